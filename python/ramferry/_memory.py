"""Regions, dirty bitmaps and the options of a session."""

from __future__ import annotations

import ctypes
import mmap
import weakref
from typing import Any, Callable, Iterable, List, Optional, Sequence, Tuple

from ramferry._lib import (WORDS, Handle, invalid, lib, refused, text, u64,
                           whole)

PAGE_SIZE = 4096
_invalid = invalid

# What a region takes: anything with a writable, C-contiguous buffer (an
# mmap, a bytearray, a memoryview, a numpy array). typing has no name for
# the buffer protocol before Python 3.12 (collections.abc.Buffer).
WritableBuffer = Any


def page_aligned(nbytes: int) -> mmap.mmap:
    """Anonymous, page-aligned, zero-filled memory of `nbytes` (an mmap):
    what a region needs, where a bytearray is not page-aligned."""
    whole("nbytes", nbytes)
    if nbytes <= 0 or nbytes % PAGE_SIZE:
        raise _invalid(f"{nbytes} bytes: a region is a nonzero multiple of "
                       f"{PAGE_SIZE} bytes")
    return mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


def c_view(buffer: WritableBuffer) -> Tuple[ctypes.Array[Any], int, int]:
    """A ctypes char array over `buffer`'s bytes, holding the buffer so it
    can neither move nor shrink while the array lives: (array, address,
    length). `buffer` is anything with a writable, contiguous buffer: an
    mmap, a bytearray, a numpy array."""
    try:
        view = memoryview(buffer)
    except TypeError:
        raise _invalid(f"{type(buffer).__name__} has no buffer: give an "
                       "mmap, a bytearray or a numpy array") from None
    except ValueError as e:  # a released memoryview, a closed mmap
        raise _invalid(f"that buffer cannot be used: {e}") from None
    if view.readonly:
        raise _invalid("region memory must be writable (the destination "
                       "writes into it, the source's rounds read it)")
    if not view.c_contiguous:
        raise _invalid("region memory must be one contiguous block")
    view = view.cast("B")
    array = (ctypes.c_char * view.nbytes).from_buffer(view)
    return array, ctypes.addressof(array), view.nbytes


class MappedAddress(int):
    """The address of memory a handle maps (Attach.regions()): an int that
    remembers its mapper, so Regions.add_mapped keeps the mapper from being
    closed while a region uses it."""

    _owner: weakref.ref[Any]

    def __new__(cls, value: int, owner: Any) -> MappedAddress:
        self = super().__new__(cls, value)
        self._owner = weakref.ref(owner)
        return self


# Handles that map memory of their own (Attach): Regions.add_mapped asks
# them for a lease on an address they map.
MAPPERS: weakref.WeakSet[Any] = weakref.WeakSet()


def _mapped(address: int, length: int) -> bool:
    """True when all of [address, address + length) is mapped here."""
    end = address + length
    with open("/proc/self/maps") as maps:
        for line in maps:
            lo, hi = (int(x, 16) for x in line.split(None, 1)[0].split("-"))
            if lo <= address < hi:
                address = hi
                if address >= end:
                    return True
    return False


class _Ticket:
    """A region's claim on memory a handle maps (an Attach): a session made
    from the region turns it into a lease, which keeps that handle from
    closing while the session lives; once the handle closed, no session
    can be made from the region."""

    def __init__(self, owner: Any, address: int, length: int) -> None:
        self.owner = weakref.ref(owner)
        self.address, self.length = address, length

    def lease(self) -> Any:
        owner = self.owner()
        if owner is None:
            raise refused(
                f"the memory at {self.address:#x} was mapped by a handle "
                "that is gone (closed or collected): it is no longer mapped")
        return owner._lease(self.address, self.length)


