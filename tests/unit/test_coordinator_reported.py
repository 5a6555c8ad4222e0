"""The coordinator's ``format("twopc")`` flow without Spark (``ReportedBatches``): ``plan`` where
Spark plans a batch, the batch's tasks (phase 1, inline), then ``commit`` or
``abort`` as Spark calls them, each from a fresh coordinator (Spark plans and
commits in separate, short-lived Python processes, so nothing survives between the steps
but the commit log and the target).

The in-memory reference sinks of ``twopc.testing`` stand in for the backends, one per
commit role. Assertions read what the memory store shows a reader (visible rows, what is
still prepared, markers) and what the commit log holds on disk, never the coordinator's
own logging.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import twopc
from twopc import CommitLog, FaultPlan
from twopc._contract.paths import CommitPath
from twopc._coordination.coordinator import Coordinator
from twopc._coordination.phase1 import Phase1Task
from twopc._coordination.reported import ReportedBatches
from twopc._coordination.reports import TaskOutcome, TaskReport
from twopc.testing import MemoryDriverSink, MemoryStore, MemoryTaskSink

pytestmark = pytest.mark.unit

SINK_ID = "orders"
QUERY = "0d9a8c1e-5b1f-4c55-9a57-3a2f7b6c1e00"
PARTITIONS = 2
ROLES = pytest.mark.parametrize(
    "role", [MemoryDriverSink, MemoryTaskSink], ids=["driver-commit", "in-task"]
)


class Query:
    """One ``format("twopc")`` query over a memory store: each step builds its own sink and
    coordinator from the store's name and the log's path, as Spark's processes would."""

    def __init__(self, role: type[twopc.Sink[Any]], store_name: str, log: Path) -> None:
        self.role = role
        self.store_name = store_name
        self.log = log

    def sink(self) -> twopc.Sink[Any]:
        return self.role(self.store_name)  # type: ignore[call-arg]

    def coordinator(self, faults: FaultPlan | None = None) -> Coordinator:
        return Coordinator(
            self.sink(), SINK_ID, CommitLog(str(self.log)), faults=faults, sleep=lambda _: None
        )

    def plan(self, batch_id: int, fingerprint: str | None = "offsets-a") -> bool:
        """Where Spark plans the batch (``streamWriter()`` in the planning process)."""
        return ReportedBatches(self.coordinator()).plan(
            QUERY, batch_id, input_fingerprint=fingerprint
        )

    def tasks(
        self,
        batch_id: int,
        run: int,
        *,
        replayed: bool = False,
        faults: FaultPlan | None = None,
        only: range = range(PARTITIONS),
    ) -> list[TaskReport | None]:
        """The batch's tasks on the executors: one report per partition, ``None`` where the
        task failed (as Spark hands a failed task's message to ``commit``). ``run`` tells
        the attempt ids of two runs apart, as the writer's run token does; ``replayed``: the
        plan found the batch decided, so each task writes nothing (the writer's
        ``skip_replayed``); ``only``: the partitions whose tasks ran before a crash."""
        task = Phase1Task(
            self.sink(), SINK_ID, QUERY, batch_id, CommitPath.of(self.sink()), faults=faults
        )
        reports: list[TaskReport | None] = []
        for partition in only:
            if replayed:
                reports.append(TaskReport(partition, 0, TaskOutcome.ALREADY_COMMITTED, None))
                continue
            rows = pa.record_batch({"id": pa.array(ids(batch_id, partition), pa.int64())})
            try:
                reports.append(
                    task.run(partition, 0, iter([rows]), attempt_id=run << 15 | partition)
                )
            except twopc.InjectedFault:
                reports.append(None)
        return reports

    def commit(
        self,
        batch_id: int,
        reports: list[TaskReport | None],
        fingerprint: str | None = "offsets-a",
        faults: FaultPlan | None = None,
    ) -> twopc.BatchMetrics:
        """``commit(messages, batchId)`` in its fresh driver-side process."""
        return ReportedBatches(self.coordinator(faults)).commit(
            QUERY, batch_id, reports, input_fingerprint=fingerprint
        )

    def abort(self, batch_id: int, reports: list[TaskReport | None]) -> None:
        """``abort(messages, batchId)`` in its fresh driver-side process."""
        ReportedBatches(self.coordinator()).abort(QUERY, batch_id, reports)

    def write(self, batch_id: int, run: int = 0) -> twopc.BatchMetrics:
        """A batch Spark plans, runs and commits with nothing going wrong."""
        replayed = self.plan(batch_id)
        return self.commit(batch_id, self.tasks(batch_id, run, replayed=replayed))

    def runs(self, batch_id: int) -> list[dict[str, Any]]:
        """The runs record of the batch, as the file in the log holds it."""
        path = self.log / QUERY / f"{batch_id:020d}.runs.json"
        runs: list[dict[str, Any]] = json.loads(path.read_text())["runs"]
        return runs


