#!/usr/bin/env python3
"""The Python package's overhead: examples/python/migrate_self.py against
examples/c/migrate_self.c, the same migration (two processes, --fork),
run in turn (C, Python, C, ...) so both see the same machine. Reports the
medians of the migration itself (connect to finish, as each prints it) and
of the whole process, and their ratios Python / C.

    bench/python_vs_c.py --c-binary=/tmp/migrate_self_c \\
        --library=build/capi/libramferry.so.0 --size-mib=1024 --runs=5
"""
import argparse
import os
import re
import subprocess
import sys
import time

import common  # bench/common.py

ROOT = common.ROOT
common.set_prog("python_vs_c")


def run(cmd, env):
    start = time.monotonic()
    out = subprocess.run(cmd, capture_output=True, text=True, env=env,
                         timeout=600)
    wall = time.monotonic() - start
    if out.returncode != 0:
        common.fail(f"{cmd[0]} failed:\n{out.stdout}\n{out.stderr}")
    m = re.search(r"connect to finish: ([0-9.]+) s", out.stdout)
    return float(m.group(1)), wall


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--c-binary", required=True)
    ap.add_argument("--library", required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    env = dict(os.environ, RAMFERRY_LIBRARY=os.path.abspath(args.library),
               PYTHONPATH=os.path.join(ROOT, "python"))
    flags = ["--fork", f"--size-mib={args.size_mib}"]
    c_cmd = [args.c_binary] + flags
    py_cmd = [args.python,
              os.path.join(ROOT, "examples", "python", "migrate_self.py")]
    py_cmd += flags
    results = {"c": [], "python": []}
    for i in range(args.runs):
        for name, cmd in (("c", c_cmd), ("python", py_cmd)):
            results[name].append(run(cmd, env))
            print(f"run {i + 1}/{args.runs} {name}: migration "
                  f"{results[name][-1][0]:.3f} s, process "
                  f"{results[name][-1][1]:.3f} s", file=sys.stderr,
                  flush=True)
    med = {k: (common.median(v, lambda r: r[0]),
               common.median(v, lambda r: r[1])) for k, v in results.items()}
    print(f"| {args.size_mib} MiB, --fork, {args.runs} runs each, in turn "
          "| C | Python | Python / C |")
    print("|---|---|---|---|")
    for label, i in (("migration (connect to finish), median s", 0),
                     ("whole process, median s", 1)):
        print(f"| {label} | {med['c'][i]:.3f} | {med['python'][i]:.3f} | "
              f"{med['python'][i] / med['c'][i]:.3f} |")


if __name__ == "__main__":
    main()
