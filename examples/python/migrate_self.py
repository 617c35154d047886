#!/usr/bin/env python3
"""migrate_self.py: examples/c/migrate_self.c, through the Python package.

Two regions (the "ram" with 4 KiB pages and a small one with 64 KiB pages)
move to the destination over loopback while a thread stores to random
places of a dirty set (the first --dirty-mib of the ram and all of the
small region) and marks each page it wrote. Live rounds run until one
sends no fewer pages than the one before, or --max-rounds; then the writer
stops, the last round goes, ramferry verifies every page's digest on both
ends, and (with both ends in this process) the program compares the memory
itself too. --fork: the destination is a child process, which tells the
source its port through a pipe. Exit status 0 when the destination is
byte-identical.

    PYTHONPATH=PREFIX/lib/python3/dist-packages python3 migrate_self.py --fork
"""
import argparse
import os
import random
import struct
import sys
import threading
import time

import ramferry

MiB = 1 << 20


def layout(size_mib):
    return [(1, 4096, size_mib * MiB), (2, 65536, 4 * MiB)]


def regions_of(memories, size_mib):
    regions = ramferry.Regions()
    for (rid, page_size, _), mem in zip(layout(size_mib), memories):
        regions.add(rid, mem, page_size)
    return regions


def make_options(key, args):
    return ramferry.Options(host="127.0.0.1", key=key,
                            transport=args.transport, channels=args.channels)


def listen(key, args):
    memories = [ramferry.page_aligned(n) for _, _, n in layout(args.size_mib)]
    rx = ramferry.Receiver(make_options(key, args),
                           regions_of(memories, args.size_mib))
    return rx, memories


def write_loop(memories, bitmaps, dirty_pages, stop, stores):
    rng = random.Random(0x9E3779B97F4A7C15)
    sizes = [(4096, dirty_pages), (65536, 4 * MiB // 65536)]
    while not stop.is_set():
        r = rng.getrandbits(64)
        which = 1 if (r & 7) == 0 else 0
        page_size, pages = sizes[which]
        page = (r >> 8) % pages
        value = rng.getrandbits(64)
        mem, bitmap = memories[which], bitmaps[which]
        if (r & 0xF0) == 0 and page + 1 < pages:
            at = (page + 1) * page_size - 8
            mem[at:at + 16] = struct.pack("<QQ", value, ~value & (2**64 - 1))
            bitmap.mark(page)
            bitmap.mark(page + 1)
        else:
            at = page * page_size + (value % (page_size // 8)) * 8
            mem[at:at + 8] = struct.pack("<Q", value)
            bitmap.mark(page)
        stores[0] += 1


def run_source(memories, key, port, args):
    start = time.monotonic()
    opts = make_options(key, args).set("port", port)
    regions = regions_of(memories, args.size_mib)
    with ramferry.Sender(opts, regions) as tx:
        tx.set_progress(lambda p: p.round_done and print(
            f"source: round {p.rounds} confirmed, {p.pages} pages so "
            "far", flush=True))
        bitmaps = regions.bitmaps(all_dirty=True)
        stop, stores = threading.Event(), [0]
        writer = threading.Thread(target=write_loop, args=(
            memories, bitmaps, args.dirty_mib * MiB // 4096, stop, stores))
        writer.start()
        try:
            previous = None
            for _ in range(args.max_rounds):
                r = tx.send_round(bitmaps)
                print(f"source: live round {r.round}: {r.pages} pages "
                      f"in {r.seconds * 1e3:.1f} ms")
                if previous is not None and r.pages >= previous:
                    break  # down to the dirty set
                previous = r.pages
        finally:
            stop.set()
            writer.join()
        r = tx.send_round(bitmaps)
        print(f"source: final round: {r.pages} pages, {stores[0]} stores "
              "during the migration")
        v = tx.verify()
        print(f"source: verified {v.pages_checked} pages, "
              f"{v.pages_mismatched} differ")
        tx.finish()
        st = tx.stats()
        print(f"source: {st.rounds} rounds, {st.pages} pages, "
              f"{st.payload_bytes / MiB:.1f} MiB over {st.channels} "
              "channels")
    print(f"source: connect to finish: {time.monotonic() - start:.3f} s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size-mib", type=int, default=64)
    ap.add_argument("--dirty-mib", type=int, default=8)
    ap.add_argument("--channels", type=int, default=2)
    ap.add_argument("--transport", default="tcp")
    ap.add_argument("--max-rounds", type=int, default=10)
    ap.add_argument("--fork", action="store_true")
    args = ap.parse_args()
    args.size_mib = max(args.size_mib, 1)
    if not 0 < args.dirty_mib <= args.size_mib:
        args.dirty_mib = args.size_mib
    print(f"migrate_self.py: ramferry {ramferry.version()}, {args.size_mib} "
          f"MiB, writes into {args.dirty_mib} MiB of it", flush=True)
    key = os.urandom(32)
    src = [ramferry.page_aligned(n) for _, _, n in layout(args.size_mib)]
    # Random bytes, 64 MiB of them over and over: generating them all
    # would take Python longer than the migration (the C example's fill
    # runs at memory speed).
    block = random.Random(42).randbytes(64 * MiB)
    for mem in src:
        for at in range(0, len(mem), len(block)):
            chunk = min(len(block), len(mem) - at)
            mem[at:at + chunk] = block[:chunk]
    try:
        if args.fork:
            return fork_and_run(src, key, args)
        rx, dst = listen(key, args)
        served = []
        server = threading.Thread(target=lambda: served.append(rx.serve()))
        server.start()
        run_source(src, key, rx.port, args)
        server.join()
        same = all(a[:] == b[:] for a, b in zip(src, dst))
        print("destination:", "byte-identical" if same else "DIFFERS")
        return 0 if same and served else 1
    except ramferry.RamferryError as e:
        print(f"migrate_self.py: {e}", file=sys.stderr)
        return 1


def fork_and_run(src, key, args):
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(read_end)
        try:
            rx, _ = listen(key, args)
            os.write(write_end, struct.pack("<H", rx.port))
            os.close(write_end)
            rx.serve()
            os._exit(0)
        except ramferry.RamferryError as e:
            print(f"migrate_self.py: destination: {e}", file=sys.stderr)
            os._exit(1)
    os.close(write_end)
    port_bytes = os.read(read_end, 2)
    os.close(read_end)
    if len(port_bytes) != 2:
        os.waitpid(child, 0)
        return 1
    run_source(src, key, struct.unpack("<H", port_bytes)[0], args)
    _, status = os.waitpid(child, 0)
    ok = os.waitstatus_to_exitcode(status) == 0
    print("destination process:", "verified and finished" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
