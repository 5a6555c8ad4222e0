"""The coordinator without Spark, over the in-memory reference sinks of ``twopc.testing``
(one per commit role), tasks inline.

Assertions read what the memory store shows a reader (its visible rows, what is still
prepared), never the coordinator's own logs.
"""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import twopc
from tests.harness.outputs import read_ids, staged_attempts
from twopc import CommitLog, RetryPolicy, TaskContext
from twopc._contract.paths import CommitPath
from twopc._coordination.coordinator import Coordinator
from twopc._coordination.records import Decision
from twopc.local import LocalEngine
from twopc.testing import MemoryDriverSink, MemoryStore, MemoryTaskSink
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


def once(*batches: int) -> Counter[int]:
    return Counter(ids_of(*batches))


class FlakyCommitSink(MemoryDriverSink):
    """Fails the first ``failures`` commit calls."""

    def __init__(
        self, store: str, failures: int, error: type[Exception] = twopc.TransientSinkError
    ) -> None:
        super().__init__(store)
        self.failures = failures
        self.error = error
        self.calls = 0

    def commit(self, committables: Sequence[twopc.Committable]) -> list[twopc.CommitOutcome]:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error("connection reset")
        return super().commit(committables)


class CountingSink(MemoryDriverSink):
    """Counts how often recovery lists prepared work."""

    def __init__(self, store: str) -> None:
        super().__init__(store)
        self.listings = 0

    def recover(self, sink_id: str) -> list[twopc.Committable]:
        self.listings += 1
        return super().recover(sink_id)


def coordinator(sink: twopc.Sink[Any], tmp_path: Path, **options: Any) -> Coordinator:
    return Coordinator(
        sink, "orders", CommitLog(str(tmp_path / "log")), sleep=lambda _: None, **options
    )


@pytest.mark.parametrize("role", [MemoryDriverSink, MemoryTaskSink], ids=["driver", "task"])
def test_batches_commit_and_replays_are_skipped(
    tmp_path: Path, store_name: str, store: MemoryStore, role: type[twopc.Sink[Any]]
) -> None:
    coord = coordinator(role(store_name), tmp_path)  # type: ignore[call-arg]
    first = coord.run_batch(QUERY, 0, engine(0))
    assert (first.status, first.rows, first.partitions) == ("committed", 20, 2)
    assert first.status is twopc.BatchStatus.COMMITTED
    assert Counter(store.visible) == once(0)

    replay = coordinator(role(store_name), tmp_path).run_batch(QUERY, 0, engine(0))  # type: ignore[call-arg]
    assert replay.status == "skipped"
    assert Counter(store.visible) == once(0)


def test_transient_commit_errors_are_retried_with_backoff(
    tmp_path: Path, store_name: str, store: MemoryStore
) -> None:
    sleeps: list[float] = []
    coord = Coordinator(
        FlakyCommitSink(store_name, failures=2),
        "orders",
        CommitLog(str(tmp_path / "log")),
        retry=RetryPolicy(max_attempts=5, initial_backoff_seconds=0.5, multiplier=2),
        sleep=sleeps.append,
    )
    metrics = coord.run_batch(QUERY, 0, engine(0))
    assert metrics.commit_retries == 2
    # exponential backoff, each wait drawn from the upper half of it (jitter 0.5)
    assert len(sleeps) == 2
    assert 0.25 <= sleeps[0] <= 0.5 and 0.5 <= sleeps[1] <= 1.0
    assert Counter(store.visible) == once(0)


def test_exhausted_retries_keep_the_decision_and_a_restart_finishes(
    tmp_path: Path, store_name: str, store: MemoryStore
) -> None:
    coord = coordinator(FlakyCommitSink(store_name, failures=10), tmp_path, retry=RetryPolicy(3))
    with pytest.raises(twopc.CommitError, match="sink 'orders', batch 0, partition 0"):
        coord.run_batch(QUERY, 0, engine(0))
    assert store.visible == []

    healthy = coordinator(MemoryDriverSink(store_name), tmp_path)
    replay = healthy.run_batch(QUERY, 0, engine(0))
    assert replay.status == "skipped" and replay.recovered_committed == 2
    assert Counter(store.visible) == once(0)


