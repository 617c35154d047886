#!/usr/bin/env python3
"""An attached workload (issue 17's figures): a process that exports its
memory through the C API keeps storing into it while ramferry-migrate
--attach moves it, and a second process adopts the received memory
(--export). Per repeat, three processes and one migration:

  ramferry-attached-workload --export=S1 --size-mib=N --rate=R ...
  ramferry-attached-workload --adopt=S2 ...
  ramferry-migrate --demo --json --attach=S1 --export=S2 [--verify=V]

The workload measures its own store latency: the first --baseline-seconds
of stores before it exports anything (plain memory, no tracking: the
latency without migration), then every store from the export until it is
paused. The pause as the workload lives it runs from its pause handler's
return (paused_at_ns) to the adopting process's first moment with the
memory (resumed_at_ns), on one CLOCK_MONOTONIC (one machine). Every repeat
must end verified with the adopter's digest equal to the workload's.

Writes --out/attach.md (medians, ratios to the same run's baseline, the
commands) and attach.jsonl (every report).

Usage: bench/attach/run.py [--out DIR] [--size-mib 1024] [--rate 100000]
           [--pattern mixed] [--threads 1] [--baseline-seconds 2]
           [--verify full,off] [--repeats 3] [--channels 2]
           [--transport tcp] [--build DIR]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
import common  # noqa: E402  (bench/common.py)

common.set_prog("attach")


def one_run(args, workload, migrate, verify, rep):
    with tempfile.TemporaryDirectory(prefix="ramferry-attach-") as d:
        s1, s2 = os.path.join(d, "export.sock"), os.path.join(d, "adopt.sock")
        exp_cmd = [workload, f"--export={s1}", f"--size-mib={args.size_mib}",
                   f"--rate={args.rate}", f"--pattern={args.pattern}",
                   f"--threads={args.threads}",
                   f"--baseline-seconds={args.baseline_seconds}",
                   f"--seed={rep + 1}", "--timeout-s=600"]
        adopt_cmd = [workload, f"--adopt={s2}", "--seconds=0",
                     "--timeout-s=600"]
        mig_cmd = [migrate, "--demo", "--json", f"--attach={s1}",
                   f"--export={s2}", f"--verify={verify}",
                   f"--channels={args.channels}",
                   f"--transport={args.transport}"]
        exp = subprocess.Popen(exp_cmd, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        adopt = subprocess.Popen(adopt_cmd, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        try:
            common.wait_for(exp, "listening", timeout=60)
            common.wait_for(adopt, "waiting", timeout=60)
            # Stores under tracking before the migration starts too: the
            # latency the workload lives while it is exported.
            rep_json = common.run_report(mig_cmd, timeout=900,
                                         verified=False)
            e_out, e_err = exp.communicate(timeout=120)
            a_out, a_err = adopt.communicate(timeout=120)
        finally:
            for p in (exp, adopt):
                if p.poll() is None:
                    p.kill()
        w, a = common.last_json(e_out), common.last_json(a_out)
        if w["digest"] != a["digest"]:
            common.fail(f"the adopter's memory differs: {w} {a}")
        if rep_json["outcome"] != "migrated":
            common.fail(f"not migrated: {rep_json.get('error')}")
        return {"verify": verify, "migration": rep_json, "workload": w,
                "adopter": a,
                "commands": [exp_cmd, adopt_cmd, mig_cmd]}


def summarize(runs, verify):
    rs = [r for r in runs if r["verify"] == verify]

    def med(f):
        return common.median(rs, f)
    pause = med(lambda r: (r["adopter"]["resumed_at_ns"]
                           - r["workload"]["paused_at_ns"]) / 1e6)
    downtime = med(lambda r: r["migration"]["downtime_s"] * 1e3)
    verify_ms = med(lambda r: r["migration"]["verify_s"] * 1e3)
    out = {
        "verify": verify, "repeats": len(rs),
        "pause_ms": pause, "downtime_ms": downtime, "verify_ms": verify_ms,
        "pause_minus_downtime_ms": med(
            lambda r: (r["adopter"]["resumed_at_ns"]
                       - r["workload"]["paused_at_ns"]) / 1e6
            - r["migration"]["downtime_s"] * 1e3),
        "pause_minus_downtime_and_verify_ms": med(
            lambda r: (r["adopter"]["resumed_at_ns"]
                       - r["workload"]["paused_at_ns"]) / 1e6
            - (r["migration"]["downtime_s"] + r["migration"]["verify_s"])
            * 1e3),
        "handover_ms": med(lambda r: r["migration"]["destination"]["export"]
                           ["handover_s"] * 1e3),
        "handler_pause_ms": med(lambda r: r["migration"]["attached"]
                                ["pause_s"] * 1e3),
        "total_s": med(lambda r: r["migration"]["total_s"]),
        "rounds": med(lambda r: r["migration"]["rounds"]),
        "rate_achieved": med(lambda r: r["workload"]["rate_achieved"]),
    }
    for q in ("p50_ns", "p90_ns", "p99_ns", "p999_ns", "max_ns"):
        base = med(lambda r: r["workload"]["baseline"][q])
        during = med(lambda r: r["workload"]["migration"][q])
        out[f"baseline_{q}"] = base
        out[f"migration_{q}"] = during
        out[f"ratio_{q}"] = during / base if base else float("nan")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", default="bench-results/attach")
    ap.add_argument("--build", default=os.path.join(common.ROOT, "build"))
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--rate", type=int, default=100000)
    ap.add_argument("--pattern", default="mixed")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--baseline-seconds", type=float, default=2)
    ap.add_argument("--verify", default="full,off")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--channels", type=int, default=2)
    ap.add_argument("--transport", default="tcp")
    args = ap.parse_args()
    workload = common.find_binary(args.build, common.WORKLOAD)
    migrate = common.find_migrate(build=args.build)
    os.makedirs(args.out, exist_ok=True)
    verifies = args.verify.split(",")
    runs = []
    with open(os.path.join(args.out, "attach.jsonl"), "w") as log:
        for rep in range(args.repeats):
            # Alternate the order so drift does not favour one mode.
            order = verifies if rep % 2 == 0 else verifies[::-1]
            for v in order:
                print(f"attach: repeat {rep + 1}/{args.repeats}, "
                      f"verify={v} ...", file=sys.stderr, flush=True)
                r = one_run(args, workload, migrate, v, rep)
                runs.append(r)
                log.write(json.dumps(r) + "\n")
                log.flush()
    lines = ["# Attached workload: store latency and pause", "",
             f"{args.size_mib} MiB memfd, {args.rate} stores/s "
             f"({args.pattern}, {args.threads} thread(s)), "
             f"{args.transport} over {args.channels} channels on loopback; "
             f"medians of {args.repeats} repeats per mode, interleaved.", ""]
    for v in verifies:
        s = summarize(runs, v)
        lines.append(f"## --verify={v}")
        lines.append("")
        lines.append("| | value |")
        lines.append("|---|---|")
        for k, val in s.items():
            lines.append(f"| {k} | {val:.3f} |" if isinstance(val, float)
                         else f"| {k} | {val} |")
        lines.append("")
        print(json.dumps(s))
    lines.append("Commands (the last repeat):")
    lines.append("")
    for c in runs[-1]["commands"]:
        lines.append("    " + " ".join(c))
    with open(os.path.join(args.out, "attach.md"), "w") as f:
        f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
