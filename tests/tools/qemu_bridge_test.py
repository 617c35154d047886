#!/usr/bin/env python3
"""A real QEMU's migration through ramferry (issue 44), and its failures.

Migrates: two QEMU processes (Debian's qemu-system-x86_64, TCG, paused
with -S, 256 MiB of patterned RAM in a memory-backend-file, multifd with 2
channels) through two ramferry-migrate --qemu processes at their defaults
(keyed, sealed), with bench/qemu --bridge: both QEMUs' query-migrate say
completed, the destination RAM file equals the source's byte for byte,
three streams were carried (the main connection and two multifd ones),
and both ramferry processes report success and exit 0.

Faults, each ending with no process left behind and a reason:
  - random bytes instead of QEMU's stream, into the source's socket: they
    are carried as they are; QEMU 7.2's destination reads some and then
    neither reads nor closes, and the stall timeout ends both ramferry
    processes with the reason;
  - the destination QEMU killed mid-migration: both ramferry processes
    fail naming the stream, and the source QEMU's migration fails (its
    guest is still there);
  - the destination ramferry killed mid-migration: the source ramferry
    fails (the session is lost) and the source QEMU's migration fails.

Skipped (exit 77, said why) without qemu-system-x86_64. Environment:
RAMFERRY_MIGRATE, the binary. Exit 0 on success, 1 on failure.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.join(HERE, "..", "..", "bench")
sys.path.insert(0, BENCH)
from qemu_harness import (  # noqa: E402
    Checks, Qmp, die_with_parent, free_port, qemu_argv, stop, write_zeros)

MIGRATE = os.environ["RAMFERRY_MIGRATE"]
QEMU = shutil.which("qemu-system-x86_64")
SIZE = 256 << 20
check = Checks()



def patterned(path, size):
    """Each 4 KiB page names itself, then bytes of its own."""
    with open(path, "wb") as f:
        for page in range(size // 4096):
            head = page.to_bytes(8, "little")
            f.write((head + bytes([page % 251]) * 8) * 256)


def migrated_through_ramferry(tmp):
    data = os.path.join("/dev/shm", f"qemu-bridge-test-{os.getpid()}")
    patterned(data, SIZE)
    try:
        p = subprocess.run(
            [sys.executable, os.path.join(BENCH, "qemu"), "--data", data,
             "--bridge", MIGRATE, "--timeout", "300"],
            capture_output=True, text=True, timeout=360)
    finally:
        os.remove(data)
    try:
        r = json.loads(p.stdout)
    except json.JSONDecodeError:
        check(False, f"bench/qemu --bridge printed no result: "
                     f"{p.stderr[-1500:]}")
        return
    check(p.returncode == 0, f"bench/qemu --bridge exit 0 ({p.returncode}: "
                             f"{r.get('error')})")
    check(r.get("status") == "completed" and
          r.get("dest_status") == "completed",
          f"both QEMUs completed ({r.get('status')}, {r.get('dest_status')})")
    check(r.get("byte_exact") is True and r.get("dest_pages_differing") == 0,
          "the destination RAM equals the source's byte for byte")
    bridge = r.get("bridge", {})
    for side in ("ramferry_src", "ramferry_dst"):
        rep = bridge.get(side, {})
        check(rep.get("ok") is True and rep.get("exit") == 0,
              f"{side} reports success and exits 0 ({rep.get('error')})")
    streams = bridge.get("ramferry_dst", {}).get("streams", [])
    check(len(streams) == 3, f"three streams carried ({len(streams)})")
    check(sum(s["forward_bytes"] for s in streams) > SIZE // 2,
          "the multifd streams carried the RAM")
    src_total = bridge.get("ramferry_src", {}).get("total", {})
    check(src_total.get("sealed_bytes", 0) > SIZE // 2,
          "every byte went sealed (the defaults)")


class Pair:
    """Two paused QEMUs with multifd (2 channels), the destination
    listening on a unix socket, and two ramferry-migrate --qemu between
    them; the source QEMU capped so the migration takes seconds."""

    def __init__(self, tmp, tag):
        self.tmp = tmp
        self.procs, self.qmps = {}, {}
        self.out = {}
        deadline = time.monotonic() + 60
        for side in ("src", "dst"):
            ram = os.path.join(tmp, f"{tag}.{side}.ram")
            if side == "src":  # random: no page goes as a zero page
                with open(ram, "wb") as f:
                    f.write(os.urandom(64 << 20))
            else:
                write_zeros(ram, 64 << 20)
            qmp = os.path.join(tmp, f"{tag}.{side}.qmp")
            self.procs[side] = subprocess.Popen(
                qemu_argv(QEMU, 64 << 20, ram, qmp, side == "dst"),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, preexec_fn=die_with_parent)
            self.qmps[side] = Qmp(qmp, deadline)
        for q in self.qmps.values():
            q.cmd("migrate-set-capabilities",
                  capabilities=[{"capability": "multifd", "state": True}])
            q.cmd("migrate-set-parameters", **{"multifd-channels": 2})
        self.qmps["src"].cmd("migrate-set-parameters",
                             **{"max-bandwidth": 8 << 20})
        self.incoming = os.path.join(tmp, f"{tag}.dst.mig")
        self.outgoing = os.path.join(tmp, f"{tag}.src.mig")
        self.qmps["dst"].cmd("migrate-incoming", uri=f"unix:{self.incoming}")
        key = os.path.join(tmp, "key")
        if not os.path.exists(key):
            fd = os.open(key, os.O_WRONLY | os.O_CREAT, 0o600)
            os.write(fd, os.urandom(32).hex().encode())
            os.close(fd)
        port = free_port()
        common = ["--json", f"--key-file={key}", "--connect-timeout=5s",
                  "--stall-timeout=10s"]
        for side, argv in [
                ("ramferry_dst", ["--role=dest", f"--qemu={self.incoming}",
                                  f"--listen=127.0.0.1:{port}"]),
                ("ramferry_src", ["--role=source", f"--qemu={self.outgoing}",
                                  f"--connect=127.0.0.1:{port}"])]:
            self.out[side] = open(os.path.join(tmp, f"{tag}.{side}"), "w+")
            self.procs[side] = subprocess.Popen(
                [MIGRATE] + argv + common, stdin=subprocess.DEVNULL,
                stdout=self.out[side], stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent)
        while not os.path.exists(self.outgoing):
            if time.monotonic() > deadline:
                raise TimeoutError("ramferry's source made no socket")
            time.sleep(0.01)

    def migrate(self):
        self.qmps["src"].cmd("migrate", uri=f"unix:{self.outgoing}")

    def status(self, side):
        try:
            return self.qmps[side].cmd("query-migrate").get("status")
        except Exception as e:  # a QEMU that was killed answers nothing
            return f"gone ({e})"

    def wait_ramferry(self, within):
        """Each ramferry process's exit code and last JSON line."""
        end = time.monotonic() + within
        out = {}
        for side in ("ramferry_src", "ramferry_dst"):
            p = self.procs[side]
            try:
                p.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                out[side] = (None, {})
                continue
            self.out[side].seek(0)
            lines = [ln for ln in self.out[side].read().splitlines()
                     if ln.startswith("{")]
            out[side] = (p.returncode, json.loads(lines[-1]) if lines else {})
        return out

    def wait_status(self, side, want, within):
        end = time.monotonic() + within
        s = None
        while time.monotonic() < end:
            s = self.status(side)
            if s in want:
                return s
            time.sleep(0.1)
        return s

    def close(self):
        for side in ("src", "dst"):
            stop(self.procs.get(side), self.qmps.get(side))
        for side in ("ramferry_src", "ramferry_dst"):
            p = self.procs.get(side)
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()


