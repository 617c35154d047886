"""The ramferry Python package against the real library: a two-process
migration of a buffer a thread keeps writing, the attach path (a Python
workload exports its memory, is migrated while it writes, and the memory
is handed to a Python adopter), and the errors every bad argument gets.

Run by ctest (tests/python/run.sh), which points RAMFERRY_LIBRARY at the
built libramferry.so and PYTHONPATH at python/."""

import dataclasses
import ctypes
import hashlib
import inspect
import json
import pickle
import os
import random
import subprocess
import sys
import threading
import time

import pytest

import ramferry

HERE = os.path.dirname(os.path.abspath(__file__))
MiB = 1 << 20


def peer(*args):
    return subprocess.Popen([sys.executable, os.path.join(HERE, "peer.py"),
                             *map(str, args)],
                            stdout=subprocess.PIPE, text=True)


def receiver_process(size, key=None):
    p = peer("receive", size, *([key.hex()] if key else []))
    port = int(p.stdout.readline())
    return p, port


def finish_peer(p):
    out, _ = p.communicate(timeout=60)
    return json.loads(out.strip().splitlines()[-1])


def options(port, key=None, **more):
    o = ramferry.Options(host="127.0.0.1", port=port, **more)
    if key:
        o.set("key", key)
    else:
        o.set("insecure", True)
    return o


def test_two_process_migration_of_a_live_written_buffer():
    size, dirty_pages = 64 * MiB, 1024
    key = os.urandom(32)
    mem = ramferry.page_aligned(size)
    mem[:] = os.urandom(size)
    child, port = receiver_process(size, key)
    regions = ramferry.Regions().add(1, mem)
    progress = []
    with options(port, key, channels=4) as o, ramferry.Sender(o, regions) as s:
        s.set_progress(progress.append)
        dirty = regions.bitmaps(all_dirty=True)
        stop = threading.Event()
        writes = [0]

        def writer():
            rng = random.Random(1)
            while not stop.is_set():
                page = rng.randrange(dirty_pages)
                at = page * ramferry.PAGE_SIZE + rng.randrange(4088)
                mem[at:at + 8] = rng.randbytes(8)
                dirty[0].mark(page)  # after the store, as the C API asks
                writes[0] += 1

        t = threading.Thread(target=writer)
        t.start()
        rounds = [s.send_round(dirty)]
        while len(rounds) < 4:
            time.sleep(0.05)
            rounds.append(s.send_round(dirty))
        stop.set()
        t.join()
        rounds.append(s.send_round(dirty))  # the final round, nothing writes
        report = s.verify()
        s.finish()
        stats = s.stats()
    result = finish_peer(child)
    assert writes[0] > 0 and rounds[0].pages == size // ramferry.PAGE_SIZE
    assert all(r.pages <= dirty_pages for r in rounds[1:])
    assert report.pages_mismatched == 0 and report.first_mismatch is None
    assert report.pages_checked == size // ramferry.PAGE_SIZE
    assert result["ok"], result["error"]
    assert result["sha256"] == hashlib.sha256(mem).hexdigest()
    assert result["rounds"] == len(rounds) == stats.rounds
    assert stats.channels == 4
    assert sum(p.round_done for p in progress) == len(rounds)
    # Typed results, which still answer to the keys of the dicts they
    # replaced (for one release).
    for value, cls, keys in (
            (rounds[0], ramferry.RoundResult,
             ["round", "pages", "bytes", "seconds"]),
            (report, ramferry.VerifyReport,
             ["pages_checked", "pages_mismatched", "first_mismatch"]),
            (progress[0], ramferry.Progress,
             ["round_done", "rounds", "pages", "payload_bytes",
              "header_bytes"]),
            (stats, ramferry.Stats, STATS_KEYS)):
        assert type(value) is cls and dataclasses.is_dataclass(value)
        assert value.keys() == keys and list(value) == keys
        assert all(value[k] == getattr(value, k) for k in keys)
        assert dict(value) == value.as_dict() == dict(value.items())
        assert value.get(keys[0]) == value[keys[0]]
        assert value.get("nope", 7) == 7 and "nope" not in value
        with pytest.raises(KeyError):
            value["nope"]
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(value, keys[0], 1)
    assert rounds[0]["pages"] == size // ramferry.PAGE_SIZE
    assert stats["rounds"] == len(rounds) and report["pages_mismatched"] == 0
    assert json.loads(json.dumps(stats.as_dict()))["channels"] == 4