def test_a_foreign_error_in_commit_is_stamped_once_and_not_retried(
    tmp_path: Path, store_name: str
) -> None:
    sink = FlakyCommitSink(store_name, failures=1, error=ValueError)
    with pytest.raises(twopc.CommitError) as failure:
        coordinator(sink, tmp_path).run_batch(QUERY, 0, engine(0))
    error = failure.value
    assert (error.sink_id, error.batch_id, error.partition) == ("orders", 0, 0)
    assert str(error) == "sink 'orders', batch 0, partition 0: ValueError: connection reset"
    assert sink.calls == 1


class SchemaMismatch(twopc.PermanentSinkError):
    """A sink's own kind of bad input."""


class RejectingSink(MemoryDriverSink):
    """Rejects every batch without saying where: the core fills that in."""

    def invoke(self, txn: Any, batch: pa.RecordBatch) -> None:
        raise SchemaMismatch("column 'region' is missing")


def test_bad_input_fails_the_batch_names_it_and_nothing_is_visible(
    tmp_path: Path, store_name: str, store: MemoryStore
) -> None:
    with pytest.raises(twopc.BatchFailedError) as failure:
        coordinator(RejectingSink(store_name), tmp_path).run_batch(QUERY, 3, engine(3))
    error = failure.value
    assert (error.sink_id, error.batch_id, error.partition) == ("orders", 3, 0)
    assert "'region'" in str(error) and "2 of 2 partition(s)" in str(error)
    # the sink's error travelled in the task's report and keeps its class
    cause = error.__cause__
    assert isinstance(cause, SchemaMismatch)
    assert (cause.sink_id, cause.batch_id, cause.partition) == ("orders", 3, 0)
    assert cause.cause_message == "column 'region' is missing"
    assert store.visible == [] and store.prepared == {}


def test_orphan_attempts_are_aborted_not_committed(
    tmp_path: Path, store_name: str, store: MemoryStore
) -> None:
    """A speculative attempt that prepared but lost the race must never become visible."""
    sink = MemoryDriverSink(store_name)
    txn = sink.begin_transaction(TaskContext("orders", QUERY, 0, 1, attempt=7))
    sink.invoke(txn, pa.record_batch({"id": pa.array([999_999], pa.int64())}))
    sink.pre_commit(txn)

    coord = coordinator(sink, tmp_path)
    metrics = coord.run_batch(QUERY, 0, engine(0))
    assert metrics.recovered_aborted == 1
    assert Counter(store.visible) == once(0) and store.prepared == {}


def test_recovery_runs_when_the_coordinator_starts_and_after_a_failure_only(
    tmp_path: Path, store_name: str, store: MemoryStore
) -> None:
    """A batch after a committed batch of the same coordinator asks the target nothing
    before phase 1; a failed batch makes the next one recover first."""
    sink = CountingSink(store_name)
    coord = coordinator(sink, tmp_path)
    for batch_id in range(3):
        coord.run_batch(QUERY, batch_id, engine(batch_id))
    assert sink.listings == 1
    faults = twopc.FaultPlan.parse("before_decision:raise@batch=3")
    coord.faults = faults
    with pytest.raises(twopc.InjectedFault):
        coord.run_batch(QUERY, 3, engine(3))
    assert sink.listings == 2  # the failed batch looked for its own prepared work ...
    assert store.prepared == {}  # ... and aborted it
    coord.faults = None
    coord.run_batch(QUERY, 3, engine(3))
    assert sink.listings == 3  # the next batch recovered first
    assert Counter(store.visible) == once(0, 1, 2, 3)


