"""The C library (libramferry.so) through ctypes: where it is found, the
prototypes of the calls the package makes, the errors they raise (one
RamferryError subclass per ramferry_status) and the typed results they
return.

Every call that returns a ramferry_status goes through check(): a status
other than RAMFERRY_OK raises RamferryError.of(status, message), the
subclass for that status with the message the library gave. ctypes
releases the GIL for every call, so a blocking call (serve, a round)
leaves other Python threads running, and abort() from another thread ends
it."""

from __future__ import annotations

import collections
import contextlib
import ctypes
import ctypes.util
import dataclasses
import enum
import os
import threading
from typing import (Any, Callable, Dict, Iterator, List, Optional, Tuple,
                    Type, TypeVar, Union, cast)

# What a path argument may be (a socket's, a key file's).
StrPath = Union[str, bytes, os.PathLike[str], os.PathLike[bytes]]

_SONAME = "libramferry.so.0"


def _candidates() -> Iterator[str]:
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


def _load() -> ctypes.CDLL:
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


class Status(enum.IntEnum):
    """ramferry_status (include/ramferry/ramferry.h): the values of
    absl::StatusCode."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


# Deprecated (kept for one release): Status(n).name is the name of n.
STATUS_NAMES: List[str] = [s.name for s in Status]


class RamferryError(Exception):
    """A call into ramferry failed. `status` is the Status, `code` its name
    ("INVALID_ARGUMENT", ...), `message` the library's explanation (never
    empty). Each status has a subclass (InvalidArgument, DataLoss, ...);
    RamferryError.of(status, message) makes the one for `status`, and
    `except RamferryError` catches them all."""

    status: Status = Status.UNKNOWN
    message: str
    # Sender.verify() sets it on the error it raises (DataLoss where pages
    # differ).
    report: Optional[VerifyReport] = None

    def __init__(self, status: int, message: str) -> None:
        """RamferryError(status, message): the base class with `status`
        (RamferryError.of picks the subclass)."""
        super().__init__(status, message)
        try:
            self.status = Status(status)
            self.message = message
        except ValueError:
            self.status = Status.UNKNOWN
            self.message = f"{message} (ramferry_status {status})"

    @property
    def code(self) -> str:
        """The status's name: "INVALID_ARGUMENT", ..."""
        return self.status.name

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def __reduce__(self) -> Any:
        return (RamferryError.of, (int(self.status), self.message),
                self.__dict__)

    @staticmethod
    def of(status: int, message: str) -> RamferryError:
        """The subclass of RamferryError for `status` (a Status or its
        number; a number outside the enum is UNKNOWN, and the message says
        which), with `message`."""
        try:
            cls = _ERROR_CLASSES[Status(status)]
        except (ValueError, KeyError):
            return Unknown(f"{message} (ramferry_status {status})")
        return cls(message)


class _StatusError(RamferryError):
    """The subclasses: each fixes its status, and takes the message."""

    def __init__(self, message: str) -> None:
        super().__init__(type(self).status, message)
        self.args = (message,)


class Cancelled(_StatusError):
    """The session was aborted (abort(), close() from another thread, a
    commit refused)."""
    status = Status.CANCELLED


class Unknown(_StatusError):
    status = Status.UNKNOWN


class InvalidArgument(_StatusError):
    """A wrong argument: refused before anything changed."""
    status = Status.INVALID_ARGUMENT


class DeadlineExceeded(_StatusError):
    status = Status.DEADLINE_EXCEEDED


class NotFound(_StatusError):
    status = Status.NOT_FOUND


class AlreadyExists(_StatusError):
    status = Status.ALREADY_EXISTS


class PermissionDenied(_StatusError):
    status = Status.PERMISSION_DENIED


class ResourceExhausted(_StatusError):
    status = Status.RESOURCE_EXHAUSTED


class FailedPrecondition(_StatusError):
    """Not now: a closed handle, a call from the handle's own callback, a
    second driving call while one runs, memory still in use."""
    status = Status.FAILED_PRECONDITION


class Aborted(_StatusError):
    status = Status.ABORTED


