"""A Kafka fetch client of cameo's own, for the source's reader: the three requests a
reader that keeps its offsets in cameo's checkpoints needs (Metadata v1, ListOffsets v1,
Fetch v4 with read_committed), over plain TCP, one connection per partition leader.

Why not librdkafka here: confluent-kafka hands over each record as a Python object,
which on the reader's thread cost more than the rest of the dataflow's work per event.
Fetched whole, a partition's record batches become one JSON body and then columns in C
(`kafka_batches`). Sources with security settings or other librdkafka options still read
through librdkafka (`kafka_reader.reads_by_fetch`), as does a source whose batches this
client does not decode.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass

_FETCH, _LIST_OFFSETS, _METADATA = 1, 2, 3
_I16, _I32, _I64 = struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")
EARLIEST, LATEST = -2, -1
#: Errors after which the partitions' leaders are asked again (the reader opens anew).
LEADER_MOVED = {3: "UNKNOWN_TOPIC_OR_PARTITION", 5: "LEADER_NOT_AVAILABLE",
                6: "NOT_LEADER_OR_FOLLOWER", 74: "FENCED_LEADER_EPOCH",
                75: "UNKNOWN_LEADER_EPOCH"}
OFFSET_OUT_OF_RANGE = 1


class KafkaProtocolError(Exception):
    """The broker answered with an error code (`code`) for `what`."""

    def __init__(self, what: str, code: int) -> None:
        super().__init__(f"{what}: Kafka error {code} {LEADER_MOVED.get(code, '')}".rstrip())
        self.code = code


def _string(s: str) -> bytes:
    b = s.encode()
    return _I16.pack(len(b)) + b


class _Answer:
    """Reads a response's fields in order."""

    def __init__(self, data: memoryview) -> None:
        self.data, self.at = data, 0

    def _take(self, s: struct.Struct) -> int:
        (v,) = s.unpack_from(self.data, self.at)
        self.at += s.size
        return int(v)

    def i8(self) -> int:
        self.at += 1
        return int(self.data[self.at - 1])

    def i16(self) -> int:
        return self._take(_I16)

    def i32(self) -> int:
        return self._take(_I32)

    def i64(self) -> int:
        return self._take(_I64)

    def string(self) -> str | None:
        n = self.i16()
        if n < 0:
            return None
        self.at += n
        return bytes(self.data[self.at - n:self.at]).decode()

    def blob(self) -> memoryview | None:
        n = self.i32()
        if n < 0:
            return None
        self.at += n
        return self.data[self.at - n:self.at]


class Connection:
    """One TCP connection to a broker; requests answered in order."""

    def __init__(self, host: str, port: int, client_id: str, timeout_s: float) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.header_tail, self.correlation = _string(client_id), 0

    def send(self, api: int, version: int, body: bytes) -> int:
        self.correlation += 1
        head = _I16.pack(api) + _I16.pack(version) + _I32.pack(self.correlation) + self.header_tail
        self.sock.sendall(_I32.pack(len(head) + len(body)) + head + body)
        return self.correlation

    def receive(self, correlation: int) -> _Answer:
        (size,) = _I32.unpack(self._exactly(4))
        data = memoryview(self._exactly(size))
        (got,) = _I32.unpack_from(data, 0)
        if got != correlation:
            raise ConnectionError(f"answer {got} to request {correlation}: out of step")
        answer = _Answer(data)
        answer.at = 4
        return answer

    def call(self, api: int, version: int, body: bytes) -> _Answer:
        return self.receive(self.send(api, version, body))

    def _exactly(self, n: int) -> bytearray:
        buf, got = bytearray(n), 0
        view = memoryview(buf)
        while got < n:
            k = self.sock.recv_into(view[got:])
            if k == 0:
                raise ConnectionError("the broker closed the connection")
            got += k
        return buf

    def close(self) -> None:
        self.sock.close()


@dataclass
class PartitionFetched:
    """One partition of a fetch's answer."""

    topic: str
    partition: int
    error: int
    high: int  # the end a read_committed reader may read to (the last stable offset)
    aborted: list[tuple[int, int]]  # (producer id, first offset), by first offset
    records: memoryview | None


