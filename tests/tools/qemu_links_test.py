#!/usr/bin/env python3
"""QEMU's migration over two real links, one of them lost (issue 44).

Two network namespaces joined by two veth pairs, each end tbf-limited
(10.79.i.1 on the source side, 10.79.i.2 on the destination side). Guest
RAM: random bytes in /dev/shm, multifd with 2 channels, QEMU 7.2 under TCG,
paused with -S.

  - Through ramferry: ramferry-migrate --qemu on each side (the source in
    the source namespace, the destination in the other), at its defaults
    (keyed, sealed) with --survive-channel-loss and one channel on each
    link (--connect=10.79.0.2:P,10.79.1.2:P). Link 1 goes down mid-
    migration. Both QEMUs complete, the RAM files match, and ramferry
    reports the lost channel.
  - QEMU alone, over link 1 (tcp, its own multifd): link 1 goes down
    mid-migration, and QEMU's migration does not complete (it stalls on
    a connection that is gone; checked for 20 s, then cancelled).

With --measure the script reports instead, with no link lost, the time
of QEMU alone on one link against QEMU through ramferry on both (issue
44's two-link row, default 1 GiB over two 500 Mbit links), as JSON.

Skipped (exit 77, said why) without root, iproute2 or QEMU. Environment:
RAMFERRY_MIGRATE, the binary. Exit 0 on success, 1 on failure.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench"))
from qemu_harness import (  # noqa: E402
    Checks, Qmp, differing_pages, die_with_parent, qemu_argv, stop,
    write_zeros)

MIGRATE = os.environ.get("RAMFERRY_MIGRATE", "")
QEMU = shutil.which("qemu-system-x86_64")
PORT = 47910
check = Checks()



def sh(*argv):
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.PIPE)


class Links:
    """Two namespaces, `n` veth links between them at `rate` each."""

    def __init__(self, rate, n=2):
        self.src = f"rfq-{os.getpid()}-src"
        self.dst = f"rfq-{os.getpid()}-dst"
        sh("ip", "netns", "add", self.src)
        sh("ip", "netns", "add", self.dst)
        for ns in (self.src, self.dst):
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        for i in range(n):
            sh("ip", "-n", self.src, "link", "add", f"veth{i}", "type", "veth",
               "peer", "name", f"veth{i}", "netns", self.dst)
            for ns, host in ((self.src, 1), (self.dst, 2)):
                sh("ip", "-n", ns, "addr", "add", f"10.79.{i}.{host}/24",
                   "dev", f"veth{i}")
                sh("ip", "-n", ns, "link", "set", f"veth{i}", "up")
                sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev",
                   f"veth{i}", "root", "tbf", "rate", rate, "burst", "256kb",
                   "latency", "50ms")

    def down(self, i):
        sh("ip", "-n", self.src, "link", "set", f"veth{i}", "down")

    def close(self):
        for ns in (self.src, self.dst):
            subprocess.run(["ip", "netns", "del", ns],
                           stderr=subprocess.DEVNULL)


class Run:
    """Two paused QEMUs (each in a namespace, or none), multifd with 2
    channels, the source's bandwidth cap lifted."""

    def __init__(self, tmp, tag, size, data, ns=(None, None),
                 qmp_within=1200):
        self.procs, self.qmps, self.out = {}, {}, {}
        self.tmp, self.tag = tmp, tag
        self.ram = {}
        deadline = time.monotonic() + qmp_within
        for side, netns in zip(("src", "dst"), ns):
            self.ram[side] = os.path.join("/dev/shm", f"{tag}-{os.getpid()}"
                                                      f".{side}")
            if side == "src":
                shutil.copyfile(data, self.ram[side])
            else:
                write_zeros(self.ram[side], size)
            qmp = os.path.join(tmp, f"{tag}.{side}.qmp")
            argv = qemu_argv(QEMU, size, self.ram[side], qmp, side == "dst")
            if netns:
                argv = ["ip", "netns", "exec", netns] + argv
            self.procs[side] = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, preexec_fn=die_with_parent)
            self.qmps[side] = Qmp(qmp, deadline)
        for q in self.qmps.values():
            q.cmd("migrate-set-capabilities",
                  capabilities=[{"capability": "multifd", "state": True}])
            q.cmd("migrate-set-parameters", **{"multifd-channels": 2})
        self.qmps["src"].cmd("migrate-set-parameters",
                             **{"max-bandwidth": 1 << 40,
                                "downtime-limit": 60000})

    def ramferry(self, links, extra):
        key = os.path.join(self.tmp, "key")
        if not os.path.exists(key):
            fd = os.open(key, os.O_WRONLY | os.O_CREAT, 0o600)
            os.write(fd, os.urandom(32).hex().encode())
            os.close(fd)
        self.incoming = os.path.join(self.tmp, f"{self.tag}.dst.mig")
        self.outgoing = os.path.join(self.tmp, f"{self.tag}.src.mig")
        self.qmps["dst"].cmd("migrate-incoming", uri=f"unix:{self.incoming}")
        common = ["--json", f"--key-file={key}", "--connect-timeout=10s"]
        connect = ",".join(f"10.79.{i}.2:{PORT}" for i in range(2))
        for side, ns, argv in [
                ("ramferry_dst", links.dst,
                 ["--role=dest", f"--qemu={self.incoming}",
                  f"--listen=0.0.0.0:{PORT}"]),
                ("ramferry_src", links.src,
                 ["--role=source", f"--qemu={self.outgoing}",
                  f"--connect={connect}", "--channels=2"])]:
            self.out[side] = open(os.path.join(self.tmp, f"{self.tag}.{side}"),
                                  "w+")
            self.procs[side] = subprocess.Popen(
                ["ip", "netns", "exec", ns, MIGRATE] + argv + common + extra,
                stdin=subprocess.DEVNULL, stdout=self.out[side],
                stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
            time.sleep(0.3)
        end = time.monotonic() + 30
        while not os.path.exists(self.outgoing):
            if time.monotonic() > end:
                raise TimeoutError("ramferry's source made no socket")
            time.sleep(0.05)
        return f"unix:{self.outgoing}"

    def alone(self, addr):
        self.qmps["dst"].cmd("migrate-incoming", uri=f"tcp:{addr}:{PORT + 1}")
        return f"tcp:{addr}:{PORT + 1}"

    def status(self, side):
        try:
            return self.qmps[side].cmd("query-migrate")
        except Exception as e:  # noqa: BLE001 - a QEMU gone answers nothing
            return {"status": f"gone ({e})"}

    def wait(self, within):
        """Both QEMUs' query-migrate once the source ended (or `within`)."""
        end = time.monotonic() + within
        while time.monotonic() < end:
            s = self.status("src")
            if s.get("status") in ("completed", "failed", "cancelled"):
                break
            time.sleep(0.1)
        d = self.status("dst")
        for _ in range(50):
            if d.get("status") == "completed":
                break
            time.sleep(0.1)
            d = self.status("dst")
        return self.status("src"), d

    def report(self, side):
        p = self.procs[side]
        try:
            p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        self.out[side].seek(0)
        lines = [ln for ln in self.out[side].read().splitlines()
                 if ln.startswith("{")]
        return p.returncode, (json.loads(lines[-1]) if lines else {})

    def same_ram(self):
        return differing_pages(self.ram["src"], self.ram["dst"])[0] == 0

    def close(self):
        for side in ("src", "dst"):
            stop(self.procs.get(side), self.qmps.get(side))
        for side in ("ramferry_src", "ramferry_dst"):
            p = self.procs.get(side)
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        for f in self.ram.values():
            if os.path.exists(f):
                os.remove(f)


def down_later(links, i, after):
    """Takes link `i` down `after` seconds from now, on a thread of its
    own: a source QEMU whose guest is paused answers QMP only once its
    migration is over, so no QMP call can time it."""
    t = threading.Timer(after, links.down, args=(i,))
    t.start()
    return t


def lost_link_through_ramferry(tmp, links, size, data):
    run = Run(tmp, "ramferry", size, data)
    try:
        uri = run.ramferry(links, ["--survive-channel-loss",
                                   "--stall-timeout=3s"])
        t0 = time.monotonic()
        run.qmps["src"].cmd("migrate", uri=uri)
        down_later(links, 1, 3).join()
        src, dst = run.wait(120)
        took = time.monotonic() - t0
        check(took > 3, f"through ramferry: link 1 went down mid-migration "
                        f"(3 s in; done after {took:.1f} s)")
        check(src.get("status") == "completed" and
              dst.get("status") == "completed",
              f"through ramferry: link 1 lost, both QEMUs completed "
              f"({src.get('status')}, {dst.get('status')}; "
              f"{src.get('error-desc')})")
        code, rep = run.report("ramferry_src")
        check(code == 0 and rep.get("ok"),
              f"through ramferry: the source ramferry ended well "
              f"({code}, {rep.get('error')})")
        check(rep.get("channels_lost", 0) == 1,
              f"through ramferry: one channel reported lost "
              f"({rep.get('lost')})")
        run.report("ramferry_dst")
        if src.get("status") == "completed":
            check(run.same_ram(), "through ramferry: the RAM files match")
    finally:
        run.close()


def lost_link_qemu_alone(tmp, links, size, data):
    run = Run(tmp, "alone", size, data, ns=(links.src, links.dst),
              qmp_within=40)
    try:
        uri = run.alone("10.79.1.2")
        run.qmps["src"].cmd("migrate", uri=uri)
        down_later(links, 1, 3).join()
        # A paused source answers only once its migration is over: no
        # answer by the QMP deadline (40 s from its start) is a stall.
        src, _ = run.wait(30)
        check(src.get("status") != "completed",
              f"QEMU alone: link 1 lost, its migration did not complete "
              f"({src.get('status')})")
    finally:
        run.close()


def measure(tmp, args, data, size):
    result = {"size": size, "rate": args.rate}
    links = Links(args.rate)
    try:
        run = Run(tmp, "alone", size, data, ns=(links.src, links.dst))
        try:
            t = time.monotonic()
            run.qmps["src"].cmd("migrate", uri=run.alone("10.79.0.2"))
            src, _ = run.wait(1200)
            result["qemu_one_link_s"] = time.monotonic() - t
            result["qemu_status"] = src.get("status")
            result["qemu_total_time_ms"] = src.get("total-time")
        finally:
            run.close()
        run = Run(tmp, "ramferry", size, data)
        try:
            uri = run.ramferry(links, [])
            t = time.monotonic()
            run.qmps["src"].cmd("migrate", uri=uri)
            src, _ = run.wait(1200)
            result["ramferry_two_links_s"] = time.monotonic() - t
            result["ramferry_status"] = src.get("status")
            result["ramferry_total_time_ms"] = src.get("total-time")
            result["byte_exact"] = run.same_ram()
        finally:
            run.close()
        result["ratio"] = (result["ramferry_two_links_s"] /
                           result["qemu_one_link_s"])
    finally:
        links.close()
    print(json.dumps(result))
    return 0 if result.get("byte_exact") else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--measure", action="store_true")
    ap.add_argument("--size-mib", type=int, default=None)
    ap.add_argument("--rate", default=None)
    args = ap.parse_args()
    why = None
    if os.geteuid() != 0:
        why = "needs root (network namespaces)"
    elif shutil.which("ip") is None or shutil.which("tc") is None:
        why = "needs iproute2 (ip, tc)"
    elif QEMU is None:
        why = "qemu-system-x86_64 is not installed"
    elif not MIGRATE:
        why = "RAMFERRY_MIGRATE is not set"
    if why:
        print(f"skipped: {why}")
        return 77
    size = (args.size_mib or (1024 if args.measure else 128)) << 20
    args.rate = args.rate or ("500mbit" if args.measure else "100mbit")
    tmp = tempfile.mkdtemp(prefix="qemu-links-")
    data = os.path.join("/dev/shm", f"qemu-links-data-{os.getpid()}")
    with open(data, "wb") as f:
        for _ in range(size >> 24):
            f.write(os.urandom(16 << 20))
    try:
        if args.measure:
            return measure(tmp, args, data, size)
        links = Links(args.rate)
        try:
            lost_link_through_ramferry(tmp, links, size, data)
        finally:
            links.close()
        links = Links(args.rate)
        try:
            lost_link_qemu_alone(tmp, links, size, data)
        finally:
            links.close()
    finally:
        os.remove(data)
        shutil.rmtree(tmp, ignore_errors=True)
    return check.exit_code()


if __name__ == "__main__":
    sys.exit(main())