class OutOfRange(_StatusError):
    status = Status.OUT_OF_RANGE


class Unimplemented(_StatusError):
    status = Status.UNIMPLEMENTED


class Internal(_StatusError):
    status = Status.INTERNAL


class Unavailable(_StatusError):
    status = Status.UNAVAILABLE


class DataLoss(_StatusError):
    """Pages differ (Sender.verify(): the error's .report says which)."""
    status = Status.DATA_LOSS


class Unauthenticated(_StatusError):
    status = Status.UNAUTHENTICATED


_ERROR_CLASSES: Dict[Status, Type[_StatusError]] = {
    cls.status: cls for cls in _StatusError.__subclasses__()}
assert set(_ERROR_CLASSES) == set(Status) - {Status.OK}, \
    "a status has no RamferryError subclass"


def invalid(message: str) -> RamferryError:
    return RamferryError.of(Status.INVALID_ARGUMENT, message)


def refused(message: str) -> RamferryError:
    """FAILED_PRECONDITION: not now (closed, in use, from a callback)."""
    return RamferryError.of(Status.FAILED_PRECONDITION, message)


# ---- typed results ----

_R = TypeVar("_R", bound="Result")


class Result:
    """What a typed result (a frozen dataclass) offers besides its fields:
    for one release, the dict it replaces (result["pages"], .get, .keys,
    .items, `in`, iteration over the keys, dict(result)). as_dict() gives
    a real dict (for json, say)."""

    def as_dict(self) -> Dict[str, Any]:
        return {name: getattr(self, name) for name in self.keys()}

    def keys(self) -> List[str]:
        return [f.name for f in dataclasses.fields(cast(Any, self))]

    def values(self) -> List[Any]:
        return [getattr(self, name) for name in self.keys()]

    def items(self) -> List[Tuple[str, Any]]:
        return [(name, getattr(self, name)) for name in self.keys()]

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key) if key in self.keys() else default

    def __getitem__(self, key: str) -> Any:
        if not isinstance(key, str) or key not in self.keys():
            raise KeyError(key)
        return getattr(self, key)

    def __contains__(self, key: object) -> bool:
        return key in self.keys()

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def __len__(self) -> int:
        return len(self.keys())

    @classmethod
    def _from_c(cls: type[_R], c: ctypes.Structure) -> _R:
        """From the C struct with the same field names."""
        names = [f.name for f in dataclasses.fields(cast(Any, cls))]
        return cls(**{name: getattr(c, name) for name in names})


@dataclasses.dataclass(frozen=True)
class RoundResult(Result):
    """Sender.send_round(): the round's number, the pages and payload
    bytes it sent, and how long it took (connect to the destination's
    confirmation)."""

    round: int
    pages: int
    bytes: int
    seconds: float


@dataclasses.dataclass(frozen=True)
class VerifyReport(Result):
    """Sender.verify(): the pages compared, how many differ, and the first
    that differs as (region id, page), None if none does."""

    pages_checked: int
    pages_mismatched: int
    first_mismatch: Optional[Tuple[int, int]]


@dataclasses.dataclass(frozen=True)
class Progress(Result):
    """What a set_progress callback gets: the totals so far, and whether a
    round was just confirmed (else: a tick while a call blocks)."""

    round_done: bool
    rounds: int
    pages: int
    payload_bytes: int
    header_bytes: int


@dataclasses.dataclass(frozen=True)
class Stats(Result):
    """stats(): totals over every channel (ramferry_stats, ramferry.h)."""

    channels: int
    rounds: int
    packets: int
    pages: int
    payload_bytes: int
    header_bytes: int
    zero_pages: int
    untouched_pages: int
    compressed_packets: int
    compressed_input_bytes: int
    compressed_output_bytes: int
    connections_refused: int
    auth_failures: int
    channels_lost: int
    resent_pages: int
    postcopy_started: int
    postcopy_urgent_channel: int
    postcopy_missing_pages: int
    postcopy_requested_pages: int
    postcopy_urgent_pages: int
    postcopy_pushed_pages: int
    postcopy_duplicate_pages: int
    postcopy_faults: int
    postcopy_latency_p50_us: int
    postcopy_latency_p99_us: int
    postcopy_latency_max_us: int
    postcopy_blocked_us: int
    postcopy_switch_ns: int
    postcopy_duration_ns: int
    postcopy_resumes: int


