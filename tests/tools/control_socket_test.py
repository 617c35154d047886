#!/usr/bin/env python3
"""ramferry-migrate --control, driven as an orchestrator would drive it.

A client written here with the standard library alone (no ramferry code)
talks JSON lines to both ends of live migrations between two
ramferry-migrate processes on loopback: it changes the bandwidth mid-round
and sees the rate follow, starts post-copy by command, cancels a migration
and sees both ends stop cleanly, sends every kind of bad request and sees
the migration go on, and runs examples/control/orchestrate.py end to end.

RAMFERRY_MIGRATE names the binary (ctest sets it). Exit 77: skipped.
"""

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

MIGRATE = os.environ.get("RAMFERRY_MIGRATE", "")
EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                       "examples", "control", "orchestrate.py")
MB = 1000 * 1000


class Client:
    """One connection to a control socket: requests and the events between."""

    def __init__(self, path, timeout=30):
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.connect(path)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                self.sock.close()
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self.sock.settimeout(timeout)
        # Reads only: a text file that also writes drops what it has read
        # ahead (an event behind a reply) when written to.
        self.file = self.sock.makefile("r", encoding="utf-8")
        self.events = []
        self.next_id = 0

    def send_line(self, text):
        self.sock.sendall((text + "\n").encode())

    def read(self):
        line = self.file.readline()
        if not line:
            raise EOFError("control socket closed")
        return json.loads(line)

    def call(self, cmd, **args):
        self.next_id += 1
        self.send_line(json.dumps(dict(cmd=cmd, id=self.next_id, **args)))
        return self.reply(self.next_id)

    def reply(self, want_id=None):
        while True:
            msg = self.read()
            if "event" in msg:
                self.events.append(msg)
                continue
            if want_id is not None:
                assert msg.get("id") == want_id, msg
            return msg

    def wait_event(self, name, timeout=60):
        deadline = time.monotonic() + timeout
        for e in self.events:
            if e["event"] == name:
                return e
        while time.monotonic() < deadline:
            msg = self.read()
            assert "event" in msg, msg
            self.events.append(msg)
            if msg["event"] == name:
                return msg
        raise TimeoutError(name)

    def wait_state(self, state, timeout=60):
        deadline = time.monotonic() + timeout
        while self.call("query")["result"]["state"] != state:
            if time.monotonic() > deadline:
                raise TimeoutError(state)
            time.sleep(0.05)

    def close(self):
        self.file.close()
        self.sock.close()


