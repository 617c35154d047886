"""The other process of the Python tests, run as `python3 peer.py ROLE ...`:

  receive SIZE [KEYHEX]   listen on 127.0.0.1:0, print the port, serve one
                          session into SIZE bytes, print {"ok", "sha256",
                          "rounds", "error"} as JSON
  export SOCKET SIZE      a workload: a memfd of SIZE bytes written by a
                          thread until a PAUSE, exported on SOCKET; prints
                          the memory's sha256 at MIGRATED and exits 0
  adopt SOCKET            waits for memory handed over on SOCKET, prints
                          the sha256 of its regions
"""

import hashlib
import json
import mmap
import os
import random
import sys
import threading
import time

import ramferry


def receive(size, key_hex=None):
    mem = ramferry.page_aligned(size)
    opts = ramferry.Options(host="127.0.0.1", port=0)
    if key_hex:
        opts.set("key", bytes.fromhex(key_hex))
    else:
        opts.set("insecure", True)
    regions = ramferry.Regions().add(1, mem)
    out = {"ok": True, "error": ""}
    with ramferry.Receiver(opts, regions) as rx:
        print(rx.port, flush=True)
        try:
            rx.serve()
        except ramferry.RamferryError as e:
            out.update(ok=False, error=f"{e.code}: {e.message}")
        out["rounds"] = rx.applied_rounds()
    out["sha256"] = hashlib.sha256(mem).hexdigest()
    print(json.dumps(out), flush=True)


def export(socket_path, size):
    fd = os.memfd_create("workload")
    os.ftruncate(fd, size)
    mem = mmap.mmap(fd, size, flags=mmap.MAP_SHARED)
    mem[:] = os.urandom(size)
    paused = threading.Event()
    done = threading.Event()
    may_write = threading.Lock()  # held while writing; PAUSE takes it

    def writer():
        rng = random.Random(7)
        while not done.is_set():
            with may_write:
                if paused.is_set():
                    time.sleep(0.001)
                    continue
                at = rng.randrange(0, size - 8)
                mem[at:at + 8] = rng.randbytes(8)

    def handler(event):
        if event == ramferry.ExportEvent.PAUSE:
            with may_write:
                paused.set()
        elif event == ramferry.ExportEvent.RESUME:
            paused.clear()
        elif event == ramferry.ExportEvent.MIGRATED:
            done.set()

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    with ramferry.SharedRegions().add(1, mem, fd) as regions, \
            ramferry.Export(socket_path, regions, handler) as exp:
        print("exported", flush=True)
        exp.wait_migrated(120000)
        done.set()
        t.join()
        print(hashlib.sha256(mem).hexdigest(), flush=True)


def adopt(socket_path):
    with ramferry.Adopt(socket_path) as a:
        print("waiting", flush=True)
        a.wait(60000)
        digest = hashlib.sha256()
        for _rid, view, _fd in a.regions():
            digest.update(view)
        print(digest.hexdigest(), flush=True)


if __name__ == "__main__":
    role, args = sys.argv[1], sys.argv[2:]
    if role == "receive":
        receive(int(args[0]), *args[1:])
    elif role == "export":
        export(args[0], int(args[1]))
    elif role == "adopt":
        adopt(args[0])
    else:
        sys.exit(f"unknown role {role}")