class FetchClient:
    """Fetches the partitions of some topics from their leaders (see the module)."""

    def __init__(self, bootstrap: str, client_id: str, timeout_s: float) -> None:
        self.bootstrap = [b.strip() for b in bootstrap.split(",") if b.strip()]
        self.client_id, self.timeout_s = client_id, timeout_s
        self.brokers: dict[int, tuple[str, int]] = {}
        self.leaders: dict[tuple[str, int], int] = {}
        self.connections: dict[int, Connection] = {}

    def partitions(self, topics: list[str]) -> dict[str, list[int] | str]:
        """Each topic's partitions, or why it has none (its error); the leaders noted."""
        body = _I32.pack(len(topics)) + b"".join(_string(t) for t in topics)
        a = self._any().call(_METADATA, 1, body)
        self.brokers = {}
        for _ in range(a.i32()):
            node, host, port = a.i32(), a.string(), a.i32()
            a.string()  # rack
            self.brokers[node] = (host or "", port)
        a.i32()  # controller
        out: dict[str, list[int] | str] = {}
        for _ in range(a.i32()):
            error, name = a.i16(), a.string() or ""
            a.i8()  # internal
            parts = []
            for _ in range(a.i32()):
                a.i16()  # the partition's error (a leader missing: -1 below)
                p, leader = a.i32(), a.i32()
                for _ in range(2):  # replicas, in-sync replicas
                    n = a.i32()
                    a.at += 4 * n
                parts.append(p)
                self.leaders[(name, p)] = leader
            out[name] = sorted(parts) if error == 0 and parts else f"Kafka error {error}"
        return out

    def offsets(self, parts: list[tuple[str, int]], which: int) -> dict[tuple[str, int], int]:
        """The earliest (`EARLIEST`) or the end (`LATEST`) offset of each partition. The
        end is the one a fetch tells (its last stable offset), which ListOffsets left short
        of the end on Tansu 0.6."""
        if which == LATEST:
            ends = {}
            # (A fetch that may not wait at all was answered empty by Tansu 0.6.)
            for f in self.fetch(self.offsets(parts, EARLIEST), 1, 1, 1):
                if f.error:
                    raise KafkaProtocolError(f"the end of {f.topic}/{f.partition}", f.error)
                ends[(f.topic, f.partition)] = f.high
            if len(ends) < len(parts):
                raise ConnectionError(f"the broker told the end of {sorted(ends)}, not of "
                                      f"every partition of {sorted(parts)}")
            return ends
        out: dict[tuple[str, int], int] = {}
        for leader, mine in self._by_leader(parts).items():
            body = _I32.pack(-1) + self._topics(
                mine, lambda tp: _I32.pack(tp[1]) + _I64.pack(which))
            a = self._connection(leader).call(_LIST_OFFSETS, 1, body)
            for _ in range(a.i32()):
                topic = a.string() or ""
                for _ in range(a.i32()):
                    p, error = a.i32(), a.i16()
                    a.i64()  # timestamp
                    offset = a.i64()
                    if error:
                        raise KafkaProtocolError(f"the offsets of {topic}/{p}", error)
                    out[(topic, p)] = offset
        return out

    def fetch(self, positions: dict[tuple[str, int], int], wait_ms: int, max_bytes: int,
              partition_bytes: int) -> list[PartitionFetched]:
        """Records from each partition's position on, from every leader at once; a leader
        with nothing new holds its answer up to `wait_ms`."""
        sent = []
        for leader, mine in self._by_leader(list(positions)).items():
            body = (_I32.pack(-1) + _I32.pack(wait_ms) + _I32.pack(1) + _I32.pack(max_bytes)
                    + b"\x01"  # read_committed
                    + self._topics(mine, lambda tp: _I32.pack(tp[1]) + _I64.pack(positions[tp])
                                   + _I32.pack(partition_bytes)))
            conn = self._connection(leader)
            sent.append((conn, conn.send(_FETCH, 4, body)))
        out: list[PartitionFetched] = []
        for conn, correlation in sent:
            a = conn.receive(correlation)
            a.i32()  # throttle
            for _ in range(a.i32()):
                topic = a.string() or ""
                for _ in range(a.i32()):
                    p, error, high, stable = a.i32(), a.i16(), a.i64(), a.i64()
                    n, aborted = a.i32(), []
                    for _ in range(max(n, 0)):
                        aborted.append((a.i64(), a.i64()))
                    aborted.sort(key=lambda x: x[1])
                    out.append(PartitionFetched(topic, p, error,
                                                stable if stable >= 0 else high,
                                       aborted, a.blob()))
        return out

    def close(self) -> None:
        for c in self.connections.values():
            c.close()
        self.connections.clear()

    # -- helpers ------------------------------------------------------------------------
    @staticmethod
    def _topics(parts: list[tuple[str, int]], entry: Callable[[tuple[str, int]], bytes]
                ) -> bytes:
        """A request's topics array: each topic, then `entry` of each of its partitions."""
        by_topic: dict[str, list[tuple[str, int]]] = {}
        for tp in parts:
            by_topic.setdefault(tp[0], []).append(tp)
        return _I32.pack(len(by_topic)) + b"".join(
            _string(t) + _I32.pack(len(tps)) + b"".join(entry(tp) for tp in tps)
            for t, tps in by_topic.items())

    def _by_leader(self, parts: list[tuple[str, int]]) -> dict[int, list[tuple[str, int]]]:
        out: dict[int, list[tuple[str, int]]] = {}
        for tp in parts:
            leader = self.leaders.get(tp, -1)
            if leader not in self.brokers:
                raise KafkaProtocolError(f"the leader of {tp[0]}/{tp[1]}", 5)
            out.setdefault(leader, []).append(tp)
        return out

    def _connection(self, node: int) -> Connection:
        conn = self.connections.get(node)
        if conn is None:
            host, port = self.brokers[node]
            conn = self.connections[node] = Connection(host, port, self.client_id, self.timeout_s)
        return conn

    def _any(self) -> Connection:
        """A connection to a bootstrap broker (for metadata)."""
        if self.connections:
            return next(iter(self.connections.values()))
        errors = []
        for address in self.bootstrap:
            host, _, port = address.rpartition(":")
            try:
                conn = Connection(host.strip("[]"), int(port), self.client_id, self.timeout_s)
            except OSError as e:
                errors.append(f"{address}: {e}")
                continue
            self.connections[-1] = conn  # a bootstrap broker, by no node id
            return conn
        raise ConnectionError("no bootstrap broker answered: " + "; ".join(errors))