# What stats() returned as a dict before it was ramferry.Stats: the fields
# of ramferry_stats, less `size`.
STATS_KEYS = [
    "channels", "rounds", "packets", "pages", "payload_bytes",
    "header_bytes", "zero_pages", "untouched_pages", "compressed_packets",
    "compressed_input_bytes", "compressed_output_bytes",
    "connections_refused", "auth_failures", "channels_lost", "resent_pages",
    "postcopy_started", "postcopy_urgent_channel", "postcopy_missing_pages",
    "postcopy_requested_pages", "postcopy_urgent_pages",
    "postcopy_pushed_pages", "postcopy_duplicate_pages", "postcopy_faults",
    "postcopy_latency_p50_us", "postcopy_latency_p99_us",
    "postcopy_latency_max_us", "postcopy_blocked_us", "postcopy_switch_ns",
    "postcopy_duration_ns", "postcopy_resumes"]


def test_stats_has_every_field_of_the_c_struct():
    c_fields = [name for name, _ in ramferry._lib.CStats._fields_]
    assert c_fields == ["size"] + STATS_KEYS
    assert ramferry.Stats(*range(len(STATS_KEYS))).keys() == STATS_KEYS


def test_numpy_arrays_are_regions():
    np = pytest.importorskip("numpy")
    size = 16 * MiB
    child, port = receiver_process(size)
    buf = ramferry.page_aligned(size)
    array = np.frombuffer(buf, dtype=np.float64)
    array[:] = np.arange(array.size, dtype=np.float64)
    with options(port) as o, ramferry.Regions().add(1, array) as regions, \
            ramferry.Sender(o, regions) as s:
        s.send_round(regions.bitmaps(all_dirty=True))
        s.verify()
        s.finish()
    assert finish_peer(child)["sha256"] == hashlib.sha256(buf).hexdigest()
    with pytest.raises(ramferry.RamferryError, match="contiguous"):
        ramferry.Regions().add(2, array[::2])


def test_the_attach_path(tmp_path):
    """A Python workload exports a memfd and keeps writing it; this process
    attaches, migrates it into a memfd while it runs, pauses it for the
    last round, and hands the result to a Python adopter."""
    size = 32 * MiB
    export_sock, adopt_sock = str(tmp_path / "export"), str(tmp_path / "adopt")
    workload = peer("export", export_sock, size)
    assert workload.stdout.readline().strip() == "exported"
    adopter = peer("adopt", adopt_sock)
    assert adopter.stdout.readline().strip() == "waiting"

    fd = os.memfd_create("destination")
    os.ftruncate(fd, size)
    import mmap
    dest = mmap.mmap(fd, size, flags=mmap.MAP_SHARED)
    rx_regions = ramferry.Regions().add(1, dest)
    rx = ramferry.Receiver(options(0), rx_regions)
    served = []
    server = threading.Thread(target=lambda: served.append(rx.serve()))
    server.start()
    with ramferry.Attach(export_sock) as att:
        [(rid, base, length)] = att.regions()
        assert (rid, length) == (1, size)
        regions = ramferry.Regions().add_mapped(rid, base, length)
        with options(rx.port) as o, ramferry.Sender(o, regions) as s:
            dirty = regions.bitmaps(all_dirty=True)
            att.collect(dirty)  # round 0 sends all: start tracking here
            dirty = regions.bitmaps(all_dirty=True)
            s.send_round(dirty)
            for _ in range(2):
                att.collect(dirty)
                s.send_round(dirty)
            att.pause()
            att.collect(dirty)
            s.send_round(dirty)
            s.verify()
            s.finish()
            # The sender reads the Attach's mapping: it may not go away.
            assert code_of(att.close) == "FAILED_PRECONDITION"
        att.migrated()
    # Closed, the Attach unmapped it: no session may be made from it.
    assert code_of(lambda: ramferry.Sender(options(rx.port), regions)) == \
        "FAILED_PRECONDITION"
    server.join()
    rx.close()
    workload_digest = workload.communicate(timeout=60)[0].strip()
    assert workload.returncode == 0
    assert hashlib.sha256(dest).hexdigest() == workload_digest
    with ramferry.SharedRegions().add(1, dest, fd) as shared:
        ramferry.hand_over_memory(adopt_sock, shared)
    assert adopter.communicate(timeout=60)[0].strip() == workload_digest


