#!/usr/bin/env python3
"""summary.md for bench/rdma_vm/run.sh: reads results.jsonl (measure.sh's
JSON lines) and prints a Markdown table: per run kind the median (min-max)
over the repeats of throughput, time, set-up time and the rdma counters,
and the throughput's ratio to ib_write_bw measured in the same VM (the
median of the per-repeat ratios: each run against the ceiling of its own
repeat, so a slower moment of the host moves both)."""

import argparse
import json
import statistics
import sys

BENCH_ORDER = ["producer-consumer", "single-thread", "unbatched", "pin-all"]
CEILINGS = ["ib_write_bw_512k", "ib_write_bw_64k"]
WHAT = {
    "producer-consumer": "channel thread, chunks registered on demand in batches (the default)",
    "single-thread": "--single-thread: the scheduler drives the channel",
    "unbatched": "--rdma-reg-batch=false: one chunk per REGISTER request",
    "pin-all": "--rdma-pin-all: every region registered in set-up",
}


def spread(values, fmt):
    if not values:
        return "-"
    med = statistics.median(values)
    lo, hi = min(values), max(values)
    if lo == hi:
        return fmt.format(med)
    return f"{fmt.format(med)} ({fmt.format(lo)}-{fmt.format(hi)})"


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("results")
    ap.add_argument("--command", default="")
    ap.add_argument("--commit", default="")
    ap.add_argument("--kernel", default="")
    ap.add_argument("--host-cpus", default="")
    a = ap.parse_args()

    runs = []
    with open(a.results) as f:
        for line in f:
            line = line.strip()
            if line:
                runs.append(json.loads(line))
    if not runs:
        sys.exit("summarize.py: no results")
    by = {}
    for r in runs:
        by.setdefault(r["label"], []).append(r)
    ceiling = {c: {r["repeat"]: r["gb_per_s"] for r in by.get(c, [])} for c in CEILINGS}
    repeats = max(r["repeat"] for r in runs)
    size = next((r["region_bytes"] for r in runs if "region_bytes" in r), None)

    def ratios(label, to):
        return [r["gb_per_s"] / ceiling[to][r["repeat"]]
                for r in by.get(label, []) if ceiling[to].get(r["repeat"])]

    out = []
    out.append("# rdma in the Soft-RoCE VM: ramferry-bench against ib_write_bw\n")
    out.append(
        f"Kernel {a.kernel or '?'} under qemu TCG (2 vCPUs, 1 GiB) on a "
        f"{a.host_cpus or '?'}-CPU host; rxe0 on virtio-net, MTU 9000 "
        f"(active_mtu 4096); both ends in the guest. "
        f"{(size or 0) >> 20} MiB region, 1 channel, {repeats} repeats, the "
        f"runs interleaved within each repeat; median (min-max). "
        f"Code: {a.commit or '?'}.\n")
    out.append("    " + a.command + "\n")
    out.append("## Throughput against the ceiling\n")
    out.append("| run | GB/s | / ib_write_bw 512 KiB | / ib_write_bw 64 KiB | time s | set-up s | source CPU s | destination CPU s |")
    out.append("|---|---|---|---|---|---|---|---|")
    for c in CEILINGS:
        rs = by.get(c, [])
        out.append(f"| `{c}` ({rs[0]['iters'] if rs else '?'} x {(rs[0]['msg_bytes'] >> 10) if rs else '?'} KiB WRITEs) "
                   f"| {spread([r['gb_per_s'] for r in rs], '{:.4f}')} "
                   f"| {spread(ratios(c, 'ib_write_bw_512k'), '{:.2f}')} "
                   f"| {spread(ratios(c, 'ib_write_bw_64k'), '{:.2f}')} "
                   f"| {spread([r['bytes'] / (r['gb_per_s'] * 1e9) for r in rs], '{:.3f}')} | - | - | - |")
    for label in BENCH_ORDER:
        rs = by.get(label, [])
        if not rs:
            continue
        out.append(f"| {label} | {spread([r['gb_per_s'] for r in rs], '{:.4f}')} "
                   f"| {spread(ratios(label, 'ib_write_bw_512k'), '{:.2f}')} "
                   f"| {spread(ratios(label, 'ib_write_bw_64k'), '{:.2f}')} "
                   f"| {spread([r['seconds'] for r in rs], '{:.3f}')} "
                   f"| {spread([r['setup_seconds'] for r in rs], '{:.3f}')} "
                   f"| {spread([r['sender_cpu_s'] for r in rs], '{:.2f}')} "
                   f"| {spread([r['receiver_cpu_s'] for r in rs], '{:.2f}')} |")
    out.append("")
    out.append("## The rdma counters (the source's, per run)\n")
    out.append("| run | drains to zero | REGISTER round trips | largest batch | inline sends | send-queue-full hits | posts | WRs | verified |")
    out.append("|---|---|---|---|---|---|---|---|---|")
    for label in BENCH_ORDER:
        rs = by.get(label, [])
        if not rs:
            continue

        def col(key, rs=rs):
            return spread([r[key] for r in rs], "{:.0f}")
        ok = sum(1 for r in rs if r.get("verified"))
        out.append(f"| {label} | {col('rdma_drains_to_zero')} | {col('register_round_trips')} "
                   f"| {col('register_batch_max')} | {col('inline_sends')} | {col('rdma_sq_full_hits')} "
                   f"| {col('rdma_posts')} | {col('rdma_wrs')} | {ok}/{len(rs)} |")
    out.append("")
    out.append("Runs:\n")
    for label in BENCH_ORDER:
        if label in by:
            out.append(f"- {label}: {WHAT[label]}.")
    out.append("- `ib_write_bw`: rdma-core's perftest (Debian `perftest`), server and "
               "client on rxe0 in the same guest, `-x 1` (the RoCEv2 GID of the IPv4 "
               "address), the same bytes as the region in 512 KiB messages (the "
               "engine's 128-page packets) and in 64 KiB ones; its MB/sec is MiB/s.")
    out.append("- CPU s: the source's and the destination's process CPU time over the "
               "run (user + system, ramferry-bench's sender_cpu_s and receiver_cpu_s); "
               "the guest has 2 vCPUs, which also run rxe's kernel work.")
    out.append("- GB/s is 10^9 bytes/s over the transfer (set-up excluded, as "
               "ib_write_bw excludes its connection); a ratio is each run's GB/s over "
               "the ceiling's in the same repeat, median over the repeats.")
    print("\n".join(out))


if __name__ == "__main__":
    main()
