#!/usr/bin/env python3
"""No process of a migration outlives it (issue 42), and a destination
region file that its filesystem cannot hold is refused before anything is
mapped.

Stop signals: every process of a --demo (the parent, which is the source,
and its forked destination) and of a two-process migration (source,
destination) is sent SIGTERM, SIGINT and SIGKILL at each phase it can be
caught in: set-up (before the session), mid pre-copy and during the pause
(stop-and-copy or the check after it). Each variant then checks, by pid
and process group (never by name: other tests run beside this one):
  - every process of that migration is gone within 2 s of the signal;
  - the control socket of every process that was not SIGKILLed is gone;
  - a source that lived to report says where its workload is: resumed
    (still running), or paused only after the commit point; after a
    SIGTERM or SIGINT its last line says which.
A source that is SIGKILLed cannot clean up: its destination must end by
itself (a lost peer ends the session); the time it took is printed.
Variants run in parallel, each in process groups of its own; every
process is SIGKILLed at the end whatever happened.

Region files (needs a private mount namespace: unshare -m; skipped, with
the reason printed, where it cannot be made): on an 8 MiB tmpfs a
destination --region-file for --size=32MiB is refused at once with both
numbers, a shorter existing file too (and left as it was), a --demo whose
destination file does not fit fails before the session, and a file that
fits is served.

Environment: RAMFERRY_MIGRATE, the binary. Exit 0 on success, 1 on
failure.
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor

MIGRATE = os.environ["RAMFERRY_MIGRATE"]
PORT_BASE = int(os.environ.get("RAMFERRY_SIGNALS_PORT_BASE", "48100"))
GONE_WITHIN = 2.0  # the target: seconds from the signal to no process
# Cheap and slow enough to catch each phase: round 0 of 32 MiB at
# 200 Mbit/s takes about 1.3 s, then (--max-rounds=1) stop-and-copy sends
# the 16 MiB dirty set in about 0.7 s, workload paused, then the check.
RUN_FLAGS = [
    "--insecure", "--size=32MiB", "--max-bandwidth=200mbit",
    "--dirty-set=16MiB", "--dirty-rate=512MiB", "--max-rounds=1",
    "--downtime-limit=10s", "--connect-timeout=5s",
]
SIGNALS = [signal.SIGTERM, signal.SIGINT, signal.SIGKILL]
PHASES = ["setup", "precopy", "pause"]
failures = []
failures_mu = threading.Lock()


def fail(name, what):
    with failures_mu:
        failures.append(f"{name}: {what}")


def proc_stat(pid):
    """(state, ppid, pgid) of `pid`, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return fields[0], int(fields[1]), int(fields[2])


def live_in_groups(groups):
    """Pids, not zombies, whose process group is one of `groups`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        st = proc_stat(int(entry))
        if st is not None and st[0] != "Z" and st[2] in groups:
            found.append(int(entry))
    return found


def children_of(pid):
    kids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = proc_stat(int(entry))
            if st is not None and st[1] == pid and st[0] != "Z":
                kids.append(int(entry))
    return kids


def query(path):
    """The control socket's query result, or None."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(1.0)
            s.connect(path)
            s.sendall(b'{"cmd":"query"}\n')
            buf = b""
            while not buf.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                buf += chunk
        reply = json.loads(buf)
        return reply.get("result") if reply.get("ok") else None
    except (OSError, ValueError):
        return None


def wait_for(cond, timeout, step=0.01):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = cond()
        if got:
            return got
        time.sleep(step)
    return None


def at_phase(sock, phase):
    """Waits for `phase` on the source's control socket; the state seen."""
    def reached():
        if phase == "setup":
            return "setup" if os.path.exists(sock) else None
        q = query(sock)
        if q is None:
            return None
        if phase == "precopy":
            ok = q.get("state") == "active" and q.get("bytes_sent", 0) > 0
        else:
            ok = q.get("state") in ("stop-and-copy", "verifying")
        return q.get("state") if ok else None
    return wait_for(reached, 20.0, 0.005)


def spawn(args, tmp, tag):
    out = open(os.path.join(tmp, tag + ".out"), "w")
    err = open(os.path.join(tmp, tag + ".err"), "w")
    return subprocess.Popen([MIGRATE] + args, stdout=out, stderr=err,
                            stdin=subprocess.DEVNULL, start_new_session=True)


def read(tmp, tag):
    try:
        with open(os.path.join(tmp, tag)) as f:
            return f.read()
    except OSError:
        return ""


def await_gone(groups, procs, since):
    """Seconds from `since` until no process of `groups` is left (reaping
    the test's own children as they end); None if some remain 2 s on."""
    while True:
        for p in procs:
            p.poll()
        if not live_in_groups(groups):
            return time.monotonic() - since
        if time.monotonic() - since > GONE_WITHIN:
            return None
        time.sleep(0.005)


