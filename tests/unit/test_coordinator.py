"""The coordinator without Spark: the files sink on a temporary directory, tasks inline.

Every assertion reads the output back with pyarrow (what a reader sees) or looks at what
is left on disk, never at the coordinator's own logs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import twopc
from tests.helpers import read_ids, staged_attempts
from twopc import CommitLog, Coordinator, RetryPolicy, TaskContext
from twopc.local import LocalEngine
from twopc_files import FilesSink

pytestmark = pytest.mark.unit

QUERY = "query-1"


def partitions(batch_id: int, count: int = 2, rows: int = 10) -> list[pa.Table]:
    return [
        pa.table(
            {
                "id": pa.array(
                    range(batch_id * 1000 + p * rows, batch_id * 1000 + (p + 1) * rows), pa.int64()
                )
            }
        )
        for p in range(count)
    ]


def engine(batch_id: int, **options: Any) -> LocalEngine:
    return LocalEngine(partitions(batch_id), processes=False, **options)


def ids_of(*batches: int, count: int = 2, rows: int = 10) -> set[int]:
    return {b * 1000 + i for b in batches for i in range(count * rows)}


class FlakyCommitSink(FilesSink):
    """Fails the first ``failures`` commit calls with a transient error."""

    def __init__(self, path: str, failures: int, error: type[Exception] = twopc.TransientSinkError):
        super().__init__(path)
        self.failures = failures
        self.error = error
        self.calls = 0

    def commit(self, committables: Sequence[twopc.Committable]) -> list[twopc.CommitOutcome]:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error("connection reset")
        return super().commit(committables)


def coordinator(sink: FilesSink, tmp_path: Path, **options: Any) -> Coordinator:
    return Coordinator(
        sink, "orders", CommitLog(str(tmp_path / "log")), sleep=lambda _: None, **options
    )


def test_batches_commit_and_replays_are_skipped(tmp_path: Path) -> None:
    coord = coordinator(FilesSink(str(tmp_path / "out")), tmp_path)
    first = coord.run_batch(QUERY, 0, engine(0))
    assert (first.status, first.rows, first.partitions) == ("committed", 20, 2)
    assert set(read_ids(tmp_path / "out")) == ids_of(0)

    replay = coord.run_batch(QUERY, 0, engine(0))
    assert replay.status == "skipped"
    assert read_ids(tmp_path / "out") == dict.fromkeys(ids_of(0), 1)


def test_transient_commit_errors_are_retried_with_backoff(tmp_path: Path) -> None:
    sleeps: list[float] = []
    sink = FlakyCommitSink(str(tmp_path / "out"), failures=2)
    coord = Coordinator(
        sink,
        "orders",
        CommitLog(str(tmp_path / "log")),
        retry=RetryPolicy(max_attempts=5, initial_backoff_seconds=0.5, multiplier=2),
        sleep=sleeps.append,
    )
    metrics = coord.run_batch(QUERY, 0, engine(0))
    assert metrics.commit_retries == 2
    assert sleeps == [0.5, 1.0]
    assert set(read_ids(tmp_path / "out")) == ids_of(0)


def test_exhausted_retries_keep_the_decision_and_a_restart_finishes(tmp_path: Path) -> None:
    sink = FlakyCommitSink(str(tmp_path / "out"), failures=10)
    coord = coordinator(sink, tmp_path, retry=RetryPolicy(max_attempts=3))
    with pytest.raises(twopc.CommitError, match="sink 'orders', batch 0"):
        coord.run_batch(QUERY, 0, engine(0))
    assert read_ids(tmp_path / "out") == {}

    healthy = coordinator(FilesSink(str(tmp_path / "out")), tmp_path)
    replay = healthy.run_batch(QUERY, 0, engine(0))
    assert replay.status == "skipped" and replay.recovered_committed == 2
    assert read_ids(tmp_path / "out") == dict.fromkeys(ids_of(0), 1)


def test_permanent_commit_errors_are_not_retried(tmp_path: Path) -> None:
    sink = FlakyCommitSink(str(tmp_path / "out"), failures=1, error=ValueError)
    with pytest.raises(twopc.CommitError, match="ValueError: connection reset"):
        coordinator(sink, tmp_path).run_batch(QUERY, 0, engine(0))
    assert sink.calls == 1


def test_bad_input_fails_the_batch_and_nothing_is_visible(tmp_path: Path) -> None:
    sink = FilesSink(str(tmp_path / "out"), partition_by=["region"])
    with pytest.raises(twopc.BatchFailedError) as failure:
        coordinator(sink, tmp_path).run_batch(QUERY, 3, engine(3))
    assert failure.value.sink_id == "orders" and failure.value.batch_id == 3
    assert failure.value.partition == 0
    assert "'region'" in str(failure.value) and "2 of 2 partition(s)" in str(failure.value)
    assert read_ids(tmp_path / "out") == {}
    assert staged_attempts(tmp_path / "out") == []


def test_orphan_attempts_are_aborted_not_committed(tmp_path: Path) -> None:
    """A speculative attempt that prepared but lost the race must never become visible."""
    sink = FilesSink(str(tmp_path / "out"))
    txn = sink.begin_transaction(TaskContext("orders", QUERY, 0, 1, attempt=7))
    sink.invoke(txn, pa.record_batch({"id": pa.array([999_999], pa.int64())}))
    sink.pre_commit(txn)

    coord = coordinator(sink, tmp_path)
    coord.run_batch(QUERY, 0, engine(0))
    coord.run_batch(QUERY, 1, engine(1))  # the next batch's recovery sweeps the orphan
    assert set(read_ids(tmp_path / "out")) == ids_of(0, 1)
    assert staged_attempts(tmp_path / "out") == []


def test_a_log_ahead_of_the_checkpoint_is_refused(tmp_path: Path) -> None:
    """A checkpoint restored from an older copy asks for a batch the log has moved past."""
    coord = coordinator(FilesSink(str(tmp_path / "out")), tmp_path, log_retention=1)
    for batch_id in range(3):
        coord.run_batch(QUERY, batch_id, engine(batch_id))
    # batch 2 of the same query is a replay and is skipped, not refused
    assert coord.run_batch(QUERY, 2, engine(2)).status == "skipped"
    with pytest.raises(twopc.CheckpointMismatchError, match="already holds batch 2"):
        coord.run_batch(QUERY, 0, engine(0))
    assert read_ids(tmp_path / "out") == dict.fromkeys(ids_of(0, 1, 2), 1)


def test_a_new_query_id_starts_its_own_batches(tmp_path: Path) -> None:
    coord = coordinator(FilesSink(str(tmp_path / "out")), tmp_path)
    coord.run_batch(QUERY, 0, engine(0))
    assert coord.run_batch("query-2", 0, engine(0)).status == "committed"
    assert set(read_ids(tmp_path / "out").values()) == {2}


def test_old_log_entries_are_pruned(tmp_path: Path) -> None:
    coord = coordinator(FilesSink(str(tmp_path / "out")), tmp_path, log_retention=2)
    for batch_id in range(5):
        coord.run_batch(QUERY, batch_id, engine(batch_id))
    assert coord.commit_log.decided_batches(QUERY) == [3, 4]
    assert set(read_ids(tmp_path / "out")) == ids_of(0, 1, 2, 3, 4)


def test_task_retries_replace_a_failed_attempt(tmp_path: Path) -> None:
    faults = twopc.FaultPlan.parse("before_pre_commit:raise@partition=0,attempt=0")
    coord = coordinator(FilesSink(str(tmp_path / "out")), tmp_path, faults=faults)
    metrics = coord.run_batch(QUERY, 0, engine(0, max_attempts=2))
    assert {t.partition: t.attempt for t in metrics.tasks} == {0: 1, 1: 0}
    assert read_ids(tmp_path / "out") == dict.fromkeys(ids_of(0), 1)
    assert staged_attempts(tmp_path / "out") == []


@pytest.mark.parametrize("point", ["after_invoke", "after_pre_commit"])
def test_a_killed_attempt_leaves_nothing_once_its_batch_commits(
    tmp_path: Path, point: str
) -> None:
    """A task process killed before or after preparing, then retried: its staged files go
    when the batch commits, not at the next batch, which the last batch of a query lacks
    (found by the chaos campaign, seeds 78 and 10165)."""
    faults = twopc.FaultPlan.parse(f"{point}:kill@partition=1,attempt=0")
    coord = coordinator(FilesSink(str(tmp_path / "out")), tmp_path, faults=faults)
    engine = LocalEngine(partitions(0), processes=True, max_attempts=2)
    metrics = coord.run_batch(QUERY, 0, engine)
    assert {t.partition: t.attempt for t in metrics.tasks} == {0: 0, 1: 1}
    assert read_ids(tmp_path / "out") == dict.fromkeys(ids_of(0), 1)
    assert staged_attempts(tmp_path / "out") == []
    assert metrics.recovered_aborted + metrics.swept == 1


class InTaskSink(FilesSink):
    """Commits in the task, like the Kafka and SQL transaction modes will."""

    capabilities = twopc.Capabilities(global_commit=False, commit_in_task=True)


def test_commit_in_task_sinks_are_visible_before_the_decision(tmp_path: Path) -> None:
    faults = twopc.FaultPlan.parse("before_decision:raise")
    coord = coordinator(InTaskSink(str(tmp_path / "out")), tmp_path, faults=faults)
    with pytest.raises(twopc.InjectedFault):
        coord.run_batch(QUERY, 0, engine(0))
    # Each task committed on its own: no atomic batch visibility for such sinks.
    assert set(read_ids(tmp_path / "out")) == ids_of(0)


def test_metrics_callback_errors_do_not_fail_a_committed_batch(tmp_path: Path) -> None:
    def broken(_: twopc.BatchMetrics) -> None:
        raise RuntimeError("dashboard down")

    writer = twopc.local.foreach_batch(
        FilesSink(str(tmp_path / "out")), "orders", on_metrics=broken, processes=False
    )
    metrics = writer.write(QUERY, 0, partitions(0))
    assert metrics.status == "committed" and writer.last_metrics == metrics
    assert set(read_ids(tmp_path / "out")) == ids_of(0)


def test_invalid_sink_ids_are_rejected(tmp_path: Path) -> None:
    sink = FilesSink(str(tmp_path / "out"))
    for bad in ["", "has space", "../up", "x" * 65, "-lead"]:
        with pytest.raises(twopc.ConfigurationError, match="invalid sink_id"):
            twopc.foreach_batch(sink, bad)
