#!/usr/bin/env python3
"""Randomized misuse of the ramferry Python package.

The promise under test: no sequence of calls from Python crashes the
interpreter, hangs, or makes the library touch memory outside the buffers
given to it. Each sequence runs in a child forked from this (thread-free)
parent, so a crash or a hang is seen from outside, as a signal or a
timeout, and ends only that child.

What a sequence does: random calls on Options, Regions, Bitmap, Sender,
Receiver, SharedRegions, Export, Attach and Adopt, with wrong types and
wrong sizes, handles closed (or dropped and collected) in any order, and
calls and closes made from other threads, some while a serve() or a round
blocks. About a fifth of the sequences run a real session over loopback.

How a stray access is seen:
- Every region's buffer lies between [PROT_NONE guard][canary page] and
  [canary page][PROT_NONE guard]: a run past either end faults or changes
  a canary, checked after every step and at the end.
- Memory a sequence gives back (view released, mmap closed) is mapped over
  at once with PROT_NONE: the library touching it after that faults.
- Calls that must be refused are checked to be refused: a bitmap whose
  page count is not its region's, a key that is not 32 bytes of bytes, two
  regions over the same memory, and every RamferryError has a message
  and is the subclass for its status.

Any signal, hang, canary change or accepted misuse fails the test, with
the failing seeds and the steps each took (rerun one alone with
RAMFERRY_MISUSE_SEED=<seed> RAMFERRY_MISUSE_COUNT=1 RAMFERRY_MISUSE_VERBOSE=1).

Environment: RAMFERRY_LIBRARY (the library), RAMFERRY_MISUSE_SEED (first
seed; default: from the clock, printed), RAMFERRY_MISUSE_COUNT (sequences,
default 1000), RAMFERRY_MISUSE_TIMEOUT_S (per sequence, default 20)."""

import collections
import ctypes
import gc
import json
import mmap
import os
import random
import select
import signal
import sys
import tempfile
import threading
import time

import ramferry

PAGE = 4096
CANARY = b"\xa5" * PAGE
NOBODY_PORT = 47499  # in this test's range; nothing listens there
JOIN_S = 10  # a close, a thread's end: longer than this is a hang

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                       ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
PROT_NONE = 0
MAP_PRIVATE, MAP_ANONYMOUS, MAP_FIXED_NOREPLACE = 0x02, 0x20, 0x100000


class Violation(Exception):
    """The package broke its promise (not a refusal: those are fine)."""


class Guarded:
    """`n` bytes of page-aligned memory between guard and canary pages:
    [PROT_NONE][canary][n bytes][canary][PROT_NONE]."""

    def __init__(self, n):
        self.n = n
        self.total = n + 4 * PAGE
        self.mm = mmap.mmap(-1, self.total)
        probe = ctypes.c_char.from_buffer(self.mm)
        self.base = ctypes.addressof(probe)
        del probe
        self.mm[PAGE:2 * PAGE] = CANARY
        self.mm[2 * PAGE + n:3 * PAGE + n] = CANARY
        for at in (self.base, self.base + self.total - PAGE):
            if _libc.mprotect(at, PAGE, PROT_NONE) != 0:
                raise OSError(ctypes.get_errno(), "mprotect")
        self.view = memoryview(self.mm)[2 * PAGE:2 * PAGE + n]
        self.gone = False

    def canaries_intact(self):
        if self.gone or self.mm.closed:
            return True
        return (self.mm[PAGE:2 * PAGE] == CANARY and
                self.mm[2 * PAGE + self.n:3 * PAGE + self.n] == CANARY)

    def give_back(self):
        """What a caller does when done with memory: release the view and
        unmap it. Refused (BufferError) while something holds it; once
        unmapped, a PROT_NONE trap takes its place, so a later access by
        the library faults instead of landing in whatever comes next."""
        self.view.release()
        self.mm.close()
        self.gone = True
        _libc.mmap(self.base, self.total, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0)