def random_bytes_are_refused_by_qemu(tmp):
    pair = Pair(tmp, "random")
    try:
        import socket
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(pair.outgoing)
        s.sendall(os.urandom(1 << 20))
        s.shutdown(socket.SHUT_WR)
        # QEMU 7.2's destination reads a little of them, then neither
        # reads nor closes: the stall timeout (10 s) ends the session.
        ends = pair.wait_ramferry(30)
        s.close()
        for side, (code, rep) in ends.items():
            check(code not in (None, 0) and rep.get("error"),
                  f"random bytes: {side} ended with a reason "
                  f"({code}, {rep.get('error')})")
        status = pair.status("dst")
        check(status != "completed",
              f"random bytes: the destination QEMU did not take them "
              f"({status})")
    finally:
        pair.close()


def killed(tmp, victim):
    pair = Pair(tmp, victim)
    try:
        pair.migrate()
        # 64 MiB at 8 MiB/s: mid-migration after 2 s.
        time.sleep(2)
        check(pair.status("src") == "active",
              f"{victim}: the migration is under way")
        pair.procs[victim].send_signal(signal.SIGKILL)
        ends = pair.wait_ramferry(30)
        src_status = pair.wait_status("src", ("failed", "cancelled"), 30)
        check(src_status in ("failed", "cancelled"),
              f"{victim} killed: the source QEMU's migration failed "
              f"({src_status}); its guest is still there")
        for side, (code, rep) in ends.items():
            if side == victim:
                continue
            check(code not in (None, 0) and not rep.get("ok", True) and
                  rep.get("error"),
                  f"{victim} killed: {side} failed with a reason "
                  f"({code}, {rep.get('error')})")
    finally:
        pair.close()


def main():
    if QEMU is None:
        print("skipped: qemu-system-x86_64 is not installed "
              "(scripts/install-deps.sh installs it)")
        return 77
    tmp = tempfile.mkdtemp(prefix="qemu-bridge-test-")
    try:
        if os.environ.get("QEMU_BRIDGE_FAULTS_ONLY") is None:
            migrated_through_ramferry(tmp)
        random_bytes_are_refused_by_qemu(tmp)
        killed(tmp, "dst")
        killed(tmp, "ramferry_dst")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return check.exit_code()


if __name__ == "__main__":
    sys.exit(main())
