"""The two ends of a session: Sender (the source) and Receiver (the
destination). Each is a context manager that frees its handle; a blocking
call releases the GIL, and abort() from another thread ends it."""

import ctypes

from ramferry._lib import (ARMED_FN, COMMIT_FN, PROGRESS_FN, WORDS, Handle,
                           RamferryError,
                           RoundResult, Stats, VerifyReport, c_size_t,
                           c_void_p, check, decode, last_error, lib, u16, u64)


def _stats_dict(stats):
    return {name: getattr(stats, name) for name, _ in Stats._fields_
            if name != "size"}


def _word_arrays(bitmaps):
    bitmaps = list(bitmaps)
    return (WORDS * len(bitmaps))(
        *[ctypes.cast(b.words, WORDS) for b in bitmaps]), len(bitmaps)


class _End(Handle):
    """What both ends share: the handle, its errors, progress, stats."""

    _prefix = ""

    def __init__(self, make, options, regions):
        """`make` is the C call that makes the handle (connect, listen)."""
        out = c_void_p()
        check(make(options._h, regions._h, ctypes.byref(out)), last_error)
        self._h = out.value
        self._regions = regions  # its buffers must outlive the session
        self._callbacks = []     # ctypes callbacks the library holds

    def _call(self, name, *args):
        fn = getattr(lib, f"ramferry_{self._prefix}_{name}")
        last = getattr(lib, f"ramferry_{self._prefix}_last_error")
        check(fn(self._live(), *args), lambda: last(self._h))

    def _live(self):
        if not self._h:
            raise RamferryError(9, f"this {self._prefix} is closed")
        return self._h

    def stats(self):
        """Totals over every channel, as a dict (ramferry_stats)."""
        s = Stats(size=ctypes.sizeof(Stats))
        self._call("stats", ctypes.byref(s))
        return _stats_dict(s)

    def channel_counter(self, channel, name):
        value = u64()
        self._call("channel_counter", channel, name.encode(),
                   ctypes.byref(value))
        return value.value

    def set_progress(self, fn, interval_ms=0):
        """Calls fn(dict) with the totals so far: once per confirmed round
        (source) and every interval_ms while a call blocks. None: off. An
        exception in fn is printed and ignored; keep fn short."""
        if fn is None:
            self._call("set_progress", PROGRESS_FN(), None, 0)
            return

        def trampoline(progress, _user):
            p = progress.contents
            fn({"round_done": bool(p.round_done), "rounds": p.rounds,
                "pages": p.pages, "payload_bytes": p.payload_bytes,
                "header_bytes": p.header_bytes})

        callback = PROGRESS_FN(trampoline)
        self._callbacks.append(callback)
        self._call("set_progress", callback, None, interval_ms)

    def abort(self, reason=None):
        """Ends the session now, from any thread."""
        self._call("abort", reason.encode() if reason else None)



class Sender(_End):
    """Connects to the destination, agrees on the regions and opens every
    channel (ramferry_sender_connect)."""

    _prefix = "sender"
    _free = "ramferry_sender_free"

    def __init__(self, options, regions):
        super().__init__(lib.ramferry_sender_connect, options, regions)

    def send_round(self, bitmaps):
        """Sends the pages marked in `bitmaps` (one Bitmap per region) and
        clears them; returns once the destination applied the round."""
        words, count = _word_arrays(bitmaps)
        r = RoundResult(size=ctypes.sizeof(RoundResult))
        self._call("send_round", words, count, ctypes.byref(r))
        return {"round": r.round, "pages": r.pages, "bytes": r.bytes,
                "seconds": r.elapsed_ns / 1e9}

    def verify(self):
        """Compares a digest of every page on both ends. A mismatch raises
        RamferryError (DATA_LOSS) with the report as its .report."""
        r = VerifyReport(size=ctypes.sizeof(VerifyReport))
        report = lambda: {  # noqa: E731
            "pages_checked": r.pages_checked,
            "pages_mismatched": r.pages_mismatched,
            "first_mismatch": ((r.first_mismatch_region,
                                r.first_mismatch_page)
                               if r.pages_mismatched else None)}
        try:
            self._call("verify", ctypes.byref(r))
        except RamferryError as e:
            e.report = report()
            raise
        return report()

    def start_verify(self):
        self._call("start_verify")

    def finish(self):
        self._call("finish")

    def set_max_bandwidth(self, bytes_per_second):
        self._call("set_max_bandwidth", bytes_per_second)

    def warnings(self):
        n = c_size_t()
        self._call("warning_count", ctypes.byref(n))
        return [decode(lib.ramferry_sender_warning(self._h, i))
                for i in range(n.value)]

    def start_postcopy(self, missing):
        """The switch: `missing` (one Bitmap per region) marks every page
        the destination lacks; the workload here is stopped for good."""
        words, count = _word_arrays(missing)
        self._call("start_postcopy", words, count)

    def complete_postcopy(self):
        self._call("complete_postcopy")


class Receiver(_End):
    """Binds and listens (ramferry_receiver_listen); serve() runs one
    session to its end."""

    _prefix = "receiver"
    _free = "ramferry_receiver_free"

    def __init__(self, options, regions):
        super().__init__(lib.ramferry_receiver_listen, options, regions)

    @property
    def port(self):
        p = u16()
        self._call("port", ctypes.byref(p))
        return p.value

    def serve(self):
        """Blocks until the source finished (returns) or the session failed
        (raises)."""
        self._call("serve")

    def applied_rounds(self):
        n = u64()
        self._call("applied_rounds", ctypes.byref(n))
        return n.value

    def verified_pages(self):
        n = u64()
        self._call("verified_pages", ctypes.byref(n))
        return n.value

    def on_armed(self, fn):
        """Post-copy: fn() runs once, on a library thread, when the
        destination armed (its workload may resume). Set before serve()."""
        callback = ARMED_FN(lambda _user: fn())
        self._callbacks.append(callback)
        self._call("on_armed", callback, None)

    def on_commit(self, fn):
        """The commit point: fn() runs once, on a library thread, when the
        source's FINISH arrived, right before the destination confirms it.
        Return anything but False to commit; False (or an exception)
        refuses, and serve() raises CANCELLED. Set before serve()."""

        def trampoline(_user):
            try:
                return 0 if fn() is not False else 1
            except Exception:  # noqa: BLE001 (a refusal, not a crash)
                return 1

        callback = COMMIT_FN(trampoline)
        self._callbacks.append(callback)
        self._call("on_commit", callback, None)
