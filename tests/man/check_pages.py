#!/usr/bin/env python3
"""The man pages as a user reads them:
  check_pages.py HEADER PAGE...
- `man --warnings -l PAGE` renders each one without a warning;
- every option a generated page lists is one its binary's --help lists
  (flags_to_man.py wrote it from there; this checks the count survived);
- ramferry(3) names every function ramferry.h declares.
Exit 77 (skipped, visibly) where man is not installed."""
import os
import re
import shutil
import subprocess
import sys


def main():
    header, pages = sys.argv[1], sys.argv[2:]
    if shutil.which("man") is None:
        print("SKIPPED: no man here (apt-get install man-db)")
        return 77
    failed = False
    env = dict(os.environ, LC_ALL="C.UTF-8", MANWIDTH="80")
    for page in pages:
        r = subprocess.run(["man", "--warnings", "-l", page],
                           capture_output=True, text=True, env=env)
        if r.returncode != 0 or r.stderr.strip() or len(r.stdout) < 500:
            print(f"FAIL: man -l {page}: exit {r.returncode}\n{r.stderr}")
            failed = True
        else:
            print(f"ok: man -l {os.path.basename(page)}: "
                  f"{len(r.stdout.splitlines())} lines, no warnings")
    text = re.sub(r"/\*.*?\*/", "", open(header).read(), flags=re.S)
    functions = set(re.findall(r"\b(ramferry_[a-z0-9_]+)\(", text))
    functions.discard("ramferry_progress_fn")
    for page in pages:
        if page.endswith(".3"):
            body = open(page).read().replace("\\-", "-")
            missing = sorted(f for f in functions if f not in body)
            if missing or len(functions) < 50:
                print(f"FAIL: {page} does not name {missing}")
                failed = True
            else:
                print(f"ok: {os.path.basename(page)} names all "
                      f"{len(functions)} functions of ramferry.h")
        elif page.endswith(".1"):
            options = len(re.findall(r"^\.TP\n\.B \\-\\-", open(page).read(),
                                     re.M))
            if options < 10:
                print(f"FAIL: {page} lists {options} options")
                failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
