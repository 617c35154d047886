#!/usr/bin/env python3
"""Two links against one: what spreading the channels over several links
buys (issue 16's "Two 1 Gbit/s links: >= 1.9x one link").

For each rate, runs `ramferry-migrate --demo --json --dirty-rate=0` over
one link of that rate (--demo-link=R) and over two (--demo-link=R,R), the
same channel count on both, interleaved (the order alternates each
repeat) and repeated, and writes to --out:

  links.jsonl   one JSON object per run: the tool's report, plus the rate,
                the link count, the repeat, and the CPU seconds of both
                ends (the tool and its destination process, from rusage)
  links.md      medians per point, the ratio two links / one, the per-link
                figures, the CPU the two ends used against the cores the
                machine has, and the exact commands

The links are real: veth pairs between two network namespaces, each end
under tc tbf at the rate (tools/common/link_testbed.h). Needs root.

Usage: bench/links/run.py [--out DIR] [--size 512MiB] [--repeats 3]
                          [--channels 4] [--rates 1gbit,500mbit]
                          [--migrate PATH] [--resummarize]
"""
import argparse
import json
import os
import platform
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
import common  # noqa: E402  (bench/common.py)

common.set_prog("links")


def command(migrate, args, rate, links):
    return [migrate, "--demo", "--json", "--dirty-rate=0",
            f"--size={args.size}", f"--channels={args.channels}",
            "--demo-link=" + ",".join([rate] * links)]


def run_one(cmd, timeout=600):
    """The report of one run with the CPU both ends used, or exits."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    rep = common.run_report(cmd, timeout=timeout)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    rep["cpu_s"] = (after.ru_utime - before.ru_utime +
                    after.ru_stime - before.ru_stime)
    rep["wall_s"] = wall
    return rep


med = common.median


def summarize(args, migrate, rows, out):
    cores = os.cpu_count()
    lines = [
        f"# Two links against one ({args.size}, {args.channels} channels, "
        f"{args.repeats} interleaved runs per point, medians; "
        f"{cores} CPUs, kernel {platform.release()})",
        "",
        "`ramferry-migrate --demo --json --dirty-rate=0` over tbf-limited "
        "veth links between two network namespaces "
        "(tools/common/link_testbed.h); with two links the source's "
        "channels alternate between them (channel i on link i % 2) and the "
        "control connection crosses link 0. Throughput is the report's "
        "(bytes sent over the transfer phase, round 0 to the last round's "
        "confirmation); CPU is both processes' user + system time over the "
        "whole run (rusage), per wall second: the machine has "
        f"{cores} cores. \"Of the rate\" compares page bytes with the "
        "links' line rate, which also carries TCP/IP and Ethernet headers "
        "(about 4% at a 1500-byte MTU) and packet headers and tags.",
        "",
        "| rate | links | GB/s (min-max) | ratio 2/1 | per link GB/s "
        "| of the rate(s) | transfer s | CPU cores busy |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for rate in args.rates:
        one = [r for r in rows if r["rate"] == rate and r["links_n"] == 1]
        two = [r for r in rows if r["rate"] == rate and r["links_n"] == 2]
        bps = common.rate_bits(rate)
        g1 = med(one, lambda r: r["throughput_gb_per_s"])
        g2 = med(two, lambda r: r["throughput_gb_per_s"])
        for n, rs, g in ((1, one, g1), (2, two, g2)):
            per_link = [med(rs, lambda r, i=i: r["links"][i]["gb_per_s"])
                        for i in range(n)]
            lo = min(r["throughput_gb_per_s"] for r in rs)
            hi = max(r["throughput_gb_per_s"] for r in rs)
            lines.append(
                f"| {rate} | {n} | {g:.3f} ({lo:.3f}-{hi:.3f}) | "
                f"{'' if n == 1 else f'{g2 / g1:.2f}x'} | "
                f"{' + '.join(f'{x:.3f}' for x in per_link)} | "
                f"{g * 1e9 * 8 / (bps * n):.0%} | "
                f"{med(rs, lambda r: r['transfer_s']):.2f} | "
                f"{med(rs, lambda r: r['cpu_s'] / r['wall_s']):.2f} |")
    lines += ["", "Load average (1 min) of the machine over the series, as "
              "/proc/loadavg gave it before each run (other jobs included): "
              f"min {min(r['loadavg'] for r in rows):.1f}, median "
              f"{med(rows, lambda r: r['loadavg']):.1f}, max "
              f"{max(r['loadavg'] for r in rows):.1f}."]
    lines += ["", "Commands (one run each; the script alternates them):", ""]
    for rate in args.rates:
        for n in (1, 2):
            lines.append("    " + " ".join(
                command("ramferry-migrate", args, rate, n)))
    lines += ["", f"Made by `bench/links/run.py --size {args.size} "
              f"--repeats {args.repeats} --channels {args.channels} "
              f"--rates {','.join(args.rates)}`; every run in links.jsonl.",
              ""]
    with open(os.path.join(out, "links.md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench-links")
    ap.add_argument("--size", default="512MiB")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--channels", type=int, default=4)
    ap.add_argument("--rates", default="1gbit,500mbit")
    ap.add_argument("--migrate")
    ap.add_argument("--resummarize", action="store_true",
                    help="rewrite links.md from --out's links.jsonl")
    args = ap.parse_args()
    args.rates = args.rates.split(",")
    for r in args.rates:
        common.rate_bits(r)
    if args.resummarize:
        rows = common.read_jsonl(os.path.join(args.out, "links.jsonl"))
        summarize(args, None, rows, args.out)
        return
    if os.geteuid() != 0:
        sys.exit("links: needs root: --demo-link creates network namespaces")
    migrate = common.find_migrate(args.migrate)
    os.makedirs(args.out, exist_ok=True)
    rows = []
    with open(os.path.join(args.out, "links.jsonl"), "w") as jsonl:
        for rep in range(1, args.repeats + 1):
            for rate in args.rates:
                order = (1, 2) if rep % 2 else (2, 1)
                for n in order:
                    cmd = command(migrate, args, rate, n)
                    print(f"links: repeat {rep}/{args.repeats}, {rate} x{n}",
                          file=sys.stderr)
                    load = os.getloadavg()[0]
                    r = run_one(cmd)
                    r.update({"rate": rate, "links_n": n, "repeat": rep,
                              "loadavg": load})
                    jsonl.write(json.dumps(r) + "\n")
                    jsonl.flush()
                    rows.append(r)
    summarize(args, migrate, rows, args.out)


if __name__ == "__main__":
    main()
