"""The two ends of a session: Sender (the source) and Receiver (the
destination). Each is a context manager that frees its handle; a blocking
call releases the GIL, and abort() or close() from another thread ends it.
Threads: one thread drives a session (rounds, verify, finish, serve, the
setters of callbacks); abort, close, stats, channel_counter, warnings,
set_max_bandwidth, port, applied_rounds and verified_pages may be called
from any thread meanwhile. A second driving call while one runs is refused
(FailedPrecondition), as is any call on a session from its own
callbacks."""

from __future__ import annotations

import ctypes
from typing import Any, Callable, List, Optional, Sequence

from ramferry._lib import (ARMED_FN, COMMIT_FN, PROGRESS_FN, CProgress,
                           CRoundResult, CStats, CVerifyReport, Handle,
                           Progress, RamferryError, RoundResult, Stats,
                           VerifyReport, c_size_t, c_void_p, check, decode,
                           in_callback_of, invalid, lib, text, u16, u32, u64,
                           whole)
from ramferry._memory import Bitmap, Options, Regions, word_arrays


class _End(Handle):
    """What both ends share: the handle, its errors, progress, stats."""

    _exclusive_excludes_shared = False  # any-thread calls during a drive
    _wait_on_close = True

    def __init__(self, make: Any, options: Options, regions: Regions) -> None:
        """`make` is the C call that makes the handle (connect, listen)."""
        if not isinstance(options, Options):
            raise invalid(f"options is a ramferry.Options, not "
                          f"{type(options).__name__}")
        if not isinstance(regions, Regions):
            raise invalid(f"regions is a ramferry.Regions, not "
                          f"{type(regions).__name__}")
        out = c_void_p()
        with options._use(exclusive=False) as o, \
                regions._use(exclusive=False) as r:
            # The session holds the buffers itself: the Regions may be
            # closed (and its buffers let go by it) while the session runs.
            keep, self._pages = regions._snapshot()
            check(make(o, r, ctypes.byref(out)))
        self._keep = keep + [[]]  # the last: ctypes callbacks it holds
        self._h = out.value

    def _set_callback(self, name: str, callback: Any, *args: Any) -> None:
        """Gives the library `callback`, held until the handle is freed."""
        fn = getattr(lib, f"ramferry_{self._prefix}_{name}")
        with self._use() as h:
            self._keep[-1].append(callback)
            self._check(fn(h, callback, *args), h)

    def _interrupt(self) -> None:
        # close() holds the handle meanwhile: it is still live here.
        getattr(lib, f"ramferry_{self._prefix}_abort")(
            self._h, f"{self._kind}.close() was called on another thread "
            "while this call ran".encode())

    def _trampoline(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """fn(*args), run as one of this handle's callbacks (by id: a
        reference to the handle would make a cycle through _keep)."""
        handle_id = id(self)

        def call(*args: Any) -> Any:
            with in_callback_of(handle_id):
                return fn(*args)
        return call

    def stats(self) -> Stats:
        """Totals over every channel (ramferry_stats). Any thread."""
        s = CStats(size=ctypes.sizeof(CStats))
        self._call("stats", ctypes.byref(s), exclusive=False)
        return Stats._from_c(s)

    def channel_counter(self, channel: int, name: str) -> int:
        """One per-channel counter by name (ramferry_channel_counter_name
        lists them). Any thread."""
        value = u64()
        self._call("channel_counter", whole("channel", channel, 0,
                                            2**32 - 1),
                   text("counter name", name), ctypes.byref(value),
                   exclusive=False)
        return value.value

    def set_progress(self, fn: Optional[Callable[[Progress], object]],
                     interval_ms: int = 0) -> None:
        """Calls fn(Progress) with the totals so far: once per confirmed
        round (source) and every interval_ms while a call blocks. None: off. An
        exception in fn is printed and ignored; keep fn short, and make no
        call on this session from it (refused)."""
        whole("interval_ms", interval_ms, 0, 2**32 - 1)
        if fn is None:
            # PROGRESS_FN(0): the NULL function pointer (as PROGRESS_FN()
            # makes, which ctypes' stubs do not know).
            self._set_callback("set_progress", PROGRESS_FN(0), None, 0)
            return
        if not callable(fn):
            raise invalid(f"progress is a function or None, not {fn!r:.60}")
        callback = fn

        def report(progress: Any, _user: Any) -> None:
            p: CProgress = progress.contents
            callback(Progress(
                round_done=bool(p.round_done), rounds=p.rounds,
                pages=p.pages, payload_bytes=p.payload_bytes,
                header_bytes=p.header_bytes))

        self._set_callback("set_progress",
                           PROGRESS_FN(self._trampoline(report)), None,
                           interval_ms)

    def abort(self, reason: Optional[str] = None) -> None:
        """Ends the session now, from any thread: the call that blocks
        raises Cancelled with `reason`."""
        self._call("abort", None if reason is None else text("reason",
                                                             reason),
                   exclusive=False)


class Sender(_End):
    """Connects to the destination, agrees on the regions and opens every
    channel (ramferry_sender_connect). Holds the regions' buffers until
    closed."""

    _prefix = "sender"

    def __init__(self, options: Options, regions: Regions) -> None:
        super().__init__(lib.ramferry_sender_connect, options, regions)

    def send_round(self, bitmaps: Sequence[Bitmap]) -> RoundResult:
        """Sends the pages marked in `bitmaps` (one Bitmap per region, in
        the order the regions were added, each of its region's page count)
        and clears those bits; returns once the destination applied the
        round. A page marked while the round runs goes in this round or
        the next, never lost."""
        words, count, _held = word_arrays(bitmaps, self._pages,
                                          "send_round")
        r = CRoundResult(size=ctypes.sizeof(CRoundResult))
        self._call("send_round", words, count, ctypes.byref(r))
        return RoundResult(round=r.round, pages=r.pages, bytes=r.bytes,
                           seconds=r.elapsed_ns / 1e9)

    def verify(self) -> VerifyReport:
        """Compares a digest of every page on both ends. A mismatch raises
        DataLoss with the report as its .report."""
        r = CVerifyReport(size=ctypes.sizeof(CVerifyReport))

        def report() -> VerifyReport:
            return VerifyReport(
                pages_checked=r.pages_checked,
                pages_mismatched=r.pages_mismatched,
                first_mismatch=((r.first_mismatch_region,
                                 r.first_mismatch_page)
                                if r.pages_mismatched else None))
        try:
            self._call("verify", ctypes.byref(r))
        except RamferryError as e:
            e.report = report()
            raise
        return report()

    def start_verify(self) -> None:
        self._call("start_verify")

    def finish(self) -> None:
        """Ends the session; on failure, commit_outcome() says whether the
        destination committed."""
        self._call("finish")

    _COMMIT_OUTCOMES = ("pending", "committed", "not-committed", "unknown")

    def commit_outcome(self) -> str:
        """Where the destination stands on the commit point (finish, or
        post-copy's switch), to decide on this side's copy of the
        workload: "pending" (not reached, no failure), "committed" (the
        destination owns the memory), "not-committed" (it discards it:
        the workload may resume here), or "unknown" (the commit point
        passed and no answer came: do not resume it). Any thread."""
        with self._use(exclusive=False) as h:
            v = u32()
            self._check(lib.ramferry_sender_commit_outcome(
                h, ctypes.byref(v)), h)
            return self._COMMIT_OUTCOMES[v.value]

    def set_max_bandwidth(self, bytes_per_second: int) -> None:
        """Caps the bytes per second from now on (0: no cap). Any
        thread."""
        self._call("set_max_bandwidth",
                   whole("bytes_per_second", bytes_per_second),
                   exclusive=False)

    def warnings(self) -> List[str]:
        """What the caller should know that did not stop the session (the
        transport "auto" chose, and why). Any thread."""
        with self._use(exclusive=False) as h:
            n = c_size_t()
            self._check(lib.ramferry_sender_warning_count(
                h, ctypes.byref(n)), h)
            return [decode(lib.ramferry_sender_warning(h, i))
                    for i in range(n.value)]

    def start_postcopy(self, missing: Sequence[Bitmap]) -> None:
        """The switch: `missing` (one Bitmap per region, as send_round
        takes) marks every page the destination lacks; read, not changed.
        The workload here is stopped for good."""
        words, count, _held = word_arrays(missing, self._pages,
                                          "start_postcopy")
        self._call("start_postcopy", words, count)

    def complete_postcopy(self) -> None:
        self._call("complete_postcopy")


class Receiver(_End):
    """Binds and listens (ramferry_receiver_listen); serve() runs one
    session to its end. Holds the regions' buffers until closed."""

    _prefix = "receiver"

    def __init__(self, options: Options, regions: Regions) -> None:
        super().__init__(lib.ramferry_receiver_listen, options, regions)

    @property
    def port(self) -> int:
        """The port it listens on. Any thread."""
        p = u16()
        self._call("port", ctypes.byref(p), exclusive=False)
        return p.value

    def serve(self) -> None:
        """Blocks until the source finished (returns) or the session failed
        (raises). abort() or close() from another thread ends it: it
        raises Cancelled."""
        self._call("serve")

    def applied_rounds(self) -> int:
        n = u64()
        self._call("applied_rounds", ctypes.byref(n), exclusive=False)
        return n.value

    def verified_pages(self) -> int:
        n = u64()
        self._call("verified_pages", ctypes.byref(n), exclusive=False)
        return n.value

    def on_armed(self, fn: Callable[[], object]) -> None:
        """Post-copy: fn() runs once, on a library thread, when the
        destination armed (its workload may resume). Set before serve()."""
        if not callable(fn):
            raise invalid(f"on_armed takes a function, not {fn!r:.60}")
        self._set_callback("on_armed",
                           ARMED_FN(self._trampoline(lambda _user: fn())),
                           None)

    def on_commit(self, fn: Callable[[], object]) -> None:
        """The commit point: fn() runs once, on a library thread, when the
        source's FINISH arrived, right before the destination confirms it
        (with post-copy: at the switch, before the destination arms).
        Return anything but False to commit; False (or an exception)
        refuses: serve() raises Cancelled, and the source learns the
        destination did not commit (Sender.commit_outcome() gives
        "not-committed"). Set before serve()."""
        if not callable(fn):
            raise invalid(f"on_commit takes a function, not {fn!r:.60}")

        def decide(_user: Any) -> int:
            try:
                return 0 if fn() is not False else 1
            except Exception:  # noqa: BLE001 (a refusal, not a crash)
                return 1

        self._set_callback("on_commit", COMMIT_FN(self._trampoline(decide)),
                           None)
