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
from enum import StrEnum
from typing import Any

from twopc._contract.boundary import describe_exception, leaving_sink
from twopc._contract.paths import CommitPath
from twopc._coordination.commit_log import CommitLog
from twopc._coordination.liveness import DEFAULT_STALE_AFTER, Heartbeat
from twopc._coordination.records import Decision
from twopc._coordination.steps import QUIET, Steps, counted, counter
from twopc.progress import GroupProgress, ProgressReporter, SourceOffsets
from twopc.protocol import (
    CommitsOnDriver,
    Committable,
    Inspection,
    PendingWork,
    Sink,
    TargetMarker,
    WorkKind,
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


class Action(StrEnum):
    """What recovery does with an item (compares equal to its string value)."""

    COMMIT = "commit"
    ABORT = "abort"
    MARK_DONE = "mark_done"
    """Only mark the batch done in the commit log: its tasks committed already."""
    ASK_LAST_RESOURCE = "ask_last_resource"
    """A group's batch decided only if its last resource (Kafka ``atomic``) committed it:
    recovery fences the last resource and reads its marker, then commits every member's
    work (it committed) or aborts it (it did not)."""
    SWEEP = "sweep"
    """Remove leftovers that never prepared."""
    FAIL = "fail"
    """Stop with an error: decided work the target no longer has cannot be committed."""


class ItemKind(StrEnum):
    """What a status item is: a pending decision, decided work that is gone, or work the
    sink shows (the values of :class:`~twopc.WorkKind`)."""

    DECISION = "decision"
    LOST = "lost"
    PREPARED = WorkKind.PREPARED.value
    UNPREPARED = WorkKind.UNPREPARED.value
    OPEN = WorkKind.OPEN.value


_ITEM_KIND = {
    WorkKind.PREPARED: ItemKind.PREPARED,
    WorkKind.UNPREPARED: ItemKind.UNPREPARED,
    WorkKind.OPEN: ItemKind.OPEN,
}
"""What a sink's pending work is as a status item."""


@dataclass(frozen=True)
class StatusItem:
    """One thing recovery would act on, and the action."""

    kind: ItemKind
    ident: str
    action: Action
    query_id: str | None = None
    batch_id: int | None = None
    partition: int | None = None
    attempt: int | None = None
    age_seconds: float | None = None
    detail: str = ""
    unproven: bool = False
    """An abort the commit log cannot justify: it has no record of the batch at all (it is
    not the log the query wrote its decisions to), so the batch may have been decided
    elsewhere. ``twopc recover`` refuses to act on such items without ``--force``."""
    sink_id: str | None = None
    """The sink id the work was prepared under, where known: for a
    :class:`~twopc.SinkGroup`, the member's own (``<group>.<member>``)."""


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
    path = CommitPath.of(sink)
    items = [_decision_item(d, path) for d in pending]
    items.extend(_lost_item(c) for d in pending for c in _lost(sink, d, inspection))
    decisions = commit_log.decisions_for(
        [w.committable for w in inspection.pending if w.committable is not None],
        on_read=counter(steps, "checked", "prepared transactions"),
    )
    known = _known_batches(commit_log, inspection.pending, decisions)
    asking = {(d.query_id, d.batch_id) for d in pending if d.last_resource is not None}
    items.extend(_work_item(work, decisions, known, asking) for work in inspection.pending)
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


def _known_batches(
    commit_log: CommitLog,
    pending: Sequence[PendingWork],
    decisions: dict[tuple[str, int], Decision | None],
) -> set[tuple[str, int]]:
    """The batches of prepared work that the log recorded (a run or a decision)."""
    keys = {
        (w.committable.query_id, w.committable.batch_id)
        for w in pending
        if w.committable is not None
    }
    return {key for key in keys if decisions.get(key) is not None or commit_log.knows_batch(*key)}


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


_ASK_WHY = (
    "recorded before its last resource {} ran, whose commit decides the batch: recovery "
    "fences it and reads its marker, then commits every member (it committed) or aborts "
    "them (it did not)"
)

_PENDING = {
    CommitPath.DRIVER: (Action.COMMIT, "phase 2 did not finish"),
    CommitPath.TASK: (
        Action.MARK_DONE,
        "the tasks committed before the decision, only the log lags",
    ),
}


def _decision_item(decision: Decision, sink_path: CommitPath) -> StatusItem:
    """A pending decision is finished the way it was made (its recorded path); a
    conditional one as its last resource says."""
    action, why = _PENDING[decision.path or sink_path]
    if decision.last_resource is not None:
        action, why = Action.ASK_LAST_RESOURCE, _ASK_WHY.format(decision.last_resource)
    return StatusItem(
        kind=ItemKind.DECISION,
        ident=f"batch {decision.batch_id}",
        action=action,
        query_id=decision.query_id,
        batch_id=decision.batch_id,
        age_seconds=_age(decision.decided_at),
        detail=f"decided with {_decided_work(decision)}; {why}",
    )


def _decided_work(decision: Decision) -> str:
    """``3 partition(s)``; a group's decision counts each member's."""
    counts: dict[str, int] = {}
    for committable in decision.committables:
        counts[committable.sink_id] = counts.get(committable.sink_id, 0) + 1
    if len(counts) <= 1:
        return f"{len(decision.committables)} partition(s)"
    return ", ".join(f"{n} partition(s) of {sink_id}" for sink_id, n in counts.items())


def _lost(sink: Sink[Any], decision: Decision, inspection: Inspection) -> list[Committable]:
    """Committables of a pending driver-path decision that the target shows neither
    prepared nor committed. Only knowable for driver-commit sinks that keep markers (SQL
    ``two_phase``): such work was rolled back outside twopc, and recovery stops with an
    error on it."""
    driver_path = (decision.path or CommitPath.of(sink)) is CommitPath.DRIVER
    if not driver_path or not isinstance(sink, CommitsOnDriver) or inspection.markers is None:
        return []
    prepared = {
        (c.query_id, c.batch_id, c.partition, c.attempt)
        for c in (w.committable for w in inspection.pending)
        if c is not None
    }
    newest = {(m.query_id, m.partition): m.batch_id for m in inspection.markers}
    return [
        c
        for c in decision.committables
        if (c.query_id, c.batch_id, c.partition, c.attempt) not in prepared
        and newest.get((c.query_id, c.partition), -1) < c.batch_id
    ]


def _lost_item(committable: Committable) -> StatusItem:
    return StatusItem(
        kind=ItemKind.LOST,
        ident=f"batch {committable.batch_id} partition {committable.partition}",
        action=Action.FAIL,
        query_id=committable.query_id,
        batch_id=committable.batch_id,
        partition=committable.partition,
        attempt=committable.attempt,
        detail=(
            "named by the batch's decision, but neither prepared nor committed (no marker): "
            "rolled back outside twopc or lost in a restore; recovery stops with an error "
            "here (see 'A prepared transaction that is gone' in docs/operations.md)"
        ),
    )


def _work_item(
    work: PendingWork,
    decisions: dict[tuple[str, int], Decision | None],
    known: set[tuple[str, int]],
    asking: set[tuple[str, int]],
) -> StatusItem:
    """``asking``: the batches whose conditional decision waits on its last resource."""
    committable = work.committable
    unproven = False
    if committable is None:
        # never prepared, or not attributable: the sweep removes or aborts it
        action = Action.ABORT if work.kind is WorkKind.OPEN else Action.SWEEP
        detail = work.detail
    else:
        key = (committable.query_id, committable.batch_id)
        decision = decisions[key]
        if decision is not None and key in asking and decision.contains(committable):
            action = Action.ASK_LAST_RESOURCE
            why = f"named by a conditional decision, {_ASK_WHY.format(decision.last_resource)}"
        elif decision is not None and decision.contains(committable):
            action, why = Action.COMMIT, "named by the batch's decision"
        elif decision is not None:
            action, why = Action.ABORT, "an attempt the batch's decision does not name"
        elif key in known:
            action, why = Action.ABORT, "no decision for the batch"
        else:
            # only prepared work can hold a decided batch's rows; open work never committed
            unproven = work.kind is WorkKind.PREPARED
            action, why = (
                Action.ABORT,
                (
                    "no decision for the batch, and no record of it in this commit log: "
                    "recover refuses to abort it without --force"
                    if unproven
                    else "no decision for the batch"
                ),
            )
        detail = f"{why}; {work.detail}" if work.detail else why
    return StatusItem(
        kind=_ITEM_KIND[work.kind],
        ident=work.ident,
        action=action,
        query_id=work.query_id,
        batch_id=work.batch_id,
        partition=work.partition,
        attempt=work.attempt,
        age_seconds=work.age_seconds,
        detail=detail,
        unproven=unproven,
        sink_id=committable.sink_id if committable is not None else None,
    )


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


def _age(at: float) -> float | None:
    return max(0.0, time.time() - at) if at else None