def check_source_report(name, tmp, tag, sig, victim_is_source):
    """What a source that lived to report says of its workload."""
    out, err = read(tmp, tag + ".out"), read(tmp, tag + ".err")
    if "before the session was set up: the workload was never paused" \
            in err:
        return  # ended at once: nothing to report
    if "still running on the source" in out or "completed" in out.lower():
        pass
    elif "kept paused" in out or "stays paused" in err:
        if "after the commit point" not in err and "FINISH" not in out:
            fail(name, "the workload stays paused before the commit point:\n"
                 + out + err)
    else:
        fail(name, "the source's report does not say where its workload "
             "is:\n" + out + err)
    if victim_is_source and sig != signal.SIGKILL:
        signame = signal.Signals(sig).name
        if (f"interrupted by {signame} before the commit point" not in err
                and f"{signame} came after the commit point" not in err):
            fail(name, "no last line on the interruption:\n" + err)


def finish(name, groups, procs, sockets, killed_pid, sig, since):
    took = await_gone(groups, procs, since)
    if took is None:
        left = live_in_groups(groups)
        fail(name, f"processes {left} still there {GONE_WITHIN} s after "
             "the signal")
    for pid, path in sockets:
        if (pid != killed_pid or sig != signal.SIGKILL) and \
                os.path.exists(path):
            fail(name, f"control socket {path} left behind")
    return took


def demo_variant(index, victim, sig, phase, tmp):
    name = f"demo {victim} {signal.Signals(sig).name} at {phase}"
    sock = os.path.join(tmp, f"d{index}.sock")
    p = spawn(["--demo", f"--control={sock}"] + RUN_FLAGS, tmp, f"d{index}")
    groups = {p.pid}
    try:
        seen = at_phase(sock, phase)
        kids = children_of(p.pid)
        if seen is None or not kids:
            fail(name, f"phase {phase} not reached (children {kids}):\n"
                 + read(tmp, f"d{index}.err"))
            return name, None, None
        target = p.pid if victim == "parent" else kids[0]
        since = time.monotonic()
        os.kill(target, sig)
        took = finish(name, groups, [p], [(p.pid, sock)], p.pid, sig, since)
        if victim == "child" or sig != signal.SIGKILL:
            check_source_report(name, tmp, f"d{index}", sig,
                                victim == "parent")
        return name, seen, took
    finally:
        for g in groups:
            try:
                os.killpg(g, signal.SIGKILL)
            except OSError:
                pass
        p.wait()


def two_process_variant(index, victim, sig, phase, tmp):
    name = f"two-process {victim} {signal.Signals(sig).name} at {phase}"
    dsock = os.path.join(tmp, f"t{index}d.sock")
    ssock = os.path.join(tmp, f"t{index}s.sock")
    dtag, stag = f"t{index}d", f"t{index}s"
    procs = []
    try:
        # Port 0: the kernel's choice, which the destination reports. A
        # fixed port can be an ephemeral one another test's connection
        # holds at that moment.
        d = spawn(["--role=dest", "--listen=127.0.0.1:0",
                   f"--control={dsock}"] + RUN_FLAGS, tmp, dtag)
        procs.append(d)
        listening = wait_for(
            lambda: re.search(r"listening on 127\.0\.0\.1:(\d+)",
                              read(tmp, dtag + ".err")), 20.0)
        if not listening:
            fail(name, "the destination did not listen:\n"
                 + read(tmp, dtag + ".err") + read(tmp, dtag + ".out"))
            return name, None, None
        port = int(listening.group(1))
        if phase == "setup" and victim == "dest":
            # Listening, no source yet (Admission::TakeControl).
            since = time.monotonic()
            d.send_signal(sig)
            took = finish(name, {d.pid}, procs, [(d.pid, dsock)], d.pid,
                          sig, since)
            return name, "listening", took
        s = spawn(["--role=source", f"--connect=127.0.0.1:{port}",
                   f"--control={ssock}"] + RUN_FLAGS, tmp, stag)
        procs.append(s)
        groups = {d.pid, s.pid}
        seen = at_phase(ssock, phase)
        if seen is None:
            fail(name, f"phase {phase} not reached:\n"
                 + read(tmp, stag + ".err"))
            return name, None, None
        target = s if victim == "source" else d
        since = time.monotonic()
        target.send_signal(sig)
        if phase == "setup":
            # The source went before a session: its destination goes on
            # listening for its source, as a destination does; a SIGTERM
            # then ends it cleanly too.
            took = finish(name, {s.pid}, procs, [(s.pid, ssock)], s.pid,
                          sig, since)
            if d.poll() is None:
                since2 = time.monotonic()
                d.send_signal(signal.SIGTERM)
                finish(name + " (its destination, then SIGTERM)", {d.pid},
                       procs, [(d.pid, dsock)], None, signal.SIGTERM,
                       since2)
        else:
            took = finish(name, groups, procs, [(d.pid, dsock),
                                                (s.pid, ssock)],
                          target.pid, sig, since)
        if victim == "dest" or sig != signal.SIGKILL:
            check_source_report(name, tmp, stag, sig, victim == "source")
        return name, seen, took
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            p.wait()


