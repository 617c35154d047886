#!/usr/bin/env python3
"""QEMU's own migration three ways, in one command: plain tcp, over TLS
(x509, GnuTLS in QEMU), and carried by two ramferry-migrate --qemu
processes at their defaults (keyed, sealed). Each run is bench/qemu on the
same bytes (2 multifd channels, a paused TCG guest, RAM files in /dev/shm,
the destination compared page by page); the three engines are interleaved
and repeated, so a noisy machine shifts all three alike.

Writes to --out: results.jsonl (one bench/qemu object per run) and
summary.md: per engine the median (min-max) of QEMU's total time, its
downtime, the CPU seconds per GiB of every process of the migration (both
QEMUs, and both ramferry processes where they run), and the ratios the
issue asks for: time through ramferry / plain, and the CPU ramferry adds
(through ramferry - plain) / the CPU TLS adds (TLS - plain). The table also
goes to stdout; progress to stderr.

Usage: bench/qemu_bridge_table.py --migrate PATH [--size 1GiB]
                                  [--repeats 3] [--out DIR]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ENGINES = ["qemu", "qemu-tls", "qemu-ramferry"]


def run(args, engine, data):
    argv = [sys.executable, os.path.join(HERE, "qemu"), "--data", data]
    if engine == "qemu-tls":
        argv.append("--tls")
    if engine == "qemu-ramferry":
        argv += ["--bridge", args.migrate]
    p = subprocess.run(argv, capture_output=True, text=True)
    try:
        r = json.loads(p.stdout)
    except json.JSONDecodeError:
        r = {"engine": engine, "status": "failed", "error": p.stderr[-500:]}
    r["engine"] = engine
    return r


def med(rows, key):
    vals = [r[key] for r in rows if r.get(key) is not None]
    if not vals:
        return None, "n/a"
    m = statistics.median(vals)
    return m, f"{m:.2f} ({min(vals):.2f}-{max(vals):.2f})"


def summary(results, size):
    lines = [f"# QEMU's migration: plain, TLS, through ramferry "
             f"({size >> 20} MiB, 2 multifd channels, medians of "
             f"{len(results) // len(ENGINES)})", "",
             "| engine | runs ok | total time s | downtime ms | "
             "CPU s/GiB (all processes) |", "|---|---|---|---|---|"]
    meds = {}
    for e in ENGINES:
        rows = [r for r in results if r["engine"] == e]
        ok = [r for r in rows if r.get("status") == "completed" and
              r.get("byte_exact")]
        t, ts = med(ok, "total_s")
        d, ds = med(ok, "downtime_ms")
        c, cs = med(ok, "migration_cpu_s_per_gib")
        meds[e] = (t, c)
        lines.append(f"| {e} | {len(ok)}/{len(rows)} | {ts} | {ds} | {cs} |")
    lines.append("")
    (tp, cp), (tt, ct), (tr, cr) = (meds[e] for e in ENGINES)
    if None not in (tp, tr):
        lines.append(f"- time through ramferry / plain: {tr / tp:.2f}x "
                     f"(TLS / plain: {tt / tp:.2f}x)" if tt else
                     f"- time through ramferry / plain: {tr / tp:.2f}x")
    if None not in (cp, ct, cr) and ct > cp:
        lines.append(f"- CPU ramferry adds / CPU TLS adds: "
                     f"{(cr - cp) / (ct - cp):.2f} "
                     f"({cr - cp:.2f} vs {ct - cp:.2f} s/GiB)")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--migrate", required=True,
                    help="the ramferry-migrate binary")
    ap.add_argument("--size", default="1GiB",
                    help="guest RAM, random bytes (default 1GiB)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", default="qemu-bridge-results")
    args = ap.parse_args()
    units = {"MiB": 1 << 20, "GiB": 1 << 30}
    size = int(args.size[:-3]) * units[args.size[-3:]]
    os.makedirs(args.out, exist_ok=True)
    data = f"/dev/shm/qemu-bridge-data-{os.getpid()}"
    with open(data, "wb") as f:
        for _ in range(size >> 26):
            f.write(os.urandom(64 << 20))
    results = []
    try:
        with open(os.path.join(args.out, "results.jsonl"), "w") as out:
            for i in range(args.repeats):
                for e in ENGINES:
                    t = time.monotonic()
                    r = run(args, e, data)
                    print(f"qemu_bridge_table: repeat {i + 1}/{args.repeats}"
                          f" {e}: {r.get('status')} in "
                          f"{time.monotonic() - t:.1f}s", file=sys.stderr,
                          flush=True)
                    results.append(r)
                    out.write(json.dumps(r) + "\n")
    finally:
        os.remove(data)
    text = summary(results, size)
    with open(os.path.join(args.out, "summary.md"), "w") as f:
        f.write(text)
    print(text)
    return 0 if all(r.get("byte_exact") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
