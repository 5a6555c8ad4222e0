"""Per-batch metrics: what the coordinator did for one micro-batch, and how long it took."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

__all__ = ["BatchMetrics", "BatchStatus", "TaskMetrics"]


class BatchStatus(StrEnum):
    """What happened to a micro-batch (compares equal to its string value)."""

    COMMITTED = "committed"
    SKIPPED = "skipped"
    """Already committed: a replay, nothing written."""
    FAILED = "failed"


@dataclass(frozen=True)
class TaskMetrics:
    """Phase-1 figures of one partition, reported by its task."""

    partition: int
    attempt: int
    rows: int
    bytes: int
    seconds: float


@dataclass(frozen=True)
class BatchMetrics:
    """What happened to one micro-batch. Logged as one line and handed to the caller.

    ``status`` is a :class:`BatchStatus`: ``committed``, ``skipped`` (already committed: a
    replay) or ``failed``.
    Times are wall-clock seconds per phase; ``commit_retries`` counts the commit calls
    retried since the previous batch's metrics (this batch's phase 2 and recovery, also of
    commits that gave up: a failed batch carries them).
    ``recovered_aborted`` counts every unit of work recovery and clean-up aborted;
    ``lingering_aborted`` is the part of it that were transactions earlier runs left open
    (the lingering sweep of sinks that commit in the task). ``commit_log_batches`` is how
    many batches of the query the commit log holds after this one (its retention bounds it).
    """

    sink_id: str
    query_id: str
    batch_id: int
    status: BatchStatus
    backend: str = ""
    """The sink's backend name (``files``, ``kafka``, ...)."""
    partitions: int = 0
    rows: int = 0
    bytes: int = 0
    recover_seconds: float = 0.0
    write_seconds: float = 0.0
    decide_seconds: float = 0.0
    commit_seconds: float = 0.0
    total_seconds: float = 0.0
    commit_retries: int = 0
    recovered_committed: int = 0
    recovered_aborted: int = 0
    swept: int = 0
    lingering_aborted: int = 0
    commit_log_batches: int = 0
    open_work_seconds: float = 0.0
    """How old the batch's oldest transaction was when its commit started (the driver's
    phase 2, or a task's own commit)."""
    near_timeout: int = 0
    """Partitions whose transaction was past 80 % of the sink's
    :meth:`~twopc.Sink.work_timeout` before its commit (each also logged a warning)."""
    in_doubt: int = 0
    """Units of work in doubt when the batch ended: decided but not finished, or prepared
    with no decision. 0 after a committed batch; a commit or recovery that keeps failing
    leaves them (``in_doubt_since`` says since when)."""
    in_doubt_since: float | None = None
    """Unix time of the oldest in-doubt work's decision, or of when the writer first saw
    it; ``None`` when nothing is in doubt."""
    other_writers: int = 0
    """Running writers of another query of this sink id met at this query's first batch:
    the batch was refused (or, for one in this very process, a warning logged)."""
    finished_at: float = 0.0
    """Unix time the batch ended (committed, skipped or failed)."""
    error: str | None = None
    tasks: tuple[TaskMetrics, ...] = field(default=(), repr=False)
    source_offsets: dict[str, dict[str, int]] | None = None
    """The source offsets the batch ended at (topic → partition → next offset), for a query
    that reports its progress (:class:`~twopc.ProgressReporter`, e.g. a Kafka consumer
    group)."""
    source_lag: int | None = None
    """The group's lag on the source after the batch (records), when it could be read."""
    progress_error: str | None = None
    """Why publishing the source offsets failed (the batch itself is committed)."""
    write_id: str | None = None
    """The idempotency key of a batch write (``twopc.write_batch``); ``None`` for a
    streaming query's batch. A batch write's ``query_id`` is derived from it, so it is new
    for every key: metrics label batch writes by this field's presence, not by query id."""

    def to_dict(self) -> dict[str, Any]:
        body = asdict(self)
        body["status"] = str(self.status)
        return body

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    def summary(self) -> str:
        """One log line: the figures an operator looks at first."""
        text = (
            f"twopc sink={self.sink_id} batch={self.batch_id} status={self.status} "
            f"partitions={self.partitions} rows={self.rows} bytes={self.bytes} "
            f"recover={self.recover_seconds:.3f}s write={self.write_seconds:.3f}s "
            f"decide={self.decide_seconds:.3f}s commit={self.commit_seconds:.3f}s "
            f"total={self.total_seconds:.3f}s retries={self.commit_retries}"
        )
        if self.recovered_committed or self.recovered_aborted or self.swept:
            text += (
                f" recovered_committed={self.recovered_committed}"
                f" recovered_aborted={self.recovered_aborted} swept={self.swept}"
            )
        if self.lingering_aborted:
            text += f" lingering_aborted={self.lingering_aborted}"
        if self.commit_log_batches:
            text += f" commit_log_batches={self.commit_log_batches}"
        if self.near_timeout:
            text += f" open_work={self.open_work_seconds:.1f}s near_timeout={self.near_timeout}"
        if self.in_doubt:
            text += f" in_doubt={self.in_doubt}"
        if self.other_writers:
            text += f" other_writers={self.other_writers}"
        if self.source_lag is not None:
            text += f" source_lag={self.source_lag}"
        if self.progress_error:
            text += f" progress_error={self.progress_error!r}"
        if self.error:
            text += f" error={self.error!r}"
        return text
