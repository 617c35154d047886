"""The C library (libramferry.so) through ctypes: where it is found, the
prototypes of the calls the package makes, and the error they raise.

Every call that returns a ramferry_status goes through check(): a status
other than RAMFERRY_OK raises RamferryError with the code and the message
the library gave. ctypes releases the GIL for every call, so a blocking
call (serve, a round) leaves other Python threads running, and abort()
from another thread ends it."""

import collections
import contextlib
import ctypes
import ctypes.util
import os
import threading

_SONAME = "libramferry.so.0"


def _candidates():
    env = os.environ.get("RAMFERRY_LIBRARY")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    # cmake --install: PREFIX/lib/python3/dist-packages/ramferry beside
    # PREFIX/lib/libramferry.so.0; or the library copied into the package.
    yield os.path.join(here, "..", "..", "..", _SONAME)
    yield os.path.join(here, _SONAME)
    found = ctypes.util.find_library("ramferry")
    if found:
        yield found
    yield _SONAME  # the loader's own search path


def _load():
    tried = []
    for path in _candidates():
        if os.sep in path and not os.path.exists(path):
            tried.append(path + " (absent)")
            continue
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path} ({e})")
    raise ImportError(
        "ramferry: libramferry.so not found; install ramferry (cmake "
        "--install), or set RAMFERRY_LIBRARY to the library's path. Tried: "
        + "; ".join(tried))


lib = _load()

STATUS_NAMES = [
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
    "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
    "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED",
]


class RamferryError(Exception):
    """A call into ramferry failed: `status` is the ramferry_status number,
    `code` its name ("INVALID_ARGUMENT", ...), `message` the library's
    explanation."""

    def __init__(self, status, message):
        self.status = status
        self.code = (STATUS_NAMES[status] if 0 <= status < len(STATUS_NAMES)
                     else f"STATUS_{status}")
        self.message = message
        super().__init__(f"{self.code}: {message}")


INVALID_ARGUMENT, FAILED_PRECONDITION = 3, 9


def invalid(message):
    return RamferryError(INVALID_ARGUMENT, message)


# Which handles' callbacks this thread is running (by id): no call may
# be made on those handles from there.
_local = threading.local()
# Guards every handle's count of calls in flight (an RLock: a handle
# collected while it is held may close itself).
_STATE = threading.Condition(threading.RLock())
# ctypes callbacks a library thread may still be running after the free
# that let go of them (an export's handler may free its own export):
# kept for the life of the process.
_RETAINED = []


class Handle:
    """A handle of the C library, freed by close(), at the end of a with
    block, or when collected. Subclasses name their free call in _free.

    Invariants, for every call made through _use():
    - the handle is freed only once no call on it is in flight: close()
      from another thread marks it closing (new calls are refused), ends
      the calls in flight where the handle can (_interrupt: an abort), and
      the last call to return frees it; a session's close() waits for that;
    - what the library uses but Python owns (buffer exports, callbacks,
      leases on mappings) is in _keep, dropped only after the free;
    - an exclusive call excludes the other exclusive calls, and with
      _exclusive_excludes_shared every call (a setter against a session
      being made from the same options, say): a clash is refused at once,
      never waited for;
    - a call from one of the handle's own callbacks is refused (the library
      is inside a call on it)."""

    _free = ""
    _h = None
    _users = 0            # calls in flight
    _driver = None        # the thread of the exclusive call in flight
    _closing = False
    _freed = False
    _keep = ()
    _exclusive_excludes_shared = True
    _wait_on_close = False
    _kind = "handle"

    def _enter(self, exclusive):
        with _STATE:
            if id(self) in getattr(_local, "inside", ()):
                raise RamferryError(FAILED_PRECONDITION, (
                    f"a call on this {self._kind} from its own callback: the "
                    "library is inside a call on it; do it after that call "
                    "returns (from the thread that made it)"))
            if not self._h or self._closing:
                raise RamferryError(FAILED_PRECONDITION,
                                    f"this {self._kind} is closed")
            if exclusive:
                busy = self._driver is not None or (
                    self._exclusive_excludes_shared and self._users > 0)
            else:
                busy = self._exclusive_excludes_shared and \
                    self._driver is not None
            if busy:
                raise RamferryError(FAILED_PRECONDITION, (
                    f"this {self._kind} is in use by a call on another "
                    "thread; one thread drives it (see the package's "
                    "README: threads)"))
            if exclusive:
                self._driver = threading.get_ident()
            self._users += 1
            return self._h

    def _exit(self, exclusive):
        with _STATE:
            self._users -= 1
            if exclusive:
                self._driver = None
            h = None
            if self._users == 0 and self._closing and self._h:
                h, self._h = self._h, None
        if h:
            self._release(h)

    @contextlib.contextmanager
    def _use(self, exclusive=True):
        """`with self._use() as h:` a call on the live handle `h`."""
        h = self._enter(exclusive)
        try:
            yield h
        finally:
            self._exit(exclusive)

    def _release(self, h):
        try:
            getattr(lib, self._free)(h)
        finally:
            with _STATE:
                self._keep = ()
                self._freed = True
                _STATE.notify_all()

    def _refuse_close(self):
        """A reason close() must not free now (memory of the handle still in
        use by Python), or None."""
        return None

    def _interrupt(self):
        """Ends the calls in flight where the handle can (an abort)."""

    def close(self):
        with _STATE:
            if not self._h or self._closing:
                return
            if id(self) in getattr(_local, "inside", ()):
                raise RamferryError(FAILED_PRECONDITION, (
                    f"close() of this {self._kind} from its own callback: the "
                    "library is inside a call on it; close it once that "
                    "call returned"))
            why = self._refuse_close()
            if why:
                raise RamferryError(FAILED_PRECONDITION, why)
            self._closing = True
            if self._users == 0:
                h, self._h = self._h, None
            else:
                h = None
                self._users += 1  # the handle stays while it is interrupted
        if h:
            self._release(h)
            return
        try:
            self._interrupt()
        finally:
            self._exit(False)
        if self._wait_on_close:
            with _STATE:
                _STATE.wait_for(lambda: self._freed, timeout=60)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 (at exit, or a refusal: leak it)
            pass