class Pair:
    """A destination and a source process, each with its control socket."""

    def __init__(self, tmp, size="128MiB", source_args=(), dest_args=()):
        self.src_ctl = os.path.join(tmp, "src.sock")
        self.dst_ctl = os.path.join(tmp, "dst.sock")
        key = os.path.join(tmp, "key")
        with open(key, "wb") as f:
            f.write(os.urandom(32))
        os.chmod(key, 0o600)
        common = ["--size=" + size, "--key-file=" + key]
        self.dest = subprocess.Popen(
            [MIGRATE, "--role=dest", "--listen=127.0.0.1:0", "--json",
             "--control=" + self.dst_ctl] + common + list(dest_args),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        port = None
        deadline = time.monotonic() + 60
        while port is None and time.monotonic() < deadline:
            line = self.dest.stderr.readline()
            if not line:
                break
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
            port = m and m.group(1)
        if port is None:
            self.dest.kill()
            raise RuntimeError("the destination did not listen")
        # Keep draining its stderr so it never blocks on a full pipe.
        self.dest_err = []
        threading.Thread(target=lambda: self.dest_err.extend(self.dest.stderr),
                         daemon=True).start()
        self.source = subprocess.Popen(
            [MIGRATE, "--role=source", "--connect=127.0.0.1:" + port, "--json",
             "--control=" + self.src_ctl] + common + list(source_args),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def wait(self, timeout=120):
        s_out, s_err = self.source.communicate(timeout=timeout)
        d_out, _ = self.dest.communicate(timeout=timeout)
        return (self.source.returncode, json.loads(s_out), s_err,
                self.dest.returncode, json.loads(d_out))

    def kill(self):
        for p in (self.source, self.dest):
            if p.poll() is None:
                p.kill()
                p.wait()


def free_port():
    """A loopback port nothing listens on, from 47500-47999."""
    for port in range(47500 + os.getpid() % 400, 48000):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise RuntimeError("no free port in 47500-47999")


def start_source(tmp, port, size, args):
    """A source that keeps retrying 127.0.0.1:port (--connect-timeout) until
    a destination listens there: it stays in setup until then."""
    ctl = os.path.join(tmp, "late-src.sock")
    key = os.path.join(tmp, "late-key")
    with open(key, "wb") as f:
        f.write(os.urandom(32))
    os.chmod(key, 0o600)
    common = ["--size=" + size, "--key-file=" + key]
    src = subprocess.Popen(
        [MIGRATE, "--role=source", "--connect=127.0.0.1:%d" % port, "--json",
         "--connect_timeout=60s", "--control=" + ctl] + common + list(args),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return src, ctl, common


class ControlSocketTest(unittest.TestCase):

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.pairs = []

    def tearDown(self):
        for p in self.pairs:
            p.kill()
        self.tmp.cleanup()

    def pair(self, **kw):
        p = Pair(self.tmp.name, **kw)
        self.pairs.append(p)
        return p

    def rate(self, client):
        """The source's rate over the last second, as query reports it."""
        client.call("query")
        time.sleep(1.0)
        return client.call("query")["result"]["rate_bytes_per_s"]

    def test_bandwidth_set_mid_round_is_followed(self):
        p = self.pair(size="256MiB", source_args=["--max-bandwidth=20MB"])
        c = Client(p.src_ctl)
        self.assertTrue(c.call("subscribe")["ok"])
        watcher = Client(p.src_ctl)  # a second client beside it
        c.wait_state("active")  # connected: the rounds begin
        slow = self.rate(c)
        self.assertGreater(slow, 0)
        self.assertLess(slow, 30 * MB)  # the 20 MB/s cap holds
        q = watcher.call("query")["result"]
        self.assertEqual(q["state"], "active")
        self.assertEqual(q["progress"]["round"], 0)
        self.assertGreater(q["progress"]["pending_bytes"], 0)
        self.assertGreater(len(q["channels"]), 0)
        self.assertGreater(q["total"]["payload_bytes"], 0)
        r = c.call("set", **{"max-bandwidth": "200MB"})
        self.assertTrue(r["ok"], r)
        self.assertEqual(r["result"]["max-bandwidth"], 200 * MB)
        fast = self.rate(c)
        self.assertGreater(fast, 2 * slow)  # and the rate follows the new one
        done = c.wait_event("completed")
        self.assertTrue(done["data"]["verified"])
        names = [e["event"] for e in c.events]
        for want in ("settings-changed", "round-done", "paused",
                     "switchover"):
            self.assertIn(want, names)
        self.assertLess(names.index("paused"), names.index("switchover"))
        rc, report, err, drc, dreport = p.wait()
        self.assertEqual(rc, 0, err)
        self.assertEqual(drc, 0)
        self.assertTrue(report["verified"])
        watcher.close()
        c.close()

    def test_postcopy_started_by_command(self):
        # Never converges alone: 64 MiB rewritten as fast as the link
        # carries, a zero downtime limit (no estimate fits it, however
        # little a starved writer dirtied), no stall detection.
        flags = ["--postcopy=auto", "--dirty-rate=256MiB",
                 "--dirty-set=64MiB"]
        p = self.pair(size="128MiB",
                      source_args=flags + ["--max-bandwidth=100MB",
                                           "--downtime-limit=0",
                                           "--stall-rounds=0",
                                           "--max-rounds=10000"],
                      dest_args=flags)
        src = Client(p.src_ctl)
        dst = Client(p.dst_ctl)
        src.call("subscribe")
        dst.call("subscribe", events=["postcopy-armed", "completed"])
        src.wait_event("round-done")
        deadline = time.monotonic() + 60
        while sum(e["event"] == "round-done" for e in src.events) < 3:
            self.assertLess(time.monotonic(), deadline)
            src.events.append(src.read())
        r = src.call("start-postcopy")
        self.assertTrue(r["ok"], r)
        sw = src.wait_event("switchover")
        self.assertEqual(sw["data"]["mode"], "postcopy")
        src.wait_event("postcopy-armed")
        dst.wait_event("postcopy-armed")
        # Too late now for another switch or a cancel.
        self.assertEqual(src.call("start-postcopy")["error"]["code"],
                         "FAILED_PRECONDITION")
        self.assertIn("too late",
                      src.call("cancel", reason="late")["error"]["message"])
        src.wait_event("completed")
        rc, report, err, drc, _ = p.wait()
        self.assertEqual(rc, 0, err)
        self.assertEqual(drc, 0)
        self.assertEqual(report["converged_by"], "command")
        self.assertEqual(report["switchover"], "postcopy")
        self.assertTrue(report["verified"])

    def test_cancel_stops_both_ends_cleanly(self):
        p = self.pair(size="256MiB", source_args=["--max-bandwidth=20MB"])
        src = Client(p.src_ctl)
        dst = Client(p.dst_ctl)
        src.call("subscribe")
        dst.call("subscribe")
        src.wait_state("active")
        time.sleep(0.5)  # mid-round
        r = src.call("cancel", reason="maintenance window closed")
        self.assertTrue(r["ok"], r)
        self.assertIn("maintenance window closed", r["result"]["cancelled"])
        ev = src.wait_event("cancelled", timeout=30)
        self.assertIn("maintenance window closed", ev["data"]["error"])
        d_end = None
        deadline = time.monotonic() + 30
        while d_end is None and time.monotonic() < deadline:
            msg = dst.read()
            if msg.get("event") in ("cancelled", "failed"):
                d_end = msg
        self.assertIsNotNone(d_end)
        rc, report, err, drc, dreport = p.wait(timeout=30)
        self.assertNotEqual(rc, 0)
        self.assertEqual(report["outcome"], "cancelled")
        self.assertIn("maintenance window closed", report["error"])
        self.assertNotEqual(drc, 0)
        self.assertFalse(dreport["ok"])

    def test_cancel_on_the_destination_is_a_cancel_on_both_ends(self):
        p = self.pair(size="256MiB", source_args=["--max-bandwidth=20MB"])
        src = Client(p.src_ctl)
        dst = Client(p.dst_ctl)
        src.call("subscribe")
        src.wait_state("active")
        # Mid-round 0: pages went out, and no round is complete.
        while src.call("query")["result"].get("bytes_sent", 0) < 4 * MB:
            time.sleep(0.05)
        r = dst.call("cancel", reason="rack moved")
        self.assertTrue(r["ok"], r)
        ev = src.wait_event("cancelled", timeout=30)
        self.assertIn("rack moved", ev["data"]["error"])
        self.assertGreater(ev["data"]["bytes_sent"], 0)
        rc, report, err, drc, dreport = p.wait(timeout=30)
        self.assertEqual(rc, 1, err)
        self.assertEqual(report["outcome"], "cancelled")
        self.assertIn("rack moved", report["error"])
        self.assertTrue(report["workload"]["running_after"])
        self.assertGreater(report["bytes_sent"], 0)
        self.assertEqual(drc, 1)
        names = [e["event"] for e in src.events]
        self.assertNotIn("failed", names)

    def test_a_set_during_setup_is_applied_when_the_session_starts(self):
        port = free_port()
        src, ctl, common = start_source(
            self.tmp.name, port, "128MiB", ["--max-bandwidth=2MB"])
        dest = None
        try:
            c = Client(ctl)
            self.assertEqual(c.call("query")["result"]["state"], "setup")
            r = c.call("set", **{"max-bandwidth": "400MB"})
            self.assertTrue(r["ok"], r)
            dest = subprocess.Popen(
                [MIGRATE, "--role=dest", "--listen=127.0.0.1:%d" % port,
                 "--json"] + common,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            c.wait_state("active")
            q = c.call("query")["result"]
            self.assertEqual(q["settings"]["max-bandwidth"], 400 * MB)
            # 128 MiB at the flag's 2 MB/s would take a minute: the cap
            # set during setup is the one the session runs at.
            out, err = src.communicate(timeout=45)
            dest.communicate(timeout=30)
            self.assertEqual(src.returncode, 0, err)
            report = json.loads(out)
            self.assertEqual(report["max_bandwidth_bytes_per_s"], 400 * MB)
            self.assertEqual(report["max_bandwidth_flag_bytes_per_s"], 2 * MB)
            c.close()
        finally:
            for proc in (src, dest):
                if proc is not None and proc.poll() is None:
                    proc.kill()
                    proc.wait()

    def test_bad_requests_get_errors_and_the_migration_goes_on(self):
        p = self.pair(size="128MiB", source_args=["--max-bandwidth=50MB"])
        c = Client(p.src_ctl)

        def error_of(line):
            c.send_line(line)
            msg = c.reply()
            self.assertFalse(msg["ok"], (line, msg))
            return msg["error"]

        self.assertEqual(error_of("not json")["code"], "INVALID_ARGUMENT")
        self.assertEqual(error_of("[1, 2]")["code"], "INVALID_ARGUMENT")
        self.assertIn("cmd", error_of('{"id": 1}')["message"])
        self.assertIn("no command", error_of('{"cmd": "reboot"}')["message"])
        for bad in ({"max-bandwidth": -5}, {"max-bandwidth": "fast"},
                    {"downtime-limit": 0}, {"downtime-limit": "soon"},
                    {"max-rounds": 0}, {"max-rounds": 1.5},
                    {"auto-converge": "yes"}, {"colour": "blue"}, {}):
            e = error_of(json.dumps(dict(cmd="set", **bad)))
            self.assertEqual(e["code"], "INVALID_ARGUMENT", bad)
        # One bad field refuses the whole set: nothing changed.
        e = error_of(json.dumps({"cmd": "set", "max-rounds": 5,
                                 "downtime-limit": -1}))
        self.assertIn("downtime-limit", e["message"])
        self.assertEqual(
            c.call("query")["result"]["settings"]["max-rounds"], 30)
        self.assertIn("--postcopy", error_of('{"cmd": "start-postcopy"}')
                      ["message"])
        self.assertEqual(error_of('{"cmd": "cancel", "reason": 7}')["code"],
                         "INVALID_ARGUMENT")
        self.assertIn("no event", error_of(
            '{"cmd": "subscribe", "events": ["lunch"]}')["message"])
        self.assertEqual(c.call("query")["id"], c.next_id)  # id echoed
        # A client that vanishes mid-line, and one that sends too long a
        # line, harm nothing.
        gone = Client(p.src_ctl)
        gone.sock.sendall(b'{"cmd": "qu')
        gone.close()
        long = Client(p.src_ctl)
        long.sock.sendall(b"x" * (70 << 10))
        msg = long.read()
        self.assertIn("longer than", msg["error"]["message"])
        with self.assertRaises(EOFError):
            long.read()
        long.close()
        self.assertTrue(c.call("set", **{"max-bandwidth": 0})["ok"])
        rc, report, err, drc, _ = p.wait()
        self.assertEqual(rc, 0, err)
        self.assertEqual(drc, 0)
        self.assertTrue(report["verified"])
        c.close()

    def test_socket_is_private(self):
        p = self.pair(size="64MiB", source_args=["--max-bandwidth=20MB"])
        c = Client(p.src_ctl)
        mode = os.stat(p.src_ctl).st_mode & 0o777
        self.assertEqual(mode, 0o600)
        if os.geteuid() == 0:
            # Past the file's mode, the peer's uid is still checked: the
            # refusal comes on connecting, before any request.
            os.chmod(self.tmp.name, 0o755)
            os.chmod(p.src_ctl, 0o666)
            out = subprocess.run(
                [sys.executable, "-c",
                 "import os,socket,sys\n"
                 "os.setgid(65534); os.setuid(65534)\n"
                 "s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n"
                 "print(s.makefile().readline())", p.src_ctl],
                capture_output=True, text=True, timeout=30)
            self.assertEqual(out.returncode, 0, out.stderr)
            reply = json.loads(out.stdout)
            self.assertEqual(reply["error"]["code"], "PERMISSION_DENIED")
        # A second migration may not take a socket in use.
        other = subprocess.run(
            [MIGRATE, "--role=dest", "--listen=127.0.0.1:0", "--size=1MiB",
             "--insecure", "--control=" + p.src_ctl],
            capture_output=True, text=True, timeout=30)
        self.assertNotEqual(other.returncode, 0)
        self.assertIn("another process serves", other.stderr)
        c.call("set", **{"max-bandwidth": 0})
        self.assertEqual(p.wait()[0], 0)
        c.close()

    def test_orchestrator_example_runs_a_migration(self):
        flags = ["--postcopy=auto", "--dirty-rate=256MiB",
                 "--dirty-set=64MiB"]
        p = self.pair(size="128MiB",
                      source_args=flags + ["--max-bandwidth=200MB",
                                           "--downtime-limit=0",
                                           "--stall-rounds=0",
                                           "--max-rounds=10000"],
                      dest_args=flags)
        out = subprocess.run(
            [sys.executable, EXAMPLE, p.src_ctl, "--bandwidth=100MB"],
            capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("starting post-copy", out.stdout)
        self.assertIn("completed", out.stdout)
        rc, report, err, drc, _ = p.wait()
        self.assertEqual(rc, 0, err)
        self.assertEqual(report["converged_by"], "command")
        self.assertTrue(report["verified"])


if __name__ == "__main__":
    if not MIGRATE or not os.access(MIGRATE, os.X_OK):
        print("SKIPPED: set RAMFERRY_MIGRATE to the ramferry-migrate binary")
        sys.exit(77)
    unittest.main(verbosity=2)
