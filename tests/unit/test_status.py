"""twopc.sink_status / recover_sink decide per item as the coordinator does, over the
in-memory reference sinks of ``twopc.testing`` and stand-ins that show what a test says
(the backends' own ``inspect`` is tested with each backend)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pytest

import twopc
from twopc import CommitLog, TaskContext
from twopc._coordination.records import BatchRun, Decision
from twopc.protocol import Footprint
from twopc.testing import MemoryDriverSink, MemoryStore

pytestmark = pytest.mark.unit

QUERY = "q-1"


def _prepare(
    sink: twopc.Sink[object], batch: int, partition: int, attempt: int
) -> twopc.Committable:
    txn = sink.begin_transaction(TaskContext("orders", QUERY, batch, partition, attempt))
    sink.invoke(txn, pa.record_batch({"id": pa.array([batch * 10 + partition], pa.int64())}))
    return sink.pre_commit(txn)


def _ran(log: CommitLog, sink: twopc.Sink[object], batch: int) -> None:
    """Record a run of ``batch`` as the coordinator does before its phase 1."""
    log.record_run(QUERY, batch, BatchRun(Footprint(sink.naming(), 1)))


def test_only_the_attempt_the_decision_names_would_commit(
    tmp_path: Path, store_name: str, store: MemoryStore
) -> None:
    sink = MemoryDriverSink(store_name)
    log = CommitLog(str(tmp_path / "log"))
    _prepare(sink, 0, 0, attempt=0)  # a failed first attempt that prepared
    winner = _prepare(sink, 0, 0, attempt=1)
    _prepare(sink, 1, 0, attempt=0)  # a batch without a decision
    log.record_decision(Decision("orders", QUERY, 0, (winner,)))
    _ran(log, sink, 1)  # the coordinator records every run before its phase 1

    status = twopc.sink_status(sink, "orders", log)
    plan = sorted((i.kind, i.batch_id, i.attempt, i.action) for i in status.items)
    assert plan == [
        (twopc.ItemKind.DECISION, 0, None, twopc.Action.COMMIT),
        (twopc.ItemKind.PREPARED, 0, 0, twopc.Action.ABORT),
        (twopc.ItemKind.PREPARED, 0, 1, twopc.Action.COMMIT),
        (twopc.ItemKind.PREPARED, 1, 0, twopc.Action.ABORT),
    ]
    (query,) = status.queries
    assert (query.log_last_committed, query.pending_decisions) == (None, (0,))
    assert query.target_partitions is None and not query.differs

    dry = twopc.recover_sink(sink, "orders", log, dry_run=True)
    assert not dry.performed
    again = twopc.sink_status(sink, "orders", log).items
    assert [(i.kind, i.ident, i.action) for i in again] == [
        (i.kind, i.ident, i.action) for i in status.items
    ]

    report = twopc.recover_sink(sink, "orders", log)
    assert report.ok and report.performed
    assert (report.committed, report.aborted) == (1, 2)
    assert report.after is not None and report.after.items == ()
    assert report.after.queries[0].log_last_committed == 0
    assert store.visible == [0] and store.prepared == {}  # batch 0, partition 0, once


class _LeftoverSink(MemoryDriverSink):
    """Also shows work of an attempt that never prepared (as staged files or a staging
    table would be), which its sweep removes."""

    def __init__(self, store: str) -> None:
        super().__init__(store)
        self.leftovers = ["attempt b3-p1"]

    def inspect(self, sink_id: str) -> twopc.Inspection:
        unprepared = tuple(
            twopc.PendingWork(
                kind=twopc.WorkKind.UNPREPARED,
                ident=name,
                query_id=QUERY,
                batch_id=3,
                partition=1,
                detail="staged by an attempt that did not finish",
            )
            for name in self.leftovers
        )
        return twopc.Inspection(super().inspect(sink_id).pending + unprepared)

    def sweep(self, sink_id: str, keep: Sequence[twopc.Committable] = ()) -> int:
        swept, self.leftovers = len(self.leftovers), []
        return swept


def test_unprepared_leftovers_would_be_swept(tmp_path: Path, store_name: str) -> None:
    sink = _LeftoverSink(store_name)
    log = CommitLog(str(tmp_path / "log"))
    _ran(log, sink, 3)
    (item,) = twopc.sink_status(sink, "orders", log).items
    assert (item.kind, item.action, item.batch_id, item.partition) == (
        twopc.ItemKind.UNPREPARED,
        twopc.Action.SWEEP,
        3,
        1,
    )
    report = twopc.recover_sink(sink, "orders", log)
    assert report.swept == 1 and report.ok
    assert report.after is not None and report.after.items == ()


class _SeenSink(twopc.Sink[None], twopc.CommitsOnDriver):
    """A driver-commit sink whose target shows what the test says: prepared work, markers."""

    backend_name = "seen"

    def __init__(self, prepared: list[twopc.Committable], markers: list[tuple[int, int]] | None):
        self.prepared, self.markers = prepared, markers

    def begin_transaction(self, ctx: TaskContext) -> None:
        return None

    def invoke(self, txn: None, batch: pa.RecordBatch) -> None:
        return None

    def pre_commit(self, txn: None) -> twopc.Committable:
        raise NotImplementedError

    def abort(self, txn: None) -> None:
        return None

    def commit(self, committables: Sequence[twopc.Committable]) -> list[twopc.CommitOutcome]:
        raise NotImplementedError

    def abort_prepared(self, committables: Sequence[twopc.Committable]) -> None:
        return None

    def recover(self, sink_id: str) -> list[twopc.Committable]:
        return list(self.prepared)

    def inspect(self, sink_id: str) -> twopc.Inspection:
        return twopc.Inspection(
            tuple(twopc.PendingWork.prepared(c, f"p{c.partition}") for c in self.prepared),
            None
            if self.markers is None
            else tuple(twopc.TargetMarker(QUERY, p, b) for p, b in self.markers),
        )


@pytest.mark.parametrize(
    ("markers", "lost"),
    [
        ([(0, 0)], [2]),  # p0: prepared; p1: marker at batch 1; p2: neither
        ([(0, 0), (2, 3)], []),  # p2's newest marker is a later batch: it committed
        (None, []),  # a sink without markers cannot tell: nothing is called lost
    ],
)
def test_decided_work_neither_prepared_nor_committed_is_lost(
    tmp_path: Path, markers: list[tuple[int, int]] | None, lost: list[int]
) -> None:
    decided = [twopc.Committable("orders", QUERY, 1, p, 0) for p in range(3)]
    log = CommitLog(str(tmp_path / "log"))
    log.record_decision(Decision("orders", QUERY, 1, tuple(decided)))
    if markers is not None:
        markers = [*markers, (1, 1)]
    sink = _SeenSink([decided[0]], markers)

    items = twopc.sink_status(sink, "orders", log).items
    assert sorted((i.kind, i.partition, i.action) for i in items) == sorted(
        [("decision", None, "commit"), ("prepared", 0, "commit")]
        + [("lost", p, "fail") for p in lost]
    )