class in_callback_of:  # noqa: N801 (used as a with statement)
    """Marks the calling thread as running a callback of the handle whose
    id() is `handle_id`."""

    def __init__(self, handle_id):
        self._id = handle_id

    def __enter__(self):
        inside = getattr(_local, "inside", None)
        if inside is None:
            inside = _local.inside = collections.Counter()
        inside[self._id] += 1

    def __exit__(self, *exc):
        _local.inside[self._id] -= 1
        if not _local.inside[self._id]:
            del _local.inside[self._id]


def check(status, handle_error=None):
    """Raises RamferryError unless `status` is OK, with the message the
    failed call left for this thread (read at once), else the handle's
    (`handle_error()`); never an empty one."""
    if status != 0:
        message = decode(lib.ramferry_last_error())
        if not message and handle_error is not None:
            message = decode(handle_error())
        if not message:
            message = "the library gave no message for this failure"
        raise RamferryError(status, message)


def decode(text):
    if text is None:
        return ""
    return text.decode("utf-8", "replace")


def last_error():
    return lib.ramferry_last_error()


def whole(name, value, low=0, high=2**64 - 1):
    """`value` as a whole number in [low, high], or INVALID_ARGUMENT."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(f"{name} is a whole number, not {value!r:.60}")
    if not low <= value <= high:
        raise invalid(f"{name} {value} is out of range ({low} to {high})")
    return value


def text(name, value):
    """`value` (str, or bytes / a path for paths) as NUL-free bytes."""
    if isinstance(value, str):
        data = value.encode()
    elif isinstance(value, (bytes, os.PathLike)):
        data = os.fsencode(value)
    else:
        raise invalid(f"{name} is text, not {value!r:.60}")
    if b"\0" in data:
        raise invalid(f"{name} {value!r:.60} holds a NUL character")
    return data


c_void_p = ctypes.c_void_p
c_char_p = ctypes.c_char_p
u8, u16, u32, u64, i64 = (ctypes.c_uint8, ctypes.c_uint16, ctypes.c_uint32,
                          ctypes.c_uint64, ctypes.c_int64)
c_int, c_size_t = ctypes.c_int, ctypes.c_size_t
P = ctypes.POINTER
status_t = ctypes.c_int


class Stats(ctypes.Structure):
    _fields_ = [("size", u32), ("channels", u32)] + [
        (name, u64) for name in (
            "rounds", "packets", "pages", "payload_bytes", "header_bytes",
            "zero_pages", "untouched_pages", "compressed_packets",
            "compressed_input_bytes", "compressed_output_bytes",
            "connections_refused", "auth_failures", "channels_lost",
            "resent_pages")
    ] + [("postcopy_started", u32), ("postcopy_urgent_channel", u32)] + [
        (name, u64) for name in (
            "postcopy_missing_pages", "postcopy_requested_pages",
            "postcopy_urgent_pages", "postcopy_pushed_pages",
            "postcopy_duplicate_pages", "postcopy_faults",
            "postcopy_latency_p50_us", "postcopy_latency_p99_us",
            "postcopy_latency_max_us", "postcopy_blocked_us",
            "postcopy_switch_ns", "postcopy_duration_ns", "postcopy_resumes")
    ]


class Progress(ctypes.Structure):
    _fields_ = [("size", u32), ("round_done", u32), ("rounds", u64),
                ("pages", u64), ("payload_bytes", u64),
                ("header_bytes", u64)]


class RoundResult(ctypes.Structure):
    _fields_ = [("size", u32), ("round", u64), ("pages", u64),
                ("bytes", u64), ("elapsed_ns", u64)]


class VerifyReport(ctypes.Structure):
    _fields_ = [("size", u32), ("pages_checked", u64),
                ("pages_mismatched", u64), ("first_mismatch_region", u32),
                ("first_mismatch_page", u64)]


PROGRESS_FN = ctypes.CFUNCTYPE(None, P(Progress), c_void_p)
ARMED_FN = ctypes.CFUNCTYPE(None, c_void_p)
COMMIT_FN = ctypes.CFUNCTYPE(c_int, c_void_p)
EXPORT_FN = ctypes.CFUNCTYPE(None, c_void_p, c_int)
WORDS = P(u64)

_PROTOTYPES = {
    "ramferry_version": (c_char_p, []),
    "ramferry_last_error": (c_char_p, []),
    "ramferry_options_new": (c_void_p, []),
    "ramferry_options_free": (None, [c_void_p]),
    "ramferry_options_last_error": (c_char_p, [c_void_p]),
    "ramferry_options_set_host": (status_t, [c_void_p, c_char_p]),
    "ramferry_options_set_port": (status_t, [c_void_p, u16]),
    "ramferry_options_set_transport": (status_t, [c_void_p, c_char_p]),
    "ramferry_options_set_channels": (status_t, [c_void_p, u32]),
    "ramferry_options_set_key_file": (status_t, [c_void_p, c_char_p]),
    "ramferry_options_set_key": (status_t, [c_void_p, c_char_p, c_size_t]),
    "ramferry_options_set_insecure": (status_t, [c_void_p, c_int]),
    "ramferry_options_set_protect": (status_t, [c_void_p, c_char_p]),
    "ramferry_options_set_compression": (status_t, [c_void_p, c_char_p]),
    "ramferry_options_set_verify": (status_t, [c_void_p, c_char_p]),
    "ramferry_options_set_max_bandwidth": (status_t, [c_void_p, u64]),
    "ramferry_options_set_postcopy": (status_t, [c_void_p, c_int]),
    "ramferry_options_set_postcopy_urgent_channel":
        (status_t, [c_void_p, c_int]),
    "ramferry_options_set_postcopy_resume_timeout_ms":
        (status_t, [c_void_p, u64]),
    "ramferry_options_set_connect_timeout_ms": (status_t, [c_void_p, u64]),
    "ramferry_options_set": (status_t, [c_void_p, c_char_p, c_char_p]),
    "ramferry_regions_new": (c_void_p, []),
    "ramferry_regions_free": (None, [c_void_p]),
    "ramferry_regions_last_error": (c_char_p, [c_void_p]),
    "ramferry_regions_add": (status_t, [c_void_p, u32, c_void_p, u64, u32]),
    "ramferry_regions_set_file": (status_t, [c_void_p, u32, c_int, u64]),
    "ramferry_regions_count": (c_size_t, [c_void_p]),
    "ramferry_bitmap_words": (c_size_t, [u64]),
    "ramferry_bitmap_mark": (None, [WORDS, u64]),
    "ramferry_bitmap_mark_range": (None, [WORDS, u64, u64]),
    "ramferry_sender_connect": (status_t, [c_void_p, c_void_p, P(c_void_p)]),
    "ramferry_sender_free": (None, [c_void_p]),
    "ramferry_sender_last_error": (c_char_p, [c_void_p]),
    "ramferry_sender_send_round":
        (status_t, [c_void_p, P(WORDS), c_size_t, P(RoundResult)]),
    "ramferry_sender_verify": (status_t, [c_void_p, P(VerifyReport)]),
    "ramferry_sender_start_verify": (status_t, [c_void_p]),
    "ramferry_sender_finish": (status_t, [c_void_p]),
    "ramferry_sender_commit_outcome": (status_t, [c_void_p, P(u32)]),
    "ramferry_sender_abort": (status_t, [c_void_p, c_char_p]),
    "ramferry_sender_set_max_bandwidth": (status_t, [c_void_p, u64]),
    "ramferry_sender_stats": (status_t, [c_void_p, P(Stats)]),
    "ramferry_sender_channel_counter":
        (status_t, [c_void_p, u32, c_char_p, P(u64)]),
    "ramferry_sender_warning_count": (status_t, [c_void_p, P(c_size_t)]),
    "ramferry_sender_warning": (c_char_p, [c_void_p, c_size_t]),
    "ramferry_sender_set_progress":
        (status_t, [c_void_p, PROGRESS_FN, c_void_p, u32]),
    "ramferry_sender_start_postcopy":
        (status_t, [c_void_p, P(WORDS), c_size_t]),
    "ramferry_sender_complete_postcopy": (status_t, [c_void_p]),
    "ramferry_receiver_listen":
        (status_t, [c_void_p, c_void_p, P(c_void_p)]),
    "ramferry_receiver_free": (None, [c_void_p]),
    "ramferry_receiver_last_error": (c_char_p, [c_void_p]),
    "ramferry_receiver_port": (status_t, [c_void_p, P(u16)]),
    "ramferry_receiver_serve": (status_t, [c_void_p]),
    "ramferry_receiver_abort": (status_t, [c_void_p, c_char_p]),
    "ramferry_receiver_stats": (status_t, [c_void_p, P(Stats)]),
    "ramferry_receiver_channel_counter":
        (status_t, [c_void_p, u32, c_char_p, P(u64)]),
    "ramferry_receiver_applied_rounds": (status_t, [c_void_p, P(u64)]),
    "ramferry_receiver_verified_pages": (status_t, [c_void_p, P(u64)]),
    "ramferry_receiver_set_progress":
        (status_t, [c_void_p, PROGRESS_FN, c_void_p, u32]),
    "ramferry_receiver_on_armed": (status_t, [c_void_p, ARMED_FN, c_void_p]),
    "ramferry_receiver_on_commit":
        (status_t, [c_void_p, COMMIT_FN, c_void_p]),
    "ramferry_shared_regions_new": (c_void_p, []),
    "ramferry_shared_regions_free": (None, [c_void_p]),
    "ramferry_shared_regions_add":
        (status_t, [c_void_p, u32, c_void_p, u64, c_int, u64]),
    "ramferry_export_listen":
        (status_t, [c_char_p, c_void_p, EXPORT_FN, c_void_p, P(c_void_p)]),
    "ramferry_export_free": (None, [c_void_p]),
    "ramferry_export_last_error": (c_char_p, [c_void_p]),
    "ramferry_export_wait_migrated": (status_t, [c_void_p, u64]),
    "ramferry_export_paused_at_ns": (status_t, [c_void_p, P(i64)]),
    "ramferry_attach_open": (status_t, [c_char_p, u64, P(c_void_p)]),
    "ramferry_attach_free": (None, [c_void_p]),
    "ramferry_attach_last_error": (c_char_p, [c_void_p]),
    "ramferry_attach_region_count": (status_t, [c_void_p, P(c_size_t)]),
    "ramferry_attach_region":
        (status_t, [c_void_p, c_size_t, P(u32), P(c_void_p), P(u64)]),
    "ramferry_attach_collect":
        (status_t, [c_void_p, P(WORDS), c_size_t, P(u64)]),
    "ramferry_attach_pause": (status_t, [c_void_p, u64]),
    "ramferry_attach_resume": (status_t, [c_void_p]),
    "ramferry_attach_migrated": (status_t, [c_void_p]),
    "ramferry_hand_over_memory": (status_t, [c_char_p, c_void_p, u64]),
    "ramferry_adopt_listen": (status_t, [c_char_p, P(c_void_p)]),
    "ramferry_adopt_free": (None, [c_void_p]),
    "ramferry_adopt_last_error": (c_char_p, [c_void_p]),
    "ramferry_adopt_wait": (status_t, [c_void_p, u64]),
    "ramferry_adopt_region_count": (status_t, [c_void_p, P(c_size_t)]),
    "ramferry_adopt_region":
        (status_t, [c_void_p, c_size_t, P(u32), P(c_void_p), P(u64), P(c_int)]),
}

for _name, (_res, _args) in _PROTOTYPES.items():
    _fn = getattr(lib, _name)
    _fn.restype = _res
    _fn.argtypes = _args
