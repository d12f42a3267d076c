"""A testing kit: run any dataflow in-process, without Ray or Spark.

>>> from cameo_actors import Dataflow
>>> from cameo_actors.testing import TestingSource, Watermark, run_local
>>> df = (Dataflow("errors", latency_target_ms=50)
...       .source("logs", schema={"ts": "int", "level": "str"}, event_time="ts")
...       .filter("level == 'ERROR'")
...       .sink("alerts"))
>>> result = run_local(df, {"logs": TestingSource([{"ts": 1, "level": "ERROR"},
...                                                {"ts": 2, "level": "INFO"}, Watermark(10)])})
>>> result["alerts"]
[{'ts': 1, 'level': 'ERROR'}]

`run_local` is also the reference the Ray runtime's results are tested against.
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from cameo_actors.clock import FakeClock
from cameo_actors.dataflow.builder import Dataflow
from cameo_actors.dataflow.functions import FunctionResolver
from cameo_actors.dataflow.spec import DataflowSpec, SinkStep
from cameo_actors.dataflow.validate import topological_order
from cameo_actors.errors import CameoError
from cameo_actors.operators.base import END_OF_STREAM, ErrorRecord, Event, Operator, Output
from cameo_actors.operators.build import build_operator

__all__ = ["FakeClock", "LocalEngine", "LocalResult", "TestingSink", "TestingSource", "Watermark",
           "run_local"]


@dataclass(frozen=True)
class Watermark:
    """A scripted watermark in a TestingSource: no event older than `ts` follows."""

    ts: float


class TestingSource:
    """Scripted input for one source: events (dicts) and Watermark markers, in order.
    Consecutive events are delivered in batches of up to `batch_size`."""

    __test__ = False  # not a pytest test class

    def __init__(self, items: Iterable[Event | Watermark], batch_size: int = 100) -> None:
        if batch_size < 1:
            raise ValueError(f"TestingSource: expected batch_size >= 1, got {batch_size}")
        self.items = list(items)
        self.batch_size = batch_size

    def batches(self) -> Iterable[list[Event] | Watermark]:
        batch: list[Event] = []
        for item in self.items:
            if isinstance(item, Watermark):
                if batch:
                    yield batch
                    batch = []
                yield item
            else:
                batch.append(item)
                if len(batch) == self.batch_size:
                    yield batch
                    batch = []
        if batch:
            yield batch


class TestingSink:
    """Collects a sink's results in a list."""

    __test__ = False

    def __init__(self) -> None:
        self.events: list[Event] = []


@dataclass
class LocalResult:
    sinks: dict[str, list[Event]]
    errors: list[ErrorRecord] = field(default_factory=list)

    def __getitem__(self, sink: str) -> list[Event]:
        return self.sinks[sink]

    def error_counts(self) -> dict[tuple[str, str], int]:
        """{(step, kind): count} of the error output."""
        return dict(Counter((e.step, e.kind) for e in self.errors))


class LocalEngine:
    """Runs one dataflow's operators in-process, messages in FIFO order per edge."""

    def __init__(self, spec: DataflowSpec, resolver: FunctionResolver | None = None) -> None:
        self.spec = spec
        self.operators: dict[str, Operator] = {
            sid: build_operator(spec, spec.step(sid), resolver) for sid in topological_order(spec)}
        self.routes = {s.id: spec.consumers(s.id) for s in spec.steps}
        self.result = LocalResult(sinks={s.id: [] for s in spec.sinks})
        self._work: deque[tuple[str, int, list[Event] | float]] = deque()

    def push(self, source: str, events: list[Event]) -> None:
        self._run(source, 0, events)

    def watermark(self, source: str, ts: float) -> None:
        self._run(source, 0, ts)

    def finish(self) -> LocalResult:
        """End of every input: all windows fire."""
        for src in self.spec.sources:
            self._run(src.id, 0, END_OF_STREAM)
        return self.result

    def _run(self, step_id: str, port: int, payload: list[Event] | float) -> None:
        if step_id not in self.operators:
            raise CameoError(f"no source named {step_id!r} in dataflow {self.spec.name!r}; "
                             f"sources: {[s.id for s in self.spec.sources]}")
        self._work.append((step_id, port, payload))
        while self._work:
            sid, port, payload = self._work.popleft()
            op = self.operators[sid]
            out = op.on_watermark(payload, port) if isinstance(payload, float) else op.on_batch(payload, port)
            self._emit(sid, out)

    def _emit(self, step_id: str, out: Output) -> None:
        self.result.errors.extend(out.errors)
        if out.events:
            if isinstance(self.spec.step(step_id), SinkStep):
                self.result.sinks[step_id].extend(out.events)
            for consumer, port in self.routes[step_id]:
                self._work.append((consumer.id, port, out.events))
        if out.watermark is not None:
            for consumer, port in self.routes[step_id]:
                self._work.append((consumer.id, port, float(out.watermark)))


def run_local(dataflow: Dataflow | DataflowSpec,
              inputs: Mapping[str, TestingSource | Iterable[Event | Watermark]],
              *, sinks: Mapping[str, TestingSink] | None = None,
              resolver: FunctionResolver | None = None) -> LocalResult:
    """Run a dataflow to completion in-process on scripted inputs.

    Sources are fed one after another, in the order of `inputs`; then every
    source ends (END_OF_STREAM), so every window fires.

    Args:
        dataflow: a Dataflow or its spec.
        inputs: source id -> TestingSource (or a plain list of events and Watermarks).
        sinks: optional sink id -> TestingSink to collect into as well.
        resolver: where map/flat_map functions may come from (default: anywhere).
    """
    spec = dataflow.spec if isinstance(dataflow, Dataflow) else dataflow
    engine = LocalEngine(spec, resolver)
    unknown = set(inputs) - {s.id for s in spec.sources}
    if unknown:
        raise CameoError(f"run_local: inputs name no source of {spec.name!r}: {sorted(unknown)}; "
                         f"sources: {[s.id for s in spec.sources]}")
    for source_id, source in inputs.items():
        script = source if isinstance(source, TestingSource) else TestingSource(source)
        for batch in script.batches():
            if isinstance(batch, Watermark):
                engine.watermark(source_id, float(batch.ts))
            else:
                engine.push(source_id, batch)
    result = engine.finish()
    for sink_id, sink in (sinks or {}).items():
        sink.events.extend(result.sinks[sink_id])
    return result