def code_of(call):
    """The code of the RamferryError call() raises, checked to be of the
    subclass for its status."""
    with pytest.raises(ramferry.RamferryError) as e:
        call()
    assert e.value.message
    assert isinstance(e.value.status, ramferry.Status)
    assert e.value.code == e.value.status.name
    assert type(e.value) is ERROR_CLASSES[e.value.status]
    return e.value.code


ERROR_CLASSES = {
    ramferry.Status.CANCELLED: ramferry.Cancelled,
    ramferry.Status.UNKNOWN: ramferry.Unknown,
    ramferry.Status.INVALID_ARGUMENT: ramferry.InvalidArgument,
    ramferry.Status.DEADLINE_EXCEEDED: ramferry.DeadlineExceeded,
    ramferry.Status.NOT_FOUND: ramferry.NotFound,
    ramferry.Status.ALREADY_EXISTS: ramferry.AlreadyExists,
    ramferry.Status.PERMISSION_DENIED: ramferry.PermissionDenied,
    ramferry.Status.RESOURCE_EXHAUSTED: ramferry.ResourceExhausted,
    ramferry.Status.FAILED_PRECONDITION: ramferry.FailedPrecondition,
    ramferry.Status.ABORTED: ramferry.Aborted,
    ramferry.Status.OUT_OF_RANGE: ramferry.OutOfRange,
    ramferry.Status.UNIMPLEMENTED: ramferry.Unimplemented,
    ramferry.Status.INTERNAL: ramferry.Internal,
    ramferry.Status.UNAVAILABLE: ramferry.Unavailable,
    ramferry.Status.DATA_LOSS: ramferry.DataLoss,
    ramferry.Status.UNAUTHENTICATED: ramferry.Unauthenticated,
}


def test_each_status_has_its_exception_class():
    lib = ramferry._lib.lib
    lib.ramferry_status_name.restype = ctypes.c_char_p
    lib.ramferry_status_name.argtypes = [ctypes.c_int]
    # Status is the C enum: every value the library names, by that name.
    for n in range(17):
        assert ramferry.Status(n).name == \
            lib.ramferry_status_name(n).decode()
    assert len(ramferry.Status) == 17
    assert lib.ramferry_status_name(17) == b"UNKNOWN"
    assert set(ERROR_CLASSES) == set(ramferry.Status) - {ramferry.Status.OK}
    for status, cls in ERROR_CLASSES.items():
        e = ramferry.RamferryError.of(status, "what and why")
        assert type(e) is cls and cls.status is status
        assert isinstance(e, ramferry.RamferryError)
        assert e.status is status and e.code == status.name
        assert e.message == "what and why"
        assert str(e) == f"{status.name}: what and why"
        assert type(ramferry.RamferryError.of(int(status), "m")) is cls
        assert cls("direct").status is status
        back = pickle.loads(pickle.dumps(e))
        assert type(back) is cls and back.message == e.message
        with pytest.raises(ramferry.RamferryError):
            raise e
        # The deprecated table agrees, for one release.
        assert ramferry.STATUS_NAMES[status] == status.name
    # A value outside the enum: UNKNOWN, and the message keeps the value.
    e = ramferry.RamferryError.of(99, "odd")
    assert type(e) is ramferry.Unknown and "99" in e.message
    # The old constructor still works, and so do .code and .status.
    old = ramferry.RamferryError(3, "m")
    assert old.code == "INVALID_ARGUMENT" and old.status == 3
    # The library's errors arrive as their subclass.
    with pytest.raises(ramferry.InvalidArgument):
        ramferry.Options().set("transport", "warp")
    with pytest.raises(ramferry.NotFound):
        ramferry.Options().set("no_such_option", 1)
    closed = ramferry.Options()
    closed.close()
    with pytest.raises(ramferry.FailedPrecondition):
        closed.set("channels", 2)