def test_a_failed_batch_leaves_other_pending_decisions_to_recovery(
    tmp_path: Path, store_name: str, store: MemoryStore
) -> None:
    """The abort after a failed phase 1 touches only that batch: a decided batch of another
    query, pending since a crash, is finished by recovery, not aborted."""
    sink = MemoryDriverSink(store_name)
    _, pending = _prepare(sink, "other-query", 5, [42])
    coord = coordinator(sink, tmp_path)
    coord.recovery.needed = False  # as if this coordinator had recovered before the crash
    coord.commit_log.record_decision(Decision("orders", "other-query", 5, (pending,)))
    coord.faults = twopc.FaultPlan.parse("after_pre_commit:raise@partition=1")
    with pytest.raises(twopc.BatchFailedError):
        coord.run_batch(QUERY, 0, engine(0))
    assert next(iter(store.prepared.values()))[0] == pending  # untouched
    coord.faults = None
    coord.run_batch(QUERY, 0, engine(0))
    assert Counter(store.visible) == Counter([42, *ids_of(0)])


def _prepare(
    sink: MemoryDriverSink, query: str, batch: int, ids: list[int]
) -> tuple[Any, twopc.Committable]:
    txn = sink.begin_transaction(TaskContext("orders", query, batch, 0))
    sink.invoke(txn, pa.record_batch({"id": pa.array(ids, pa.int64())}))
    return txn, sink.pre_commit(txn)


def test_a_log_ahead_of_the_checkpoint_is_refused(
    tmp_path: Path, store_name: str, store: MemoryStore
) -> None:
    """A checkpoint restored from an older copy asks for a batch the log has moved past."""
    coord = coordinator(MemoryDriverSink(store_name), tmp_path, log_retention=1)
    for batch_id in range(3):
        coord.run_batch(QUERY, batch_id, engine(batch_id))
    # batch 2 of the same query is a replay and is skipped, not refused
    assert coord.run_batch(QUERY, 2, engine(2)).status == "skipped"
    with pytest.raises(twopc.CheckpointMismatchError, match="already holds batch 2"):
        coord.run_batch(QUERY, 0, engine(0))
    assert Counter(store.visible) == once(0, 1, 2)


@pytest.mark.parametrize("behind", [1, 2], ids=["one-batch-behind", "two-batches-behind"])
def test_a_log_put_back_with_its_checkpoint_is_refused_where_markers_are_newer(
    tmp_path: Path, store_name: str, store: MemoryStore, behind: int
) -> None:
    """The commit log inside a checkpoint copied after batch 0 comes back with the copy. The
    target's markers show the batches the copy has never heard of, even the very next one
    (which the restart plans anew, maybe over other input): refused, nothing written."""
    log = tmp_path / "log"
    coord = coordinator(MemoryTaskSink(store_name), tmp_path)
    coord.run_batch(QUERY, 0, engine(0))
    copy = tmp_path / "log-after-0"
    shutil.copytree(log, copy)
    for batch_id in range(1, behind + 1):
        coord.run_batch(QUERY, batch_id, engine(batch_id))
    shutil.rmtree(log)
    shutil.copytree(copy, log)
    before = Counter(store.visible)
    restarted = coordinator(MemoryTaskSink(store_name), tmp_path)
    with pytest.raises(twopc.CheckpointMismatchError, match="put back from an older copy") as err:
        restarted.run_batch(QUERY, 1, LocalEngine(partitions(1, count=3), processes=False))
    assert err.value.batch_id == 1
    assert Counter(store.visible) == before


def test_a_crash_after_some_tasks_committed_is_not_taken_for_a_restored_log(
    tmp_path: Path, store_name: str, store: MemoryStore
) -> None:
    """The log knows the batch it recorded a run of: its own markers are no sign of a copy."""
    faults = twopc.FaultPlan.parse("before_decision:raise@batch=1")
    coord = coordinator(MemoryTaskSink(store_name), tmp_path, faults=faults)
    coord.run_batch(QUERY, 0, engine(0))
    with pytest.raises(twopc.InjectedFault):
        coord.run_batch(QUERY, 1, engine(1))
    restarted = coordinator(MemoryTaskSink(store_name), tmp_path)
    assert restarted.run_batch(QUERY, 1, engine(1)).status == "committed"
    assert Counter(store.visible) == once(0, 1)


