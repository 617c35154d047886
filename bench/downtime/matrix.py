#!/usr/bin/env python3
"""The downtime limit as a promise (issue 42): over a matrix of limits,
writers and memory kinds, how the estimate that decided the switchover
compares with the downtime measured, and the downtime with the limit.

Each run is `ramferry-migrate --demo --json --postcopy=auto` (both ends
as separate processes, loopback; --postcopy=off for a region file,
which post-copy cannot serve), one per cell, in a rotating order:

  limits   --downtime-limit of 20, 50 and 300 ms;
  writers  idle (nothing writes), moderate (64 MiB/s into a 64 MiB set)
           and hot (1 GiB/s into half the memory);
  memory   anon (memload in anonymous memory), file (memload in a
           --region-file in /dev/shm, read through the page cache) and
           attached (ramferry-attached-workload exporting a memfd,
           paused by its handler; its --rate in 8-byte stores/s:
           0, 200000 and 2000000).

Per run: how it switched over, the estimate before the pause and once
paused (the one that decided, once the final round's probe went where
it had one), the downtime, their ratio (stop-and-copy only), and whether
the downtime kept the limit (at most 1.1x where it did not switch to
post-copy). Every run must migrate and verify.

Writes matrix.jsonl (every report) and matrix.md (the table, with the
commands) to --out.

Usage: bench/downtime/matrix.py [--out DIR] [--size-mib 512]
           [--limits 20,50,300] [--repeats 1] [--build DIR]
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
import common  # noqa: E402  (bench/common.py)

common.set_prog("downtime")
WRITERS = {
    # memload --dirty-set/--dirty-rate, attached workload --rate
    "idle": ({"set": "64MiB", "rate": "0"}, 0),
    "moderate": ({"set": "64MiB", "rate": "64MiB"}, 200000),
    "hot": ({"set": None, "rate": "1GiB"}, 2000000),
}
MEMORY = ["anon", "file", "attached"]


def one_run(args, migrate, workload, limit_ms, writer, memory, d):
    load, stores = WRITERS[writer]
    size = f"{args.size_mib}MiB"
    # Post-copy needs private anonymous memory at the destination: a
    # region file's runs stop and copy, or keep pre-copying.
    cmd = [migrate, "--demo", "--json",
           f"--postcopy={'off' if memory == 'file' else 'auto'}",
           f"--downtime-limit={limit_ms}ms"]
    exp = None
    if memory == "attached":
        sock = os.path.join(d, "export.sock")
        exp_cmd = [workload, f"--export={sock}", f"--size-mib={args.size_mib}",
                   f"--rate={stores}", "--pattern=random",
                   "--baseline-seconds=0", "--timeout-s=300"]
        exp = subprocess.Popen(exp_cmd, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
        common.wait_for(exp, "listening", stream=exp.stdout)
        cmd += [f"--attach={sock}"]
    else:
        dirty_set = load["set"] or f"{args.size_mib // 2}MiB"
        cmd += [f"--size={size}", f"--dirty-set={dirty_set}",
                f"--dirty-rate={load['rate']}"]
        if memory == "file":
            path = os.path.join("/dev/shm", os.path.basename(d))
            with open(path, "wb") as f:  # random pages: none elided
                for _ in range(args.size_mib):
                    f.write(os.urandom(1 << 20))
            cmd += [f"--region-file={path}"]
    try:
        j = common.run_report(cmd, timeout=600)
    finally:
        if exp is not None:
            try:
                exp.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                exp.kill()
                exp.communicate()
        if memory == "file":
            # The source's file and the demo's destination copy of it.
            path = os.path.join("/dev/shm", os.path.basename(d))
            for leftover in (path, path + ".dest"):
                try:
                    os.unlink(leftover)
                except FileNotFoundError:
                    pass
    if j.get("outcome") != "migrated":
        common.fail(f"not migrated: {j.get('error')}")
    return {"limit_ms": limit_ms, "writer": writer, "memory": memory,
            "command": cmd, "report": j}


def row(r):
    j = r["report"]
    down = j["downtime_s"] * 1e3
    before = j["estimated_downtime_s"] * 1e3
    paused = j.get("switchover_estimate_s", 0) * 1e3
    postcopy = j.get("switchover") == "postcopy"
    decided = before if paused == 0 else paused
    ratio = decided / down if down > 0 else 0
    within = (1 / 1.5) <= ratio <= 1.5
    kept = postcopy or down <= 1.1 * r["limit_ms"]
    # A post-copy downtime (pause, collect, the destination arming) is not
    # what the estimate predicts: that of the stop-and-copy not taken.
    judged = ("n/a (post-copy)" if postcopy else
              f"{ratio:.2f} {'yes' if within else 'NO'}")
    probe = j.get("downtime_final_probe_pages", 0)
    return (f"| {r['limit_ms']} | {r['writer']} | {r['memory']} | "
            f"{j.get('switchover')} ({j.get('converged_by')}) | "
            f"{j.get('switchovers_resumed', 0)} | {before:.1f} | "
            f"{paused:.1f} | {probe} | {down:.1f} | {judged} | "
            f"{'yes' if kept else 'NO'} |"), within, kept, postcopy


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="bench/results/downtime")
    ap.add_argument("--size-mib", type=int, default=512)
    ap.add_argument("--limits", default="20,50,300")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--build", default=os.path.join(common.ROOT, "build"))
    args = ap.parse_args()
    migrate = common.find_migrate(build=args.build)
    workload = common.find_binary(args.build, common.WORKLOAD)
    os.makedirs(args.out, exist_ok=True)
    cells = [(int(l), w, m) for l in args.limits.split(",")
             for w in WRITERS for m in MEMORY]
    runs = []
    total = len(cells) * args.repeats
    start = time.time()
    with open(os.path.join(args.out, "matrix.jsonl"), "w") as out:
        for rep in range(args.repeats):
            for limit_ms, writer, memory in common.rotated(cells, rep):
                print(f"downtime: run {len(runs) + 1}/{total}: limit "
                      f"{limit_ms} ms, {writer}, {memory} "
                      f"({time.time() - start:.0f} s)", file=sys.stderr,
                      flush=True)
                with tempfile.TemporaryDirectory(
                        prefix="ramferry-downtime-") as d:
                    r = one_run(args, migrate, workload, limit_ms, writer,
                                memory, d)
                runs.append(r)
                out.write(json.dumps(r) + "\n")
                out.flush()
    rows = [row(r) for r in runs]
    stop_copy = [x for x in rows if not x[3]]
    lines = [
        f"# Downtime against its limit ({time.strftime('%Y-%m-%d')}, "
        f"{platform.node()}, {os.cpu_count()} cores)",
        "",
        f"{len(runs)} runs of `ramferry-migrate --demo --postcopy=auto` "
        "(off for region files), "
        f"{args.size_mib} MiB, loopback. The ratio is the estimate that "
        "decided the stop-and-copy (once paused, and once the final round's "
        "probe went where it had one) over the downtime measured; a "
        "post-copy switch has no estimate of its own (its downtime is the "
        "pause, the collect and the destination arming).",
        "",
        "| limit ms | writer | memory | switchover (why) | resumed | "
        "estimate before ms | once paused ms | probe pages | downtime ms | "
        "ratio, within 1.5x | downtime <= 1.1x limit |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ] + [x[0] for x in rows] + [
        "",
        f"Stop-and-copy estimates within 1.5x: "
        f"{sum(x[1] for x in stop_copy)} of {len(stop_copy)}. "
        f"Stop-and-copy runs within 1.1x the limit: "
        f"{sum(x[2] for x in stop_copy)} of {len(stop_copy)}. "
        f"Post-copy runs: {len(rows) - len(stop_copy)}.",
        "",
        "Commands: see matrix.jsonl (each run's command and report).",
    ]
    with open(os.path.join(args.out, "matrix.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
