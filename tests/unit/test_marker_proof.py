"""Prepared work whose decision is gone but whose batch the target's markers show committed
in other partitions: recovery and ``twopc status`` commit it instead of aborting it (the
commit log lost with the checkpoint, a driver killed between two partitions' commits).
A driver-commit sink with markers of its own is built from the memory sink here."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pytest

import twopc
from twopc import CommitLog, CommitOutcome, Committable, Footprint, RecoveryScope
from twopc._coordination.coordinator import Coordinator
from twopc._coordination.marker_proof import decided_by_markers
from twopc.local import LocalEngine
from twopc.testing import MemoryDriverSink, MemoryStore, MemoryTaskSink
from twopc.testing._memory import MemoryPayload

pytestmark = pytest.mark.unit

SINK_ID = "orders"
QUERY = "query-1"


class MarkedDriverSink(MemoryDriverSink, twopc.KeepsMarkers):
    """Commits a partition's rows and its marker together, as the SQL sinks' two_phase
    mode does."""

    def commit(self, committables: Sequence[Committable]) -> list[CommitOutcome]:
        outcomes = super().commit(committables)
        for c in committables:
            key = (c.sink_id, c.query_id, c.partition)
            self.store.markers[key] = max(self.store.markers.get(key, -1), c.batch_id)
        return outcomes

    def committed_partitions(
        self, scope: RecoveryScope, batch_id: int, footprint: Footprint
    ) -> set[int] | None:
        return {
            partition
            for (sink_id, query_id, partition), batch in self.store.markers.items()
            if (sink_id, query_id) == (scope.sink_id, scope.query_id) and batch >= batch_id
        }


def batch(batch_id: int, count: int = 3) -> LocalEngine:
    tables = [
        pa.table({"id": pa.array(range(batch_id * 100 + p * 10, batch_id * 100 + p * 10 + 10))})
        for p in range(count)
    ]
    return LocalEngine(tables, processes=False)


def ids(*batches: int, count: int = 3) -> Counter[int]:
    return Counter(b * 100 + i for b in batches for i in range(count * 10))


def killed_at(point: str, sink: MemoryDriverSink, log: Path) -> None:
    """Batch 0 commits; batch 1's driver dies at ``point`` (``between_commits``: after
    partition 0's commit)."""
    plan = twopc.FaultPlan.parse(f"{point}:raise@batch=1")
    coordinator = Coordinator(sink, SINK_ID, CommitLog(str(log)), faults=plan)
    coordinator.run_batch(QUERY, 0, batch(0))
    with pytest.raises(twopc.InjectedFault):
        coordinator.run_batch(QUERY, 1, batch(1))


def test_a_lost_log_does_not_abort_a_decided_batch_the_markers_show(
    tmp_path: Path, store_name: str, store: MemoryStore
) -> None:
    sink = MarkedDriverSink(store_name)
    killed_at("between_commits", sink, tmp_path / "log")
    assert len(store.prepared) == 2  # partitions 1 and 2 of batch 1 wait
    new_log = CommitLog(str(tmp_path / "new-log"))  # the old one went with the checkpoint

    status = twopc.sink_status(sink, SINK_ID, new_log)
    planned = {i.partition: (i.action, i.unproven) for i in status.items}
    assert planned == {1: ("commit", False), 2: ("commit", False)}, status.items
    assert "markers show other partitions" in status.items[0].detail
    # the log is empty, which recover warns of (--force), but no abort lacks proof
    assert [w.split(":")[0] for w in status.warnings] == [f"no commit log at {new_log.url}"]

    report = twopc.recover_sink(sink, SINK_ID, new_log, force=True)
    assert report.ok, report
    assert not any("aborting batch" in line for line in report.forced), report.forced
    assert Counter(store.visible) == ids(0, 1) and store.prepared == {}


def test_attempts_of_a_committed_partition_are_still_aborted(
    tmp_path: Path, store_name: str, store: MemoryStore
) -> None:
    """A losing attempt of partition 0 (committed) is aborted; of partition 1, whose commit
    the crash cut off, exactly one prepared attempt is committed, the newest."""
    sink = MarkedDriverSink(store_name)
    killed_at("between_commits", sink, tmp_path / "log")
    waiting = sorted(store.prepared.values(), key=lambda e: e[0].partition)
    for committable, rows in waiting:  # a second attempt of each waiting partition
        copy = Committable.for_task(
            twopc.TaskContext(
                SINK_ID, QUERY, 1, committable.partition, attempt=committable.attempt + 7
            ),
            MemoryPayload(f"copy-{committable.partition}", len(rows)),
        )
        store.prepared[f"copy-{committable.partition}"] = (copy, list(rows))
    loser = Committable.for_task(
        twopc.TaskContext(SINK_ID, QUERY, 1, 0, attempt=99), MemoryPayload("loser-0", 10)
    )
    store.prepared["loser-0"] = (loser, list(range(100, 110)))

    report = twopc.recover_sink(sink, SINK_ID, CommitLog(str(tmp_path / "new-log")), force=True)
    assert report.ok, report
    assert Counter(store.visible) == ids(0, 1) and store.prepared == {}
    assert {"copy-1", "copy-2"} <= store.committed  # the newest attempt of each


def test_an_undecided_batch_without_markers_is_still_aborted(
    tmp_path: Path, store_name: str, store: MemoryStore
) -> None:
    """No partition of the batch committed: nothing proves a decision, so its prepared
    work is aborted as before (with --force, since this log never heard of the batch)."""
    sink = MarkedDriverSink(store_name)
    killed_at("after_decision", sink, tmp_path / "log")
    new_log = CommitLog(str(tmp_path / "new-log"))
    status = twopc.sink_status(sink, SINK_ID, new_log)
    assert {(i.action, i.unproven) for i in status.items} == {("abort", True)}
    assert twopc.recover_sink(sink, SINK_ID, new_log, force=True).ok
    assert Counter(store.visible) == ids(0) and store.prepared == {}


def test_a_sink_without_markers_keeps_the_old_rule(
    tmp_path: Path, store_name: str, store: MemoryStore
) -> None:
    sink = MemoryDriverSink(store_name)
    killed_at("between_commits", sink, tmp_path / "log")
    status = twopc.sink_status(sink, SINK_ID, CommitLog(str(tmp_path / "new-log")))
    assert {(i.action, i.unproven) for i in status.items} == {("abort", True)}


class InTaskAndDriverSink(MemoryTaskSink, MemoryDriverSink):
    """Commits in its tasks, and finishes on the driver what an earlier driver-commit mode
    prepared (as the SQL sinks' ``transaction`` mode does)."""


def test_markers_of_a_sink_that_commits_in_its_tasks_prove_nothing(store_name: str) -> None:
    """Its tasks commit (and write markers) before any decision, so a marker is no proof
    that a batch was decided."""
    sink = InTaskAndDriverSink(store_name)
    sink.store.markers[(SINK_ID, QUERY, 0)] = 1
    waiting = Committable.for_task(
        twopc.TaskContext(SINK_ID, QUERY, 1, 1, attempt=3), MemoryPayload("waiting-1", 10)
    )
    assert sink.committed_partitions(RecoveryScope(SINK_ID, QUERY), 1, Footprint({}, 2)) == {0}
    assert decided_by_markers(sink, SINK_ID, [waiting]) == []
    assert decided_by_markers(MarkedDriverSink(store_name), SINK_ID, [waiting]) == [waiting]
