"""The answers about a dataflow's checkpoints (`GET /v1/dataflows/{name}/checkpoints`): the
counts, the history with each checkpoint's phases, and the last restore's phases."""

from __future__ import annotations

from pydantic import BaseModel, Field


class CheckpointPhases(BaseModel):
    """Seconds from a checkpoint's first barrier put in (into a source's mailbox) to the
    last of its parts past each phase."""

    barriers_s: float = Field(description="its barrier came, behind the messages before it")
    aligned_s: float = Field(description="every input channel's barrier came")
    packed_s: float = Field(description="its state was packed")
    written_s: float = Field(description="it was written to storage")


class CheckpointRecord(BaseModel):
    id: int
    at: float = Field(description="epoch seconds it completed or was given up")
    ok: bool
    duration_s: float
    bytes: int
    parts: int
    incremental_parts: int = Field(description="parts that build on earlier ones")
    executors: dict[str, int] = Field(description="executor -> bytes of its parts")
    reason: str | None = Field(description="why it did not complete")
    phases: CheckpointPhases | None = Field(
        default=None, description="where its time went (None: not completed, or not known)")



class RestorePhases(BaseModel):
    checkpoint: int
    waited_s: float
    read_s: float
    read_bytes: int
    read_local_bytes: int
    restored_s: float


class Checkpoints(BaseModel):
    name: str
    interval_s: float = Field(description="0: none taken")
    last: int | None
    last_at: float | None
    last_duration_s: float | None
    last_bytes: int
    completed: int
    failed: int
    last_restore: RestorePhases | None
    history: list[CheckpointRecord] = Field(description="the last ones, newest first")
