"""A SinkGroup with a last resource on the local engine: a real files target (Parquet on the
local disk) and the kit's in-memory last resource, whose one in-task transaction per batch
decides the group's batch (the shape of PostgreSQL + Kafka ``atomic``, whose real-system
tests are tests/integration/test_group_kafka_last_resource.py and tests/crash). Crashes here
raise at the crash point (the simulator)."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

import twopc
import twopc.local
from twopc import Action, CommitLog, FaultPlan, InjectedFault, Member, SinkGroup
from twopc.testing import (
    MemoryDriverSink,
    MemoryLastResource,
    MemoryTaskSink,
    forget_store,
    memory_store,
)

pytestmark = pytest.mark.unit

QUERY, GROUP = "q-last", "orders-outbox"
OUTBOX = f"{GROUP}.outbox"


@pytest.fixture
def store() -> Iterator[str]:
    name = f"last-resource-{uuid.uuid4().hex}"
    yield name
    forget_store(name)


def _batch(batch_id: int, partitions: int = 2, rows: int = 4) -> list[pa.Table]:
    return [
        pa.table({"id": pa.array([batch_id * 100 + p * rows + i for i in range(rows)], pa.int64())})
        for p in range(partitions)
    ]


def _expected(*batches: int) -> list[int]:
    return sorted(b * 100 + i for b in batches for i in range(8))


def _group(root: Path, store: str) -> SinkGroup:
    # the last resource is listed first: the group runs it last all the same
    return SinkGroup(
        {
            "outbox": Member(MemoryLastResource(store)),
            "orders": Member(twopc.create_sink("files", path=str(root / "orders"))),
        }
    )


def _writer(
    root: Path, store: str, faults: str | None = None, attempts: int = 1
) -> twopc.local.LocalBatchWriter:
    return twopc.local.foreach_batch(
        _group(root, store),
        GROUP,
        commit_log=str(root / "log"),
        faults=FaultPlan.parse(faults) if faults else None,
        processes=False,
        max_attempts=attempts,
    )


def _orders(root: Path) -> list[int]:
    directory = root / "orders"
    files = [
        str(p)
        for p in directory.rglob("*.parquet")
        if not any(s.startswith(("_", ".")) for s in p.relative_to(directory).parts)
    ]
    if not files:
        return []
    return sorted(ds.dataset(files, format="parquet").to_table().column("id").to_pylist())


def _outbox(store: str) -> list[int]:
    return sorted(memory_store(store).visible)


def _both(root: Path, store: str, *batches: int) -> None:
    assert _orders(root) == _expected(*batches)
    assert _outbox(store) == _expected(*batches)


def test_the_last_resource_runs_last_and_the_decision_names_it(tmp_path: Path, store: str) -> None:
    group = _group(tmp_path, store)
    assert group.last_resource == "outbox"
    assert list(group.members) == ["orders", "outbox"]
    writer = _writer(tmp_path, store)
    for batch in range(2):
        assert writer.write(QUERY, batch, _batch(batch)).status == "committed"
    assert writer.write(QUERY, 1, _batch(1)).status == "skipped"
    _both(tmp_path, store, 0, 1)
    decision = CommitLog(str(tmp_path / "log")).decision(QUERY, 1)
    assert decision is not None and decision.last_resource == OUTBOX
    assert {c.sink_id for c in decision.committables} == {f"{GROUP}.orders"}


def test_a_crash_before_the_last_resource_leaves_the_batch_nowhere(
    tmp_path: Path, store: str
) -> None:
    _writer(tmp_path, store).write(QUERY, 0, _batch(0))
    with pytest.raises(InjectedFault):
        _writer(tmp_path, store, "before_last_resource:raise@batch=1").write(QUERY, 1, _batch(1))
    _both(tmp_path, store, 0)
    log = CommitLog(str(tmp_path / "log"))
    assert log.decision(QUERY, 1) is not None  # conditional, not yet decided
    restarted = _writer(tmp_path, store)
    assert restarted.write(QUERY, 1, _batch(1)).status == "committed"  # withdrawn, written
    _both(tmp_path, store, 0, 1)
    assert not list((tmp_path / "orders").rglob("*.staged"))


def test_a_crash_after_the_last_resource_commits_every_other_member(
    tmp_path: Path, store: str
) -> None:
    with pytest.raises(InjectedFault):
        _writer(tmp_path, store, "after_last_resource:raise@batch=0").write(QUERY, 0, _batch(0))
    assert _outbox(store) == _expected(0) and _orders(tmp_path) == []  # the decision is made
    restarted = _writer(tmp_path, store)
    assert restarted.write(QUERY, 0, _batch(0)).status == "skipped"  # recovery finished it
    restarted.write(QUERY, 1, _batch(1))
    _both(tmp_path, store, 0, 1)


def test_a_last_resource_that_committed_but_failed_decides_the_batch(
    tmp_path: Path, store: str
) -> None:
    """The task commits, then fails before it reports (a lost reply): the driver fences
    the last resource, reads its marker, and the batch is committed everywhere."""
    writer = _writer(tmp_path, store, "after_task_commit:raise@batch=0")
    assert writer.write(QUERY, 0, _batch(0)).status == "committed"
    _both(tmp_path, store, 0)


def test_a_last_resource_that_did_not_commit_fails_the_batch_everywhere(
    tmp_path: Path, store: str
) -> None:
    writer = _writer(tmp_path, store, "before_task_commit:raise@batch=1")
    writer.write(QUERY, 0, _batch(0))
    with pytest.raises(twopc.BatchFailedError, match=f"last resource {OUTBOX} did not commit"):
        writer.write(QUERY, 1, _batch(1))
    _both(tmp_path, store, 0)
    assert CommitLog(str(tmp_path / "log")).decision(QUERY, 1) is None  # withdrawn
    assert _writer(tmp_path, store).write(QUERY, 1, _batch(1)).status == "committed"
    _both(tmp_path, store, 0, 1)


def test_a_retried_last_resource_task_finds_its_marker(tmp_path: Path, store: str) -> None:
    writer = _writer(tmp_path, store, "after_task_commit:raise@batch=0,attempt=0", attempts=2)
    assert writer.write(QUERY, 0, _batch(0)).status == "committed"
    _both(tmp_path, store, 0)


def test_fencing_stops_a_transaction_opened_before_it(store: str) -> None:
    sink = MemoryLastResource(store)
    ctx = twopc.TaskContext(OUTBOX, QUERY, 0, 0, 0)
    txn = sink.begin_transaction(ctx)
    batch = pa.table({"id": [1, 2]}).to_batches()[0]
    sink.invoke(txn, batch)
    sink.pre_commit(txn)
    assert sink.fence_and_check(twopc.RecoveryScope(OUTBOX, QUERY), 0) is False
    with pytest.raises(twopc.PermanentSinkError, match="fenced"):
        sink.commit_in_task(txn)
    assert _outbox(store) == []


def test_status_shows_the_batch_waits_on_its_last_resource(tmp_path: Path, store: str) -> None:
    writer = _writer(tmp_path, store, "before_last_resource:raise@batch=0")
    with pytest.raises(InjectedFault):
        writer.write(QUERY, 0, _batch(0))
    writer.close()
    log = CommitLog(str(tmp_path / "log"))
    status = twopc.sink_status(_group(tmp_path, store), GROUP, log)
    actions = Counter(i.action for i in status.items)
    assert actions[Action.ASK_LAST_RESOURCE] == 3  # the decision and two prepared partitions
    assert Action.ABORT not in actions and Action.COMMIT not in actions
    decision = next(i for i in status.items if i.kind == "decision")
    assert OUTBOX in decision.detail
    report = twopc.recover_sink(_group(tmp_path, store), GROUP, log, settle_seconds=0)
    assert report.performed and report.error is None
    _both(tmp_path, store)  # nothing: the last resource never ran
    assert report.after is not None and report.after.items == ()


def test_a_batch_waiting_on_a_removed_last_resource_is_refused(tmp_path: Path, store: str) -> None:
    with pytest.raises(InjectedFault):
        _writer(tmp_path, store, "before_last_resource:raise@batch=0").write(QUERY, 0, _batch(0))
    without = SinkGroup(
        {
            "orders": twopc.create_sink("files", path=str(tmp_path / "orders")),
            "audit": MemoryDriverSink(store),
        }
    )
    writer = twopc.local.foreach_batch(
        without, GROUP, commit_log=str(tmp_path / "log"), processes=False
    )
    with pytest.raises(twopc.ConfigurationError, match=f"last resource {OUTBOX}"):
        writer.write(QUERY, 1, _batch(1))
    assert _orders(tmp_path) == []


def test_a_group_takes_one_last_resource(store: str) -> None:
    with pytest.raises(twopc.ConfigurationError, match="at most one such member"):
        SinkGroup(
            {
                "a": MemoryLastResource(store),
                "b": MemoryLastResource(store),
                "c": MemoryDriverSink(store),
            }
        )
    with pytest.raises(twopc.ConfigurationError, match=r"no twopc\.LastResource"):
        SinkGroup({"a": MemoryTaskSink(store), "c": MemoryDriverSink(store)})


def test_kafka_per_partition_is_refused_and_atomic_is_the_last_resource(store: str) -> None:
    def kafka(mode: str) -> twopc.Sink[object]:
        return twopc.create_sink("kafka", bootstrap_servers="127.0.0.1:1", topic="t", mode=mode)

    with pytest.raises(twopc.ConfigurationError, match="mode='atomic'"):
        SinkGroup({"events": kafka("per_partition"), "rows": MemoryDriverSink(store)})
    group = SinkGroup({"events": kafka("atomic"), "rows": MemoryDriverSink(store)})
    assert group.last_resource == "events" and list(group.members) == ["rows", "events"]
