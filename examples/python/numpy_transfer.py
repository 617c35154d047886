#!/usr/bin/env python3
"""numpy_transfer.py: moves a large numpy array from this process to a
child process with ramferry, and checks it arrived whole.

The array lives in page-aligned memory (ramferry.page_aligned), so the
session reads it in place: no copy on this side. The child receives into
an array of the same shape and prints its checksum; so does the parent.

    PYTHONPATH=PREFIX/lib/python3/dist-packages \\
      python3 numpy_transfer.py --size-mib=1024 --channels=4
"""
import argparse
import hashlib
import os
import struct
import sys

import numpy as np

import ramferry


def array_in(buffer):
    return np.frombuffer(buffer, dtype=np.float64)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=256)
    ap.add_argument("--channels", type=int, default=4)
    args = ap.parse_args()
    nbytes = args.size_mib << 20
    key = os.urandom(32)
    options = ramferry.Options(host="127.0.0.1", key=key,
                               channels=args.channels)
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # the destination
        os.close(read_end)
        buf = ramferry.page_aligned(nbytes)
        with ramferry.Receiver(options, ramferry.Regions().add(1, buf)) as rx:
            os.write(write_end, struct.pack("<H", rx.port))
            rx.serve()
        print("child: received, sha256",
              hashlib.sha256(array_in(buf)).hexdigest()[:16], flush=True)
        os._exit(0)
    os.close(write_end)
    port = struct.unpack("<H", os.read(read_end, 2))[0]
    buf = ramferry.page_aligned(nbytes)
    array = array_in(buf)
    array[:] = np.random.default_rng(1).standard_normal(array.size)
    print("parent: sending", array.shape, array.dtype, "sha256",
          hashlib.sha256(array).hexdigest()[:16], flush=True)
    with ramferry.Regions().add(1, array) as regions, \
            ramferry.Sender(options.set("port", port), regions) as tx:
        r = tx.send_round(regions.bitmaps(all_dirty=True))
        tx.verify()  # every page's digest, compared on both ends
        tx.finish()
    print(f"parent: {r.bytes >> 20} MiB in {r.seconds:.2f} s "
          f"({r.bytes / r.seconds / 1e9:.2f} GB/s), verified")
    _, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main())
