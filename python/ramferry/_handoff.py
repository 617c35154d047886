"""Memory of another process (ramferry/memory_handoff.h): a workload
exports its shared memory to a migration process (Export, Attach), and a
destination hands what it received to the process that runs on (Adopt,
hand_over_memory)."""

import ctypes
import enum

from ramferry._lib import (EXPORT_FN, WORDS, Handle, RamferryError, c_int,
                           c_size_t, c_void_p, check, last_error, lib, u32,
                           u64, i64)
from ramferry._memory import c_view


class ExportEvent(enum.IntEnum):
    PAUSE = 1     # stop every write to the exported memory, then return
    RESUME = 2    # the migration failed: writes may go on here
    MIGRATED = 3  # the memory lives at the destination now
    DETACHED_WHILE_PAUSED = 4


class SharedRegions(Handle):
    """Shared mappings of files (memfds, tmpfs): region id, the mapping
    (a buffer, held), the fd it maps and the offset."""

    _free = "ramferry_shared_regions_free"

    def __init__(self):
        self._h = lib.ramferry_shared_regions_new()
        if not self._h:
            raise MemoryError("ramferry_shared_regions_new")
        self._views = []

    def add(self, region_id, buffer, fd, fd_offset=0):
        array, address, length = c_view(buffer)
        check(lib.ramferry_shared_regions_add(self._h, region_id, address,
                                              length, fd, fd_offset),
              last_error)
        self._views.append(array)
        return self



class _Handle(Handle):
    _prefix = ""

    def _call(self, name, *args):
        if not self._h:
            raise RamferryError(9, f"this {self._prefix} is closed")
        last = getattr(lib, f"ramferry_{self._prefix}_last_error")
        check(getattr(lib, f"ramferry_{self._prefix}_{name}")(self._h, *args),
              lambda: last(self._h))



class Export(_Handle):
    """The workload's side: serves migration processes on `socket_path`
    (mode 0600). `handler(event)` (an ExportEvent, on the export's thread)
    must stop every write at PAUSE before returning; None: the migration
    process pauses this whole process with SIGSTOP."""

    _prefix = "export"
    _free = "ramferry_export_free"

    def __init__(self, socket_path, regions, handler=None):
        self._h = None
        self._regions = regions
        self._fn = EXPORT_FN(lambda _u, ev: handler(ExportEvent(ev))) \
            if handler else EXPORT_FN()
        out = c_void_p()
        check(lib.ramferry_export_listen(socket_path.encode(), regions._h,
                                         self._fn, None, ctypes.byref(out)),
              last_error)
        self._h = out.value

    def wait_migrated(self, timeout_ms):
        self._call("wait_migrated", timeout_ms)

    def paused_at_ns(self):
        ns = i64()
        self._call("paused_at_ns", ctypes.byref(ns))
        return ns.value


def _region_view(base, length):
    return memoryview((ctypes.c_char * length).from_address(base)).cast("B")


class Attach(_Handle):
    """The migration process's side of an Export: the workload's regions,
    mapped here read-only, its writes, its pause."""

    _prefix = "attach"
    _free = "ramferry_attach_free"

    def __init__(self, socket_path, timeout_ms=10000):
        self._h = None
        out = c_void_p()
        check(lib.ramferry_attach_open(socket_path.encode(), timeout_ms,
                                       ctypes.byref(out)), last_error)
        self._h = out.value

    def regions(self):
        """[(id, base address, length)]: pass to Regions via a view."""
        n = c_size_t()
        self._call("region_count", ctypes.byref(n))
        out = []
        for i in range(n.value):
            rid, base, length = u32(), c_void_p(), u64()
            self._call("region", i, ctypes.byref(rid), ctypes.byref(base),
                       ctypes.byref(length))
            out.append((rid.value, base.value, length.value))
        return out

    def collect(self, bitmaps):
        """ORs the pages written since the last call into `bitmaps`."""
        words = (WORDS * len(bitmaps))(
            *[ctypes.cast(b.words, WORDS) for b in bitmaps])
        reported = u64()
        self._call("collect", words, len(bitmaps), ctypes.byref(reported))
        return reported.value

    def pause(self, timeout_ms=10000):
        self._call("pause", timeout_ms)

    def resume(self):
        self._call("resume")

    def migrated(self):
        self._call("migrated")


class Adopt(_Handle):
    """The new workload's side: waits on `socket_path` for the memory a
    destination hands over, then maps it here."""

    _prefix = "adopt"
    _free = "ramferry_adopt_free"

    def __init__(self, socket_path):
        self._h = None
        out = c_void_p()
        check(lib.ramferry_adopt_listen(socket_path.encode(),
                                        ctypes.byref(out)), last_error)
        self._h = out.value

    def wait(self, timeout_ms):
        self._call("wait", timeout_ms)

    def regions(self):
        """[(id, memoryview, fd)]: the views are valid until close()."""
        n = c_size_t()
        self._call("region_count", ctypes.byref(n))
        out = []
        for i in range(n.value):
            rid, base, length, fd = u32(), c_void_p(), u64(), c_int()
            self._call("region", i, ctypes.byref(rid), ctypes.byref(base),
                       ctypes.byref(length), ctypes.byref(fd))
            out.append((rid.value, _region_view(base.value, length.value),
                        fd.value))
        return out


def hand_over_memory(socket_path, regions, timeout_ms=10000):
    """Hands `regions` (SharedRegions: their fds) to the process waiting in
    Adopt.wait() at `socket_path`."""
    check(lib.ramferry_hand_over_memory(socket_path.encode(), regions._h,
                                        timeout_ms), last_error)