def test_an_option_out_of_range_gets_the_librarys_message():
    """Options checks no option's range itself: the library's setter
    refuses, and the error carries its message, the same one
    ramferry_options_set gives."""
    lib = ramferry._lib.lib
    for value in (0, 1000, 2**31):
        with pytest.raises(ramferry.InvalidArgument) as e:
            ramferry.Options(channels=value)
        with ramferry.Options() as o, o._use() as h:
            assert lib.ramferry_options_set(
                h, b"channels", str(value).encode()) == \
                ramferry.Status.INVALID_ARGUMENT
            assert e.value.message == \
                ramferry.decode(lib.ramferry_options_last_error(h))
    # What the C parameter cannot carry is refused before the call (ctypes
    # would wrap it): a port is a uint16_t.
    for value in (-1, 70000):
        assert code_of(lambda: ramferry.Options(port=value)) == \
            "INVALID_ARGUMENT"
    ramferry.Options(port=65535, channels=256).close()


def test_the_package_is_typed():
    """py.typed ships (PEP 561), and every public function and method has
    its type hints."""
    package = os.path.dirname(ramferry.__file__)
    assert os.path.isfile(os.path.join(package, "py.typed"))
    unhinted, checked = [], set()
    for name in ramferry.__all__:
        obj = getattr(ramferry, name)
        if inspect.isclass(obj) and not issubclass(
                obj, (BaseException, tuple, int)):
            members = [(f"{klass.__name__}.{m}", fn)
                       for klass in obj.__mro__
                       if klass.__module__.startswith("ramferry")
                       for m, fn in vars(klass).items()
                       if not m.startswith("_") or m == "__init__"]
        elif inspect.isfunction(obj):
            members = [(name, obj)]
        else:
            continue
        for label, fn in members:
            if isinstance(fn, property):
                fn = fn.fget
            fn = getattr(fn, "__func__", fn)
            if inspect.isfunction(fn) and \
                    "return" not in fn.__annotations__:
                unhinted.append(label)
            checked.add(label)
    assert not unhinted
    assert {"Handle.close", "_End.stats", "Sender.send_round",
            "Result.keys", "hand_over_memory"} <= checked


def test_every_bad_argument_gets_an_error_with_its_cause(tmp_path):
    o = ramferry.Options()
    assert code_of(lambda: o.set("transport", "warp")) == "INVALID_ARGUMENT"
    assert code_of(lambda: o.set("no_such_option", 1)) == "NOT_FOUND"
    assert code_of(lambda: o.set("port", 70000)) == "INVALID_ARGUMENT"
    assert code_of(lambda: o.set("port", "80")) == "INVALID_ARGUMENT"
    assert code_of(lambda: o.set("channels", 0)) == "INVALID_ARGUMENT"
    assert code_of(lambda: o.set("packet_pages", 5000)) == "INVALID_ARGUMENT"
    assert code_of(lambda: o.set("protect", "maybe")) == "INVALID_ARGUMENT"
    assert code_of(lambda: o.set("key", b"short")) == "INVALID_ARGUMENT"
    assert code_of(lambda: o.set("key_file", str(tmp_path / "none"))) in (
        "NOT_FOUND", "INVALID_ARGUMENT", "FAILED_PRECONDITION")
    o.set("packet_pages", 64).set("zero_pages", False)  # and these work

    r = ramferry.Regions()
    assert code_of(lambda: r.add(1, b"read-only bytes")) == "INVALID_ARGUMENT"
    assert code_of(lambda: r.add(1, 42)) == "INVALID_ARGUMENT"
    assert code_of(lambda: ramferry.page_aligned(100)) == "INVALID_ARGUMENT"
    mem = ramferry.page_aligned(4 * MiB)
    assert code_of(lambda: r.add(1, mem, page_size=3000)) == "INVALID_ARGUMENT"
    assert code_of(lambda: r.add(1, memoryview(mem)[1:4097])) == \
        "INVALID_ARGUMENT"  # not aligned
    with pytest.raises(ramferry.RamferryError, match="page_aligned"):
        r.add(1, memoryview(bytearray(3 * 4096))[1:8193])
    r.add(1, mem)
    assert code_of(lambda: r.add(1, ramferry.page_aligned(4096))) == \
        "ALREADY_EXISTS"  # the same id twice
    b = ramferry.Bitmap(10)
    assert code_of(lambda: b.mark(10)) == "INVALID_ARGUMENT"

    # No key and not insecure: refused before anything is sent.
    assert code_of(lambda: ramferry.Receiver(ramferry.Options(), r)) in (
        "INVALID_ARGUMENT", "FAILED_PRECONDITION", "UNAUTHENTICATED")
    # Nothing listens.
    quick = options(1, connect_timeout_ms=200)
    assert code_of(lambda: ramferry.Sender(quick, r)) in (
        "UNAVAILABLE", "DEADLINE_EXCEEDED")


