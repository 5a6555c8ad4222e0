"""What a sink's crashed runs left, and what recovery would do about it; then doing it.

:func:`sink_status` reads the commit log, the writer's liveness records and the sink's own
read-only :meth:`~twopc.Sink.inspect`, and decides for every item what recovery would do
with exactly the coordinator's rules: commit what a decision names, abort prepared work no
decision names, sweep what never prepared. :func:`recover_sink` runs
:meth:`~twopc.Coordinator.recover` after checking that no writer is running. The
``twopc status`` and ``twopc recover`` commands are thin layers over these two.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from twopc._contract.boundary import describe_exception, leaving_sink
from twopc._coordination.commit_log import CommitLog
from twopc._coordination.liveness import DEFAULT_STALE_AFTER, Heartbeat
from twopc._coordination.records import Decision
from twopc._coordination.steps import QUIET, Steps, counted, counter
from twopc._operations.status_items import Action, ItemKind, StatusItem, status_items
from twopc.progress import GroupProgress, ProgressReporter, SourceOffsets
from twopc.protocol import (
    Inspection,
    Sink,
    TargetMarker,
)

__all__ = [
    "Action",
    "ItemKind",
    "QueryStatus",
    "SinkStatus",
    "StatusItem",
    "WriterStatus",
    "sink_status",
]


_log = logging.getLogger("twopc.recover")

ProgressResolver = Callable[[Mapping[str, Any]], ProgressReporter]
"""Builds the reporter of a group from its recorded description (the ``to`` of a decision's
progress: no secrets; the caller adds credentials)."""


@dataclass(frozen=True)
class QueryStatus:
    """Last committed batch of one streaming query, per the commit log and per the target.

    ``target_partitions`` maps partition -> newest batch with a marker; it is ``None`` when
    the sink keeps no markers. ``differs`` says the two records disagree (e.g. tasks
    committed a batch whose decision was never written, or the log lags the target).
    """

    query_id: str
    log_last_committed: int | None
    target_last_committed: int | None
    target_partitions: dict[int, int] | None
    pending_decisions: tuple[int, ...] = ()
    source: SourceOffsets | None = None
    """The source offsets the last committed batch ended at (queries that report progress)."""
    progress_to: dict[str, Any] | None = None
    """Where those offsets are published (the progress reporter's ``describe()``, as the
    decision recorded it)."""
    group: GroupProgress | None = None
    """The group's offsets and lag now, when the group could be asked."""
    group_error: str | None = None

    @property
    def differs(self) -> bool:
        return (
            self.target_partitions is not None
            and self.log_last_committed != self.target_last_committed
        )


@dataclass(frozen=True)
class WriterStatus:
    """A liveness record and what it means."""

    heartbeat: Heartbeat
    running: bool
    reason: str


