"""Where a query whose checkpoint is gone may start again: the source offsets stored with
the newest whole batch of the sink id, or a refusal that says why no start is safe.

The rule lives here, once; a sink only reports what its target holds
(:meth:`~twopc.protocol.KeepsSourceOffsets.stored_offsets`). A driver-commit sink without
that role is served by its commit log, whose decisions record every batch's offsets (the
files sink keeps its commit log with its output).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from twopc._contract.paths import CommitPath
from twopc._coordination.commit_log import CommitLog
from twopc._coordination.completeness import ranges as _ranges
from twopc._engines.writer import resolve_commit_log, validate_sink_id
from twopc.errors import (
    ConfigurationError,
    NoStoredOffsetsError,
    OffsetsMismatchError,
    UnsafeStartError,
)
from twopc.groups import SinkGroup
from twopc.progress import SourceOffsets
from twopc.protocol import KeepsSourceOffsets, Sink, StoredBatch, WorkKind
from twopc.secrets import redact

__all__ = ["StartingPoint", "find_start", "starting_offsets"]

_log = logging.getLogger("twopc")

_RECOVER_FIRST = (
    "run `twopc recover` for the sink id with the commit log the old query used (it "
    "finishes a decided batch and aborts an undecided one), then ask again. If that log "
    "went with the checkpoint, `twopc recover --force` aborts the waiting work, which never "
    "became visible: the start then follows what the target holds"
)


@dataclass(frozen=True)
class StartingPoint:
    """Where a new query starts: after ``batch_id`` of ``query_id``, at ``offsets``;
    ``where`` says which record told (the target, or the commit log)."""

    sink_id: str
    query_id: str
    batch_id: int
    offsets: SourceOffsets
    where: str

    def spark_json(self) -> str:
        """The offsets as Spark's Kafka source takes them (``startingOffsets``)."""
        return spark_starting_offsets(self.offsets)


def spark_starting_offsets(offsets: SourceOffsets) -> str:
    """``{"topic": {"partition": offset}}``, topics and partitions sorted."""
    body = {
        topic: {str(p): offsets.topics[topic][p] for p in sorted(offsets.topics[topic])}
        for topic in sorted(offsets.topics)
    }
    return json.dumps(body, separators=(",", ":"))


