#!/usr/bin/env python3
"""Post-copy: what the switch buys where pre-copy cannot converge, and what
the urgent channel does to fault latency (issue 16's post-copy figures).

Two parts, each `ramferry-migrate --demo --json` runs:

  auto     --postcopy=auto over one tbf-limited link (--demo-link=RATE)
           with memload writing FACTOR times the link's rate: pre-copy does
           not converge, so the migration switches to post-copy; once per
           repeat, every report saved (auto.jsonl; the last also as
           auto.json). Needs root (--demo-link creates network namespaces).
  urgent   on loopback, --postcopy=now with the destination's workload
           writing all over the region (every page is missing at the
           switch, so its writers fault hard) while the bulk channels push
           the region as fast as loopback goes, with --postcopy-urgent=on
           and off, interleaved (the order alternates each repeat): the
           fault-latency histograms side by side (urgent.jsonl).

and writes --out/postcopy.md: per part the medians (downtime, how the live
rounds ended, the post-copy phase, pages requested and pushed, faults,
fault latency p50/p99/max, time blocked, the workload's progress on the
destination), the histograms (power-of-two microsecond buckets, summed
over the repeats), and the exact commands.

Usage: bench/postcopy/run.py [--out DIR] [--parts auto,urgent]
           [--size 2GiB] [--rate 1gbit] [--factor 2] [--dirty-set 256MiB]
           [--loopback-size 1GiB] [--writers 4] [--loopback-rate 1GiB]
           [--repeats 3] [--channels 2] [--max-rounds 30] [--migrate PATH]
           [--resummarize]
"""
import argparse
import json
import os
import platform
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
import common  # noqa: E402  (bench/common.py)

common.set_prog("postcopy")
PARTS = ("auto", "urgent")


def rate_bytes(text):
    return common.rate_bits(text) / 8


def auto_command(migrate, args):
    dirty = int(rate_bytes(args.rate) * args.factor)
    return [migrate, "--demo", "--json", f"--size={args.size}",
            f"--channels={args.channels}", f"--demo-link={args.rate}",
            f"--dirty-set={args.dirty_set}", f"--dirty-rate={dirty}",
            f"--max-rounds={args.max_rounds}", "--postcopy=auto"]


def urgent_command(migrate, args, urgent):
    # The whole region is the workload's set: each first write to a page
    # the push has not reached yet faults.
    return [migrate, "--demo", "--json", f"--size={args.loopback_size}",
            f"--channels={args.channels}",
            f"--dirty-set={args.loopback_size}",
            f"--dirty-rate={args.loopback_rate}",
            f"--writers={args.writers}", "--postcopy=now",
            f"--postcopy-urgent={urgent}"]


med = common.median


def dst(r):
    return r["destination"]["postcopy"]


def buckets(rows):
    """{(lo_us, hi_us): count summed over rows} of the destination's
    fault-latency histogram."""
    out = {}
    for r in rows:
        for b in dst(r)["latency_histogram"]:
            key = (b["lo_us"], b["hi_us"])
            out[key] = out.get(key, 0) + b["count"]
    return out


def histogram_table(columns):
    """Markdown rows of the buckets of every column side by side;
    `columns` is [(name, rows)]."""
    counts = [(name, buckets(rows)) for name, rows in columns]
    keys = sorted({k for _, c in counts for k in c})
    lines = ["| fault latency | " + " | ".join(n for n, _ in counts) + " |",
             "|---|" + "---|" * len(counts)]
    for lo, hi in keys:
        lines.append(f"| [{lo},{hi}) us | " + " | ".join(
            str(c.get((lo, hi), 0)) for _, c in counts) + " |")
    return lines


