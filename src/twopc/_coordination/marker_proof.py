"""Prepared work that no decision in the commit log names, but whose batch the target's
markers show committed in other partitions.

A driver-commit sink commits nothing of a batch before its decision is durable, so a
visible marker of batch B proves that B was decided, even when its decision is gone (the
commit log was lost with the checkpoint, or recovery is pointed at a new log). A partition
whose commit the crash cut off then still holds B's rows in prepared work: aborting it would
lose them, and the batch would stay partial for good. Recovery and ``twopc status`` share
this one rule, so what status plans is what recovery does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from twopc._contract.boundary import leaving_sink
from twopc.protocol import (
    CommitsInTask,
    CommitsOnDriver,
    Committable,
    Footprint,
    KeepsMarkers,
    RecoveryScope,
    Sink,
)

__all__ = ["decided_by_markers"]


def decided_by_markers(
    sink: Sink[Any], sink_id: str, undecided: Sequence[Committable]
) -> list[Committable]:
    """Of ``undecided`` (prepared work whose batch no decision holds), what the target's
    markers prove decided: per batch with a committed partition, one prepared attempt of
    each partition the markers do not show committed (the newest attempt, where several
    prepared; any one holds the partition's rows of the batch). Attempts of a partition the
    markers show committed are losers, left to be aborted. Empty for a sink without markers
    of its own (:class:`~twopc.KeepsMarkers` and :class:`~twopc.CommitsOnDriver`), and for
    one that commits in its tasks too (the SQL sinks' ``transaction`` mode): its markers
    appear before any decision, so they prove none. The target's errors name the sink."""
    if not undecided or isinstance(sink, CommitsInTask):
        return []
    if not (isinstance(sink, KeepsMarkers) and isinstance(sink, CommitsOnDriver)):
        return []
    by_batch: dict[tuple[str, int], list[Committable]] = {}
    for committable in undecided:
        by_batch.setdefault((committable.query_id, committable.batch_id), []).append(committable)
    proven: list[Committable] = []
    for (query_id, batch_id), work in sorted(by_batch.items()):
        footprint = Footprint(sink.naming(), max(c.partition for c in work) + 1)
        with leaving_sink(sink_id, batch_id, what="reading the target's markers failed: "):
            committed = sink.committed_partitions(
                RecoveryScope(sink_id, query_id), batch_id, footprint
            )
        if not committed:
            continue
        newest: dict[int, Committable] = {}
        for committable in work:
            if committable.partition in committed:
                continue
            known = newest.get(committable.partition)
            if known is None or committable.attempt > known.attempt:
                newest[committable.partition] = committable
        proven.extend(newest[p] for p in sorted(newest))
    return proven
