#!/usr/bin/env python3
"""The README's headline: ramferry-migrate against a raw TCP baseline on
the same memory path, measured in one run, in figures that transfer to
another machine (CPU seconds per GiB on both ends, and time as a ratio
to the baseline).

Per repeat, interleaved (the order rotates):

  raw       ramferry-bench --transport=raw: a plain socket send loop,
            --channels connections, from an anonymous mapping into an
            anonymous mapping (no engine, no key, no check);
  migrate   ramferry-migrate as two processes (--role=dest, then
            --role=source) on anonymous memory of --size, an idle workload
            (--dirty-rate=0), --channels channels, at its defaults (a key,
            the stream sealed with mac) and --verify=off (the raw loop
            checks nothing either); its time is the transfer phase
            (transfer_s: every round, set-up excluded as the raw loop's
            is), its CPU each process's over its session (cpu_s: every
            thread, set-up included; filling the memory before it, as
            the raw loop's, not);
  verified  the same with --verify=full, the default, for its CPU.

Writes headline.jsonl and headline.md (medians, min-max, ratios) to --out.

Usage: bench/headline.py [--out DIR] [--size 2GiB] [--channels 2]
           [--repeats 3] [--build DIR]
"""
import argparse
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time

import common  # bench/common.py

common.set_prog("headline")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def gib(size):
    units = {"MiB": 1 << 20, "GiB": 1 << 30}
    for u, m in units.items():
        if size.endswith(u):
            return int(size[:-len(u)]) * m / (1 << 30)
    common.fail(f"--size {size}: give MiB or GiB")


def run_raw(args, bench):
    cmd = [bench, "--transport=raw", f"--channels={args.channels}",
           f"--size={args.size}", "--json"]
    j = common.run_report(cmd, timeout=900, verified=False)
    if not j["verified"]:
        common.fail("the raw baseline's copy differs")
    return {"seconds": j["seconds"],
            "cpu_s_per_gib": j["sender_cpu_s_per_gib"] +
            j["receiver_cpu_s_per_gib"], "command": cmd}


def run_migrate(args, migrate, key, verify):
    port = free_port()
    both = [f"--size={args.size}", f"--key-file={key}", "--json",
            f"--verify={verify}"]
    dst_cmd = [migrate, "--role=dest", f"--listen=127.0.0.1:{port}"] + both
    src_cmd = [migrate, "--role=source", f"--connect=127.0.0.1:{port}",
               f"--channels={args.channels}", "--dirty-rate=0"] + both
    dst = subprocess.Popen(dst_cmd, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    time.sleep(0.3)
    src = subprocess.Popen(src_cmd, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    src_out, src_err = src.communicate(timeout=900)
    dst_out, dst_err = dst.communicate(timeout=120)
    if src.returncode != 0 or dst.returncode != 0:
        common.fail(f"migration failed:\n{src_out}{src_err}{dst_err}")
    j, d = common.last_json(src_out), common.last_json(dst_out)
    # Each end's CPU over its session (the source's connect to FINISH,
    # the destination's serving), every thread of the process.
    return {"seconds": j["transfer_s"], "total_s": j["total_s"],
            "cpu_s_per_gib": (j["cpu_s"] + d["cpu_s"]) / gib(args.size),
            "command": [dst_cmd, src_cmd]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="bench/results/headline")
    ap.add_argument("--size", default="2GiB")
    ap.add_argument("--channels", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--build", default=os.path.join(common.ROOT, "build"))
    args = ap.parse_args()
    bench = common.find_binary(args.build, "bench/ramferry-bench")
    migrate = common.find_migrate(build=args.build)
    os.makedirs(args.out, exist_ok=True)
    engines = ["raw", "migrate", "verified"]
    runs = {e: [] for e in engines}
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="ramferry-headline-") as d, \
            open(os.path.join(args.out, "headline.jsonl"), "w") as out:
        key = os.path.join(d, "key")
        with open(key, "wb") as f:
            f.write(os.urandom(32))
        os.chmod(key, 0o600)
        for rep in range(args.repeats):
            for e in common.rotated(engines, rep):
                print(f"headline: repeat {rep + 1}/{args.repeats}: {e} "
                      f"({time.time() - start:.0f} s)", file=sys.stderr,
                      flush=True)
                r = (run_raw(args, bench) if e == "raw" else
                     run_migrate(args, migrate, key,
                                 "off" if e == "migrate" else "full"))
                r.update(engine=e, repeat=rep)
                runs[e].append(r)
                out.write(json.dumps(r) + "\n")
    raw_s = common.median(runs["raw"], "seconds")
    raw_cpu = common.median(runs["raw"], "cpu_s_per_gib")
    lines = [
        f"# Headline ({time.strftime('%Y-%m-%d')}, {platform.node()}, "
        f"{os.cpu_count()} cores, {platform.release()})",
        "",
        f"{args.size} of anonymous memory, loopback tcp, {args.channels} "
        f"channels, {args.repeats} interleaved repeats, median (min-max).",
        "",
        "| engine | time s | / raw | CPU s/GiB, both ends | / raw |",
        "|---|---|---|---|---|",
    ]
    names = {"raw": "raw TCP send loop (no engine)",
             "migrate": "ramferry-migrate, key + mac, --verify=off",
             "verified": "ramferry-migrate, key + mac, --verify=full"}
    for e in engines:
        s = common.spread(r["seconds"] for r in runs[e])
        c = common.spread(r["cpu_s_per_gib"] for r in runs[e])
        lines.append(f"| {names[e]} | {s[0]:.2f} ({s[1]:.2f}-{s[2]:.2f}) | "
                     f"{s[0] / raw_s:.2f}x | {c[0]:.2f} ({c[1]:.2f}-"
                     f"{c[2]:.2f}) | {c[0] / raw_cpu:.2f}x |")
    lines += ["", "Commands: headline.jsonl."]
    with open(os.path.join(args.out, "headline.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