def figures_table(columns):
    """Medians per column: what the switch and the post-copy phase took
    and what faulted."""
    rows = [
        ("runs", lambda rs: f"{len(rs)}"),
        ("stopped by", lambda rs: ", ".join(sorted(
            {(r["converged_by"] or "-") + " -> " + (r["switchover"] or "-")
             for r in rs}))),
        ("downtime ms (paused -> armed)",
         lambda rs: f"{med(rs, lambda r: r['downtime_s']) * 1e3:.1f}"),
        ("stop-and-copy estimate ms",
         lambda rs: f"{med(rs, lambda r: r['estimated_downtime_s']) * 1e3:.0f}"),
        ("rounds before the switch",
         lambda rs: f"{med(rs, lambda r: r['rounds']):.0f}"),
        ("post-copy phase s",
         lambda rs: f"{med(rs, lambda r: r['postcopy']['complete_postcopy_s']):.2f}"),
        ("total s", lambda rs: f"{med(rs, lambda r: r['total_s']):.1f}"),
        ("missing pages at the switch",
         lambda rs: f"{med(rs, lambda r: r['postcopy']['missing_pages']):.0f}"),
        ("requested / pushed (source)",
         lambda rs: f"{med(rs, lambda r: r['postcopy']['requested_pages']):.0f}"
                    f" / {med(rs, lambda r: r['postcopy']['pushed_pages']):.0f}"),
        ("duplicates dropped (destination)",
         lambda rs: f"{med(rs, lambda r: dst(r)['duplicate_pages']):.0f}"),
        ("faults", lambda rs: f"{med(rs, lambda r: dst(r)['faults']):.0f}"),
        ("fault p50 / p99 / max us",
         lambda rs: f"{med(rs, lambda r: dst(r)['latency_p50_us']):.0f} / "
                    f"{med(rs, lambda r: dst(r)['latency_p99_us']):.0f} / "
                    f"{med(rs, lambda r: dst(r)['latency_max_us']):.0f}"),
        ("blocked s (all faults)",
         lambda rs: f"{med(rs, lambda r: dst(r)['blocked_s']):.3f}"),
        ("destination workload pages/s",
         lambda rs: f"{med(rs, lambda r: dst(r)['workload_pages_written'] / max(dst(r)['workload_s'], 1e-9)):.0f}"),
    ]
    lines = ["| | " + " | ".join(n for n, _ in columns) + " |",
             "|---|" + "---|" * len(columns)]
    for label, f in rows:
        cells = []
        for _, rs in columns:
            # A run that never switched has no post-copy figures.
            pc = [r for r in rs if r.get("switchover") == "postcopy"]
            cells.append(f(pc) if pc else "-")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def summarize(args, rows, out):
    lines = [f"# Post-copy ({os.cpu_count()} CPUs, kernel "
             f"{platform.release()}; medians, histograms summed over the "
             "repeats)", ""]
    auto = [r for r in rows if r["part"] == "auto"]
    if auto:
        lines += [
            f"## --postcopy=auto: {args.size} over a {args.rate} "
            f"--demo-link, memload writing {args.factor}x the link over "
            f"{args.dirty_set}, {args.channels} channels", "",
            "Downtime: the source's workload paused to the destination "
            "armed (then it runs there, and its missing pages fault in or "
            "are pushed). The estimate is what stop-and-copy would have "
            "taken when pre-copy stopped.", ""]
        lines += figures_table([("postcopy-auto", auto)])
        lines += [""] + histogram_table([("postcopy-auto", auto)])
        lines += ["", "    " + " ".join(auto_command("ramferry-migrate",
                                                      args)), ""]
    urgent = [r for r in rows if r["part"] == "urgent"]
    if urgent:
        on = [r for r in urgent if r["urgent"] == "on"]
        off = [r for r in urgent if r["urgent"] == "off"]
        lines += [
            f"## The urgent channel: {args.loopback_size} on loopback, "
            f"--postcopy=now, {args.writers} destination writers at "
            f"{args.loopback_rate}/s over the whole region", "",
            "Every page is missing at the switch and the bulk channels push "
            "the region at loopback speed, so a fault's request competes "
            "with the push: on, requests and answers have a connection of "
            "their own; off, they ride the control connection and the "
            "answers queue behind the pushed pages.", ""]
        cols = [("urgent on", on), ("urgent off", off)]
        lines += figures_table(cols) + [""] + histogram_table(cols)
        lines += [""] + ["    " + " ".join(urgent_command(
            "ramferry-migrate", args, u)) for u in ("on", "off")] + [""]
    lines += [f"Made by `bench/postcopy/run.py --parts "
              f"{','.join(args.parts)} --size {args.size} --rate {args.rate} "
              f"--factor {args.factor} --dirty-set {args.dirty_set} "
              f"--loopback-size {args.loopback_size} --writers "
              f"{args.writers} --loopback-rate {args.loopback_rate} "
              f"--repeats {args.repeats} --channels {args.channels} "
              f"--max-rounds {args.max_rounds}`; every report in "
              "auto.jsonl and urgent.jsonl.", ""]
    with open(os.path.join(out, "postcopy.md"), "w") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="bench-postcopy")
    ap.add_argument("--parts", default="auto,urgent")
    ap.add_argument("--size", default="2GiB")
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--factor", type=float, default=2)
    ap.add_argument("--dirty-set", default="256MiB")
    ap.add_argument("--loopback-size", default="1GiB")
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--loopback-rate", default="1GiB",
                    help="the destination workload's writes per second")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--channels", type=int, default=2)
    ap.add_argument("--max-rounds", type=int, default=30)
    ap.add_argument("--migrate")
    ap.add_argument("--resummarize", action="store_true",
                    help="rewrite postcopy.md from --out's jsonl files")
    args = ap.parse_args()
    args.parts = [p for p in args.parts.split(",") if p]
    for p in args.parts:
        if p not in PARTS:
            sys.exit(f"postcopy: unknown part '{p}': want "
                     f"{' or '.join(PARTS)}")
    if args.resummarize:
        summarize(args,
                  common.read_jsonl(os.path.join(args.out, "auto.jsonl")) +
                  common.read_jsonl(os.path.join(args.out, "urgent.jsonl")),
                  args.out)
        return
    if "auto" in args.parts and os.geteuid() != 0:
        sys.exit("postcopy: the auto part needs root: --demo-link creates "
                 "network namespaces (or run --parts urgent)")
    migrate = common.find_migrate(args.migrate)
    os.makedirs(args.out, exist_ok=True)
    rows = []
    if "auto" in args.parts:
        with open(os.path.join(args.out, "auto.jsonl"), "w") as jsonl:
            for rep in range(args.repeats):
                print(f"postcopy: auto, repeat {rep + 1}/{args.repeats}",
                      file=sys.stderr)
                r = common.run_report(auto_command(migrate, args))
                r.update({"part": "auto", "repeat": rep + 1,
                          "loadavg": os.getloadavg()[0]})
                jsonl.write(json.dumps(r) + "\n")
                jsonl.flush()
                with open(os.path.join(args.out, "auto.json"), "w") as f:
                    json.dump(r, f, indent=1)
                rows.append(r)
    if "urgent" in args.parts:
        with open(os.path.join(args.out, "urgent.jsonl"), "w") as jsonl:
            for rep in range(args.repeats):
                order = ["on", "off"] if rep % 2 == 0 else ["off", "on"]
                for urgent in order:
                    print(f"postcopy: urgent={urgent}, repeat "
                          f"{rep + 1}/{args.repeats}", file=sys.stderr)
                    r = common.run_report(urgent_command(migrate, args,
                                                         urgent))
                    r.update({"part": "urgent", "urgent": urgent,
                              "repeat": rep + 1,
                              "loadavg": os.getloadavg()[0]})
                    jsonl.write(json.dumps(r) + "\n")
                    jsonl.flush()
                    rows.append(r)
    summarize(args, rows, args.out)


if __name__ == "__main__":
    main()