def _ticket_on(address: int, length: int) -> Optional[_Ticket]:
    """What lets a session keep the memory at `address` mapped: a ticket
    on the handle that maps it, or None for memory this process maps
    otherwise (checked to be mapped now; keeping it so is the caller's)."""
    if isinstance(address, MappedAddress):
        owner = address._owner()
        if owner is None:
            raise refused(
                f"the memory at {address:#x} was mapped by a handle that is "
                "gone (closed or collected): it is no longer mapped")
        owner._lease(address, length)  # refuses a closed one, a bad range
        return _Ticket(owner, int(address), length)
    for owner in list(MAPPERS):
        if owner._lease(address, length, only_if_mine=True) is not None:
            return _Ticket(owner, address, length)
    if not _mapped(address, length):
        raise _invalid(f"[{address:#x}, {address + length:#x}) is not mapped "
                       "in this process (its mapper closed?)")
    return None


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
    KEY_BYTES = 32
    _prefix = "options"

    def __init__(self, **settings: Any) -> None:
        self._h = lib.ramferry_options_new()
        if not self._h:
            raise MemoryError("ramferry_options_new")
        for name, value in settings.items():
            self.set(name, value)

    def set(self, name: str, value: Any) -> Options:
        """Sets option `name` (a keyword of Options, or any name
        ramferry_options_set knows) to `value`; returns self."""
        if not isinstance(name, str):
            raise _invalid(f"an option's name is text, not {name!r:.60}")
        kind = self._NAMED.get(name)
        with self._use() as h:
            if kind is None:
                status = lib.ramferry_options_set(
                    h, text("an option's name", name.replace("_", "-")),
                    text(name, self._as_text(name, value)))
            else:
                status = self._set_named(h, name, kind, value)
            self._check(status, h)
        return self

    @staticmethod
    def _as_text(name: str, value: Any) -> str:
        if isinstance(value, bool):
            return "1" if value else "0"
        if isinstance(value, (int, str)):
            return str(value)
        raise _invalid(f"option {name} takes text, a whole number or a "
                       f"bool, not {value!r:.60}")

    def _set_named(self, h: int, name: str, kind: type, value: Any) -> int:
        setter = getattr(lib, "ramferry_options_set_" + name)
        # ramferry_options_set_<name>(options, value...) -> ramferry_status.
        set_to: Callable[..., int] = setter
        if kind is bool:
            if not isinstance(value, int) or value not in (0, 1):
                raise _invalid(f"{name} is True or False, not {value!r:.60}")
            return set_to(h, 1 if value else 0)
        if kind is int:
            # The option's own range is the library's to check (channels:
            # ramferry_options_set_channels refuses 0 or 1000 with its
            # message). Only what the setter's C parameter cannot carry is
            # refused here: ctypes would wrap it (port -1 or 70000 into a
            # uint16_t port 65535 or 4464) and the library never see it.
            high = (1 << 8 * ctypes.sizeof(setter.argtypes[1])) - 1
            if not 0 <= whole(name, value) <= high:
                raise _invalid(f"{name} {value} does not fit the library's "
                               f"setter (ramferry_options_set_{name} takes "
                               f"0 to {high})")
            return set_to(h, value)
        if kind is bytes:
            key = self._key(value)
            return set_to(h, key, len(key))
        return set_to(h, text(name, value))

    @classmethod
    def _key(cls, value: Any) -> bytes:
        # bytes(32) is 32 zero bytes: an int, or anything else bytes()
        # takes, must not become a key by accident.
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise _invalid(
                f"key is {cls.KEY_BYTES} bytes (bytes, bytearray or "
                f"memoryview), not {type(value).__name__}: make one with "
                f"os.urandom({cls.KEY_BYTES}), or name a key file with "
                "key_file=")
        key = bytes(value)
        if len(key) != cls.KEY_BYTES:
            raise _invalid(
                f"key is {len(key)} bytes; give exactly {cls.KEY_BYTES} "
                f"(os.urandom({cls.KEY_BYTES})), or a key file of another "
                "length (16 to 1024 bytes) with key_file=")
        if not any(key):
            raise _invalid(f"key is {cls.KEY_BYTES} zero bytes, which anyone "
                           f"can guess: use os.urandom({cls.KEY_BYTES})")
        return key