@dataclass(frozen=True)
class SinkStatus:
    """Everything ``twopc status`` shows for one sink id."""

    sink_id: str
    backend: str
    sink: str
    commit_log: str
    queries: tuple[QueryStatus, ...]
    items: tuple[StatusItem, ...]
    writers: tuple[WriterStatus, ...]
    notes: tuple[str, ...] = ()
    checked_at: float = field(default_factory=time.time)
    log_found: bool = True
    """Whether the commit log holds any query's records; ``False`` for a path nothing
    wrote to (a mistyped ``--checkpoint``, a ``commit_log=`` the query was given and the
    command was not)."""
    other_sink_ids: tuple[str, ...] = ()
    """Sink ids of decisions in the log that are not ``sink_id``: the log of another sink."""
    warnings: tuple[str, ...] = ()
    """What makes the commit log look like the wrong place for this sink; recovery refuses
    to act while there are any, unless forced."""

    @property
    def running(self) -> tuple[WriterStatus, ...]:
        return tuple(w for w in self.writers if w.running)

    @property
    def unproven(self) -> tuple[StatusItem, ...]:
        """Aborts of prepared work whose batch the commit log does not know."""
        return tuple(i for i in self.items if i.unproven)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able view (what ``twopc status --json`` prints)."""
        return {
            "sink_id": self.sink_id,
            "backend": self.backend,
            "sink": self.sink,
            "commit_log": self.commit_log,
            "checked_at": self.checked_at,
            "running": bool(self.running),
            "writers": [
                {**w.heartbeat.to_dict(), "running": w.running, "reason": w.reason}
                for w in self.writers
            ],
            "queries": [
                {
                    "query_id": q.query_id,
                    "log_last_committed": q.log_last_committed,
                    "target_last_committed": q.target_last_committed,
                    "target_partitions": None
                    if q.target_partitions is None
                    else {str(p): b for p, b in sorted(q.target_partitions.items())},
                    "pending_decisions": list(q.pending_decisions),
                    "differs": q.differs,
                    "source_offsets": None if q.source is None else q.source.to_json(),
                    "progress_to": q.progress_to,
                    "group": None if q.group is None else q.group.to_json(),
                    "group_error": q.group_error,
                }
                for q in self.queries
            ],
            "in_doubt": [
                {**asdict(i), "kind": str(i.kind), "action": str(i.action)} for i in self.items
            ],
            "notes": list(self.notes),
            "log_found": self.log_found,
            "warnings": list(self.warnings),
        }


def sink_status(
    sink: Sink[Any],
    sink_id: str,
    commit_log: CommitLog,
    *,
    stale_after: float = DEFAULT_STALE_AFTER,
    progress: ProgressResolver | None = None,
    steps: Steps = QUIET,
) -> SinkStatus:
    """Read-only: what recovery of ``sink_id`` would do now, and whether a writer runs.

    For queries that publish their source offsets, each query's status carries the offsets
    of its last committed batch; with ``progress`` (a description of the group, as the
    commit log recorded it → a :class:`~twopc.ProgressReporter`), also the group's offsets
    and lag now. ``steps`` hears how far it is (``twopc status`` shows it on a terminal)."""
    pending = commit_log.pending(on_read=counter(steps, "read", "pending decisions"))
    steps.note("inspecting the target")
    with leaving_sink(sink_id, what="inspecting the target failed: "):
        inspection = sink.inspect(sink_id)
    items = status_items(sink, sink_id, commit_log, pending, inspection, steps=steps)
    log_found = commit_log.exists()
    others = tuple(sorted({d.sink_id for d in pending if d.sink_id != sink_id}))
    writers = tuple(
        WriterStatus(hb, *_assess(hb, stale_after))
        for hb in commit_log.heartbeats()
        if hb.sink_id == sink_id
    )
    return SinkStatus(
        sink_id=sink_id,
        backend=sink.backend_name,
        sink=sink.describe(),
        commit_log=commit_log.url,
        queries=_queries(commit_log, inspection, pending, progress, steps),
        items=tuple(items),
        writers=writers,
        notes=inspection.notes,
        log_found=log_found,
        other_sink_ids=others,
        warnings=_warnings(commit_log, sink_id, log_found, others, items),
    )


def _warnings(
    commit_log: CommitLog,
    sink_id: str,
    log_found: bool,
    other_sink_ids: tuple[str, ...],
    items: Sequence[StatusItem],
) -> tuple[str, ...]:
    """Why this commit log looks like the wrong place for ``sink_id``'s recovery."""
    found: list[str] = []
    if not log_found:
        found.append(
            f"no commit log at {commit_log.url}: no query of sink {sink_id!r} recorded "
            "anything there. Check --checkpoint (the query's checkpointLocation) or "
            "--commit-log (what the query passed as commit_log=)"
        )
    if other_sink_ids:
        found.append(
            f"the commit log at {commit_log.url} holds decisions of sink id(s) "
            f"{', '.join(map(repr, other_sink_ids))}, not {sink_id!r}: it is another sink's log"
        )
    unproven = sorted({(i.query_id or "", i.batch_id or 0) for i in items if i.unproven})
    if unproven:
        batches = ", ".join(f"batch {b} of query {q}" for q, b in unproven)
        found.append(
            f"the target holds prepared work of {batches}, which the commit log at "
            f"{commit_log.url} has no record of: it cannot tell whether that batch was "
            "decided, so aborting it could throw away committed output"
        )
    return tuple(found)


def _assess(heartbeat: Heartbeat, stale_after: float) -> tuple[bool, str]:
    liveness = heartbeat.assess(stale_after)
    return liveness.running, liveness.reason


def _queries(
    commit_log: CommitLog,
    inspection: Inspection,
    pending: list[Decision],
    progress: ProgressResolver | None,
    steps: Steps,
) -> tuple[QueryStatus, ...]:
    by_query: dict[str, list[TargetMarker]] = {}
    for marker in inspection.markers or ():
        by_query.setdefault(marker.query_id, []).append(marker)
    query_ids = sorted(set(commit_log.query_ids()) | set(by_query))
    out = []
    for query_id in counted(steps, query_ids, "checked", "queries"):
        done = commit_log.done_batches(query_id)
        markers = by_query.get(query_id, [])
        partitions: dict[int, int] | None = None
        if inspection.markers is not None:
            partitions = {}
            for m in markers:
                partitions[m.partition] = max(m.batch_id, partitions.get(m.partition, -1))
        status = QueryStatus(
            query_id=query_id,
            log_last_committed=done[-1] if done else None,
            target_last_committed=max(partitions.values()) if partitions else None,
            target_partitions=partitions,
            pending_decisions=tuple(d.batch_id for d in pending if d.query_id == query_id),
        )
        out.append(_with_source(status, commit_log, progress))
    return tuple(out)


def _with_source(
    status: QueryStatus, commit_log: CommitLog, progress: ProgressResolver | None
) -> QueryStatus:
    """The last committed batch's source offsets and, if it can be asked, the group."""
    if status.log_last_committed is None:
        return status
    decision = commit_log.decision(status.query_id, status.log_last_committed)
    recorded = decision.progress if decision is not None else None
    if recorded is None:
        return status
    status = replace(status, source=recorded.offsets, progress_to=dict(recorded.reporter))
    if progress is None:
        return status
    try:
        group = progress(recorded.reporter).progress(recorded.offsets)
    except Exception as exc:
        return replace(status, group_error=describe_exception(exc))
    return replace(status, group=group)