def test_a_new_query_id_starts_its_own_batches(
    tmp_path: Path, store_name: str, store: MemoryStore
) -> None:
    coord = coordinator(MemoryDriverSink(store_name), tmp_path)
    coord.run_batch(QUERY, 0, engine(0))
    assert coord.run_batch("query-2", 0, engine(0)).status == "committed"
    assert set(Counter(store.visible).values()) == {2}


def test_old_log_entries_are_pruned(tmp_path: Path, store_name: str, store: MemoryStore) -> None:
    coord = coordinator(MemoryDriverSink(store_name), tmp_path, log_retention=2)
    for batch_id in range(5):
        coord.run_batch(QUERY, batch_id, engine(batch_id))
    assert coord.commit_log.decided_batches(QUERY) == [3, 4]
    assert Counter(store.visible) == once(0, 1, 2, 3, 4)


def test_a_batch_after_a_committed_one_lists_the_log_once(
    tmp_path: Path, store_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    coord = coordinator(MemoryDriverSink(store_name), tmp_path, log_retention=2)
    for batch_id in range(3):
        coord.run_batch(QUERY, batch_id, engine(batch_id))
    listed: Counter[str] = Counter()
    for name in ("query_ids", "_batch_files", "decided_batches", "is_done"):
        method = getattr(CommitLog, name)

        def counting(self: CommitLog, *args: Any, _name: str = name, _m: Any = method) -> Any:
            listed[_name] += 1
            return _m(self, *args)

        monkeypatch.setattr(CommitLog, name, counting)
    coord.run_batch(QUERY, 3, engine(3))  # past the retention: it prunes batch 1
    assert listed == Counter({"_batch_files": 1})
    assert coord.commit_log.decided_batches(QUERY) == [2, 3]


def test_task_retries_replace_a_failed_attempt(
    tmp_path: Path, store_name: str, store: MemoryStore
) -> None:
    faults = twopc.FaultPlan.parse("before_pre_commit:raise@partition=0,attempt=0")
    coord = coordinator(MemoryDriverSink(store_name), tmp_path, faults=faults)
    metrics = coord.run_batch(QUERY, 0, engine(0, max_attempts=2))
    assert {t.partition: t.attempt for t in metrics.tasks} == {0: 1, 1: 0}
    assert Counter(store.visible) == once(0) and store.prepared == {}


@pytest.mark.parametrize("point", ["after_invoke", "after_pre_commit"])
def test_a_killed_attempt_leaves_nothing_once_its_batch_commits(tmp_path: Path, point: str) -> None:
    """A task process killed before or after preparing, then retried: its staged files go
    when the batch commits, not at the next batch, which the last batch of a query lacks
    (found by the chaos campaign, seeds 78 and 10165). Task processes need a sink whose
    target outlives them: the files sink."""
    faults = twopc.FaultPlan.parse(f"{point}:kill@partition=1,attempt=0")
    coord = coordinator(FilesSink(str(tmp_path / "out")), tmp_path, faults=faults)
    engine = LocalEngine(partitions(0), processes=True, max_attempts=2)
    metrics = coord.run_batch(QUERY, 0, engine)
    assert {t.partition: t.attempt for t in metrics.tasks} == {0: 0, 1: 1}
    assert read_ids(tmp_path / "out") == dict.fromkeys(ids_of(0), 1)
    assert staged_attempts(tmp_path / "out") == []
    assert metrics.recovered_aborted + metrics.swept == 1


# -- the in-task path ---------------------------------------------------------------------------


def test_in_task_sinks_are_visible_before_the_decision_and_a_rerun_skips_them(
    tmp_path: Path, store_name: str, store: MemoryStore
) -> None:
    faults = twopc.FaultPlan.parse("before_decision:raise")
    coord = coordinator(MemoryTaskSink(store_name), tmp_path, faults=faults)
    with pytest.raises(twopc.InjectedFault):
        coord.run_batch(QUERY, 0, engine(0))
    # Each task committed on its own: no atomic batch visibility for such sinks.
    assert Counter(store.visible) == once(0)
    rerun = coordinator(MemoryTaskSink(store_name), tmp_path).run_batch(QUERY, 0, engine(0))
    assert rerun.status == "committed"  # no decision was written, so the batch ran again...
    assert Counter(store.visible) == once(0)  # ... and every task found its marker


def test_a_partly_committed_in_task_batch_finishes_once(
    tmp_path: Path, store_name: str, store: MemoryStore
) -> None:
    faults = twopc.FaultPlan.parse("before_task_commit:raise@batch=1,partition=1")
    coord = coordinator(MemoryTaskSink(store_name), tmp_path, faults=faults)
    coord.run_batch(QUERY, 0, engine(0))
    with pytest.raises(twopc.BatchFailedError, match="stay committed and are skipped"):
        coord.run_batch(QUERY, 1, engine(1))
    assert Counter(store.visible) == once(0) + Counter(range(1000, 1010))
    coordinator(MemoryTaskSink(store_name), tmp_path).run_batch(QUERY, 1, engine(1))
    assert Counter(store.visible) == once(0, 1)


class ExpiringMarkersSink(MemoryTaskSink):
    """A memory in-task sink whose target says it drops markers an hour after writing."""

    def markers_expire_after(self) -> float | None:
        return 3600.0


@pytest.mark.parametrize("markers", ["expired", "kept", "partly"])
def test_a_first_batch_older_than_its_markers_live_is_refused_unless_all_are_seen(
    tmp_path: Path,
    store_name: str,
    store: MemoryStore,
    monkeypatch: pytest.MonkeyPatch,
    markers: str,
) -> None:
    """Batch 0 has no earlier batch whose markers could show that they expired. Its first
    run crashed after its tasks committed; the restart comes two hours later, when the
    target may have dropped the markers: unless every partition's marker is still there,
    twopc cannot tell what committed and refuses instead of writing it again."""
    faults = twopc.FaultPlan.parse(
        "before_task_commit:raise@partition=1" if markers == "partly" else "before_decision:raise"
    )
    with pytest.raises((twopc.InjectedFault, twopc.BatchFailedError)):
        coordinator(ExpiringMarkersSink(store_name), tmp_path, faults=faults).run_batch(
            QUERY, 0, engine(0)
        )
    committed = Counter(store.visible)
    if markers == "expired":
        store.markers.clear()
    import twopc._coordination.replay_guard as guard

    later = time.time() + 2 * 3600
    monkeypatch.setattr(guard.time, "time", lambda: later)
    restarted = coordinator(ExpiringMarkersSink(store_name), tmp_path)
    if markers == "kept":
        assert restarted.run_batch(QUERY, 0, engine(0)).status == "committed"
        assert Counter(store.visible) == once(0)
        return
    with pytest.raises(twopc.CommitStateUnknownError, match="drops its markers 60 min") as err:
        restarted.run_batch(QUERY, 0, engine(0))
    assert err.value.batch_id == 0
    assert "runs.json" in str(err.value)
    assert Counter(store.visible) == committed


def test_a_young_first_batch_trusts_its_markers(
    tmp_path: Path, store_name: str, store: MemoryStore
) -> None:
    """Within the markers' lifetime a missing marker means "not committed": the replay
    writes what had not committed, once."""
    faults = twopc.FaultPlan.parse("before_task_commit:raise@partition=1")
    with pytest.raises(twopc.BatchFailedError):
        coordinator(ExpiringMarkersSink(store_name), tmp_path, faults=faults).run_batch(
            QUERY, 0, engine(0)
        )
    assert Counter(store.visible) == Counter(range(10))
    coordinator(ExpiringMarkersSink(store_name), tmp_path).run_batch(QUERY, 0, engine(0))
    assert Counter(store.visible) == once(0)


def test_a_pending_decision_finishes_the_way_it_was_made(
    tmp_path: Path, store_name: str, store: MemoryStore
) -> None:
    """A batch decided for the task path is only marked done; one decided for the driver
    path cannot be finished by a sink that only commits in the task: that is refused."""
    log = CommitLog(str(tmp_path / "log"))
    marked = Decision("orders", QUERY, 0, (), path=CommitPath.TASK)
    log.record_decision(marked)
    coordinator(MemoryTaskSink(store_name), tmp_path).recover()
    assert log.is_done(QUERY, 0)

    committable = _prepare(MemoryDriverSink(store_name), QUERY, 1, [7])[1]
    log.record_decision(Decision("orders", QUERY, 1, (committable,), path=CommitPath.DRIVER))
    with pytest.raises(twopc.ConfigurationError, match="decided for a commit on the driver"):
        coordinator(MemoryTaskSink(store_name), tmp_path).recover()
    coordinator(MemoryDriverSink(store_name), tmp_path).recover()
    assert store.visible == [7]


def test_an_object_without_a_commit_role_is_refused(tmp_path: Path) -> None:
    class NoRole(twopc.Sink[list[int]]):
        def begin_transaction(self, ctx: TaskContext) -> list[int]:
            return []

        def invoke(self, txn: list[int], batch: pa.RecordBatch) -> None: ...

        def pre_commit(self, txn: list[int]) -> twopc.Committable:
            raise NotImplementedError

        def abort(self, txn: list[int]) -> None: ...

    with pytest.raises(twopc.ConfigurationError, match="implements no commit role"):
        coordinator(NoRole(), tmp_path)
    with pytest.raises(twopc.ConfigurationError, match=r"expected a twopc\.Sink"):
        twopc.foreach_batch(object(), "orders")  # type: ignore[arg-type]


# -- the commit log's formats ---------------------------------------------------------------------


def test_a_decision_of_a_newer_format_is_refused_not_misread(
    tmp_path: Path, store_name: str
) -> None:
    log = CommitLog(str(tmp_path / "log"))
    log.record_decision(Decision("orders", QUERY, 0, ()))
    path = tmp_path / "log" / QUERY / f"{0:020d}.decision.json"
    body = json.loads(path.read_text())
    path.write_text(json.dumps({**body, "format": 4}))
    with pytest.raises(twopc.UnsupportedFormatError, match="format 4; this twopc reads formats"):
        coordinator(MemoryDriverSink(store_name), tmp_path).run_batch(QUERY, 0, engine(0))


def test_a_decision_of_format_1_is_read_with_its_path(tmp_path: Path) -> None:
    log = CommitLog(str(tmp_path / "log"))
    directory = tmp_path / "log" / QUERY
    directory.mkdir(parents=True)
    body = {
        "format": 1,
        "sink_id": "orders",
        "query_id": QUERY,
        "batch_id": 4,
        "decided_at": 1.0,
        "committables": [],
        "committed_in_task": True,
    }
    (directory / f"{4:020d}.decision.json").write_text(json.dumps(body))
    decision = log.decision(QUERY, 4)
    assert decision is not None and decision.path is CommitPath.TASK


# -- the writer around the coordinator ----------------------------------------------------------


def test_metrics_callback_errors_do_not_fail_a_committed_batch(
    tmp_path: Path, store_name: str
) -> None:
    def broken(_: twopc.BatchMetrics) -> None:
        raise RuntimeError("dashboard down")

    writer = twopc.local.foreach_batch(
        MemoryDriverSink(store_name),
        "orders",
        commit_log=str(tmp_path / "log"),
        on_metrics=broken,
        processes=False,
    )
    metrics = writer.write(QUERY, 0, partitions(0))
    assert metrics.status == "committed" and writer.last_metrics == metrics


def test_invalid_sink_ids_are_rejected(store_name: str) -> None:
    sink = MemoryDriverSink(store_name)
    for bad in ["", "has space", "../up", "x" * 65, "-lead"]:
        with pytest.raises(twopc.ConfigurationError, match="invalid sink_id"):
            twopc.foreach_batch(sink, bad)


def test_recovery_removes_a_crashed_log_write(
    tmp_path: Path, store_name: str, store: MemoryStore
) -> None:
    """A driver killed inside the commit log's atomic write leaves a hidden temporary file;
    the next recovery deletes it (chaos campaign, seed 896)."""
    coord = coordinator(MemoryDriverSink(store_name), tmp_path)
    coord.run_batch(QUERY, 0, engine(0))
    leftover = tmp_path / "log" / QUERY / f".tmp-0123abcd-{0:020d}.done"
    leftover.write_bytes(b"")
    coord.recover()
    assert not leftover.exists()
    assert Counter(store.visible) == once(0)


# -- the metrics' bookkeeping figures -----------------------------------------------------------


def test_the_commit_log_size_is_what_the_log_holds_after_each_batch(
    tmp_path: Path, store_name: str
) -> None:
    coord = coordinator(MemoryDriverSink(store_name), tmp_path, log_retention=2)
    for batch_id in range(5):
        metrics = coord.run_batch(QUERY, batch_id, engine(batch_id))
        assert metrics.backend == MemoryDriverSink.backend_name
        assert metrics.commit_log_batches == len(coord.commit_log.decided_batches(QUERY))
    replay = coord.run_batch(QUERY, 4, engine(4))
    assert replay.status == "skipped"
    assert replay.commit_log_batches == len(coord.commit_log.decided_batches(QUERY))


class LingeringSink(MemoryTaskSink):
    """An in-task sink whose lingering sweep finds three open transactions of earlier runs."""

    def sweep_lingering(self, sink_id: str, footprint: twopc.Footprint) -> int:
        return 3


def test_lingering_transactions_aborted_are_counted_apart(tmp_path: Path, store_name: str) -> None:
    coordinator(LingeringSink(store_name), tmp_path).run_batch(QUERY, 0, engine(0))
    restarted = coordinator(LingeringSink(store_name), tmp_path)
    metrics = restarted.run_batch(QUERY, 1, engine(1))
    assert metrics.lingering_aborted == 3
    assert metrics.recovered_aborted >= 3  # the lingering ones are part of the aborted
    assert "lingering_aborted=3" in metrics.summary()


class _StragglingEngine(LocalEngine):
    """Phase 1 fails after partition 0 prepared; partition 1's task is still running then
    (as Spark lets a failed job's other tasks run on) and prepares only once the engine
    is asked to wait for it."""

    def __init__(self, store_name: str, batch_id: int) -> None:
        super().__init__(partitions(batch_id), processes=False)
        self.store_name = store_name
        self.task: Any = None
        self.waited = 0

    def run_phase1(self, task: Any) -> list[Any]:
        self.task = task
        task.run(0, 0, iter(partitions(1)[0].to_batches()), attempt_id=10)
        raise twopc.SinkError("the Spark job failed: partition 0 was killed")

    def wait_for_stragglers(self, timeout: float) -> bool:
        self.waited += 1
        # the straggler ends now, after preparing its work
        self.task.run(1, 0, iter(partitions(1)[1].to_batches()), attempt_id=11)
        return True


def test_a_failed_phase1_waits_for_its_stragglers_before_cleaning_up(
    tmp_path: Path, store_name: str, store: MemoryStore
) -> None:
    """Seed 120146 of the chaos campaign: a task of the failed job prepared after the
    clean-up, and its work stayed until the next recovery. The clean-up now waits."""
    straggling = _StragglingEngine(store_name, 1)
    with pytest.raises(twopc.BatchFailedError):
        coordinator(MemoryDriverSink(store_name), tmp_path).run_batch(QUERY, 1, straggling)
    assert straggling.waited == 1
    assert store.prepared == {}  # the straggler's prepared work was aborted too
    assert store.visible == []