def test_a_session_refused_by_the_destination_says_why():
    child, port = receiver_process(8 * MiB, os.urandom(32))
    r = ramferry.Regions().add(1, ramferry.page_aligned(8 * MiB))
    wrong = options(port, os.urandom(32))
    code = code_of(lambda: ramferry.Sender(wrong, r))
    assert code in ("UNAUTHENTICATED", "PERMISSION_DENIED", "UNAVAILABLE")
    child.kill()
    child.wait()

    child, port = receiver_process(8 * MiB)
    other_size = ramferry.Regions().add(1, ramferry.page_aligned(4 * MiB))
    with pytest.raises(ramferry.RamferryError) as e:
        ramferry.Sender(options(port), other_size)
    assert "region" in e.value.message
    # The destination refuses that source and waits for the right one.
    child.kill()
    child.wait()


def test_abort_ends_a_blocked_serve_and_closed_handles_refuse():
    r = ramferry.Regions().add(1, ramferry.page_aligned(MiB))
    rx = ramferry.Receiver(options(0), r)
    errors = []

    def serve():
        try:
            rx.serve()
        except ramferry.RamferryError as e:
            errors.append(e)

    t = threading.Thread(target=serve)
    t.start()
    time.sleep(0.2)
    rx.abort("test over")
    t.join(timeout=30)
    assert not t.is_alive()
    assert errors and errors[0].code == "CANCELLED"
    assert isinstance(errors[0], ramferry.Cancelled)
    assert "test over" in errors[0].message
    rx.close()
    assert code_of(rx.applied_rounds) == "FAILED_PRECONDITION"
    with ramferry.Options() as o:
        pass
    assert o._h is None


EXAMPLES = os.path.join(HERE, "..", "..", "examples", "python")


def run_example(name, *args):
    return subprocess.run([sys.executable, os.path.join(EXAMPLES, name),
                           *args], capture_output=True, text=True,
                          timeout=300)


def test_the_examples_run():
    out = run_example("migrate_self.py", "--fork", "--size-mib=32")
    assert out.returncode == 0, out.stderr
    assert "0 differ" in out.stdout
    assert "verified and finished" in out.stdout
    out = run_example("migrate_self.py", "--size-mib=16", "--channels=3")
    assert out.returncode == 0, out.stderr
    assert "byte-identical" in out.stdout
    pytest.importorskip("numpy")
    out = run_example("numpy_transfer.py", "--size-mib=32")
    assert out.returncode == 0, out.stderr
    sent = out.stdout.split("parent: sending")[1].split("sha256 ")[1][:16]
    assert f"child: received, sha256 {sent}" in out.stdout


def test_pip_installs_the_package_without_the_network(tmp_path):
    """pip install --no-build-isolation with Debian's setuptools, from a
    copy of python/ (pip builds in the source tree)."""
    import shutil
    if subprocess.run([sys.executable, "-m", "pip", "--version"],
                      capture_output=True).returncode != 0:
        pytest.skip("no pip here (apt-get install python3-pip)")
    src = tmp_path / "python"
    shutil.copytree(os.path.join(HERE, "..", "..", "python"), src,
                    ignore=shutil.ignore_patterns("build", "*.egg-info"))
    site = tmp_path / "site"
    out = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-index",
         "--no-build-isolation", "--no-deps", "--target", str(site),
         str(src)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    check = subprocess.run(
        [sys.executable, "-c", "import ramferry; print(ramferry.__file__, "
         "ramferry.version())"], capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(site)}, timeout=60)
    assert check.returncode == 0, check.stderr
    assert str(site) in check.stdout
    assert (site / "ramferry" / "py.typed").is_file()  # PEP 561


