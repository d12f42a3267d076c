"""The ingress write-ahead log (`runtime/_private/ingress_log.py`): what was appended
comes back, across rolls, restarts and crashes that cut a segment's tail."""

from __future__ import annotations

import os
import struct
import threading
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cameo_actors.runtime._private.executor.source_log import IngressLog


def _path(log: IngressLog, n: int) -> Path:
    return Path(log.folder) / f"seg-{n:010d}.log"


def _chop(path: Path, n_bytes: int) -> None:
    """A crash mid-write: the last `n_bytes` of a segment never reached the disk."""
    with open(path, "r+b") as f:
        f.truncate(max(0, path.stat().st_size - n_bytes))


def test_round_trip_across_rolls(tmp_path: Path) -> None:
    log = IngressLog(str(tmp_path / "a" / "b"))  # parents are created
    assert log.segments() == [1]
    log.append("c1", 0, b"x")
    log.append("c2", 0, b"")
    assert log.roll() == 2
    log.append("c1", 2, b"z" * 70_000)
    log.append("c1", 1, b"y")  # out of order
    log.append("c1", 1, b"y")  # and again (a resend)
    assert log.roll() == 3
    assert log.segments() == [1, 2, 3]
    assert list(log.records()) == [("c1", 0, b"x"), ("c2", 0, b""), ("c1", 2, b"z" * 70_000),
                                   ("c1", 1, b"y"), ("c1", 1, b"y")]
    assert log.records_written == 5
    assert log.bytes_written == sum(p.stat().st_size for p in tmp_path.rglob("seg-*.log"))
    log.close()


def test_a_restarted_log_appends_to_a_new_segment(tmp_path: Path) -> None:
    first = IngressLog(str(tmp_path))
    first.append("c", 0, b"a")
    first.roll()
    first.append("c", 1, b"b")
    # SIGKILLed: never closed. What was flushed is on disk all the same.
    second = IngressLog(str(tmp_path))
    assert second.segments() == [1, 2, 3]
    second.append("c", 2, b"c")
    assert list(second.records()) == [("c", 0, b"a"), ("c", 1, b"b"), ("c", 2, b"c")]
    assert _path(second, 2).read_bytes().endswith(msgpack.packb(["c", 1, b"b"]))
    second.close()


def test_records_while_appending(tmp_path: Path) -> None:
    log = IngressLog(str(tmp_path))
    log.append("c", 0, b"a")
    reader = log.records()
    assert next(reader) == ("c", 0, b"a")
    log.append("c", 1, b"b")  # flushed before the reader gets there
    assert list(reader) == [("c", 1, b"b")]
    log.close()


