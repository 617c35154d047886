#!/usr/bin/env python3
"""Local migration by hand-over against the same migration over loopback.

One exported workload (bench/attach/workload.c: a memfd filled with
pseudo-random words, a quarter of the pages zero, storing at --rate while
it runs), moved to an adopting process in one of three ways per repeat:

  hand-over, --verify=off:
    ramferry-attached-workload --export=S1 --allow-hand-over ...
    ramferry-attached-workload --adopt=S2 --seconds=0
    ramferry-migrate --attach=S1 --hand-over=S2 --verify=off --json
  hand-over, --verify=full (a digest per region, checked by the adopter)
  loopback (docs/handoff.md's two-process command lines):
    ramferry-migrate --role=dest --listen=127.0.0.1:0 --size=N --key-file=K
        --export=S2 --json
    ramferry-migrate --role=source --connect=127.0.0.1:PORT --key-file=K
        --attach=S1 --json

Each run must end migrated, with the adopter's digest of what it got equal
to the workload's digest of its memory once told MIGRATED (the adopter
writes nothing: with a hand-over they are the same pages). Figures: the
tool's downtime (hand-over: pause start to the adopter's acknowledgement;
loopback: the source's downtime_s), the pause as the workload lives it
(its handler's return to the adopter's first moment with the memory, one
CLOCK_MONOTONIC), and the migration process's wall time.

Writes --out/hand_over.md (medians, ratios) and hand_over.jsonl.

Usage: bench/attach/hand_over.py [--out DIR] [--size-mib 4096]
           [--rate 100000] [--repeats 3] [--build DIR]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
import common  # noqa: E402  (bench/common.py)

common.set_prog("hand_over")
MODES = ("hand-over verify=off", "hand-over verify=full", "loopback")


def migrate_cmds(args, migrate, mode, d, s1, s2):
    """(the destination's command or None, the migration's command)."""
    if mode.startswith("hand-over"):
        verify = mode.split("=")[1]
        return None, [migrate, f"--attach={s1}", f"--hand-over={s2}",
                      f"--verify={verify}", "--json"]
    key = os.path.join(d, "key")
    with open(key, "w") as f:
        f.write("k" * 32)
    os.chmod(key, 0o600)
    dest = [migrate, "--role=dest", "--listen=127.0.0.1:0",
            f"--size={args.size_mib}MiB", f"--key-file={key}",
            f"--export={s2}", "--json"]
    src = [migrate, "--role=source", "--connect=127.0.0.1:PORT",
           f"--key-file={key}", f"--attach={s1}", "--json"]
    return dest, src


def one_run(args, workload, migrate, mode, rep):
    with tempfile.TemporaryDirectory(prefix="ramferry-hand-over-") as d:
        s1, s2 = os.path.join(d, "export.sock"), os.path.join(d, "adopt.sock")
        exp_cmd = [workload, f"--export={s1}", f"--size-mib={args.size_mib}",
                   f"--rate={args.rate}", "--baseline-seconds=1",
                   f"--seed={rep + 1}", "--timeout-s=900"]
        if mode.startswith("hand-over"):
            exp_cmd.append("--allow-hand-over")
        adopt_cmd = [workload, f"--adopt={s2}", "--seconds=0",
                     "--timeout-s=900"]
        dest_cmd, mig_cmd = migrate_cmds(args, migrate, mode, d, s1, s2)
        procs = []
        try:
            exp = subprocess.Popen(exp_cmd, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, text=True)
            adopt = subprocess.Popen(adopt_cmd, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
            procs = [exp, adopt]
            common.wait_for(exp, "listening")
            common.wait_for(adopt, "waiting")
            dest = None
            if dest_cmd:
                dest = subprocess.Popen(dest_cmd, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True)
                procs.append(dest)
                line = common.wait_for(dest, "listening on 127.0.0.1:")
                port = line.strip().rsplit(":", 1)[1].split()[0]
                mig_cmd = [c.replace("PORT", port) for c in mig_cmd]
            t0 = time.monotonic()
            rep_json = common.run_report(mig_cmd, timeout=900,
                                         verified=False)
            wall = time.monotonic() - t0
            e_out, _ = exp.communicate(timeout=300)
            a_out, _ = adopt.communicate(timeout=300)
            if dest:
                dest.communicate(timeout=300)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        w, a = common.last_json(e_out), common.last_json(a_out)
        if w["digest"] != a["digest"] or rep_json["outcome"] != "migrated":
            common.fail(f"{mode}: memory differs or not migrated: "
                        f"{rep_json} {w} {a}")
        return {"mode": mode, "repeat": rep, "wall_s": wall,
                "downtime_s": rep_json["downtime_s"],
                "lived_pause_s": (a["resumed_at_ns"] - w["paused_at_ns"]) / 1e9,
                "verify_s": rep_json.get("verify_s", 0),
                "digest": w["digest"], "migration": rep_json,
                "commands": [exp_cmd, adopt_cmd] +
                ([dest_cmd] if dest_cmd else []) + [mig_cmd]}


def med(runs, mode, key):
    return common.median([r for r in runs if r["mode"] == mode], key)


def report(args, runs):
    rows = {m: {k: med(runs, m, k) for k in
                ("downtime_s", "lived_pause_s", "wall_s", "verify_s")}
            for m in MODES}
    loop = rows["loopback"]
    lines = ["# Hand-over against loopback migration", "",
             f"{args.size_mib} MiB memfd workload storing {args.rate}/s, "
             f"medians of {args.repeats} repeats per mode (interleaved); "
             "every run migrated, the adopter's digest equal to the "
             "workload's.", "",
             "| mode | downtime ms | pause lived ms | verify ms | "
             "wall s | downtime / loopback | pause lived / loopback | "
             "wall / loopback |",
             "|---|---|---|---|---|---|---|---|"]
    for m in MODES:
        r = rows[m]
        lines.append(
            f"| {m} | {r['downtime_s'] * 1e3:.2f} | "
            f"{r['lived_pause_s'] * 1e3:.2f} | {r['verify_s'] * 1e3:.1f} | "
            f"{r['wall_s']:.2f} | "
            f"{r['downtime_s'] / loop['downtime_s']:.4f} | "
            f"{r['lived_pause_s'] / loop['lived_pause_s']:.4f} | "
            f"{r['wall_s'] / loop['wall_s']:.4f} |")
    lines += ["", "Commands (the last repeat of each mode):", ""]
    for m in MODES:
        last = [r for r in runs if r["mode"] == m][-1]
        lines.append(f"{m}:")
        lines += ["    " + " ".join(c) for c in last["commands"]]
    with open(os.path.join(args.out, "hand_over.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", default="bench-results/hand-over")
    ap.add_argument("--build", default=os.path.join(common.ROOT, "build"))
    ap.add_argument("--size-mib", type=int, default=4096)
    ap.add_argument("--rate", type=int, default=100000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    workload = common.find_binary(args.build, common.WORKLOAD)
    migrate = common.find_migrate(build=args.build)
    os.makedirs(args.out, exist_ok=True)
    runs = []
    with open(os.path.join(args.out, "hand_over.jsonl"), "w") as log:
        for rep in range(args.repeats):
            order = MODES if rep % 2 == 0 else MODES[::-1]
            for mode in order:
                print(f"hand_over: repeat {rep + 1}/{args.repeats}, {mode}",
                      file=sys.stderr, flush=True)
                r = one_run(args, workload, migrate, mode, rep)
                print(f"  downtime {r['downtime_s'] * 1e3:.2f} ms, wall "
                      f"{r['wall_s']:.2f} s", file=sys.stderr, flush=True)
                runs.append(r)
                log.write(json.dumps(r) + "\n")
                log.flush()
    report(args, runs)


if __name__ == "__main__":
    main()
