"""ramferry from Python: ctypes over libramferry.so, no compile step.

    import ramferry
    mem = ramferry.page_aligned(256 << 20)
    with ramferry.Options(host="127.0.0.1", port=7070, key_file="key") as o, \\
         ramferry.Regions().add(1, mem) as regions, \\
         ramferry.Sender(o, regions) as sender:
        dirty = regions.bitmaps(all_dirty=True)
        sender.send_round(dirty)        # mark pages written since, repeat
        sender.verify()
        sender.finish()

Errors raise RamferryError, with .code ("INVALID_ARGUMENT", ...), .status
(the ramferry_status number) and .message. Regions take any writable
contiguous buffer: an mmap, a bytearray, a numpy array (page-aligned: see
page_aligned()). The C API's documentation is ramferry.h, and man 3
ramferry."""

from ramferry._handoff import (Adopt, Attach, Export, ExportEvent,
                               SharedRegions, hand_over_memory)
from ramferry._lib import STATUS_NAMES, RamferryError, decode, lib
from ramferry._memory import PAGE_SIZE, Bitmap, Options, Regions, page_aligned
from ramferry._session import Receiver, Sender

__all__ = [
    "Adopt", "Attach", "Bitmap", "Export", "ExportEvent", "Options",
    "PAGE_SIZE", "RamferryError", "Receiver", "Regions", "STATUS_NAMES",
    "Sender", "SharedRegions", "hand_over_memory", "page_aligned", "version",
]


def version():
    """The library's version, "MAJOR.MINOR.PATCH"."""
    return decode(lib.ramferry_version())