def ids(batch_id: int, partition: int) -> list[int]:
    return [batch_id * 1000 + partition * 10 + i for i in range(10)]


def once(*batches: int) -> Counter[int]:
    return Counter(i for b in batches for p in range(PARTITIONS) for i in ids(b, p))


QueryOf = Callable[[type[twopc.Sink[Any]]], Query]


@pytest.fixture
def query_of(tmp_path: Path, store_name: str) -> QueryOf:
    """A query of the given sink class over the test's store, its log under ``tmp_path``."""

    def make(role: type[twopc.Sink[Any]]) -> Query:
        return Query(role, store_name, tmp_path / "log")

    return make


@ROLES
def test_a_planned_batch_is_recorded_then_counted_when_it_commits(
    query_of: QueryOf, store: MemoryStore, role: type[twopc.Sink[Any]]
) -> None:
    """The plan records the run before any task writes, its partition count unknown (0);
    the commit replaces that run with the counted one instead of adding a second run, so
    the log shows one run per run of the batch, with the plan's start time."""
    query = query_of(role)
    assert query.plan(0) is False
    (planned,) = query.runs(0)
    assert planned["footprint"]["partitions"] == 0
    assert planned["input"] == "offsets-a"

    metrics = query.commit(0, query.tasks(0, run=0))
    assert metrics.status is twopc.BatchStatus.COMMITTED
    (counted,) = query.runs(0)
    assert counted["footprint"]["partitions"] == PARTITIONS
    assert counted["started_at"] == planned["started_at"]
    assert Counter(store.visible) == once(0)
    assert store.prepared == {}


@ROLES
def test_the_replay_of_a_decided_batch_is_planned_as_decided_and_writes_nothing(
    query_of: QueryOf, store: MemoryStore, role: type[twopc.Sink[Any]]
) -> None:
    """Spark did not record batch 0's commit and runs it again: the plan says it is
    decided (so the writer's tasks write nothing), the commit skips it, and the runs
    record is left as the first run made it."""
    query = query_of(role)
    query.write(0)
    recorded = query.runs(0)

    assert query.plan(0) is True
    replay = query.commit(0, query.tasks(0, run=1, replayed=True))
    assert replay.status is twopc.BatchStatus.SKIPPED
    assert Counter(store.visible) == once(0)
    assert store.prepared == {}
    assert query.runs(0) == recorded

    query.write(1)  # and the query goes on
    assert Counter(store.visible) == once(0, 1)


@ROLES
def test_a_replay_whose_tasks_wrote_again_is_discarded_at_the_commit(
    query_of: QueryOf, store: MemoryStore, role: type[twopc.Sink[Any]]
) -> None:
    """When the plan could not tell the batch is a replay (the offset log could not be
    read), its tasks write again: the driver-commit sink's prepared work is aborted at the
    commit, the in-task sink's tasks find their markers; nothing shows twice."""
    query = query_of(role)
    query.write(0)
    replay = query.commit(0, query.tasks(0, run=1))
    assert replay.status is twopc.BatchStatus.SKIPPED
    assert Counter(store.visible) == once(0)
    assert store.prepared == {}


