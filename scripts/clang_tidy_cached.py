#!/usr/bin/env python3
"""Runs clang-tidy over files of a compilation database, skipping the files
it has already found clean with the same inputs.

  clang_tidy_cached.py BUILD_DIR FILE...

A file's key is the SHA-256 of clang-tidy's version, the .clang-tidy it
reads, the file's compile command and the file as clang preprocesses it
(every header it includes, expanded, with its line markers), the path of
the checkout (the current directory) replaced by a placeholder. A file with
the same key was clean before and is clean now: clang-tidy sees exactly the
same translation unit under the same checks. Only clean results are kept, so
every finding is reported afresh on every run; a key unused for 30 days is
dropped.

The cache is $RAMFERRY_TIDY_CACHE, or ~/.cache/ramferry/clang-tidy; an
empty or missing one only makes the run as slow as clang-tidy itself.
Prints one line per finding file and a summary; exits 1 when clang-tidy
found anything (its full output goes to stdout then).
"""

import concurrent.futures
import hashlib
import json
import os
import shlex
import subprocess
import sys
import time


def tidy_version():
    out = subprocess.run(["clang-tidy", "--version"], capture_output=True,
                         text=True, check=True).stdout
    return out


def preprocess_command(entry):
    """The entry's command, run by clang++ to preprocess to stdout."""
    if "arguments" in entry:
        args = list(entry["arguments"])
    else:
        args = shlex.split(entry["command"])
    out = ["clang++", "-E"]
    skip = False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a in ("-o", "-MF", "-MT", "-MQ"):
            skip = True
            continue
        if a in ("-c", "-MD", "-MMD") or a.startswith("-g"):
            continue
        out.append(a)
    return out


def key_of(entry, salt):
    pre = subprocess.run(preprocess_command(entry), cwd=entry["directory"],
                         capture_output=True, check=False)
    if pre.returncode != 0:
        return None  # clang-tidy will say why
    # The checkout's path left out, so a clone elsewhere (CI's) finds what
    # this one found clean.
    root = os.getcwd().encode()
    command = entry.get("command", " ".join(entry.get("arguments", [])))
    h = hashlib.sha256(salt)
    h.update(command.encode().replace(root, b"@ROOT@"))
    h.update(b"\0")
    h.update(pre.stdout.replace(root, b"@ROOT@"))
    return h.hexdigest()


def main():
    if len(sys.argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    build, files = sys.argv[1], sys.argv[2:]
    with open(os.path.join(build, "compile_commands.json")) as f:
        db = {os.path.realpath(e["file"]): e for e in json.load(f)}
    cache = os.environ.get("RAMFERRY_TIDY_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "ramferry", "clang-tidy")
    os.makedirs(cache, exist_ok=True)
    with open(".clang-tidy", "rb") as f:
        salt = tidy_version().encode() + b"\0" + f.read() + b"\0"

    entries = []
    for name in files:
        e = db.get(os.path.realpath(name))
        if e is None:
            print(f"clang-tidy: {name} is not in {build}/compile_commands.json")
            return 1
        entries.append((name, e))

    jobs = os.cpu_count() or 2
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        keys = list(pool.map(lambda ne: key_of(ne[1], salt), entries))

    def known(key):
        if key is None:
            return False
        try:
            os.utime(os.path.join(cache, key))  # kept while it is used
            return True
        except FileNotFoundError:
            return False

    todo = [(n, k) for (n, _), k in zip(entries, keys) if not known(k)]

    def tidy(item):
        name, key = item
        r = subprocess.run(["clang-tidy", "-p", build, "--quiet",
                            "--warnings-as-errors=*", name],
                           capture_output=True, text=True, check=False)
        if r.returncode == 0 and key is not None:
            open(os.path.join(cache, key), "w").close()
        return name, r

    found = []
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        for name, r in pool.map(tidy, todo):
            if r.returncode != 0:
                found.append((name, r.stdout + r.stderr))

    for name, out in found:
        print(f"=== {name}")
        print(out.rstrip())
    month = 30 * 24 * 3600
    for old in os.scandir(cache):
        if old.stat().st_mtime < time.time() - month:
            os.unlink(old.path)
    print(f"clang-tidy: {len(entries)} files, {len(entries) - len(todo)} "
          f"unchanged since a clean run (cache {cache}), {len(todo)} checked, "
          f"{len(found)} with findings")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
