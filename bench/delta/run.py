#!/usr/bin/env python3
"""Delta-encoded re-sends (--delta) against none, side by side in one run
(issue 33's delta targets).

Two experiments, each as `ramferry-migrate --demo --json` (both ends as
separate processes), the modes interleaved (the order rotates each
repeat):

  link      --size (1GiB) over one tbf-limited veth link (--demo-link,
            1gbit) between two network namespaces; memload stores 8 bytes
            at a time into --dirty-set (256MiB) at --stores per second, a
            rate that keeps pre-copy alone from converging within
            --downtime-limit (300ms). Modes: --delta=off, on and auto.
            Reported: how pre-copy ended, rounds, the bytes each re-sent
            round put on the wire (rounds after the first; round 1 fills
            the cache, so rounds 2 and later are shown apart), downtime,
            total time, the delta cache's statistics, verified. Needs
            root.
  loopback  --size over loopback; memload rewrites whole pages with new
            random words (--dirty-write=page, where no delta can help)
            over the whole region, --loop-stores per second, 5 live
            rounds (--downtime-limit=1us: none stops early) and the final
            one. Modes: --delta=off, on and auto. Reported: the
            migration's time (transfer_s), median per mode and the ratios
            auto / off and on / off.

Writes delta.jsonl (every report, with the experiment, mode and repeat)
and delta.md (the tables, with the commands) to --out.

Usage: bench/delta/run.py [--out DIR] [--size 1GiB] [--rate 1gbit]
           [--dirty-set 256MiB] [--stores 50000] [--loop-stores 100000]
           [--repeats 2] [--loop-repeats 10] [--only link|loopback]
           [--migrate PATH]
"""
import argparse
import json
import os
import platform
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
import common  # noqa: E402  (bench/common.py)

common.set_prog("delta")
MODES = ["off", "on", "auto"]


def link_command(migrate, args, mode):
    return [migrate, "--demo", "--json", f"--size={args.size}",
            f"--demo-link={args.rate}", f"--dirty-set={args.dirty_set}",
            f"--dirty-rate={args.stores}pages", "--dirty-write=word",
            "--downtime-limit=300ms", f"--delta={mode}"]


def loopback_command(migrate, args, mode):
    return [migrate, "--demo", "--json", f"--size={args.size}",
            f"--dirty-set={args.size}", f"--dirty-rate={args.loop_stores}pages",
            "--dirty-write=page", "--max-rounds=5", "--stall-rounds=0",
            "--downtime-limit=1us", f"--delta={mode}"]


def run_one(cmd):
    """The report of one run; a run that did not converge exits non-zero
    but counts, where it verified."""
    print("delta: " + " ".join(cmd[1:]), file=sys.stderr, flush=True)
    return common.run_report(cmd, check_exit=False)


def resent(rep, first):
    """Wire bytes of the live rounds from `first` on (not the final,
    paused one)."""
    wire = rep["wire_bytes_per_round"][:rep["rounds"] - 1]
    return wire[first:]


def mean(xs):
    return sum(xs) / len(xs) if xs else 0


def mib(b):
    return f"{b / 2**20:.2f} MiB"


