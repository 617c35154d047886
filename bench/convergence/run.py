#!/usr/bin/env python3
"""Convergence policies side by side on a workload that outruns its link
(issue 16's convergence comparison).

Runs `ramferry-migrate --demo --json` over one tbf-limited link
(--demo-link=RATE) with memload dirtying at FACTOR times the link's rate,
once per policy per repeat, interleaved (the order rotates each repeat):

  max-rounds     --stall-rounds=0: pre-copy as it was, stopping after
                 --max-rounds live rounds whatever the downtime
  stall          the default: stall detection stops at the lowest point
  auto-converge  --auto-converge: memload's writers throttled in steps
  postcopy-auto  --postcopy=auto: stop-and-copy if the final round fits the
                 downtime limit, else the switch to post-copy (the
                 destination resumes the workload and faults in the rest)

and writes to --out:

  convergence.jsonl  one JSON object per run: the tool's report plus the
                     policy and the repeat
  convergence.md     medians per policy: downtime (measured and
                     estimated), total time, rounds, bytes sent, the last
                     throttle, the post-copy phase and its fault latency
                     (p99) where the run switched, and the workload's own
                     progress (pages it wrote per second of migration, on
                     the source and, after a switch, on the destination),
                     with the commands

Needs root (--demo-link creates network namespaces).

Usage: bench/convergence/run.py [--out DIR] [--size 1GiB] [--rate 1gbit]
           [--factor 2] [--dirty-set 256MiB] [--repeats 2] [--channels 2]
           [--max-rounds 30] [--migrate PATH] [--resummarize]
"""
import argparse
import json
import os
import platform
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
import common  # noqa: E402  (bench/common.py)

common.set_prog("convergence")
POLICIES = {
    "max-rounds": ["--stall-rounds=0"],
    "stall": [],
    "auto-converge": ["--auto-converge"],
    "postcopy-auto": ["--postcopy=auto"],
}


def rate_bytes(text):
    return common.rate_bits(text) / 8


def command(migrate, args, policy):
    dirty = int(rate_bytes(args.rate) * args.factor)
    return [migrate, "--demo", "--json", f"--size={args.size}",
            f"--channels={args.channels}", f"--demo-link={args.rate}",
            f"--dirty-set={args.dirty_set}", f"--dirty-rate={dirty}",
            f"--max-rounds={args.max_rounds}"] + POLICIES[policy]


med = common.median


def switched(r):
    return r.get("switchover") == "postcopy"


def pages_written(r):
    """The workload's pages on both ends: after a switch to post-copy it
    runs on the destination."""
    dest = r.get("destination", {}).get("postcopy", {})
    return r["workload"]["pages_written"] + dest.get(
        "workload_pages_written", 0)


def postcopy_cell(rs):
    """Median post-copy phase (s) and destination fault p99 (us) over the
    runs that switched, with how many did."""
    pc = [r for r in rs if switched(r)]
    if not pc:
        return "-"
    return (f"{med(pc, lambda r: r['postcopy']['complete_postcopy_s']):.1f} s, "
            f"p99 {med(pc, lambda r: r['destination']['postcopy']['latency_p99_us']):.0f} us"
            f" ({len(pc)}/{len(rs)} runs)")


