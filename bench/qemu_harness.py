"""What the QEMU scripts share (bench/qemu, bench/qemu-bridge and
tests/tools/qemu_bridge_test.py): a QMP client, QEMU's command line for a
paused TCG machine whose RAM is a file, files of zeros or holes, copies,
a page-by-page comparison, a throwaway x509 CA for QEMU's TLS, and
stopping a QEMU.
"""
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

PAGE = 4096
CHUNK = 64 << 20


def log(msg):
    print(f"qemu: {msg}", file=sys.stderr, flush=True)


class QmpError(Exception):
    pass


class Qmp:
    """A QMP client: JSON objects, one per line, over a unix socket."""

    def __init__(self, path, deadline):
        while True:
            try:
                self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                self.sock.connect(path)
                break
            except (FileNotFoundError, ConnectionRefusedError):
                self.sock.close()
                if time.monotonic() > deadline:
                    raise QmpError(f"no QMP socket at {path}")
                time.sleep(0.02)
        self.deadline = deadline
        self.buf = b""
        self.events = []
        greeting = self._read()
        if "QMP" not in greeting:
            raise QmpError(f"unexpected QMP greeting: {greeting}")
        self.version = greeting["QMP"]["version"]["qemu"]
        self.cmd("qmp_capabilities")

    def _read(self):
        while b"\n" not in self.buf:
            # A source in stop-and-copy answers only once it is done.
            self.sock.settimeout(max(0.1, self.deadline - time.monotonic()))
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                raise TimeoutError("no QMP reply before the --timeout "
                                   "deadline") from None
            if not data:
                raise QmpError("QMP connection closed")
            self.buf += data
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def cmd(self, name, **arguments):
        msg = {"execute": name}
        if arguments:
            msg["arguments"] = arguments
        self.sock.sendall(json.dumps(msg).encode() + b"\n")
        while True:
            reply = self._read()
            if "event" in reply:
                self.events.append(reply)
                continue
            if "error" in reply:
                raise QmpError(f"{name}: {reply['error'].get('desc')}")
            return reply.get("return")

    def close(self):
        self.sock.close()


def cpu_seconds(pid):
    """utime + stime of a live process (all its threads, dead ones too)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return round((int(fields[11]) + int(fields[12])) /
                 os.sysconf("SC_CLK_TCK"), 3)


def die_with_parent():
    """preexec_fn: the QEMU child gets SIGKILL when this script dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_zeros(path, size):
    """A file of `size` bytes, every page written (allocated)."""
    zeros = bytes(CHUNK)
    with open(path, "wb") as f:
        left = size
        while left:
            n = min(left, CHUNK)
            f.write(zeros[:n])
            left -= n


def sparse_file(path, size):
    with open(path, "wb") as f:
        f.truncate(size)


def copy_file(src, dst):
    with open(src, "rb") as i, open(dst, "wb") as o:
        left = os.fstat(i.fileno()).st_size
        while left:
            n = os.copy_file_range(i.fileno(), o.fileno(), min(left, 1 << 30))
            if n <= 0:
                raise OSError(f"copy_file_range {src} -> {dst} returned {n}")
            left -= n


def differing_pages(a, b, limit=8):
    """(number of 4 KiB pages that differ between files a and b, the first
    `limit` differing byte offsets). Sizes must match."""
    if os.path.getsize(a) != os.path.getsize(b):
        raise ValueError(f"{a} and {b} differ in size")
    count, first = 0, []
    x, y = bytearray(CHUNK), bytearray(CHUNK)
    with open(a, "rb", buffering=0) as fa, open(b, "rb", buffering=0) as fb:
        off = 0
        while True:
            n, m = fa.readinto(x), fb.readinto(y)
            if n != m:
                raise ValueError(f"short read comparing {a} and {b}")
            if not n:
                return count, first
            if (x != y) if n == CHUNK else (x[:n] != y[:n]):
                for p in range(0, n, PAGE):
                    if x[p:p + PAGE] != y[p:p + PAGE]:
                        count += 1
                        if len(first) < limit:
                            first.append(off + p)
            off += n


def make_tls_dir(directory):
    """A throwaway CA and a server certificate it signed, for localhost and
    127.0.0.1, in the file names QEMU's tls-creds-x509 reads (ca-cert.pem,
    server-cert.pem, server-key.pem). Raises OSError when openssl fails."""
    def openssl(*argv):
        p = subprocess.run(["openssl", *argv], cwd=directory,
                           capture_output=True, text=True)
        if p.returncode != 0:
            raise OSError(f"openssl {argv[0]}: {p.stderr.strip()[-300:]}")
    if shutil.which("openssl") is None:
        raise OSError("--tls needs openssl (apt-get install openssl)")
    with open(os.path.join(directory, "server.ext"), "w") as f:
        f.write("basicConstraints=critical,CA:FALSE\n"
                "keyUsage=critical,digitalSignature,keyEncipherment\n"
                "extendedKeyUsage=serverAuth\n"
                "subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", "/CN=ramferry bench CA", "-keyout", "ca-key.pem",
            "-out", "ca-cert.pem", "-addext",
            "basicConstraints=critical,CA:TRUE", "-addext",
            "keyUsage=critical,keyCertSign,cRLSign")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost",
            "-keyout", "server-key.pem", "-out", "server.csr")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca-cert.pem",
            "-CAkey", "ca-key.pem", "-CAcreateserial", "-days", "2",
            "-extfile", "server.ext", "-out", "server-cert.pem")


def qemu_argv(qemu, size, ram_file, qmp_path, incoming, tls_dir=None):
    mib = size >> 20
    argv = [qemu, "-machine", "pc,accel=tcg,memory-backend=ram0", "-S",
            "-nodefaults", "-display", "none", "-m", f"{mib}M",
            "-object", f"memory-backend-file,id=ram0,size={mib}M,"
                       f"mem-path={ram_file},share=on",
            "-qmp", f"unix:{qmp_path},server=on,wait=off"]
    if incoming:
        argv += ["-incoming", "defer"]
    if tls_dir is not None:
        endpoint = ("endpoint=server,verify-peer=off" if incoming else
                    "endpoint=client")
        argv += ["-object", f"tls-creds-x509,id=tls0,dir={tls_dir},"
                            f"{endpoint}"]
    return argv


def stop(proc, qmp):
    """Quit over QMP, then SIGTERM, then SIGKILL."""
    if proc is None or proc.poll() is not None:
        return
    if qmp is not None:
        try:
            qmp.cmd("quit")
        except (QmpError, OSError):
            pass
    for sig, wait in [(None, 5), (signal.SIGTERM, 5), (signal.SIGKILL, 30)]:
        if sig is not None:
            proc.send_signal(sig)
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            pass


class Checks:
    """A test script's checks: each printed as it is made, "ok: " or
    "FAILED: " and what it says; exit_code() sums them up."""

    def __init__(self):
        self.failed = []

    def __call__(self, cond, what):
        print(("ok: " if cond else "FAILED: ") + what, flush=True)
        if not cond:
            self.failed.append(what)

    def exit_code(self):
        if self.failed:
            print(f"{len(self.failed)} check(s) failed")
            return 1
        print("all checks passed")
        return 0