def link_table(rows):
    out = ["| mode | ended by | rounds | wire / re-sent round: round 1 | "
           "rounds 2+ (mean) | downtime | total | delta pages | cache hits "
           "/ misses / evictions | verified |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        rep = r["report"]
        d = rep["delta"]
        r1 = resent(rep, 1)
        out.append(
            f"| {r['mode']} | {rep['converged_by']} | {rep['rounds']} | "
            f"{mib(r1[0]) if r1 else '-'} | {mib(mean(r1[1:]))} | "
            f"{rep['downtime_s'] * 1e3:.0f} ms | {rep['total_s']:.1f} s | "
            f"{d['pages']} | {d['cache_hits']} / {d['cache_misses']} / "
            f"{d['cache_evictions']} | {rep['verified']} |")
    return out


def link_ratio(rows, mode="auto", base="off"):
    """Mean bytes per re-sent round after round 1 (rounds 2+) with `mode`
    over the same with `base`, each side's runs pooled."""
    def pooled(m):
        return [b for r in rows if r["mode"] == m
                for b in resent(r["report"], 2)]
    a, b = pooled(mode), pooled(base)
    return mean(a) / mean(b) if a and b and mean(b) else float("nan")


def per_mode(rows, key):
    return {m: mean([key(r["report"]) for r in rows if r["mode"] == m])
            for m in MODES if any(r["mode"] == m for r in rows)}


def ratio_rows(rows):
    out = []
    for name, key, fmt in [
            ("rounds", lambda r: r["rounds"], "{:.1f}"),
            ("downtime (ms)", lambda r: r["downtime_s"] * 1e3, "{:.0f}"),
            ("wire bytes, rounds 2+ (MiB)",
             lambda r: sum(resent(r, 2)) / 2**20, "{:.2f}")]:
        v = per_mode(rows, key)
        ratio = [v["auto"] / v[b] if v.get(b) else float("nan")
                 for b in ("on", "off")]
        out.append(f"| {name} | " + " | ".join(
            fmt.format(v[m]) if m in v else "-" for m in MODES) +
            f" | {ratio[0]:.3f}x | {ratio[1]:.3f}x |")
    return out


def summarize(args, rows, out):
    lines = [f"# --delta: {args.size}, {os.cpu_count()} CPUs, kernel "
             f"{platform.release()}", ""]
    link = [r for r in rows if r["experiment"] == "link"]
    loop = [r for r in rows if r["experiment"] == "loopback"]
    if link:
        lines += [
            f"## Link: {args.rate} tbf, memload {args.stores} stores/s of 8 "
            f"bytes into {args.dirty_set}, --downtime-limit=300ms", "",
            *link_table(link), "",
            "Rounds 2+ (round 1 fills the cache), mean wire bytes per "
            f"round: auto / on **{link_ratio(link, 'auto', 'on'):.3f}x**, "
            f"auto / off **{link_ratio(link, 'auto', 'off'):.4f}x**, "
            f"on / off {link_ratio(link, 'on', 'off'):.4f}x.", "",
            "| mean over runs | " + " | ".join(MODES) + " | auto / on | "
            "auto / off |", "|---|---|---|---|---|---|",
            *ratio_rows(link), "",
            "```", " ".join(link_command("ramferry-migrate", args, "auto")),
            "```", ""]
    if loop:
        by = {m: [r["report"]["transfer_s"] for r in loop if r["mode"] == m]
              for m in MODES}
        med = {m: common.median(v) for m, v in by.items() if v}
        lines += [
            f"## Loopback: whole pages rewritten at {args.loop_stores} pages/s "
            f"over all of {args.size}, 5 live rounds + the final one", "",
            "| mode | transfer_s, each run | median |", "|---|---|---|"]
        for m in MODES:
            lines.append(f"| {m} | {', '.join(f'{x:.2f}' for x in by[m])} | "
                         f"{med[m]:.2f} |")
        lines += ["", f"auto / off, medians: **{med['auto'] / med['off']:.3f}"
                  f"x** (on / off {med['on'] / med['off']:.3f}x)", "", "```",
                  " ".join(loopback_command("ramferry-migrate", args, "auto")),
                  "```", ""]
    with open(os.path.join(out, "delta.md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="bench/results/delta")
    ap.add_argument("--size", default="1GiB")
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--dirty-set", default="256MiB")
    ap.add_argument("--stores", type=int, default=50000)
    ap.add_argument("--loop-stores", type=int, default=100000)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--loop-repeats", type=int, default=10)
    ap.add_argument("--only", choices=["link", "loopback"])
    ap.add_argument("--migrate")
    args = ap.parse_args()
    migrate = common.find_migrate(args.migrate)
    os.makedirs(args.out, exist_ok=True)
    rows = []
    plan = []
    if args.only in (None, "link"):
        plan += [("link", i) for i in range(args.repeats)]
    if args.only in (None, "loopback"):
        plan += [("loopback", i) for i in range(args.loop_repeats)]
    for experiment, i in plan:
        for mode in common.rotated(MODES, i):
            make = link_command if experiment == "link" else loopback_command
            rep = run_one(make(migrate, args, mode))
            rows.append({"experiment": experiment, "mode": mode, "repeat": i,
                         "report": rep})
    with open(os.path.join(args.out, "delta.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    summarize(args, rows, args.out)


if __name__ == "__main__":
    main()
