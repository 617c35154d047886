"""Memory of another process (ramferry/memory_handoff.h): a workload
exports its shared memory to a migration process (Export, Attach), and a
destination hands what it received to the process that runs on (Adopt,
hand_over_memory).

What this process maps for a handle (an Attach's read-only view of the
workload, an Adopt's adopted memory) stays mapped while anything uses it:
the views and addresses the handle gives out keep it from closing
(close() refuses, saying what still uses it), and collecting it is safe,
since they hold it."""

from __future__ import annotations

import ctypes
import enum
import weakref
from typing import (Any, Callable, List, NamedTuple, Optional, Sequence,
                    Type, cast)

from ramferry._lib import (_RETAINED, _STATE, EXPORT_FN, Handle, StrPath,
                           c_int, c_size_t, c_void_p, check, i64, invalid,
                           lib, refused, text, u32, u64, whole)
from ramferry._memory import (MAPPERS, PAGE_SIZE, Bitmap, MappedAddress,
                              WritableBuffer, c_view, word_arrays)


class ExportEvent(enum.IntEnum):
    PAUSE = 1     # stop every write to the exported memory, then return
    RESUME = 2    # the migration failed: writes may go on here
    MIGRATED = 3  # the memory lives at the destination now
    DETACHED_WHILE_PAUSED = 4


class AttachedRegion(NamedTuple):
    """One of Attach.regions(): the workload's region `id`, mapped here
    read-only at `address` (for Regions.add_mapped), `length` bytes."""

    id: int
    address: MappedAddress
    length: int


class AdoptedRegion(NamedTuple):
    """One of Adopt.regions(): region `id`, its memory (a view that keeps
    it mapped) and the fd it maps."""

    id: int
    view: memoryview
    fd: int


class SharedRegions(Handle):
    """Shared mappings of files (memfds, tmpfs): region id, the mapping
    (a buffer, held), the fd it maps and the offset."""

    _prefix = "shared_regions"

    def __init__(self) -> None:
        self._h = lib.ramferry_shared_regions_new()
        if not self._h:
            raise MemoryError("ramferry_shared_regions_new")
        self._keep = []

    def add(self, region_id: int, buffer: WritableBuffer, fd: int,
            fd_offset: int = 0) -> SharedRegions:
        whole("region_id", region_id, 0, 2**32 - 1)
        whole("fd", fd, 0, 2**31 - 1)
        whole("fd_offset", fd_offset)
        with self._use() as h:
            array, address, length = c_view(buffer)
            self._check(lib.ramferry_shared_regions_add(
                h, region_id, address, length, fd, fd_offset), h)
            self._keep.append(array)
        return self

    def _snapshot(self) -> List[Any]:
        return list(self._keep)


def _shared(regions: Any) -> SharedRegions:
    if not isinstance(regions, SharedRegions):
        raise invalid(f"regions is a ramferry.SharedRegions, not "
                      f"{type(regions).__name__}")
    return regions


class Export(Handle):
    """The workload's side: serves migration processes on `socket_path`
    (mode 0600). `handler(event)` (an ExportEvent, on the export's thread)
    must stop every write at PAUSE before returning; None: the migration
    process pauses this whole process with SIGSTOP. The handler may close
    its own export. Holds the regions' buffers until closed."""

    _prefix = "export"
    _exclusive_excludes_shared = False

    def __init__(self, socket_path: StrPath, regions: SharedRegions,
                 handler: Optional[Callable[[ExportEvent], object]] = None
                 ) -> None:
        path = text("socket_path", socket_path)
        _shared(regions)
        if handler is not None and not callable(handler):
            raise invalid(f"handler is a function or None, not "
                          f"{handler!r:.60}")
        if handler:
            on_event = handler  # narrowed, for the lambda
            fn = EXPORT_FN(lambda _u, ev: on_event(ExportEvent(ev)))
        else:
            # EXPORT_FN(0): the NULL function pointer (as EXPORT_FN()
            # makes, which ctypes' stubs do not know).
            fn = EXPORT_FN(0)
        # A handler that frees its own export returns after the free: its
        # thunk must outlive this object.
        _RETAINED.append(fn)
        out = c_void_p()
        with regions._use(exclusive=False) as r:
            keep = regions._snapshot()
            check(lib.ramferry_export_listen(path, r, fn, None,
                                             ctypes.byref(out)))
        self._keep = keep
        self._h = out.value

    def wait_migrated(self, timeout_ms: int) -> None:
        self._call("wait_migrated", whole("timeout_ms", timeout_ms))

    def paused_at_ns(self) -> int:
        ns = i64()
        self._call("paused_at_ns", ctypes.byref(ns), exclusive=False)
        return ns.value


class _Lease:
    """Held by a Regions (and the sessions made from it) for memory a
    handle maps: while one lives, that handle refuses to close."""

    __slots__ = ("owner", "__weakref__")

    def __init__(self, owner: Attach) -> None:
        self.owner = owner


def _alive(refs: List[Any]) -> List[Any]:
    return [r for r in refs if r() is not None]


