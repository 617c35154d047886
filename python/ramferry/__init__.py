"""ramferry from Python: ctypes over libramferry.so, no compile step.

    import ramferry
    mem = ramferry.page_aligned(256 << 20)
    with ramferry.Options(host="127.0.0.1", port=7070, key_file="key") as o, \\
         ramferry.Regions().add(1, mem) as regions, \\
         ramferry.Sender(o, regions) as sender:
        dirty = regions.bitmaps(all_dirty=True)
        r = sender.send_round(dirty)    # a RoundResult: r.pages, r.seconds
        # ... mark the pages written since, send again; then:
        sender.verify()
        sender.finish()

Errors raise a subclass of RamferryError, one per ramferry_status
(InvalidArgument, FailedPrecondition, Cancelled, DataLoss, ...), with
.status (a Status), .code (its name, "INVALID_ARGUMENT") and .message.
Results are frozen dataclasses (RoundResult, VerifyReport, Stats,
Progress) that, for one release, may still be indexed like the dicts they
replace (r["pages"]). Regions take any writable contiguous buffer: an
mmap, a bytearray, a numpy array (page-aligned: see page_aligned()). The
C API's documentation is ramferry.h, and man 3 ramferry."""

from ramferry._handoff import (Adopt, AdoptedRegion, Attach, AttachedRegion,
                               Export, ExportEvent, SharedRegions,
                               hand_over_memory)
from ramferry._lib import (STATUS_NAMES, Aborted, AlreadyExists, Cancelled,
                           DataLoss, DeadlineExceeded, FailedPrecondition,
                           Internal, InvalidArgument, NotFound, OutOfRange,
                           PermissionDenied, Progress, RamferryError,
                           ResourceExhausted, RoundResult, Stats, Status,
                           Unauthenticated, Unavailable, Unimplemented,
                           Unknown, VerifyReport, decode, lib)
from ramferry._memory import PAGE_SIZE, Bitmap, Options, Regions, page_aligned
from ramferry._session import Receiver, Sender

__all__ = [
    # handles
    "Adopt", "Attach", "Export", "Options", "Receiver", "Regions", "Sender",
    "SharedRegions",
    # memory
    "Bitmap", "PAGE_SIZE", "hand_over_memory", "page_aligned",
    # results
    "AdoptedRegion", "AttachedRegion", "ExportEvent", "Progress",
    "RoundResult", "Stats", "VerifyReport",
    # errors
    "Aborted", "AlreadyExists", "Cancelled", "DataLoss", "DeadlineExceeded",
    "FailedPrecondition", "Internal", "InvalidArgument", "NotFound",
    "OutOfRange", "PermissionDenied", "RamferryError", "ResourceExhausted",
    "STATUS_NAMES", "Status", "Unauthenticated", "Unavailable",
    "Unimplemented", "Unknown",
    "version",
]


def version() -> str:
    """The library's version, "MAJOR.MINOR.PATCH"."""
    return decode(lib.ramferry_version())