def stop_signals():
    variants = []
    index = 0
    for victim, run in (("parent", demo_variant), ("child", demo_variant),
                        ("source", two_process_variant),
                        ("dest", two_process_variant)):
        for sig in SIGNALS:
            for phase in PHASES:
                variants.append((run, index, victim, sig, phase))
                index += 1
    with tempfile.TemporaryDirectory(prefix="ramferry-signals-") as tmp:
        # Several at once: each mostly waits on its bandwidth cap.
        with ThreadPoolExecutor(max_workers=6) as pool:
            results = list(pool.map(
                lambda v: v[0](v[1], v[2], v[3], v[4], tmp), variants))
    for name, seen, took in results:
        print(f"  {name:42s} caught in {seen or '-':14s} all gone in "
              + (f"{took:.2f} s" if took is not None else "-"))


def region_files():
    """The destination's region file against its filesystem's room."""
    try:
        probe = subprocess.run(
            ["unshare", "-m", "--propagation", "private", "sh", "-c",
             "mount -t tmpfs -o size=8m none /mnt"],
            capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        probe = None
        reason = str(e)
    if probe is None or probe.returncode != 0:
        reason = probe.stderr.strip() if probe is not None else reason
        print(f"SKIP region files: no private tmpfs here ({reason}); "
              "needs root (CAP_SYS_ADMIN) for unshare -m and mount")
        return
    failed_before = len(failures)
    with tempfile.TemporaryDirectory(prefix="ramferry-room-") as mnt:
        def in_tmpfs(script, timeout=10):
            """`script` with the 8 MiB tmpfs on `mnt`; its whole group is
            SIGKILLed past `timeout` (returncode then None)."""
            p = subprocess.Popen(
                ["unshare", "-m", "--propagation", "private", "sh", "-c",
                 f"mount -t tmpfs -o size=8m none {mnt} && {script}"],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                out, err = p.communicate(timeout=timeout)
                code = p.returncode
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                out, err = p.communicate()
                code = None
                err += f"\n[still running after {timeout} s: killed]"
            return subprocess.CompletedProcess(p.args, code, out, err)

        def expect_refused(name, r, size):
            if not r.returncode or r.returncode < 0 \
                    or f"--size is {size}" not in r.stderr \
                    or "free" not in r.stderr:
                fail(name, f"not refused with --size and the free space "
                     f"(rc {r.returncode}):\n{r.stdout}{r.stderr}")
            elif "madvise" in r.stderr or "Bad address" in r.stderr:
                fail(name, "failed late:\n" + r.stderr)

        m = f"'{MIGRATE}'"
        dest = (f"{m} --role=dest --insecure --listen=127.0.0.1:"
                f"{PORT_BASE + 90} --region-file={mnt}/r")
        r = in_tmpfs(f"{dest} --size=32MiB")
        expect_refused("region file on a full tmpfs", r, "32MiB")
        if "has 8MiB free" not in r.stderr:
            fail("region file on a full tmpfs",
                 "the free space is not 8MiB:\n" + r.stderr)
        # A shorter file is refused, and left as it was.
        r = in_tmpfs(f"head -c 4194304 /dev/zero > {mnt}/r && "
                     f"{dest} --size=32MiB; rc=$?; "
                     f"echo size=$(stat -c %s {mnt}/r); exit $rc")
        expect_refused("shorter region file", r, "32MiB")
        if "size=4194304" not in r.stdout:
            fail("shorter region file", "the file was changed:\n" + r.stdout)
        # A --demo whose destination file does not fit: the source's
        # 6 MiB fits, its copy does not.
        r = in_tmpfs(f"{m} --make-image={mnt}/src --size=6MiB >/dev/null && "
                     f"{m} --demo --insecure --region-file={mnt}/src")
        expect_refused("--demo's destination file", r, "6MiB")
        # One that fits is served (then stopped by SIGTERM).
        r = in_tmpfs(f"({dest} --size=4MiB & p=$!; "
                     f"for i in $(seq 100); do sleep 0.05; "
                     f"[ -e {mnt}/r ] && break; done; sleep 0.2; "
                     f"kill -TERM $p; wait $p; echo rc=$?)")
        if "listening on" not in r.stderr or "rc=143" not in r.stdout:
            fail("region file that fits",
                 f"not served, or not ended by SIGTERM:\n{r.stdout}"
                 f"{r.stderr}")
    if len(failures) == failed_before:
        print("  region files: refused with the sizes and the free space, "
              "before any mapping")


def main():
    start = time.monotonic()
    region_files()
    stop_signals()
    print(f"took {time.monotonic() - start:.1f} s")
    if failures:
        print(f"FAILED ({len(failures)}):")
        for f in failures:
            print("  " + f.replace("\n", "\n    "))
        return 1
    print("OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
