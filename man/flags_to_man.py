#!/usr/bin/env python3
"""Fills a man page template's @OPTIONS@ with the flags a binary's --help
lists, so the page's OPTIONS section is the binary's own flag table and
cannot drift from it:

    flags_to_man.py TEMPLATE OUT BINARY

Each "--name (doc); default: value;" entry of the --help output becomes a
.TP paragraph with the name spelled with dashes (as the binaries accept
it). Fails if an entry does not parse, so a page never silently loses a
flag."""
import re
import subprocess
import sys

ENTRY = re.compile(r"^    --(\w+) \((.*)\); default: (.*?);$", re.S)


def entries(help_text):
    blocks, current = [], None
    for line in help_text.splitlines():
        if line.startswith("    --"):
            current = [line]
            blocks.append(current)
        elif line.startswith("      ") and current is not None:
            current.append(line.strip())
        else:
            current = None
    for block in blocks:
        text = " ".join(block)
        m = ENTRY.match(text)
        if not m:
            sys.exit(f"flags_to_man: cannot parse: {text[:120]}")
        yield m.group(1), m.group(2), m.group(3)


def roff(text):
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return "\\&" + text  # a line starting with . or ' is not a request


def main():
    template, out, binary = sys.argv[1:4]
    help_text = subprocess.run([binary, "--help"], capture_output=True,
                               text=True).stdout
    help_text += subprocess.run([binary, "--help"], capture_output=True,
                                text=True).stderr
    items = sorted(entries(help_text))
    if len(items) < 5:
        sys.exit(f"flags_to_man: {binary} --help listed {len(items)} flags")
    lines = []
    for name, doc, default in items:
        lines += [".TP", ".B \\-\\-" + name.replace("_", "\\-"),
                  roff(doc + "."), roff(f"Default: {default}.")]
    with open(template) as f:
        page = f.read()
    if "@OPTIONS@" not in page:
        sys.exit(f"flags_to_man: {template} has no @OPTIONS@")
    with open(out, "w") as f:
        f.write(page.replace("@OPTIONS@", "\n".join(lines)))


if __name__ == "__main__":
    main()
