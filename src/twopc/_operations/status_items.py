"""The items of a sink's status: for each pending decision, each decided committable the
target lost, and each piece of work the target shows, what recovery would do with it and
why, by the coordinator's rules (see :mod:`twopc._operations.status`)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from twopc._contract.paths import CommitPath
from twopc._coordination.commit_log import CommitLog
from twopc._coordination.marker_proof import decided_by_markers
from twopc._coordination.records import Decision
from twopc._coordination.steps import QUIET, Steps, counter
from twopc.protocol import (
    CommitsOnDriver,
    Committable,
    Inspection,
    PendingWork,
    Sink,
    WorkKind,
)

__all__ = ["Action", "ItemKind", "StatusItem", "status_items"]


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


def status_items(
    sink: Sink[Any],
    sink_id: str,
    commit_log: CommitLog,
    pending: Sequence[Decision],
    inspection: Inspection,
    *,
    steps: Steps = QUIET,
) -> list[StatusItem]:
    """What recovery would do with each pending decision, each decided committable the
    target lost, and each piece of work the target shows."""
    path = CommitPath.of(sink)
    items = [_decision_item(d, path) for d in pending]
    items.extend(_lost_item(c) for d in pending for c in _lost(sink, d, inspection))
    decisions = commit_log.decisions_for(
        [w.committable for w in inspection.pending if w.committable is not None],
        on_read=counter(steps, "checked", "prepared transactions"),
    )
    known = _known_batches(commit_log, inspection.pending, decisions)
    asking = {(d.query_id, d.batch_id) for d in pending if d.last_resource is not None}
    proven = _decided_by_markers(sink, sink_id, inspection.pending, decisions)
    items.extend(_work_item(work, decisions, known, asking, proven) for work in inspection.pending)
    return items


def _decided_by_markers(
    sink: Sink[Any],
    sink_id: str,
    pending: Sequence[PendingWork],
    decisions: dict[tuple[str, int], Decision | None],
) -> set[int]:
    """The ``id`` of each prepared committable no decision names that recovery commits
    because the target's markers show its batch committed in other partitions."""
    undecided = [
        w.committable
        for w in pending
        if w.committable is not None
        and w.kind is WorkKind.PREPARED
        and decisions.get((w.committable.query_id, w.committable.batch_id)) is None
    ]
    return {id(c) for c in decided_by_markers(sink, sink_id, undecided)}


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


_ASK_WHY = (
    "recorded before its last resource {} ran, whose commit decides the batch: recovery "
    "fences it and reads its marker, then commits every member (it committed) or aborts "
    "them (it did not)"
)

_PROVEN_WHY = (
    "no decision for the batch in this commit log, but the target's markers show other "
    "partitions of it committed, so it was decided: recovery commits this partition"
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
    proven: set[int],
) -> StatusItem:
    """``asking``: the batches whose conditional decision waits on its last resource;
    ``proven``: the committables the target's markers prove decided."""
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
        elif id(committable) in proven:
            action, why = Action.COMMIT, _PROVEN_WHY
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


def _age(at: float) -> float | None:
    return max(0.0, time.time() - at) if at else None
