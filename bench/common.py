"""What the benchmark drivers share: finding the built binaries, running a
tool for its JSON report, medians, and the order of interleaved repeats.

A driver in bench/ imports it as it is; one in bench/NAME/ puts bench/ on
the path first:

    sys.path.insert(0, os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))))
    import common  # noqa: E402

    common.set_prog("delta")   # the prefix of every message

Every failure ends the driver with sys.exit("PROG: what happened").
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Under a build folder.
MIGRATE = "tools/migrate/ramferry-migrate"
WORKLOAD = "tests/capi/ramferry-attached-workload"  # bench/attach/workload.c

_prog = "bench"


def set_prog(name):
    """Names the driver at the start of every message (`delta: ...`)."""
    global _prog
    _prog = name


def fail(message):
    sys.exit(f"{_prog}: {message}")


def find_binary(build, rel, target=None):
    """BUILD/REL if it is an executable; else fails, naming the cmake
    target (by default REL's file name) that builds it."""
    path = os.path.join(build, rel)
    if not os.access(path, os.X_OK):
        target = target or os.path.basename(rel)
        fail(f"{path} not found: build it (cmake --build {build} --target "
             f"{target}) or pass --build")
    return path


def find_migrate(path=None, build=None):
    """ramferry-migrate: with `build`, that build folder's only; else
    `path` (--migrate), then build/ in the checkout, then $PATH."""
    if build:
        return find_binary(build, MIGRATE, "ramferry-migrate")
    for p in ([path] if path else []) + [os.path.join(ROOT, "build", MIGRATE),
                                         shutil.which("ramferry-migrate")]:
        if p and os.access(p, os.X_OK):
            return p
    fail("ramferry-migrate not found: build it (cmake --build build "
         "--target ramferry-migrate) or pass --migrate")


def tail(text, chars=500):
    return text.strip()[-chars:]


def last_json(text):
    """The JSON object on the last line of `text`; ValueError if none."""
    lines = text.strip().splitlines()
    if not lines:
        raise ValueError("no output")
    return json.loads(lines[-1])


def run_report(cmd, timeout=1800, check_exit=True, verified=True):
    """Runs `cmd` and returns the report on the last line of its stdout.
    Fails, with the report's error or the tail of stderr, where it prints
    no report, exits non-zero (with check_exit) or reports verified false
    (with verified)."""
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    text = " ".join(cmd)
    try:
        rep = last_json(r.stdout)
    except ValueError:
        fail(f"{text} printed no report (exit {r.returncode}): "
             f"{tail(r.stderr)}")
    why = rep.get("error") or tail(r.stderr)
    if check_exit and r.returncode != 0:
        fail(f"{text} failed (exit {r.returncode}): {why}")
    if verified and not rep.get("verified"):
        fail(f"{text} did not verify: {why}")
    return rep


def wait_for(proc, text, stream=None, timeout=300):
    """Reads `stream` (proc's stderr by default) until a line holds
    `text`; returns that line, or fails with what it read."""
    stream = stream or proc.stderr
    seen = []
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = stream.readline()
        if not line:
            break
        seen.append(line)
        if text in line:
            return line
    fail(f"no '{text}' from {proc.args[0]}:\n{''.join(seen)}")


def median(rows, key=None):
    """The median of key(row) (key a function or a field name) over
    `rows`; of the rows themselves without a key."""
    if key is None:
        return statistics.median(rows)
    get = key if callable(key) else (lambda r: r[key])
    return statistics.median(get(r) for r in rows)


def spread(xs):
    """(median, min, max) of `xs`."""
    xs = list(xs)
    return statistics.median(xs), min(xs), max(xs)


def rotated(items, rep):
    """`items` starting at rep % len(items): repeat rep's order, so that
    no item always runs first."""
    k = rep % len(items)
    return list(items[k:]) + list(items[:k])


def rate_bits(text):
    """A tc rate (1gbit, 500mbit, 10mbps, ...) in bits per second."""
    units = [("tbit", 1e12), ("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3),
             ("bit", 1), ("gbps", 8e9), ("mbps", 8e6), ("kbps", 8e3),
             ("bps", 8)]
    for suffix, mult in units:
        if text.endswith(suffix):
            return float(text[:-len(suffix)]) * mult
    fail(f"rate '{text}': want a tc rate such as 1gbit")


def read_jsonl(path):
    """Every line of `path` as JSON; [] if there is no such file."""
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