# Which handles' callbacks this thread is running (by id): no call may
# be made on those handles from there.
_local = threading.local()
# Guards every handle's count of calls in flight (an RLock: a handle
# collected while it is held may close itself).
_STATE = threading.Condition(threading.RLock())
# ctypes callbacks a library thread may still be running after the free
# that let go of them (an export's handler may free its own export):
# kept for the life of the process.
_RETAINED: List[Any] = []


_H = TypeVar("_H", bound="Handle")


class Handle:
    """A handle of the C library, freed by close(), at the end of a with
    block, or when collected. Subclasses name the C object in _prefix
    ("sender": ramferry_sender_free frees it, ramferry_sender_last_error
    says why a call on it failed); _call() makes a call on it.

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

    _prefix = ""
    _h: Optional[int] = None
    _users = 0            # calls in flight
    _driver: Optional[int] = None  # the thread of the exclusive call
    _closing = False
    _freed = False
    _keep: Any = ()
    _exclusive_excludes_shared = True
    _wait_on_close = False

    @property
    def _kind(self) -> str:
        return type(self).__name__

    def _enter(self, exclusive: bool) -> int:
        with _STATE:
            if id(self) in getattr(_local, "inside", ()):
                raise refused(
                    f"a call on this {self._kind} from its own callback: the "
                    "library is inside a call on it; do it after that call "
                    "returns (from the thread that made it)")
            if not self._h or self._closing:
                raise refused(f"this {self._kind} is closed")
            if exclusive:
                busy = self._driver is not None or (
                    self._exclusive_excludes_shared and self._users > 0)
            else:
                busy = self._exclusive_excludes_shared and \
                    self._driver is not None
            if busy:
                raise refused(
                    f"this {self._kind} is in use by a call on another "
                    "thread; one thread drives it (see the package's "
                    "README: threads)")
            if exclusive:
                self._driver = threading.get_ident()
            self._users += 1
            return self._h

    def _exit(self, exclusive: bool) -> None:
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
    def _use(self, exclusive: bool = True) -> Iterator[int]:
        """`with self._use() as h:` a call on the live handle `h`."""
        h = self._enter(exclusive)
        try:
            yield h
        finally:
            self._exit(exclusive)

    def _check(self, status: int, h: int) -> None:
        """check(status), with this handle's own message as the fallback
        (where the C object keeps one)."""
        name = f"ramferry_{self._prefix}_last_error"
        if name not in _PROTOTYPES:
            check(status)
            return
        # const char* ramferry_<prefix>_last_error(handle): c_char_p.
        last: Callable[[int], Optional[bytes]] = getattr(lib, name)
        check(status, lambda: last(h))

    def _call(self, name: str, *args: Any, exclusive: bool = True) -> None:
        """ramferry_<prefix>_<name>(handle, *args) on the live handle;
        raises its error."""
        fn = getattr(lib, f"ramferry_{self._prefix}_{name}")
        with self._use(exclusive) as h:
            self._check(fn(h, *args), h)

    def _release(self, h: int) -> None:
        try:
            getattr(lib, f"ramferry_{self._prefix}_free")(h)
        finally:
            with _STATE:
                self._keep = ()
                self._freed = True
                _STATE.notify_all()

    def _refuse_close(self) -> Optional[str]:
        """A reason close() must not free now (memory of the handle still in
        use by Python), or None."""
        return None

    def _interrupt(self) -> None:
        """Ends the calls in flight where the handle can (an abort)."""

    def close(self) -> None:
        """Frees the handle (once the calls in flight returned); a second
        close does nothing. Refused (FailedPrecondition) from the handle's
        own callback, or while memory it maps is still in use."""
        with _STATE:
            if not self._h or self._closing:
                return
            if id(self) in getattr(_local, "inside", ()):
                raise refused(
                    f"close() of this {self._kind} from its own callback: the "
                    "library is inside a call on it; close it once that "
                    "call returned")
            why = self._refuse_close()
            if why:
                raise refused(why)
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

    def __enter__(self: _H) -> _H:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 (at exit, or a refusal: leak it)
            pass


class in_callback_of:  # noqa: N801 (used as a with statement)
    """Marks the calling thread as running a callback of the handle whose
    id() is `handle_id`."""

    def __init__(self, handle_id: int) -> None:
        self._id = handle_id

    def __enter__(self) -> None:
        inside = getattr(_local, "inside", None)
        if inside is None:
            inside = _local.inside = collections.Counter()
        inside[self._id] += 1

    def __exit__(self, *exc: object) -> None:
        _local.inside[self._id] -= 1
        if not _local.inside[self._id]:
            del _local.inside[self._id]


def check(status: int,
          handle_error: Optional[Callable[[], Optional[bytes]]] = None
          ) -> None:
    """Raises RamferryError.of(status, message) unless `status` is OK, with
    the message the failed call left for this thread (read at once), else
    the handle's (`handle_error()`); never an empty one."""
    if status != Status.OK:
        message = decode(lib.ramferry_last_error())
        if not message and handle_error is not None:
            message = decode(handle_error())
        if not message:
            message = "the library gave no message for this failure"
        raise RamferryError.of(status, message)