def test_the_commit_hook_may_refuse_the_finish():
    for refuse in (False, True):
        src = ramferry.page_aligned(MiB)
        src[:] = os.urandom(MiB)
        dst = ramferry.page_aligned(MiB)
        rx = ramferry.Receiver(options(0), ramferry.Regions().add(1, dst))
        calls = []
        rx.on_commit(lambda: calls.append(1) or not refuse)
        outcome = []

        def serve():
            try:
                rx.serve()
                outcome.append("ok")
            except ramferry.RamferryError as e:
                outcome.append(e.code)

        t = threading.Thread(target=serve)
        t.start()
        regions = ramferry.Regions().add(1, src)
        with ramferry.Sender(options(rx.port), regions) as tx:
            tx.send_round(regions.bitmaps(all_dirty=True))
            assert tx.commit_outcome() == "pending"
            if refuse:
                with pytest.raises(ramferry.RamferryError):
                    tx.finish()
                # The destination's refusal is definite (audit F4).
                assert tx.commit_outcome() == "not-committed"
            else:
                tx.finish()
                assert tx.commit_outcome() == "committed"
        t.join(timeout=60)
        assert calls == [1]
        assert outcome == (["CANCELLED"] if refuse else ["ok"])
        assert refuse or dst[:] == src[:]
        rx.close()


def serve_in_thread(rx):
    """Runs rx.serve() on a thread: (thread, [outcome])."""
    outcome = []

    def serve():
        try:
            rx.serve()
            outcome.append("ok")
        except ramferry.RamferryError as e:
            outcome.append(e)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    return t, outcome