@ROLES
def test_spark_commits_a_decided_batch_again_and_it_is_skipped(
    query_of: QueryOf, store: MemoryStore, role: type[twopc.Sink[Any]]
) -> None:
    """The double commit Apache Paimon met: ``commit`` succeeded, Spark could not record
    it and calls ``commit`` again with the same messages. The second call is a skipped
    replay, and the next batch commits as usual."""
    query = query_of(role)
    assert query.plan(0) is False
    reports = query.tasks(0, run=0)
    assert query.commit(0, reports).status is twopc.BatchStatus.COMMITTED
    assert query.commit(0, reports).status is twopc.BatchStatus.SKIPPED
    assert Counter(store.visible) == once(0)
    query.write(1)
    assert Counter(store.visible) == once(0, 1)
    assert store.prepared == {}


@ROLES
@pytest.mark.parametrize("ran", [range(PARTITIONS), range(1)], ids=["all-tasks", "one-task"])
def test_a_crash_between_the_plan_and_the_commit_then_a_replay_writes_once(
    query_of: QueryOf, store: MemoryStore, role: type[twopc.Sink[Any]], ran: range
) -> None:
    """The driver dies after the batch was planned and some or all of its tasks ran, before
    ``commit``. The restart plans the batch again: no decision, so it is written again;
    the plan aborts what the dead run prepared (driver-commit sink), the in-task sink's
    tasks skip the partitions their markers show. Every row once, nothing left prepared,
    and still one run in the log (the replay has the dead run's shape)."""
    query = query_of(role)
    query.write(0)
    assert query.plan(1) is False
    query.tasks(1, run=0, only=ran)  # then the driver dies: no commit, no abort

    assert query.plan(1) is False
    assert store.prepared == {}  # what the dead run prepared is aborted before any task
    if role is MemoryTaskSink:  # partitions committed in their tasks stay committed
        assert Counter(store.visible) == once(0) + Counter(i for p in ran for i in ids(1, p))
    assert len(query.runs(1)) == 1
    assert query.commit(1, query.tasks(1, run=1)).status is twopc.BatchStatus.COMMITTED
    assert Counter(store.visible) == once(0, 1)
    assert store.prepared == {}
    (run,) = query.runs(1)
    assert run["footprint"]["partitions"] == PARTITIONS


@ROLES
def test_a_failed_task_fails_the_batch_and_the_rerun_commits_it_once(
    query_of: QueryOf, store: MemoryStore, role: type[twopc.Sink[Any]]
) -> None:
    """A task fails for good: Spark hands ``commit`` a ``None`` message for it (or calls
    ``abort``). The commit refuses and names the partition; a driver-commit sink shows
    nothing of the batch and keeps nothing prepared; an in-task sink keeps the partitions
    that committed, and the rerun writes only the others."""
    query = query_of(role)
    assert query.plan(0) is False
    point = "after_pre_commit" if role is MemoryDriverSink else "before_task_commit"
    reports = query.tasks(0, run=0, faults=FaultPlan.parse(f"{point}:raise@partition=1"))
    assert reports[1] is None

    with pytest.raises(twopc.BatchFailedError, match=r"partition\(s\) \[1\] failed") as failed:
        query.commit(0, reports)
    assert (failed.value.sink_id, failed.value.batch_id, failed.value.partition) == (
        SINK_ID,
        0,
        1,
    )
    query.abort(0, reports)  # Spark then aborts the batch
    assert store.prepared == {}
    kept = Counter(ids(0, 0)) if role is MemoryTaskSink else Counter[int]()
    assert Counter(store.visible) == kept

    assert query.write(0, run=1).status is twopc.BatchStatus.COMMITTED
    assert Counter(store.visible) == once(0)
    assert store.prepared == {}


def test_an_abort_without_a_decision_removes_the_batchs_prepared_work(
    query_of: QueryOf, store: MemoryStore
) -> None:
    """Spark gives up on a batch before any decision: every attempt's prepared work goes,
    including one whose message never reached the driver."""
    query = query_of(MemoryDriverSink)
    query.plan(0)
    reports = query.tasks(0, run=0)
    query.tasks(0, run=1, only=range(1))  # a losing copy whose message Spark dropped
    assert len(store.prepared) == PARTITIONS + 1
    query.abort(0, reports)
    assert store.prepared == {}
    assert store.visible == []