def summarize(args, rows, out):
    lines = [
        f"# Convergence policies: {args.size}, workload writing "
        f"{args.factor}x a {args.rate} link ({args.dirty_set} dirty set), "
        f"{args.channels} channels, {args.repeats} interleaved runs per "
        f"policy, medians ({os.cpu_count()} CPUs, kernel "
        f"{platform.release()})",
        "",
        "`ramferry-migrate --demo --json --demo-link` over one tbf-limited "
        "veth link between two network namespaces. Downtime: workload "
        "paused to the final round confirmed; the estimate is what the "
        "policy predicted when it stopped (for a switch to post-copy the "
        "downtime ends when the destination armed; the estimate is still "
        "stop-and-copy's). Dirty / link: the distinct "
        "pages the workload dirtied per second while it ran (what each "
        "round had to re-send), over what the link carried. Workload "
        "progress: pages memload wrote per second of the whole run, "
        "against the rate it was asked for (auto-converge buys its "
        "downtime with this; memload's writer also slows on every first "
        "write of a round, a write-protect fault). Load average (1 min) "
        "before the runs: " + ", ".join(f"{r['loadavg']:.1f}" for r in rows)
        + ".",
        "",
        "| policy | downtime ms | estimated ms | stopped by | rounds "
        "| total s | sent GiB | dirty / link | last throttle % "
        "| post-copy phase, fault p99 | workload progress |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    asked = rate_bytes(args.rate) * args.factor / 4096
    for policy in POLICIES:
        rs = [r for r in rows if r["policy"] == policy]
        if not rs:
            continue
        reasons = sorted({r["converged_by"] + (" -> post-copy" if switched(r)
                                               else "") for r in rs})
        lines.append(
            f"| {policy} | {med(rs, lambda r: r['downtime_s']) * 1e3:.0f} "
            f"({min(r['downtime_s'] for r in rs) * 1e3:.0f}-"
            f"{max(r['downtime_s'] for r in rs) * 1e3:.0f}) | "
            f"{med(rs, lambda r: r['estimated_downtime_s']) * 1e3:.0f} | "
            f"{', '.join(reasons)} | {med(rs, lambda r: r['rounds']):.0f} | "
            f"{med(rs, lambda r: r['total_s']):.1f} | "
            f"{med(rs, lambda r: r['bytes_sent']) / 2**30:.2f} | "
            f"{med(rs, lambda r: r['dirty_rate_pages_per_s'] * 4096 / r['link_bytes_per_s']):.2f} | "
            f"{med(rs, lambda r: r['throttle_percent']):.0f} | "
            f"{postcopy_cell(rs)} | "
            f"{med(rs, lambda r: pages_written(r) / r['total_s']) / asked:.0%} |")
    lines += ["", "Commands (one run each; the script rotates them):", ""]
    for policy in POLICIES:
        lines.append("    " + " ".join(command("ramferry-migrate", args,
                                               policy)))
    lines += ["", f"Made by `bench/convergence/run.py --size {args.size} "
              f"--rate {args.rate} --factor {args.factor} --dirty-set "
              f"{args.dirty_set} --repeats {args.repeats} --channels "
              f"{args.channels} --max-rounds {args.max_rounds}`; every run "
              "in convergence.jsonl.", ""]
    with open(os.path.join(out, "convergence.md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench-convergence")
    ap.add_argument("--size", default="1GiB")
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--factor", type=float, default=2)
    ap.add_argument("--dirty-set", default="256MiB")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--channels", type=int, default=2)
    ap.add_argument("--max-rounds", type=int, default=30)
    ap.add_argument("--migrate")
    ap.add_argument("--resummarize", action="store_true",
                    help="rewrite convergence.md from --out's jsonl")
    args = ap.parse_args()
    if args.resummarize:
        summarize(args, common.read_jsonl(
            os.path.join(args.out, "convergence.jsonl")), args.out)
        return
    if os.geteuid() != 0:
        sys.exit("convergence: needs root: --demo-link creates network "
                 "namespaces")
    migrate = common.find_migrate(args.migrate)
    os.makedirs(args.out, exist_ok=True)
    rows = []
    names = list(POLICIES)
    with open(os.path.join(args.out, "convergence.jsonl"), "w") as jsonl:
        for rep in range(args.repeats):
            for policy in common.rotated(names, rep):
                print(f"convergence: repeat {rep + 1}/{args.repeats}, "
                      f"{policy}", file=sys.stderr)
                load = os.getloadavg()[0]
                r = common.run_report(command(migrate, args, policy))
                r.update({"policy": policy, "repeat": rep + 1,
                          "loadavg": load})
                jsonl.write(json.dumps(r) + "\n")
                jsonl.flush()
                rows.append(r)
    summarize(args, rows, args.out)


if __name__ == "__main__":
    main()