def starting_offsets(
    sink: Sink[Any],
    sink_id: str,
    *,
    topics: Iterable[str] | None = None,
    commit_log: str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> str:
    """The ``startingOffsets`` JSON for a query that continues ``sink_id``'s output on a
    new checkpoint: per topic and partition, the offset after the newest batch the target
    holds whole.

    ``topics``: the topics the new query reads; stored offsets for others are refused.
    ``commit_log``: the commit log the old query used, for a driver-commit sink that keeps
    no offsets in its target (default: the sink's own, e.g. the files sink's, next to its
    output).

    Raises :class:`~twopc.NoStoredOffsetsError` when the target holds none,
    :class:`~twopc.UnsafeStartError` when a batch is partly committed or prepared work
    waits (run ``twopc recover`` first), :class:`~twopc.OffsetsMismatchError` for other
    topics. Never a silent earliest or latest."""
    return find_start(
        sink, sink_id, topics=topics, commit_log=commit_log, storage_options=storage_options
    ).spark_json()


def find_start(
    sink: Sink[Any],
    sink_id: str,
    *,
    topics: Iterable[str] | None = None,
    commit_log: str | None = None,
    storage_options: dict[str, Any] | None = None,
) -> StartingPoint:
    """:func:`starting_offsets` with where they came from."""
    sink_id = validate_sink_id(sink_id)
    _refuse_pending(sink, sink_id)
    if isinstance(sink, SinkGroup):
        point = _group_start(sink, sink_id, commit_log, storage_options)
    else:
        batches, where = _stored(sink, sink_id, commit_log, storage_options)
        decided = _decisions(sink, sink_id, commit_log, storage_options)
        point = _start_of(batches, sink_id, where, decided)
    _check_topics(point.offsets, topics, sink_id)
    _log.info(
        "twopc sink=%s: a new query starts after batch %d of query %s (%s): %s",
        sink_id,
        point.batch_id,
        point.query_id,
        point.where,
        point.spark_json(),
    )
    return point


def _group_start(
    group: SinkGroup,
    sink_id: str,
    commit_log: str | None,
    storage_options: dict[str, Any] | None,
) -> StartingPoint:
    """Every member's start, which must be the same: the group's one decision commits a
    batch in all members or none. Members that keep no offsets of their own are served by
    the group's commit log."""
    points: dict[str, StartingPoint] = {}
    for name, member_id in group.member_ids(sink_id).items():
        member = group.members[name].sink
        if isinstance(member, KeepsSourceOffsets):
            batches, where = member.stored_offsets(member_id), f"member {name!r}"
        else:
            batches, where = _stored(group, sink_id, commit_log, storage_options)
            where = f"member {name!r} ({where})"
        points[name] = _start_of(batches, member_id, where)
    found = {(p.query_id, p.batch_id, p.spark_json()) for p in points.values()}
    if len(found) > 1:
        shown = "; ".join(
            f"{name}: after batch {p.batch_id} of query {p.query_id}" for name, p in points.items()
        )
        raise UnsafeStartError(
            f"the members of group {sink_id!r} end at different batches ({shown}): a batch "
            f"is committed in some members only. {_RECOVER_FIRST}",
            sink_id=sink_id,
        )
    first = next(iter(points.values()))
    return StartingPoint(sink_id, first.query_id, first.batch_id, first.offsets, "every member")


def _decisions(
    sink: Sink[Any],
    sink_id: str,
    commit_log: str | None,
    storage_options: dict[str, Any] | None,
) -> Callable[[str, int], bool] | None:
    """Whether the commit log the caller named holds a batch's decision (a sink that commits
    in the task records it once every partition committed): what tells a whole batch whose
    partition count the target holds only as planned (adaptive execution may run fewer
    partitions than planned). ``None`` without a log."""
    if not commit_log or CommitPath.of(sink) is not CommitPath.TASK:
        return None
    log = CommitLog(commit_log, storage_options)
    return lambda query_id, batch_id: log.decision(query_id, batch_id) is not None


def _start_of(
    batches: Sequence[StoredBatch],
    sink_id: str,
    where: str,
    decided: Callable[[str, int], bool] | None = None,
) -> StartingPoint:
    """The start after the newest whole batch of the newest query among ``batches``;
    ``decided`` confirms a batch whole that the stored partition count cannot."""
    if not batches:
        raise NoStoredOffsetsError(
            f"{where} holds no committed batch of sink id {sink_id!r}: nothing was written "
            "under this sink id (check it), so there is no position to continue from",
            sink_id=sink_id,
        )
    newest = _newest_batch(_newest_query(batches, sink_id, where))
    stored_any = newest.source_offsets is not None or newest.partition_count > 0
    confirmed = decided is not None and decided(newest.query_id, newest.batch_id)
    if stored_any and not confirmed:
        _refuse_partial(newest, sink_id)  # (a row of an older twopc stores neither)
    if newest.source_offsets is None:
        raise NoStoredOffsetsError(
            f"batch {newest.batch_id} of query {newest.query_id}, the newest {where} holds "
            f"for sink id {sink_id!r}, was stored without source offsets: the query's source "
            "is not Kafka (file sources keep their own log; start such a query from its "
            "files), or a twopc before 0.3.0 wrote it. Choose the new query's "
            "startingOffsets yourself",
            sink_id=sink_id,
            batch_id=newest.batch_id,
        )
    return StartingPoint(sink_id, newest.query_id, newest.batch_id, newest.source_offsets, where)


def _stored(
    sink: Sink[Any],
    sink_id: str,
    commit_log: str | None,
    storage_options: dict[str, Any] | None,
) -> tuple[list[StoredBatch], str]:
    """What holds the offsets: the target (its role), else a driver-commit sink's commit
    log."""
    if isinstance(sink, KeepsSourceOffsets):
        return sink.stored_offsets(sink_id), f"the {sink.backend_name} target"
    if CommitPath.of(sink) is CommitPath.TASK:
        raise NoStoredOffsetsError(
            f"the {sink.backend_name} sink does not keep source offsets with its output "
            "(it has no KeepsSourceOffsets role), so it cannot tell where a new query may "
            "start",
            sink_id=sink_id,
        )
    try:
        url, options = resolve_commit_log(sink, sink_id, commit_log, storage_options)
    except ConfigurationError:
        raise NoStoredOffsetsError(
            f"the {sink.backend_name} sink keeps source offsets only in its commit log: pass "
            "commit_log= (the old query's commit_log=, or <its checkpoint>/twopc/<sink id> "
            "if that is still there)",
            sink_id=sink_id,
        ) from None
    log = CommitLog(url, options)
    return _decided_batches(log), f"the commit log {redact(log.url, ())}"


def _decided_batches(log: CommitLog) -> list[StoredBatch]:
    """The newest decision of every query in the log, as whole batches: a decided batch
    is committed, or recovery commits it."""
    found: list[StoredBatch] = []
    for query_id in log.query_ids():
        decided = log.decided_batches(query_id)
        if not decided:
            continue
        decision = log.decision(query_id, decided[-1])
        if decision is None:
            continue
        partitions = frozenset(c.partition for c in decision.committables)
        found.append(
            StoredBatch(
                query_id,
                decision.batch_id,
                partitions,
                len(partitions),
                decision.source_offsets,
                decision.decided_at or None,
            )
        )
    return found


def _refuse_pending(sink: Sink[Any], sink_id: str) -> None:
    """Prepared or open work of the sink id may still become visible (a decided batch
    that recovery finishes): no start is safe before it is settled."""
    waiting = [
        w for w in sink.inspect(sink_id).pending if w.kind in (WorkKind.PREPARED, WorkKind.OPEN)
    ]
    if not waiting:
        return
    named = sorted({(w.query_id or "?", w.batch_id) for w in waiting}, key=str)
    shown = ", ".join(
        f"batch {b} of query {q}" if b is not None else f"work of query {q}" for q, b in named[:3]
    )
    raise UnsafeStartError(
        f"{len(waiting)} prepared or open piece(s) of work of sink id {sink_id!r} wait "
        f"({shown}{', ...' if len(named) > 3 else ''}): whether they become visible is not "
        f"settled, so no start position is safe yet. {_RECOVER_FIRST}",
        sink_id=sink_id,
    )


def _newest_query(batches: Sequence[StoredBatch], sink_id: str, where: str) -> list[StoredBatch]:
    """The stored batches of the query that committed last (queries of one sink id run
    one after another)."""
    by_query: dict[str, list[StoredBatch]] = {}
    for batch in batches:
        by_query.setdefault(batch.query_id, []).append(batch)
    if len(by_query) == 1:
        return next(iter(by_query.values()))
    times = {q: max((b.committed_at or 0.0) for b in found) for q, found in by_query.items()}
    ordered = sorted(times, key=lambda q: times[q], reverse=True)
    if not times[ordered[0]] or times[ordered[0]] == times[ordered[1]]:
        raise UnsafeStartError(
            f"{where} holds batches of {len(by_query)} queries of sink id {sink_id!r} and "
            "does not say which committed last, so it cannot tell where the output ends",
            sink_id=sink_id,
        )
    return by_query[ordered[0]]


def _newest_batch(batches: Sequence[StoredBatch]) -> StoredBatch:
    """The newest batch of one query, with every partition that holds it merged."""
    newest = max(b.batch_id for b in batches)
    at = [b for b in batches if b.batch_id == newest]
    first = at[0]
    return StoredBatch(
        first.query_id,
        newest,
        frozenset().union(*(b.partitions for b in at)),
        max(b.partition_count for b in at),
        next((b.source_offsets for b in at if b.source_offsets is not None), None),
        max((b.committed_at or 0.0) for b in at) or None,
    )


def _refuse_partial(batch: StoredBatch, sink_id: str) -> None:
    """A batch committed in some partitions only: starting before it writes those twice,
    after it loses the others."""
    if batch.whole:
        return
    if batch.partition_count <= 0:
        raise UnsafeStartError(
            f"batch {batch.batch_id} of query {batch.query_id} is committed in partitions "
            f"{_ranges(sorted(batch.partitions))}, but the target does not say how many partitions "
            'the batch had (a format("twopc") task cannot tell), so it cannot tell whether '
            "the batch is whole: give the old query's commit log (commit_log=, or "
            "--commit-log / --checkpoint), whose decision confirms a whole batch",
            sink_id=sink_id,
            batch_id=batch.batch_id,
        )
    missing = set(range(batch.partition_count)) - batch.partitions
    # contiguous from 0: adaptive execution may have run fewer partitions than planned
    coalesced = batch.partitions == set(range(len(batch.partitions)))
    hint = (
        f" (If adaptive query execution ran the batch with {len(batch.partitions)} of the "
        f"{batch.partition_count} partitions planned, it may be whole: give the old query's "
        "commit log, --commit-log or --checkpoint, whose decision confirms a whole batch.)"
        if coalesced
        else ""
    )
    raise UnsafeStartError(
        f"batch {batch.batch_id} of query {batch.query_id} is committed in partitions "
        f"{_ranges(sorted(batch.partitions))} but not in {_ranges(sorted(missing))} (of "
        f"{batch.partition_count}): starting after batch {batch.batch_id - 1} would write "
        f"the committed partitions twice, starting after batch {batch.batch_id} would lose "
        f"the others. Restart the old query on its own checkpoint if it still exists (its "
        f"replay finishes the batch exactly), else {_RECOVER_FIRST}{hint}",
        sink_id=sink_id,
        batch_id=batch.batch_id,
    )


def _check_topics(offsets: SourceOffsets, topics: Iterable[str] | None, sink_id: str) -> None:
    if topics is None:
        return
    wanted = {topics} if isinstance(topics, str) else set(topics)
    stored = set(offsets.topics)
    if wanted != stored:
        raise OffsetsMismatchError(
            f"the stored offsets of sink id {sink_id!r} are for topic(s) "
            f"{', '.join(sorted(stored))}, but the new query reads "
            f"{', '.join(sorted(wanted)) or 'none'}: a query that reads other topics does "
            "not continue this output; give it its own sink id, or read the same topics",
            sink_id=sink_id,
            batch_id=offsets.batch_id,
        )