def test_a_commit_that_dies_after_the_decision_is_finished_where_the_replay_is_planned(
    query_of: QueryOf, store: MemoryStore
) -> None:
    """The commit's process fails right after the decision (driver-commit sink): Spark's
    ``abort`` keeps the decided work, and where the restart plans the batch the decision is
    committed, before any task of the replay runs; the replay then writes nothing."""
    query = query_of(MemoryDriverSink)
    query.plan(0)
    reports = query.tasks(0, run=0)
    with pytest.raises(twopc.InjectedFault):
        query.commit(0, reports, faults=FaultPlan.parse("after_decision:raise"))
    query.abort(0, reports)
    assert store.visible == []
    assert len(store.prepared) == PARTITIONS  # decided: kept for the restart

    assert query.plan(0) is True
    assert Counter(store.visible) == once(0)
    assert query.commit(0, query.tasks(0, run=1, replayed=True)).status == "skipped"
    assert Counter(store.visible) == once(0)
    assert store.prepared == {}


def test_a_crash_between_two_partitions_commits_shows_part_until_the_batch_is_planned_again(
    query_of: QueryOf, store: MemoryStore
) -> None:
    """A driver-commit sink commits a decided batch partition by partition: a crash in
    between leaves partition 0 visible and partition 1 prepared. That lasts until the
    batch is planned again (for a batch write: the same ``write_id`` run again), which
    commits the rest; the documented limit of the batch's atomicity."""
    query = query_of(MemoryDriverSink)
    query.plan(0)
    with pytest.raises(twopc.InjectedFault):
        query.commit(0, query.tasks(0, run=0), faults=FaultPlan.parse("between_commits:raise"))
    assert Counter(store.visible) == Counter(ids(0, 0))
    assert query.plan(0) is True
    assert Counter(store.visible) == once(0)
    assert store.prepared == {}


def test_a_checkpoint_one_batch_behind_is_refused_where_the_batch_is_planned(
    query_of: QueryOf, store: MemoryStore
) -> None:
    """Checkpoint and log put back from a copy taken before batch 1 committed: the log
    knows batch 0 only, the in-task sink's markers show batch 1. The plan refuses before
    any task writes batch 1 again."""
    query = query_of(MemoryTaskSink)
    query.write(0)
    query.write(1)
    for entry in (query.log / QUERY).glob(f"{1:020d}.*"):
        entry.unlink()

    with pytest.raises(twopc.CheckpointMismatchError, match="batch 1 or a later one") as refused:
        query.plan(1)
    assert (refused.value.sink_id, refused.value.batch_id) == (SINK_ID, 1)
    assert Counter(store.visible) == once(0, 1)


@ROLES
def test_a_decided_batch_planned_over_other_input_is_refused(
    query_of: QueryOf, store: MemoryStore, role: type[twopc.Sink[Any]]
) -> None:
    """A replay of a decided batch whose offsets differ from the committed run's (an older
    checkpoint planned it anew) is refused where it is planned and where it would commit:
    skipping it would lose rows, writing it would duplicate them."""
    query = query_of(role)
    query.write(0)
    with pytest.raises(twopc.CheckpointMismatchError, match="other input"):
        query.plan(0, fingerprint="offsets-b")
    with pytest.raises(twopc.CheckpointMismatchError, match="other input"):
        query.commit(0, query.tasks(0, run=1, replayed=True), fingerprint="offsets-b")
    assert Counter(store.visible) == once(0)


@ROLES
def test_the_commit_reports_the_backend_and_the_commit_log_size(
    query_of: QueryOf, role: type[twopc.Sink[Any]]
) -> None:
    query = query_of(role)
    sizes = [query.write(batch_id).commit_log_batches for batch_id in range(3)]
    assert sizes == [1, 2, 3]
    assert query.write(2).status == "skipped"  # a replay: the log holds as many
    replay = query.commit(2, query.tasks(2, 1, replayed=True))
    assert (replay.backend, replay.commit_log_batches) == (role.backend_name, 3)