def outcome_of(exc):
    if exc is None:
        return "ok"
    if isinstance(exc, ramferry.RamferryError):
        return "RamferryError"
    return type(exc).__name__


class Sequence:
    """One random sequence of calls, in a forked child."""

    def __init__(self, seed, tmpdir, trace_fd):
        self.rng = random.Random(seed)
        self.seed = seed
        self.tmpdir = tmpdir
        self.trace_fd = trace_fd
        self.calls = collections.Counter()
        self.buffers = []
        self.options = []
        self.regions = []     # (Regions, [(id, page_size, pages)])
        self.bitmaps = []
        self.receivers = []   # (Receiver, serve thread or None)
        self.senders = []     # (Sender, sender regions' pages list)
        self.threads = []
        self.handoff = []     # Export / Attach / Adopt / SharedRegions
        self.views = []       # adopted memory's views
        self.steps = 0

    # ---- plumbing ----

    def trace(self, text):
        os.write(self.trace_fd, ("S " + text.replace("\n", " ") + "\n")
                 .encode())

    def call(self, label, fn, must_refuse=None):
        """Runs fn(), counts its outcome; `must_refuse`: why it must not
        succeed (a Violation if it does)."""
        self.trace(label)
        exc = None
        result = None
        try:
            result = fn()
        except Violation:
            raise
        except BaseException as e:  # noqa: BLE001 (counted, not hidden)
            exc = e
        outcome = outcome_of(exc)
        if isinstance(exc, ramferry.RamferryError):
            outcome += ":" + exc.code
            if not exc.message.strip():
                raise Violation(f"{label}: {exc.code} with an empty message")
            if type(exc) is not type(ramferry.RamferryError.of(exc.status,
                                                               "")):
                raise Violation(f"{label}: {exc.code} raised as "
                                f"{type(exc).__name__}, not its subclass")
        self.calls[outcome] += 1
        if exc is not None:
            self.trace(f"  -> {outcome}: {str(exc)[:120]}")
        if exc is None and must_refuse:
            raise Violation(f"{label}: accepted, but {must_refuse}")
        self.check_canaries(label)
        return result, exc

    def in_thread(self, label, fn, wait=True, must_refuse=None):
        """Runs call(label, fn) on another thread; `wait`: join it (a
        hang past JOIN_S is a Violation)."""
        box = []

        def run():
            try:
                box.append(self.call(label + " [thread]", fn, must_refuse))
            except Violation as v:
                box.append(v)

        t = threading.Thread(target=run, daemon=True)
        t.start()
        self.threads.append((label, t))
        if wait:
            t.join(JOIN_S)
            if t.is_alive():
                raise Violation(f"{label} [thread] did not return in "
                                f"{JOIN_S} s")
            if box and isinstance(box[0], Violation):
                raise box[0]
        return t

    def check_canaries(self, after):
        for b in self.buffers:
            if not b.canaries_intact():
                raise Violation(f"a canary beside a {b.n}-byte region "
                                f"changed (after {after})")

    def pick(self, items):
        return self.rng.choice(items) if items else None

    def session_options(self, port, **more):
        o = ramferry.Options(host="127.0.0.1", port=port, insecure=True,
                             connect_timeout_ms=300, channels=1, **more)
        o.set("handshake_timeout_ms", 500)
        self.options.append(o)
        return o

    # ---- steps ----

    def step_buffer(self):
        b = Guarded(self.rng.choice([16, 32, 64]) << 10)
        self.buffers.append(b)
        self.trace(f"buffer {b.n} at {b.base + 2 * PAGE:#x}")
        return b

    def step_options(self):
        rng = self.rng
        kwargs = {}
        bad_key = None
        if rng.random() < 0.6:
            choices = [
                (os.urandom(32), None), (bytearray(os.urandom(32)), None),
                (memoryview(os.urandom(32)), None),
                (32, "an int is not a key"), ("k" * 32, "text is not a key"),
                (os.urandom(16), "a key is 32 bytes"),
                (os.urandom(33), "a key is 32 bytes"),
                (bytes(32), "an all-zero key is public"),
                (None, "None is not a key"), (3.5, "a float is not a key"),
                ([1] * 32, "a list is not a key")]
            kwargs["key"], bad_key = rng.choice(choices)
        for name, values in (
                ("insecure", [True, False, 1, 0]),
                ("channels", [1, 2, 0, -1, "2", 2**40, 2.0]),
                ("port", [0, 7, -1, 70000, "80", None]),
                ("host", ["127.0.0.1", "", 7, "a\0b", b"127.0.0.1"]),
                ("transport", ["tcp", "warp", 3]),
                ("connect_timeout_ms", [100, -5, "x", 2**70]),
                ("packet_pages", [16, 0, "many", None]),
                ("no_such_option", [1])):
            if rng.random() < 0.3:
                kwargs[name] = rng.choice(values)
        label = "Options(" + ", ".join(
            f"{k}={v!r:.40}" for k, v in kwargs.items()) + ")"
        o, _ = self.call(label, lambda: ramferry.Options(**kwargs),
                         must_refuse=bad_key and f"key: {bad_key}")
        if o is not None:
            self.options.append(o)
        if self.options and rng.random() < 0.3:
            o = self.pick(self.options)
            value = rng.choice([os.urandom(32), 32, bytes(32), "k"])
            bad = None if isinstance(value, bytes) and any(value) else \
                "only 32 random bytes are a key"
            self.call(f"Options.set('key', {value!r:.30})",
                      lambda: o.set("key", value), must_refuse=bad)

    def step_regions(self):
        rng = self.rng
        if not self.regions or rng.random() < 0.4:
            r, _ = self.call("Regions()", ramferry.Regions)
            if r is None:
                return
            self.regions.append((r, []))
        r, spans = self.pick(self.regions)
        b = self.pick(self.buffers) or self.step_buffer()
        page_size = rng.choice([PAGE, PAGE, PAGE, 512, 8192, 3000, 0, -1,
                                "4096", 2**33])
        rid = rng.choice([len(spans) + 1, len(spans) + 1, 1, 0, -1, 2**32,
                          "1", None])
        kind = rng.choice(["whole", "whole", "half", "second-half",
                           "unaligned", "bytes", "bytearray", "int", "None",
                           "readonly"])
        half = b.n // 2
        target = {
            "whole": lambda: b.view, "half": lambda: b.view[:half],
            "second-half": lambda: b.view[half:],
            "unaligned": lambda: b.view[1:PAGE + 1],
            "bytes": lambda: bytes(PAGE), "bytearray": lambda: bytearray(PAGE),
            "int": lambda: 4096, "None": lambda: None,
            "readonly": lambda: b.view.toreadonly()}[kind]
        lo = {"whole": 0, "half": 0, "second-half": half}.get(kind)
        hi = {"whole": b.n, "half": half, "second-half": b.n}.get(kind)
        overlap = None
        if lo is not None:
            for (ob, olo, ohi) in spans:
                if ob is b and olo < hi and lo < ohi:
                    overlap = "this memory is already a region of it"

        def add():
            r.add(rid, target(), page_size=page_size)
            if lo is not None:
                spans.append((b, lo, hi))

        self.call(f"Regions.add({rid!r}, {kind} of {b.n}, page_size="
                  f"{page_size!r})", add, must_refuse=overlap)
        if rng.random() < 0.1:
            fd = rng.choice([-1, 0, 999, "3", None])
            self.call(f"Regions.set_file({rid!r}, {fd!r})",
                      lambda: r.set_file(rid, fd))

    def step_bitmap(self):
        rng = self.rng
        pages = rng.choice([1, 4, 8, 16, 32, 64, 65, 128, 0, -1, "8", 2**64,
                            None, 1.5])
        bm, _ = self.call(f"Bitmap({pages!r})", lambda: ramferry.Bitmap(pages))
        if bm is None:
            return
        self.bitmaps.append(bm)
        for _ in range(rng.randrange(3)):
            page = rng.choice([0, 1, pages if isinstance(pages, int) else 0,
                               -1, 2**64, "x"])
            self.call(f"Bitmap.mark({page!r})", lambda: bm.mark(page))
        if rng.random() < 0.3:
            self.call("Bitmap.mark_range(0, huge)",
                      lambda: bm.mark_range(0, 2**63))
        if rng.random() < 0.5:
            self.call("Bitmap.mark_all()", bm.mark_all)

    def bitmaps_for(self, pages_list, tag):
        """Bitmaps for regions of `pages_list`: (list, why wrong or None)."""
        rng = self.rng
        kind = rng.choice(["right", "right", "right", "count", "size",
                           "size", "not-bitmaps", "none", "stale"])
        if kind == "right" or not pages_list:
            maps = [ramferry.Bitmap(p) for p in pages_list]
            for m in maps:
                m.mark_all()
            return maps, (None if pages_list else None)
        if kind == "count":
            maps = [ramferry.Bitmap(p) for p in pages_list + [8]]
            return maps, "one bitmap per region"
        if kind == "size":
            i = rng.randrange(len(pages_list))
            wrong = rng.choice([1, pages_list[i] + 1, pages_list[i] * 4,
                                max(1, pages_list[i] - 1)])
            maps = [ramferry.Bitmap(p) for p in pages_list]
            maps[i] = ramferry.Bitmap(wrong)
            for m in maps:
                m.mark_all()
            return maps, (None if wrong == pages_list[i] else
                          f"bitmap {i} has {wrong} pages, its region "
                          f"{pages_list[i]}")
        if kind == "not-bitmaps":
            return [1] * len(pages_list), "ints are not bitmaps"
        if kind == "none":
            return None, "None is not a list of bitmaps"
        maps = list(self.bitmaps[:len(pages_list)])
        if len(maps) == len(pages_list) and all(
                m.pages == p for m, p in zip(maps, pages_list)):
            return maps, None
        return maps, "these bitmaps do not fit the regions"

    def step_receiver(self, regions=None):
        if regions is None:
            if not self.regions:
                self.step_regions()
                if not self.regions:
                    return None
            regions = self.pick(self.regions)[0]
        o = self.session_options(0)
        rx, _ = self.call("Receiver(port 0)",
                          lambda: ramferry.Receiver(o, regions))
        if rx is None:
            return None
        t = None
        if self.rng.random() < 0.8:
            t = self.in_thread("Receiver.serve()", rx.serve, wait=False)
        self.receivers.append((rx, t))
        return rx

    def step_sender(self, port=None, regions=None):
        if regions is None:
            if not self.regions:
                return None
            regions = self.pick(self.regions)[0]
        if port is None:
            live = [rx for rx, _ in self.receivers if rx._h]
            port = NOBODY_PORT if not live or self.rng.random() < 0.2 \
                else self.call("Receiver.port", lambda: live[0].port)[0]
            if port is None:
                return None
        o = self.session_options(port)
        pages = list(regions.pages)
        tx, _ = self.call(f"Sender(port {port})",
                          lambda: ramferry.Sender(o, regions))
        if tx is not None:
            self.senders.append((tx, pages))
        return tx

    def step_session(self):
        """A real session: matching regions on both ends, then rounds."""
        rng = self.rng
        sizes = [rng.choice([16, 32, 64]) << 10
                 for _ in range(rng.randrange(1, 3))]
        page_size = rng.choice([PAGE, PAGE, 512])
        ends = []
        for _end in range(2):
            r = ramferry.Regions()
            self.regions.append((r, []))
            for i, n in enumerate(sizes):
                b = Guarded(n)
                self.buffers.append(b)
                r.add(i + 1, b.view, page_size=page_size)
            ends.append(r)
        rx = self.step_receiver(ends[1])
        if rx is None:
            return
        if self.receivers[-1][1] is None:  # a sender needs serve() running
            self.receivers[-1] = (rx, self.in_thread(
                "Receiver.serve()", rx.serve, wait=False))
        tx = self.step_sender(rx.port, ends[0])
        if tx is None:
            return
        if rng.random() < 0.5:
            # Let go of what the session uses, as a with-block's end would.
            self.call("Regions.close() (source)", ends[0].close)
            self.call("Regions.close() (destination)", ends[1].close)
            for b in self.buffers[-2 * len(sizes):]:
                self.call("give the memory back", b.give_back)

    def step_session_call(self):
        rng = self.rng
        if self.senders and rng.random() < 0.7:
            tx, pages = self.pick(self.senders)
            what = rng.choice(["round", "round", "round", "postcopy", "verify",
                               "finish", "abort", "stats", "bandwidth",
                               "warnings", "progress", "start_verify",
                               "complete_postcopy", "counter"])
            if what in ("round", "postcopy"):
                maps, wrong = self.bitmaps_for(pages, what)
                fn = (lambda: tx.send_round(maps)) if what == "round" else \
                    (lambda: tx.start_postcopy(maps))
                label = f"Sender.{what}({wrong or 'fitting bitmaps'})"
            else:
                wrong = None
                value = rng.choice([0, 10**6, -1, "fast", 2**64])
                fn, label = {
                    "verify": (tx.verify, "Sender.verify()"),
                    "finish": (tx.finish, "Sender.finish()"),
                    "abort": (lambda: tx.abort("misuse"), "Sender.abort()"),
                    "stats": (tx.stats, "Sender.stats()"),
                    "bandwidth": (lambda: tx.set_max_bandwidth(value),
                                  f"Sender.set_max_bandwidth({value!r})"),
                    "warnings": (tx.warnings, "Sender.warnings()"),
                    "progress": (lambda: tx.set_progress(
                        lambda p: tx.close(), rng.choice([0, 1])),
                        "Sender.set_progress(closes its sender)"),
                    "start_verify": (tx.start_verify, "Sender.start_verify()"),
                    "complete_postcopy": (tx.complete_postcopy,
                                          "Sender.complete_postcopy()"),
                    "counter": (lambda: tx.channel_counter(
                        rng.choice([0, 1, -1, 2**40]),
                        rng.choice(["packets", "nope", 3, "a\0b"])),
                        "Sender.channel_counter"),
                }[what]
            if rng.random() < 0.3:
                self.in_thread(label, fn, wait=rng.random() < 0.5,
                               must_refuse=wrong)
            else:
                self.call(label, fn, must_refuse=wrong)
        elif self.receivers:
            rx, _ = self.pick(self.receivers)
            what = rng.choice(["stats", "rounds", "abort", "commit", "port",
                               "verified", "armed", "progress"])
            fn = {"stats": rx.stats, "rounds": rx.applied_rounds,
                  "abort": lambda: rx.abort(rng.choice(["misuse", 7, None])),
                  "commit": lambda: rx.on_commit(lambda: rx.close()),
                  "port": lambda: rx.port,
                  "verified": rx.verified_pages,
                  "armed": lambda: rx.on_armed(rng.choice([print, None])),
                  "progress": lambda: rx.set_progress(
                      lambda p: rx.stats(), rng.choice([0, 1, -1]))}[what]
            if rng.random() < 0.3:
                self.in_thread(f"Receiver.{what}", fn, wait=False)
            else:
                self.call(f"Receiver.{what}", fn)

    def step_close(self):
        """Closes or drops something, maybe from another thread."""
        rng = self.rng
        pools = [p for p in (self.options, self.regions, self.receivers,
                             self.senders, self.handoff, self.bitmaps,
                             self.buffers, self.views) if p]
        if not pools:
            return
        pool = rng.choice(pools)
        i = rng.randrange(len(pool))
        item = pool[i]
        obj = item[0] if isinstance(item, tuple) else item
        if pool is self.buffers:
            self.call(f"give back a {obj.n}-byte buffer", obj.give_back)
            return
        if pool is self.views:
            self.call("read an adopted view", lambda: bytes(obj[:16]))
            return
        name = type(obj).__name__
        held = pool is self.receivers and item[1] is not None
        if pool is self.bitmaps or (rng.random() < 0.25 and not held):
            # (A serving Receiver is held by its serve(): no drop there.)
            # Drop it: what the collector frees must be safe to free.
            del pool[i]
            del item, obj
            self.call(f"drop a {name} and collect", gc.collect)
            return
        if rng.random() < 0.4:
            self.in_thread(f"{name}.close()", obj.close)
        else:
            self.call(f"{name}.close()", obj.close)

    def step_handoff(self):
        """An Adopt fed by hand_over_memory from this process, or an
        Export attached to from this process; the views and addresses
        they give outlive (or try to outlive) their handles."""
        rng = self.rng
        n = rng.choice([16, 64]) << 10
        fd = os.memfd_create("misuse")
        os.ftruncate(fd, n)
        mm = mmap.mmap(fd, n, flags=mmap.MAP_SHARED)
        mm[:8] = b"misuse!!"
        shared, _ = self.call("SharedRegions().add",
                              lambda: ramferry.SharedRegions().add(1, mm, fd))
        if shared is None:
            return
        self.handoff.append(shared)
        path = os.path.join(self.tmpdir, f"h{self.seed}-{self.steps}")
        if rng.random() < 0.5:
            if rng.random() < 0.3:
                def closed_while_waiting():
                    a = ramferry.Adopt(path)
                    self.in_thread("Adopt.close() during wait", a.close,
                                   wait=False)
                    a.wait(200)
                self.call("Adopt.wait, closed meanwhile",
                          closed_while_waiting)
                return

            def adopted():
                a = ramferry.Adopt(path)
                t = self.in_thread("hand_over_memory", lambda:
                                   ramferry.hand_over_memory(path, shared,
                                                             3000), wait=False)
                a.wait(3000)
                t.join(JOIN_S)
                views = [v for _, v, _ in a.regions()]
                if rng.random() < 0.5:
                    self.handoff.append(a)
                return views  # without the Adopt: it may be collected
            views, _ = self.call("Adopt + hand_over_memory", adopted)
            if views:
                self.views.extend(views)
                gc.collect()
                self.call("read an adopted view", lambda: bytes(views[0][:8]))
            return
        events = []
        exp, _ = self.call("Export", lambda: ramferry.Export(
            path, shared, events.append))
        if exp is None:
            return
        self.handoff.append(exp)
        att, _ = self.call("Attach", lambda: ramferry.Attach(path, 3000))
        if att is None:
            return
        self.handoff.append(att)
        regs, _ = self.call("Attach.regions()", att.regions)
        if not regs:
            return
        r = ramferry.Regions()
        self.regions.append((r, []))
        rid, base, length = regs[0]
        self.call("Regions.add_mapped(attached)",
                  lambda: r.add_mapped(rid, base, length))
        maps, wrong = self.bitmaps_for([length // PAGE], "collect")
        self.call("Attach.collect", lambda: att.collect(maps),
                  must_refuse=wrong)
        for name, fn in (("pause", lambda: att.pause(500)),
                         ("resume", att.resume),
                         ("paused_at_ns", exp.paused_at_ns),
                         ("wait_migrated", lambda: exp.wait_migrated(50))):
            if rng.random() < 0.3:
                self.call(f"{name}()", fn)
        if rng.random() < 0.5:
            self.call("Attach.close()", att.close)
            if rng.random() < 0.5:
                self.call("Regions.add_mapped(closed attach's address)",
                          lambda: r.add_mapped(rid + 1, base, length))
        rx = self.step_receiver()
        if rx is not None and rng.random() < 0.7:
            dst = ramferry.Regions()
            g = Guarded(length)
            self.buffers.append(g)
            dst.add(rid, g.view)
            rx2 = self.step_receiver(dst)
            if rx2 is not None:
                tx = self.step_sender(rx2.port, r)
                if tx is not None:
                    self.call("Sender.send_round(attached memory)",
                              lambda: tx.send_round(r.bitmaps(True)))

    # ---- the sequence ----

    def run(self):
        rng = self.rng
        # Weighed for cost too: a thread costs about a millisecond of CPU
        # here, a listening receiver several, a session tens.
        steps = [(self.step_options, 2), (self.step_buffer, 1),
                 (self.step_regions, 3), (self.step_bitmap, 2),
                 (self.step_receiver, 0.6), (self.step_sender, 0.2),
                 (self.step_close, 3), (self.step_session_call, 3)]
        if rng.random() < 0.12:
            steps.append((self.step_session, 1))
            self.step_session()
        if rng.random() < 0.04:
            self.step_handoff()
        fns, weights = zip(*steps)
        for _ in range(rng.randrange(3, 11)):
            self.steps += 1
            rng.choices(fns, weights)[0]()
        self.teardown()

    def teardown(self):
        """Everything closed in a random order, some from other threads;
        then every thread this sequence started must end."""
        rng = self.rng
        handles = ([rx for rx, _ in self.receivers] +
                   [tx for tx, _ in self.senders] +
                   [r for r, _ in self.regions] + self.options + self.handoff)
        rng.shuffle(handles)
        for h in handles:
            label = f"teardown {type(h).__name__}.close()"
            if rng.random() < 0.3:
                self.in_thread(label, h.close)
            else:
                self.call(label, h.close)
        for label, t in self.threads:
            t.join(JOIN_S)
            if t.is_alive():
                raise Violation(f"{label} still runs {JOIN_S} s after every "
                                "handle was closed")
        self.views = []
        handles = self.receivers = self.senders = self.regions = None
        self.options = self.handoff = self.bitmaps = None
        gc.collect()
        self.check_canaries("teardown")


def child(seed, tmpdir, trace_fd):
    """Runs one sequence; exit status 0 (kept its promise) or 1."""
    seq = Sequence(seed, tmpdir, trace_fd)
    status, violation = 0, None
    try:
        seq.run()
    except Violation as v:
        status, violation = 1, str(v)
    except BaseException:  # noqa: BLE001 (a bug of the test itself)
        import traceback
        status, violation = 1, "the test itself failed: " + \
            traceback.format_exc()
    os.write(trace_fd, ("R " + json.dumps(
        {"calls": seq.calls, "violation": violation}) + "\n").encode())
    os._exit(status)  # no interpreter teardown: threads may still run


class Run:
    """One sequence's child: forked at once; feed() reads what it wrote,
    verdict() tells how it ended."""

    def __init__(self, seed, tmpdir, timeout_s):
        self.seed = seed
        self.began = time.monotonic()
        self.deadline = self.began + timeout_s
        self.timeout_s = timeout_s
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            if os.environ.get("RAMFERRY_MISUSE_VERBOSE") != "1":
                # Exceptions raised in callbacks are printed and ignored:
                # noise here. A crash shows as the child's signal.
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, 2)
                os.dup2(devnull, 1)
            try:
                child(seed, tmpdir, w)
            finally:
                os._exit(2)
        os.close(w)
        self.pid, self.pipe = pid, r
        self.pidfd = os.pidfd_open(pid)
        self.data = b""
        self.hung = False

    def feed(self):
        chunk = os.read(self.pipe, 65536)
        self.data += chunk
        return bool(chunk)

    def finish(self):
        """Reaps the child (killed first when past its deadline):
        (verdict, report, trace lines, seconds)."""
        if self.hung:
            os.kill(self.pid, signal.SIGKILL)
        _, status = os.waitpid(self.pid, 0)
        os.close(self.pidfd)
        while self.feed():
            pass
        os.close(self.pipe)
        lines = self.data.decode(errors="replace").splitlines()
        trace = [line[2:] for line in lines if line.startswith("S ")]
        report = next((json.loads(line[2:]) for line in lines
                       if line.startswith("R ")), None)
        seconds = time.monotonic() - self.began
        if self.hung:
            verdict = f"hang (over {self.timeout_s} s)"
        elif os.WIFSIGNALED(status):
            verdict = f"signal {signal.Signals(os.WTERMSIG(status)).name}"
        elif report is None or os.WEXITSTATUS(status) != 0:
            why = report and report.get("violation")
            verdict = "violation: " + (
                why or f"exit {os.WEXITSTATUS(status)}")
        else:
            verdict = "ok"
        return verdict, report, trace, seconds


def run_all(seeds, tmpdir, timeout_s, jobs):
    """Runs a child per seed, `jobs` at a time; yields (seed, verdict,
    report, trace, seconds) as each ends."""
    seeds = list(seeds)
    running = {}
    while seeds or running:
        while seeds and len(running) < jobs:
            run = Run(seeds.pop(0), tmpdir, timeout_s)
            running[run.pipe] = run
            running[run.pidfd] = run
        left = min(run.deadline for run in running.values()) - \
            time.monotonic()
        ready, _, _ = select.select(list(running), [], [], max(left, 0))
        now = time.monotonic()
        done = set()
        for fd in ready:
            run = running[fd]
            if fd == run.pipe:
                if not run.feed():
                    done.add(run)  # EOF: the child (and its fds) ended
            else:
                done.add(run)
        for run in set(running.values()):
            if run not in done and now >= run.deadline:
                run.hung = True
                done.add(run)
        for run in done:
            del running[run.pipe], running[run.pidfd]
            yield (run.seed,) + run.finish()


def main():
    seed = int(os.environ.get("RAMFERRY_MISUSE_SEED") or
               time.time_ns() % 10**9)
    count = int(os.environ.get("RAMFERRY_MISUSE_COUNT", "1000"))
    timeout_s = float(os.environ.get("RAMFERRY_MISUSE_TIMEOUT_S", "20"))
    jobs = int(os.environ.get("RAMFERRY_MISUSE_JOBS", "2"))
    verbose = os.environ.get("RAMFERRY_MISUSE_VERBOSE") == "1"
    print(f"misuse: seed {seed}, {count} sequences, {jobs} at a time "
          f"(RAMFERRY_MISUSE_SEED={seed} RAMFERRY_MISUSE_COUNT={count} to "
          "repeat)", flush=True)
    verdicts = collections.Counter()
    calls = collections.Counter()
    failures = []
    slowest = []
    start = time.monotonic()
    # A child's first touch of a page the parent's objects share copies it,
    # and a collection touches every object: frozen, they stay shared.
    gc.collect()
    gc.freeze()
    with tempfile.TemporaryDirectory(prefix="ramferry-misuse-") as tmpdir:
        for s, verdict, report, trace, seconds in run_all(
                range(seed, seed + count), tmpdir, timeout_s, jobs):
            slowest = sorted(slowest + [(seconds, s)], reverse=True)[:3]
            verdicts[verdict.split(":")[0].split(" (")[0]] += 1
            if report:
                calls.update(report["calls"])
            if verbose:
                print(f"seed {s}: {verdict}", *trace, sep="\n  ")
            if verdict != "ok":
                failures.append((s, verdict, trace))
    elapsed = time.monotonic() - start
    print(f"misuse: {count} sequences in {elapsed:.1f} s: " + ", ".join(
        f"{k} {v}" for k, v in sorted(verdicts.items())))
    print("misuse: slowest: " + ", ".join(
        f"seed {s} {t:.2f} s" for t, s in slowest))
    print("misuse: calls by outcome: " + ", ".join(
        f"{k} {v}" for k, v in sorted(calls.items(), key=lambda kv: -kv[1])))
    failures.sort()
    for n, (s, verdict, trace) in enumerate(failures):
        if n < 10:
            print(f"FAILED seed {s}: {verdict}\n  last steps: " +
                  "\n    ".join(trace[-8:]))
        else:
            print(f"FAILED seed {s}: {verdict[:160]}")
    if failures:
        print(f"misuse: {len(failures)} of {count} sequences broke the "
              "promise (rerun one: RAMFERRY_MISUSE_SEED=<seed> "
              "RAMFERRY_MISUSE_COUNT=1 RAMFERRY_MISUSE_VERBOSE=1)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
