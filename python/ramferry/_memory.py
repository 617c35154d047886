"""Regions, dirty bitmaps and the options of a session."""

import ctypes
import mmap

from ramferry._lib import (WORDS, Handle, RamferryError, check, lib, u64)

PAGE_SIZE = 4096


def _invalid(message):
    return RamferryError(3, message)  # RAMFERRY_INVALID_ARGUMENT


def page_aligned(nbytes):
    """Anonymous, page-aligned, zero-filled memory of `nbytes` (an mmap):
    what a region needs, where a bytearray is not page-aligned."""
    if nbytes <= 0 or nbytes % PAGE_SIZE:
        raise _invalid(f"{nbytes} bytes: a region is a nonzero multiple of "
                       f"{PAGE_SIZE} bytes")
    return mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


def c_view(buffer):
    """A ctypes char array over `buffer`'s bytes, holding the buffer so it
    can neither move nor shrink while the array lives: (array, address,
    length). `buffer` is anything with a writable, contiguous buffer: an
    mmap, a bytearray, a numpy array."""
    try:
        view = memoryview(buffer)
    except TypeError:
        raise _invalid(f"{type(buffer).__name__} has no buffer: give an "
                       "mmap, a bytearray or a numpy array") from None
    if view.readonly:
        raise _invalid("region memory must be writable (the destination "
                       "writes into it, the source's rounds read it)")
    if not view.c_contiguous:
        raise _invalid("region memory must be one contiguous block")
    view = view.cast("B")
    array = (ctypes.c_char * view.nbytes).from_buffer(view)
    return array, ctypes.addressof(array), view.nbytes


class Options(Handle):
    """Settings of one end of a session (ramferry_options): keyword
    arguments or set(name, value). Named setters exist for the common
    fields; any other SessionOptions field goes by name, as
    ramferry_options_set takes it ("packet_pages" or "packet-pages")."""

    _NAMED = {
        "host": str, "port": int, "transport": str, "channels": int,
        "key_file": str, "key": bytes, "insecure": bool, "protect": str,
        "compression": str, "verify": str, "max_bandwidth": int,
        "postcopy": bool, "postcopy_urgent_channel": bool,
        "postcopy_resume_timeout_ms": int, "connect_timeout_ms": int,
    }
    _LIMITS = {"port": 0xFFFF, "channels": 0xFFFFFFFF}
    _free = "ramferry_options_free"

    def __init__(self, **settings):
        self._h = lib.ramferry_options_new()
        if not self._h:
            raise MemoryError("ramferry_options_new")
        for name, value in settings.items():
            self.set(name, value)

    def set(self, name, value):
        kind = self._NAMED.get(name)
        if kind is None:
            text = ("1" if value else "0") if isinstance(value, bool) \
                else str(value)
            status = lib.ramferry_options_set(
                self._h, name.replace("_", "-").encode(), text.encode())
        else:
            status = self._set_named(name, kind, value)
        check(status, lambda: lib.ramferry_options_last_error(self._h))
        return self

    def _set_named(self, name, kind, value):
        setter = getattr(lib, "ramferry_options_set_" + name)
        if kind is bool:
            return setter(self._h, 1 if value else 0)
        if kind is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise _invalid(f"{name} is a whole number, not {value!r}")
            if not 0 <= value <= self._LIMITS.get(name, 2**64 - 1):
                raise _invalid(f"{name} {value} is out of range")
            return setter(self._h, value)
        if kind is bytes:
            key = bytes(value)
            return setter(self._h, key, len(key))
        if not isinstance(value, str):
            raise _invalid(f"{name} is text, not {value!r}")
        return setter(self._h, value.encode())



class Regions(Handle):
    """The memory a session moves (ramferry_regions): each region an id
    both ends agree on and a writable buffer, which the Regions holds (and
    so keeps from moving) until closed."""

    _free = "ramferry_regions_free"

    def __init__(self):
        self._h = lib.ramferry_regions_new()
        if not self._h:
            raise MemoryError("ramferry_regions_new")
        self._views = []
        self.pages = []  # per region, in the order added

    def add(self, region_id, buffer, page_size=PAGE_SIZE):
        array, address, length = c_view(buffer)
        if address % PAGE_SIZE:
            # A bytearray's memory comes from malloc: rarely page-aligned.
            raise _invalid(
                f"region {region_id}'s buffer starts at {address:#x}, not on "
                f"a {PAGE_SIZE}-byte page boundary: allocate it with "
                "ramferry.page_aligned(n) (an mmap; wrap it in a numpy "
                "array or a memoryview as needed)")
        status = lib.ramferry_regions_add(self._h, region_id, address, length,
                                          page_size)
        check(status, lambda: lib.ramferry_regions_last_error(self._h))
        self._views.append(array)
        self.pages.append(length // page_size)
        return self

    def add_mapped(self, region_id, address, length, page_size=PAGE_SIZE):
        """A region of memory this process maps but Python does not own
        (an Attach's regions, a mapping made through another library):
        the caller keeps it mapped for as long as a session uses it."""
        status = lib.ramferry_regions_add(self._h, region_id, address, length,
                                          page_size)
        check(status, lambda: lib.ramferry_regions_last_error(self._h))
        self.pages.append(length // page_size)
        return self

    def set_file(self, region_id, fd, offset=0):
        """The file region `region_id` maps shared (a memfd, a tmpfs file),
        so long runs of its pages move through it."""
        status = lib.ramferry_regions_set_file(self._h, region_id, fd, offset)
        check(status, lambda: lib.ramferry_regions_last_error(self._h))
        return self

    def __len__(self):
        return lib.ramferry_regions_count(self._h)

    def bitmaps(self, all_dirty=False):
        """One Bitmap per region, every page marked when `all_dirty`."""
        maps = [Bitmap(p) for p in self.pages]
        if all_dirty:
            for b in maps:
                b.mark_all()
        return maps

    def close(self):
        super().close()
        self._views = []


class Bitmap:
    """A region's dirty pages: one bit per page, in words a round reads and
    clears in place. mark() is atomic, so a writer thread may mark while a
    round runs."""

    def __init__(self, pages):
        self.pages = pages
        self.words = (u64 * lib.ramferry_bitmap_words(pages))()
        self._ptr = ctypes.cast(self.words, WORDS)

    def _check(self, first, count=1):
        if first < 0 or count < 0 or first + count > self.pages:
            raise _invalid(f"pages [{first}, {first + count}) are outside "
                           f"the region's {self.pages}")

    def mark(self, page):
        self._check(page)
        lib.ramferry_bitmap_mark(self._ptr, page)

    def mark_range(self, first, count):
        self._check(first, count)
        lib.ramferry_bitmap_mark_range(self._ptr, first, count)

    def mark_all(self):
        lib.ramferry_bitmap_mark_range(self._ptr, 0, self.pages)

    def count(self):
        return sum(bin(w).count("1") for w in self.words)
