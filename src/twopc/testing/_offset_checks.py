"""The check of the optional role :class:`~twopc.KeepsSourceOffsets`: what a sink stores
of each batch's source offsets, read back with ``stored_offsets``. Sinks without the role
skip it."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from twopc.progress import SourceOffsets
from twopc.protocol import CommitsInTask, CommitsOnDriver, KeepsSourceOffsets, Sink, StoredBatch
from twopc.testing._base import NOT_APPLICABLE, SinkChecks, expect, guarantee, sink_call

__all__ = ["SourceOffsetChecks"]

_TOPIC = "kit-orders"


class SourceOffsetChecks(SinkChecks):
    """:class:`~twopc.KeepsSourceOffsets`: each batch's offsets and partition count are
    stored with its data, and ``stored_offsets`` tells a whole batch from a partial one."""

    @guarantee("offsets-kept")
    def test_the_target_keeps_each_batchs_source_offsets(self, target: str) -> None:
        sink = self.make_sink(target)
        if not isinstance(sink, KeepsSourceOffsets):
            pytest.skip(
                f"{NOT_APPLICABLE}{type(sink).__name__} keeps no source offsets "
                "(no KeepsSourceOffsets role)"
            )
        query = uuid.uuid4().hex
        five = SourceOffsets(5, {_TOPIC: {0: 120, 1: 80}})
        six = SourceOffsets(6, {_TOPIC: {0: 150, 1: 95}})
        self._batch(sink, query, 5, {0: range(10), 1: range(10, 20)}, five)
        if isinstance(sink, CommitsInTask):
            # batch 6 commits in partition 0 only (a crash before partition 1's commit):
            # the newest batch of partition 0 is 6, of partition 1 still 5
            self._batch(sink, query, 6, {0: range(20, 30)}, six)
            expected = {6: ({0}, six), 5: ({1}, None)}
        else:
            # a driver commit makes a decided batch whole
            self._batch(sink, query, 6, {0: range(20, 30), 1: range(30, 40)}, six)
            expected = {6: ({0, 1}, six)}
        with sink_call("stored_offsets"):
            stored = [b for b in sink.stored_offsets("kit") if b.query_id == query]
        by_batch = {b.batch_id: b for b in stored}
        expect(
            set(by_batch) == set(expected),
            "offsets-kept",
            f"stored_offsets shows batches {sorted(by_batch)} of the query, expected "
            f"{sorted(expected)} (the newest batch of each partition)",
        )
        for batch_id, (partitions, offsets) in expected.items():
            _expect_batch(by_batch[batch_id], partitions, offsets, f"batch {batch_id}")
        others = [b for b in sink.stored_offsets("kit-other") if b.query_id == query]
        expect(not others, "offsets-kept", f"another sink id's offsets show {others}")

    def _batch(
        self,
        sink: Sink[Any],
        query: str,
        batch: int,
        partitions: dict[int, range],
        offsets: SourceOffsets,
    ) -> None:
        """Phase 1 of the given partitions of a two-partition batch, committed the way
        the coordinator commits: each task by itself, or the batch in one driver call."""
        opened = [
            self.open_task(sink, ids, query=query, batch=batch, partition=p, source=(offsets, 2))
            for p, ids in partitions.items()
        ]
        if isinstance(sink, CommitsInTask):
            for txn, _ in opened:
                with sink_call(f"commit_in_task (batch {batch})"):
                    sink.commit_in_task(txn)
            return
        assert isinstance(sink, CommitsOnDriver)
        committables = [c.with_source_offsets(offsets) for _, c in opened]
        with sink_call(f"commit (batch {batch})"):
            for unit in sink.commit_units(committables):
                sink.commit(unit)


def _expect_batch(
    found: StoredBatch, partitions: set[int], offsets: SourceOffsets | None, what: str
) -> None:
    expect(
        found.partitions == partitions and found.partition_count == 2,
        "offsets-kept",
        f"{what}: stored_offsets shows partitions {sorted(found.partitions)} of "
        f"{found.partition_count}, expected {sorted(partitions)} of 2 (TaskContext.partitions)",
    )
    if offsets is not None:
        expect(
            found.source_offsets == offsets,
            "offsets-kept",
            f"{what}: stored_offsets shows offsets {found.source_offsets}, expected {offsets} "
            "(TaskContext.source_offsets, or Committable.source_offsets on the driver)",
        )