class Regions(Handle):
    """The memory a session moves (ramferry_regions): each region an id
    both ends agree on and a writable buffer, which the Regions holds (and
    so keeps from moving) until closed. A Sender or Receiver made from it
    holds the buffers too, until it is closed: closing the Regions first
    is safe."""

    _prefix = "regions"

    def __init__(self) -> None:
        self._h = lib.ramferry_regions_new()
        if not self._h:
            raise MemoryError("ramferry_regions_new")
        # buffer exports and tickets, in the order added
        self._keep: List[Any] = []
        self._pages: List[int] = []  # per region, in the order added
        self._spans: List[Tuple[int, int, int]] = []  # (first, end, id)
        self._ids: List[int] = []

    @property
    def pages(self) -> Tuple[int, ...]:
        """The page count of each region, in the order added (a tuple)."""
        return tuple(self._pages)

    @property
    def ids(self) -> Tuple[int, ...]:
        """The id of each region, in the order added (a tuple)."""
        return tuple(self._ids)

    def add(self, region_id: int, buffer: WritableBuffer,
            page_size: int = PAGE_SIZE) -> Regions:
        """Appends region `region_id` over `buffer` (writable, contiguous,
        starting on a 4 KiB page); returns self."""
        whole("region_id", region_id, 0, 2**32 - 1)
        whole("page_size", page_size, 1, 2**32 - 1)
        with self._use() as h:
            array, address, length = c_view(buffer)
            if address % PAGE_SIZE:
                # A bytearray's memory comes from malloc: rarely aligned.
                raise _invalid(
                    f"region {region_id}'s buffer starts at {address:#x}, not "
                    f"on a {PAGE_SIZE}-byte page boundary: allocate it with "
                    "ramferry.page_aligned(n) (an mmap; wrap it in a numpy "
                    "array or a memoryview as needed)")
            self._add(h, region_id, address, length, page_size, array)
        return self

    def add_mapped(self, region_id: int, address: int, length: int,
                   page_size: int = PAGE_SIZE) -> Regions:
        """A region of memory this process maps but Python does not own.
        Memory an Attach maps (the addresses of Attach.regions()): a
        Sender or Receiver made from these regions keeps that Attach from
        closing while it lives, and none can be made once it closed. Any
        other address must be mapped now, and the caller keeps it mapped
        for as long as a session uses it."""
        whole("region_id", region_id, 0, 2**32 - 1)
        whole("address", address, 1, 2**64 - 1)
        whole("length", length, 1, 2**64 - 1 - address)
        whole("page_size", page_size, 1, 2**32 - 1)
        with self._use() as h:
            ticket = _ticket_on(address, length)
            self._add(h, region_id, int(address), length, page_size, ticket)
        return self

    def _add(self, h: int, region_id: int, address: int, length: int,
             page_size: int, keep: Any) -> None:
        end = address + length
        for lo, hi, other in self._spans:
            if address < hi and lo < end:
                raise _invalid(
                    f"region {region_id}'s memory [{address:#x}, {end:#x}) "
                    f"overlaps region {other}'s [{lo:#x}, {hi:#x}): a byte "
                    "may belong to one region only")
        self._check(lib.ramferry_regions_add(h, region_id, address, length,
                                             page_size), h)
        if keep is not None:
            self._keep.append(keep)
        self._pages.append(length // page_size)
        self._spans.append((address, end, region_id))
        self._ids.append(region_id)

    def set_file(self, region_id: int, fd: int, offset: int = 0) -> Regions:
        """The file region `region_id` maps shared (a memfd, a tmpfs file),
        so long runs of its pages move through it."""
        whole("region_id", region_id, 0, 2**32 - 1)
        whole("fd", fd, -1, 2**31 - 1)
        whole("offset", offset)
        with self._use() as h:
            self._check(lib.ramferry_regions_set_file(h, region_id, fd,
                                                      offset), h)
        return self

    def __len__(self) -> int:
        with self._use(exclusive=False) as h:
            count: int = lib.ramferry_regions_count(h)  # size_t
            return count

    def bitmaps(self, all_dirty: bool = False) -> List[Bitmap]:
        """One Bitmap per region, every page marked when `all_dirty`."""
        maps = [Bitmap(p) for p in self._pages]
        if all_dirty:
            for b in maps:
                b.mark_all()
        return maps

    def _snapshot(self) -> Tuple[List[Any], Tuple[int, ...]]:
        """For a session made from these regions: (what keeps their memory
        while it lives, their page counts), as they are now. Refuses where
        the handle that mapped a region's memory is closed."""
        return [k.lease() if isinstance(k, _Ticket) else k
                for k in self._keep], tuple(self._pages)


class Bitmap:
    """A region's dirty pages: one bit per page, in words a round reads and
    clears in place. mark() is atomic, so a writer thread may mark while a
    round runs."""

    MAX_PAGES = 1 << 40

    def __init__(self, pages: int) -> None:
        whole("pages", pages, 1, self.MAX_PAGES)
        self._pages = pages
        words: int = lib.ramferry_bitmap_words(pages)  # size_t
        self._words = (u64 * words)()
        self._ptr = ctypes.cast(self._words, WORDS)

    @property
    def pages(self) -> int:
        return self._pages

    @property
    def words(self) -> ctypes.Array[Any]:
        """The words (a ctypes array of uint64): page p is bit p % 64 of
        word p // 64. Read them; mark through mark()."""
        return self._words

    def _check(self, first: int, count: int = 1) -> None:
        whole("page", first)
        whole("count", count)
        if first + count > self._pages:
            raise _invalid(f"pages [{first}, {first + count}) are outside "
                           f"the region's {self._pages}")

    def mark(self, page: int) -> None:
        self._check(page)
        lib.ramferry_bitmap_mark(self._ptr, page)

    def mark_range(self, first: int, count: int) -> None:
        self._check(first, count)
        lib.ramferry_bitmap_mark_range(self._ptr, first, count)

    def mark_all(self) -> None:
        lib.ramferry_bitmap_mark_range(self._ptr, 0, self._pages)

    def count(self) -> int:
        return sum(bin(w).count("1") for w in self._words)


def word_arrays(bitmaps: Iterable[Bitmap], pages: Sequence[int], what: str
                ) -> Tuple[Any, int, List[Any]]:
    """The C view of `bitmaps` for a call that reads (and may clear) them
    in place: (array of word pointers, count, the word arrays to keep
    alive). Refuses anything but one Bitmap per region, in order, each of
    its region's page count: the library reads and writes as many words as
    the region has pages."""
    if isinstance(bitmaps, (str, bytes, Bitmap)) or not hasattr(
            bitmaps, "__iter__"):
        raise _invalid(f"{what} takes a list of Bitmaps (one per region), "
                       f"not {type(bitmaps).__name__}")
    bitmaps = list(bitmaps)
    if len(bitmaps) != len(pages):
        raise _invalid(f"{what}: {len(bitmaps)} bitmaps for {len(pages)} "
                       "regions: give one per region, in the order the "
                       "regions were added (Regions.bitmaps() makes them)")
    for i, (b, p) in enumerate(zip(bitmaps, pages)):
        if not isinstance(b, Bitmap):
            raise _invalid(f"{what}: bitmap {i} is a "
                           f"{type(b).__name__}, not a ramferry.Bitmap")
        if b.pages != p:
            raise _invalid(f"{what}: bitmap {i} has {b.pages} pages, and "
                           f"region {i} has {p}: a bitmap is made for its "
                           "region (Regions.bitmaps(), or Bitmap(pages))")
    words = [b._words for b in bitmaps]
    return (WORDS * len(words))(*[ctypes.cast(w, WORDS) for w in words]), \
        len(words), words