def decode(text: Optional[bytes]) -> str:
    if text is None:
        return ""
    return text.decode("utf-8", "replace")


def last_error() -> Optional[bytes]:
    message: Optional[bytes] = lib.ramferry_last_error()  # c_char_p
    return message


def whole(name: str, value: Any, low: int = 0, high: int = 2**64 - 1) -> int:
    """`value` as a whole number in [low, high], or InvalidArgument."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(f"{name} is a whole number, not {value!r:.60}")
    if not low <= value <= high:
        raise invalid(f"{name} {value} is out of range ({low} to {high})")
    return value


def text(name: str, value: Any) -> bytes:
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
# One name a line: mypy takes a class unpacked from a tuple for a plain
# function, and then `u64 * n` (an array type) for Any.
u8 = ctypes.c_uint8
u16 = ctypes.c_uint16
u32 = ctypes.c_uint32
u64 = ctypes.c_uint64
i64 = ctypes.c_int64
c_int = ctypes.c_int
c_size_t = ctypes.c_size_t
P = ctypes.POINTER
status_t = ctypes.c_int


class CStats(ctypes.Structure):
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


class CProgress(ctypes.Structure):
    _fields_ = [("size", u32), ("round_done", u32), ("rounds", u64),
                ("pages", u64), ("payload_bytes", u64),
                ("header_bytes", u64)]


class CRoundResult(ctypes.Structure):
    _fields_ = [("size", u32), ("round", u64), ("pages", u64),
                ("bytes", u64), ("elapsed_ns", u64)]


class CVerifyReport(ctypes.Structure):
    _fields_ = [("size", u32), ("pages_checked", u64),
                ("pages_mismatched", u64), ("first_mismatch_region", u32),
                ("first_mismatch_page", u64)]


PROGRESS_FN = ctypes.CFUNCTYPE(None, P(CProgress), c_void_p)
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
        (status_t, [c_void_p, P(WORDS), c_size_t, P(CRoundResult)]),
    "ramferry_sender_verify": (status_t, [c_void_p, P(CVerifyReport)]),
    "ramferry_sender_start_verify": (status_t, [c_void_p]),
    "ramferry_sender_finish": (status_t, [c_void_p]),
    "ramferry_sender_commit_outcome": (status_t, [c_void_p, P(u32)]),
    "ramferry_sender_abort": (status_t, [c_void_p, c_char_p]),
    "ramferry_sender_set_max_bandwidth": (status_t, [c_void_p, u64]),
    "ramferry_sender_stats": (status_t, [c_void_p, P(CStats)]),
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
    "ramferry_receiver_stats": (status_t, [c_void_p, P(CStats)]),
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