def _framed(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


_BAD_TAILS = {
    "short length prefix": b"\x00\x00",
    "garbage length prefix": b"\xff\xff\xff\xff" + b"junk" * 10,
    "short body": struct.pack(">I", 100) + b"\x93\xa1c",
    "empty body": _framed(b""),
    "not msgpack": _framed(b"\xc1"),
    "not [str, int, bytes]": _framed(msgpack.packb([1, 2, 3])),
    "a bool for seq": _framed(msgpack.packb(["c", True, b"x"])),
    "a str for blob": _framed(msgpack.packb(["c", 1, "x"])),
    "trailing bytes in a body": _framed(msgpack.packb(["c", 1, b"x"]) + b"\x00"),
}


@pytest.mark.parametrize("tail", _BAD_TAILS.values(), ids=list(_BAD_TAILS))
def test_a_bad_tail_ends_its_segment_only(tmp_path: Path, tail: bytes) -> None:
    log = IngressLog(str(tmp_path))
    log.append("c", 0, b"kept")
    log.close()
    with open(_path(log, 1), "ab") as f:
        f.write(tail)
        f.write(_framed(msgpack.packb(["c", 9, b"lost"])))  # after it: not read
    log = IngressLog(str(tmp_path))
    log.append("c", 1, b"next")
    assert list(log.records()) == [("c", 0, b"kept"), ("c", 1, b"next")]
    log.close()


def test_a_chopped_tail_ends_its_segment_only(tmp_path: Path) -> None:
    log = IngressLog(str(tmp_path))
    for seq in range(3):
        log.append("c", seq, b"%d" % seq * 100)
    log.roll()
    log.append("c", 3, b"later")
    _chop(_path(log, 1), 5)
    assert list(log.records()) == [("c", 0, b"0" * 100), ("c", 1, b"1" * 100), ("c", 3, b"later")]
    log.close()


def test_a_failed_write_moves_to_a_new_segment(tmp_path: Path) -> None:
    log = IngressLog(str(tmp_path))
    log.append("c", 0, b"a")
    real: Any = log._file
    assert real is not None

    class DiskFull:  # writes part of the record, then fails
        def write(self, data: Any) -> int:
            real.write(bytes(data[:7]))
            raise OSError(28, "No space left on device")

        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

    log._file = DiskFull()  # type: ignore[assignment]
    with pytest.raises(OSError, match="No space"):
        log.append("c", 1, b"b")  # not acknowledged: the client sends it again
    log.append("c", 1, b"b")
    assert log.segments() == [1, 2]
    assert list(log.records()) == [("c", 0, b"a"), ("c", 1, b"b")]
    log.close()


def test_retire_deletes_covered_closed_segments_only(tmp_path: Path) -> None:
    log = IngressLog(str(tmp_path))
    log.append("a", 0, b"")
    log.append("b", 0, b"")
    log.roll()  # 1: a<=0, b<=0
    log.append("a", 1, b"")
    log.append("a", 5, b"")
    log.roll()  # 2: a<=5
    log.roll()  # 3: empty
    log.append("a", 0, b"")  # 4: open
    assert log.retire({}) == [3]  # nothing covered but the empty one
    assert log.retire({"a": 5}) == []  # b is at 0: segment 1 keeps its b record
    assert log.retire({"a": 5, "b": 1}) == [1]  # 2 has a record at seq 5 >= 5
    assert log.retire({"a": 6, "b": 1}) == [2]
    assert log.retire({"a": 100, "b": 100}) == []  # never the open segment
    assert log.segments() == [4]
    assert list(log.records()) == [("a", 0, b"")]
    log.close()


def test_retire_scans_an_earlier_instances_segments(tmp_path: Path) -> None:
    dead = IngressLog(str(tmp_path))
    dead.append("a", 3, b"")
    dead.roll()
    dead.append("a", 7, b"")  # left open: the process was killed
    log = IngressLog(str(tmp_path))
    assert log.retire({"a": 4}) == [1]
    assert log.retire({"a": 7}) == []
    assert log.retire({"a": 8}) == [2]
    assert log.segments() == [3]
    # A segment that appeared after this instance started may be a live one's: kept.
    other = IngressLog(str(tmp_path))
    assert log.retire({"a": 100}) == []
    assert log.segments() == [3, 4]
    other.close()
    log.close()


def test_concurrent_appends_all_come_back(tmp_path: Path) -> None:
    log = IngressLog(str(tmp_path))
    start = threading.Barrier(4)

    def push(client: str) -> None:
        start.wait()
        for seq in range(500):
            log.append(client, seq, f"{client}:{seq}".encode() * (seq % 7))
            if client == "t0" and seq % 100 == 99:
                log.roll()

    threads = [threading.Thread(target=push, args=(f"t{i}",)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got = list(log.records())
    assert len(got) == log.records_written == 2000
    for i in range(4):
        mine = [(seq, blob) for client, seq, blob in got if client == f"t{i}"]
        assert mine == [(seq, f"t{i}:{seq}".encode() * (seq % 7)) for seq in range(500)]
    log.close()


def test_closed_and_bad_arguments(tmp_path: Path) -> None:
    log = IngressLog(str(tmp_path))
    with pytest.raises(TypeError, match=r"got \(int, str, bytes\)"):
        log.append(1, "0", b"")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        log.append("c", True, b"")
    log.close()
    with pytest.raises(ValueError, match="is closed"):
        log.append("c", 0, b"")
    with pytest.raises(ValueError, match="is closed"):
        log.roll()
    log.close()  # twice is fine


def test_drop_removes_the_folder(tmp_path: Path) -> None:
    log = IngressLog(str(tmp_path / "log"), fsync=True)
    log.append("c", 0, b"x")
    log.roll()
    log.drop()
    assert not (tmp_path / "log").exists()
    assert log.segments() == []
    assert list(log.records()) == []
    with pytest.raises(ValueError, match="is closed"):
        log.append("c", 1, b"x")


# Operations: ("append", client, blob), ("roll",), ("crash", which segment, bytes lost).
_ops = st.lists(st.one_of(
    st.tuples(st.just("append"), st.sampled_from(["a", "b", "é"]), st.binary(max_size=40)),
    st.tuples(st.just("roll")),
    st.tuples(st.just("crash"), st.integers(0, 10), st.integers(1, 60)),
), max_size=40)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_ops)
def test_records_are_the_appends_minus_what_a_crash_cut(tmp_path_factory: Any,
                                                        ops: list[tuple[Any, ...]]) -> None:
    folder = str(tmp_path_factory.mktemp("log"))
    log = IngressLog(folder)
    # The model: segment -> [(record, its end offset in the file)], and each file's length.
    model: dict[int, list[tuple[tuple[str, int, bytes], int]]] = {1: []}
    size = {1: 0}
    open_n = 1
    seq = 0
    for op in ops:
        if op[0] == "append":
            record = (op[1], seq, op[2])
            seq += 1
            before = log.bytes_written
            log.append(*record)
            size[open_n] += log.bytes_written - before
            model[open_n].append((record, size[open_n]))
        elif op[0] == "roll":
            open_n = log.roll()
            model[open_n], size[open_n] = [], 0
        else:  # the process dies mid-write; a new one starts on the folder
            log.close()
            victim = sorted(model)[op[1] % len(model)]
            size[victim] = max(0, size[victim] - op[2])
            _chop(_path(log, victim), op[2])
            model[victim] = [(r, end) for r, end in model[victim] if end <= size[victim]]
            log = IngressLog(folder)
            open_n = log.segments()[-1]
            model[open_n], size[open_n] = [], 0
    expected = [r for n in sorted(model) for r, _ in model[n]]
    assert list(log.records()) == expected
    assert sorted(model) == log.segments()
    log.drop()
    assert not os.path.exists(folder)


def test_the_modules_examples() -> None:
    import doctest

    from cameo_actors.runtime._private.executor import source_log as ingress_log

    assert doctest.testmod(ingress_log).failed == 0
