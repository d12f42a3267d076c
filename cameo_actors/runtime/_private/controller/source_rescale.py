"""A Kafka source given another parallelism, through a checkpoint (`Recovery.rescale`).

A source keeps no state by key, so it cannot move bins live as keyed steps do
(`plans.py`). What a Kafka source instance holds is its partitions' offsets (its
`positions`, one per topic and partition) and, at a checkpoint's cut, the messages it
had taken in and not yet run (its part's in-flight messages). So the dataflow is
checkpointed, then restored from that checkpoint with the source's new instances:

- every new instance gets every old instance's positions (they are per partition, so
  each reads its own share, `every[instance::instances]`, from where the checkpoint
  left it);
- each old instance's in-flight messages are run once, by the new instance of its
  number, or by number modulo the new count for an instance that is gone;
- the steps after the source start each of its channels from the least watermark the
  old ones had (`Activation.restore`): a partition that moved may be behind the
  instance it moved to, and must not find its events late.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

from cameo_actors.dataflow.spec import DataflowSpec, SourceStep
from cameo_actors.dataflow.validate import validate
from cameo_actors.runtime._private.executor_api import MergedParts
from cameo_actors.runtime._private.placement import Placement
from cameo_actors.runtime.boundary import ActivationId


def kafka_source(spec: DataflowSpec, step: str) -> bool:
    """Whether `step` is a source that reads Kafka (the kind that rescales this way)."""
    s = next((x for x in spec.steps if x.id == step), None)
    return isinstance(s, SourceStep) and s.connector is not None \
        and s.connector.format == "kafka"


def rescaled(spec_dict: dict[str, Any], placement: Placement, step: str, parallelism: int,
             executors: list[int]) -> tuple[dict[str, Any], Placement, MergedParts]:
    """The spec, placement and merge of a restore that gives source `step` `parallelism`
    instances: those numbered below it stay where they are, new ones go to the
    executors of `executors` hosting fewest of the dataflow's instances.

    >>> from cameo_actors import Dataflow
    >>> flow = (Dataflow("d", latency_target_ms=100)
    ...         .source("s", schema={"t": "int"}, parallelism=3,
    ...                 connector={"format": "kafka", "kafka.bootstrap.servers": "b:9092",
    ...                            "subscribe": "t"}).sink("o"))
    >>> old = Placement({ActivationId("d", "s", i): i % 2 for i in range(3)}
    ...                 | {ActivationId("d", "o", 0): 0})
    >>> spec, new, merged = rescaled(flow.spec.to_dict(), old, "s", 2, [0, 1])
    >>> sorted(str(a) for a in new.of_step("s")), merged["d/s/0"]
    (['d/s/0', 'd/s/1'], [('d/s/1', False), ('d/s/2', True)])
    >>> [s["parallelism"] for s in spec["steps"] if s["id"] == "s"]
    [2]
    """
    spec = DataflowSpec.from_dict(spec_dict)
    spec = replace(spec, steps=tuple(replace(s, parallelism=parallelism) if s.id == step
                                     else s for s in spec.steps))
    validate(spec)
    name = spec.name
    old = [a.instance for a in placement.of_step(step)]
    instances = {a: ex for a, ex in placement.instances.items()
                 if a.step != step or a.instance < parallelism}
    load = Counter(ex for ex in instances.values() if ex in executors)
    for i in range(parallelism):
        aid = ActivationId(name, step, i)
        if aid not in instances:
            instances[aid] = ex = min(executors, key=lambda e: (load[e], e))
            load[ex] += 1
    merged: MergedParts = {
        str(ActivationId(name, step, i)): [
            (str(ActivationId(name, step, k)), k >= parallelism and k % parallelism == i)
            for k in old if k != i]
        for i in range(parallelism)}
    return spec.to_dict(), replace(placement, instances=instances), merged
