#!/usr/bin/env python3
"""docs/protocol.md, held to the engine: two ramferry-migrate processes
migrate through a recording relay (relay.py), and decode_capture.py, a
decoder written from the protocol document alone (it imports nothing of
ramferry's), parses every byte of every connection. Its packet, page, zero
page and payload counts per channel, and the rounds it saw confirmed,
must equal the engine's own counters in the source's --json report. Three
sessions, one per socket transport (the wire format is the same on each):
unprotected over tcp; sealed (--protect=mac, the default with a key) over
tcp-zerocopy; encrypted and compressed (--protect=encrypt --compress=on)
over uring-zc, the key given to the decoder.

RAMFERRY_MIGRATE names the binary. Exit 77: skipped (no cryptography
module for the sealed sessions)."""

import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from relay import RecordingRelay  # noqa: E402

MIGRATE = os.environ.get("RAMFERRY_MIGRATE", "")
DECODER = os.path.join(HERE, "decode_capture.py")
COUNTERS = ("packets", "pages", "zero_pages", "payload_bytes")


class CaptureTest(unittest.TestCase):

    def migrate_through_relay(self, tmp, common, source_args=()):
        dest = subprocess.Popen(
            [MIGRATE, "--role=dest", "--listen=127.0.0.1:0", "--json"] +
            common, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)
        port = None
        while port is None:
            line = dest.stderr.readline()
            if not line:
                dest.kill()
                self.fail("the destination did not listen")
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)", line)
            port = m and int(m.group(1))
        capture = os.path.join(tmp, "capture")
        os.mkdir(capture)
        relay = RecordingRelay(port, capture)
        source = subprocess.run(
            [MIGRATE, "--role=source", f"--connect=127.0.0.1:{relay.port}",
             "--json"] + common + list(source_args),
            capture_output=True, text=True, timeout=300)
        dest_out, _ = dest.communicate(timeout=60)
        relay.finish()
        self.assertEqual(source.returncode, 0, source.stderr)
        self.assertEqual(dest.returncode, 0)
        return capture, json.loads(source.stdout), json.loads(dest_out)

    def decode(self, capture, key=None):
        args = [sys.executable, DECODER, capture]
        if key:
            args.append("--key-file=" + key)
        out = subprocess.run(args, capture_output=True, text=True,
                             timeout=600)
        self.assertEqual(out.returncode, 0, out.stderr[-3000:])
        return json.loads(out.stdout)

    def check(self, decoded, report, protection):
        self.assertEqual(decoded["protection"], protection)
        engine = {c["channel"]: c for c in report["channel_stats"]}
        mine = {c["channel"]: c for c in decoded["channels"]}
        self.assertEqual(sorted(mine), sorted(engine))
        for ch, counters in engine.items():
            for name in COUNTERS:
                self.assertEqual(mine[ch][name], counters[name],
                                 f"channel {ch} {name}")
        self.assertEqual(decoded["rounds"], report["confirmed_rounds"])
        for name in COUNTERS:
            self.assertEqual(decoded["total"][name],
                             sum(c[name] for c in engine.values()), name)
        return decoded

    def test_an_unprotected_session(self):
        with tempfile.TemporaryDirectory() as tmp:
            capture, report, _ = self.migrate_through_relay(
                tmp, ["--size=24MiB", "--insecure", "--channels=3",
                      "--transport=tcp",
                      "--image=zero=50,untouched=10,random=40"],
                ["--dirty-rate=64MiB", "--dirty-set=4MiB"])
            self.assertGreater(report["confirmed_rounds"], 1)
            d = self.check(self.decode(capture), report, "none")
            self.assertEqual(d["tags_verified"], 0)
            self.assertGreater(d["total"]["zero_pages"], 0)

    def sealed(self, protection, transport, source_args=()):
        with tempfile.TemporaryDirectory() as tmp:
            key = os.path.join(tmp, "key")
            with open(key, "wb") as f:
                f.write(os.urandom(32))
            os.chmod(key, 0o600)
            capture, report, _ = self.migrate_through_relay(
                tmp, ["--size=16MiB", "--key-file=" + key, "--channels=2",
                      "--transport=" + transport,
                      f"--protect={protection}",
                      "--image=zero=40,text=20,random=40"], source_args)
            d = self.check(self.decode(capture, key), report, protection)
            self.assertGreater(d["tags_verified"], 0)

    def test_a_session_sealed_with_the_tests_key(self):
        self.sealed("mac", "tcp-zerocopy")

    def test_an_encrypted_compressed_session(self):
        self.sealed("encrypt", "uring-zc", ["--compress=on"])


if __name__ == "__main__":
    if not MIGRATE or not os.access(MIGRATE, os.X_OK):
        print("SKIPPED: set RAMFERRY_MIGRATE to the ramferry-migrate binary")
        sys.exit(77)
    try:
        import cryptography  # noqa: F401  (the decoder's AES)
    except ImportError:
        print("SKIPPED: no python3-cryptography for the sealed sessions")
        sys.exit(77)
    unittest.main(verbosity=2)