def test_a_session_holds_its_buffers_after_the_regions_close():
    """Closing the Regions (the end of its with block) while a Receiver
    lives must not let its memory go: the mmap refuses to close, and the
    round lands in the buffer, not in whatever is mapped there next."""
    src = ramferry.page_aligned(MiB)
    src[:] = os.urandom(MiB)
    dst = ramferry.page_aligned(MiB)
    with ramferry.Regions() as rreg:
        rreg.add(1, dst)
        rx = ramferry.Receiver(options(0), rreg)
    with pytest.raises(BufferError):
        dst.close()
    t, outcome = serve_in_thread(rx)
    with ramferry.Regions() as sreg:
        sreg.add(1, src)
        tx = ramferry.Sender(options(rx.port), sreg)
    with pytest.raises(BufferError):
        src.close()
    tx.send_round([_all_dirty(MiB // ramferry.PAGE_SIZE)])
    tx.finish()
    t.join(timeout=30)
    assert outcome == ["ok"]
    assert dst[:] == src[:]
    tx.close()
    rx.close()
    src.close()  # nothing holds them now
    dst.close()


def _all_dirty(pages):
    b = ramferry.Bitmap(pages)
    b.mark_all()
    return b


def test_bitmaps_must_fit_their_regions():
    """The library reads and clears as many words as a region has pages:
    a bitmap of another size, a list of another length or anything but a
    Bitmap is refused before the call."""
    pages = 4 * MiB // ramferry.PAGE_SIZE  # 1024 pages, 16 words
    rx = ramferry.Receiver(options(0), ramferry.Regions().add(
        1, ramferry.page_aligned(4 * MiB)))
    t, outcome = serve_in_thread(rx)
    regions = ramferry.Regions().add(1, ramferry.page_aligned(4 * MiB))
    with ramferry.Sender(options(rx.port), regions) as tx:
        for wrong in ([_all_dirty(1)], [_all_dirty(pages + 64)],
                      [_all_dirty(pages), _all_dirty(pages)], [], [1],
                      None, _all_dirty(pages)):
            assert code_of(lambda: tx.send_round(wrong)) == "INVALID_ARGUMENT"
            assert code_of(lambda: tx.start_postcopy(wrong)) == \
                "INVALID_ARGUMENT"
        assert tx.send_round([_all_dirty(pages)]).pages == pages
        tx.finish()
    t.join(timeout=30)
    assert outcome == ["ok"]
    for bad in (-1, 0, 2**64, "8", 1.5, None):
        assert code_of(lambda: ramferry.Bitmap(bad)) == "INVALID_ARGUMENT"
    with pytest.raises(AttributeError):
        ramferry.Bitmap(8).words = (ramferry._lib.u64 * 1)()


def test_a_key_is_32_bytes_of_bytes():
    for bad in (32, "k" * 32, os.urandom(16), os.urandom(33), bytes(32),
                [1] * 32, None, 3.5):
        assert code_of(lambda: ramferry.Options(key=bad)) == \
            "INVALID_ARGUMENT"
        assert code_of(lambda: ramferry.Options().set("key", bad)) == \
            "INVALID_ARGUMENT"
    for good in (os.urandom(32), bytearray(os.urandom(32)),
                 memoryview(os.urandom(32))):
        ramferry.Options(key=good).close()
    for bad in ("no", 2, None):
        assert code_of(lambda: ramferry.Options(insecure=bad)) == \
            "INVALID_ARGUMENT"


def test_close_from_another_thread_ends_a_blocked_serve():
    rx = ramferry.Receiver(options(0), ramferry.Regions().add(
        1, ramferry.page_aligned(MiB)))
    serving = threading.Event()
    rx.set_progress(lambda _: serving.set(), interval_ms=1)  # serve() runs
    t, outcome = serve_in_thread(rx)
    assert serving.wait(30)
    closer = threading.Thread(target=rx.close, daemon=True)
    closer.start()
    closer.join(timeout=30)
    t.join(timeout=30)
    assert not closer.is_alive() and not t.is_alive()
    assert outcome[0].code == "CANCELLED"
    assert "close()" in outcome[0].message
    assert code_of(rx.serve) == "FAILED_PRECONDITION"


def test_overlapping_regions_and_closed_handles_are_refused_with_a_message():
    mem = ramferry.page_aligned(64 * 1024)
    view = memoryview(mem)
    r = ramferry.Regions().add(1, view[:32 * 1024])
    assert code_of(lambda: r.add(2, view)) == "INVALID_ARGUMENT"
    assert code_of(lambda: r.add(2, view[16 * 1024:48 * 1024])) == \
        "INVALID_ARGUMENT"
    r.add(2, view[32 * 1024:])  # adjacent, not overlapping
    assert r.pages == (8, 8)
    r.close()
    assert code_of(lambda: r.add(3, ramferry.page_aligned(4096))) == \
        "FAILED_PRECONDITION"
    assert code_of(lambda: len(r)) == "FAILED_PRECONDITION"
    o = ramferry.Options()
    o.close()
    assert code_of(lambda: o.set("channels", 2)) == "FAILED_PRECONDITION"
    assert code_of(lambda: ramferry.Receiver(o, ramferry.Regions())) == \
        "FAILED_PRECONDITION"


def test_adopted_views_keep_their_memory_mapped(tmp_path):
    """A view of adopted memory holds its Adopt: returned from a helper
    that drops the Adopt, it still reads; close() refuses while a view
    lives, and works once none does."""
    import gc
    import mmap
    path = str(tmp_path / "adopt")
    fd = os.memfd_create("w")
    os.ftruncate(fd, MiB)
    mm = mmap.mmap(fd, MiB, flags=mmap.MAP_SHARED)
    mm[:5] = b"hello"
    shared = ramferry.SharedRegions().add(1, mm, fd)

    def adopted():
        a = ramferry.Adopt(path)
        t = threading.Thread(target=ramferry.hand_over_memory,
                             args=(path, shared, 5000))
        t.start()
        a.wait(5000)
        t.join()
        return a, [v for _, v, _ in a.regions()]

    views = adopted()[1]
    gc.collect()
    assert bytes(views[0][:5]) == b"hello"
    head = views[0][:5]  # a slice holds it too
    del views
    gc.collect()
    assert bytes(head) == b"hello"
    a, more = adopted()
    assert code_of(a.close) == "FAILED_PRECONDITION"
    del more
    a.close()