class Attach(Handle):
    """The migration process's side of an Export: the workload's regions,
    mapped here read-only, its writes, its pause. regions() gives their
    addresses for Regions.add_mapped; a Sender made from such regions
    holds this Attach open (close() refuses) until the Sender is closed,
    and none can be made from them once this Attach is closed."""

    _prefix = "attach"

    def __init__(self, socket_path: StrPath, timeout_ms: int = 10000) -> None:
        path = text("socket_path", socket_path)
        whole("timeout_ms", timeout_ms)
        self._leases: List[Any] = []
        self._mapped: Optional[List[Any]] = None
        out = c_void_p()
        check(lib.ramferry_attach_open(path, timeout_ms, ctypes.byref(out)))
        self._h = out.value
        MAPPERS.add(self)

    def _regions(self, h: int) -> List[Any]:
        if self._mapped is None:
            n = c_size_t()
            self._check(lib.ramferry_attach_region_count(h, ctypes.byref(n)),
                        h)
            mapped = []
            for i in range(n.value):
                rid, base, length = u32(), c_void_p(), u64()
                self._check(lib.ramferry_attach_region(
                    h, i, ctypes.byref(rid), ctypes.byref(base),
                    ctypes.byref(length)), h)
                mapped.append((rid.value, base.value, length.value))
            self._mapped = mapped
        return self._mapped

    def regions(self) -> List[AttachedRegion]:
        """[AttachedRegion(id, address, length)] (tuples): pass them to
        Regions.add_mapped."""
        with self._use() as h:
            return [AttachedRegion(rid, MappedAddress(base, self), length)
                    for rid, base, length in self._regions(h)]

    def _lease(self, address: int, length: int,
               only_if_mine: bool = False) -> Optional[_Lease]:
        with _STATE:
            mine = any(base <= address and address + length <= base + n
                       for _, base, n in self._mapped or ())
            live = self._h and not self._closing
            if only_if_mine and not (mine and live):
                return None
            if not live:
                raise refused(
                    f"the Attach that mapped {address:#x} is closed: that "
                    "memory is no longer mapped")
            if not mine:
                raise invalid(f"[{address:#x}, {address + length:#x}) is not "
                              "within one region this Attach maps")
            lease = _Lease(self)
            self._leases = _alive(self._leases) + [weakref.ref(lease)]
            return lease

    def _refuse_close(self) -> Optional[str]:
        self._leases = _alive(self._leases)
        if self._leases:
            return (f"{len(self._leases)} Sender(s) or Receiver(s) still "
                    "use memory this Attach maps (Regions.add_mapped): "
                    "close them first")
        return None

    def collect(self, bitmaps: Sequence[Bitmap]) -> int:
        """ORs the pages written since the last call into `bitmaps` (one
        Bitmap per region, each of its region's page count)."""
        with self._use() as h:
            pages = [n // PAGE_SIZE for _, _, n in self._regions(h)]
            words, count, _held = word_arrays(bitmaps, pages, "collect")
            reported = u64()
            self._check(lib.ramferry_attach_collect(
                h, words, count, ctypes.byref(reported)), h)
            return reported.value

    def pause(self, timeout_ms: int = 10000) -> None:
        self._call("pause", whole("timeout_ms", timeout_ms))

    def resume(self) -> None:
        self._call("resume")

    def migrated(self) -> None:
        self._call("migrated")


class Adopt(Handle):
    """The new workload's side: waits on `socket_path` for the memory a
    destination hands over, then maps it here. The views regions() gives
    hold this Adopt (and so the mapping): close() refuses while one
    lives."""

    _prefix = "adopt"

    def __init__(self, socket_path: StrPath) -> None:
        path = text("socket_path", socket_path)
        self._views: List[Any] = []
        out = c_void_p()
        check(lib.ramferry_adopt_listen(path, ctypes.byref(out)))
        self._h = out.value

    def wait(self, timeout_ms: int) -> None:
        self._call("wait", whole("timeout_ms", timeout_ms))

    def regions(self) -> List[AdoptedRegion]:
        """[AdoptedRegion(id, view, fd)] (tuples): the views (and what is
        made from them) keep the memory mapped; close() refuses until they
        are gone."""
        out = []
        with self._use() as h:
            n = c_size_t()
            self._check(lib.ramferry_adopt_region_count(h, ctypes.byref(n)),
                        h)
            for i in range(n.value):
                rid, base, length, fd = u32(), c_void_p(), u64(), c_int()
                self._check(lib.ramferry_adopt_region(
                    h, i, ctypes.byref(rid), ctypes.byref(base),
                    ctypes.byref(length), ctypes.byref(fd)), h)
                # The view's exporter holds this Adopt: no view outlives
                # the mapping it reads.
                # A subclass, so an array takes a weak reference and an
                # attribute; cast: type()'s stub returns a bare `type`.
                kind = cast(Type["ctypes.Array[ctypes.c_char]"],
                            type("AdoptedMemory",
                                 (ctypes.c_char * length.value,), {}))
                # RAMFERRY_OK gives a mapped region's base: never NULL (None).
                assert base.value is not None
                array = kind.from_address(base.value)
                # Array's stub declares no _adopt (the subclass's own).
                setattr(array, "_adopt", self)
                with _STATE:
                    self._views = _alive(self._views) + [weakref.ref(array)]
                out.append(AdoptedRegion(rid.value,
                                         memoryview(array).cast("B"),
                                         fd.value))
        return out

    def _refuse_close(self) -> Optional[str]:
        self._views = _alive(self._views)
        if self._views:
            return ("views of the adopted memory (regions()) are alive; "
                    "close() unmaps it: drop them (del, or view.release()) "
                    "first")
        return None


def hand_over_memory(socket_path: StrPath, regions: SharedRegions,
                     timeout_ms: int = 10000) -> None:
    """Hands `regions` (SharedRegions: their fds) to the process waiting in
    Adopt.wait() at `socket_path`."""
    path = text("socket_path", socket_path)
    whole("timeout_ms", timeout_ms)
    with _shared(regions)._use(exclusive=False) as r:
        check(lib.ramferry_hand_over_memory(path, r, timeout_ms))
