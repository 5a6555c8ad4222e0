"""A SinkGroup on the local engine: two real files targets (Parquet and JSON on the local
disk) written by one batch with one decision, read back from the files themselves.
Crashes here raise at the crash point (the simulator); the real-process and real-Spark
kills are in tests/crash."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pytest

import twopc
import twopc.local
from twopc import CommitLog, FaultPlan, InjectedFault, Member, SinkGroup
from twopc.testing import MemoryDriverSink, MemoryStore, MemoryTaskSink

pytestmark = pytest.mark.unit

QUERY, GROUP = "q-group", "orders-and-audit"


def _batch(batch_id: int, partitions: int = 2, rows: int = 5) -> list[pa.Table]:
    return [
        pa.table(
            {
                "id": pa.array([batch_id * 1000 + p * rows + i for i in range(rows)], pa.int64()),
                "amount": pa.array([float(i) for i in range(rows)]),
                "event": pa.array([f"created-{p}-{i}" for i in range(rows)]),
            }
        )
        for p in range(partitions)
    ]


def _group(root: Path, **parquet_options: Any) -> SinkGroup:
    return SinkGroup(
        {
            "orders": Member(
                twopc.create_sink(
                    "files", path=str(root / "orders"), format="parquet", **parquet_options
                ),
                project=lambda t: t.select(["id", "amount"]),
            ),
            "audit": Member(
                twopc.create_sink("files", path=str(root / "audit"), format="json"),
                project=lambda t: t.select(["id", "event"]),
            ),
        }
    )


def _ids(root: Path, member: str) -> list[int]:
    """Every id a reader of the member's directory sees (hidden names skipped)."""
    directory = root / member
    if not directory.exists():
        return []
    fmt = "parquet" if member == "orders" else "json"
    files = [
        str(p)
        for p in directory.rglob("*")
        if p.is_file() and not any(s.startswith(("_", ".")) for s in p.relative_to(directory).parts)
    ]
    if not files:
        return []
    return sorted(ds.dataset(files, format=fmt).to_table().column("id").to_pylist())


def _writer(root: Path, faults: str | None = None) -> twopc.local.LocalBatchWriter:
    return twopc.local.foreach_batch(
        _group(root),
        GROUP,
        commit_log=str(root / "log"),
        faults=FaultPlan.parse(faults) if faults else None,
        processes=False,
    )


def _expected(*batches: int, partitions: int = 2, rows: int = 5) -> list[int]:
    return sorted(b * 1000 + i for b in batches for i in range(partitions * rows))


def test_every_member_gets_its_projection_of_every_batch_once(tmp_path: Path) -> None:
    writer = _writer(tmp_path)
    for batch in range(3):
        metrics = writer.write(QUERY, batch, _batch(batch))
        assert metrics.status == "committed"
    assert writer.write(QUERY, 2, _batch(2)).status == "skipped"  # a replay writes nothing
    for member in ("orders", "audit"):
        assert _ids(tmp_path, member) == _expected(0, 1, 2)
    columns = ds.dataset(str(tmp_path / "orders"), format="parquet", exclude_invalid_files=True)
    assert set(columns.schema.names) == {"id", "amount"}


def test_one_decision_names_every_members_work(tmp_path: Path) -> None:
    _writer(tmp_path).write(QUERY, 0, _batch(0))
    decision = CommitLog(str(tmp_path / "log")).decision(QUERY, 0)
    assert decision is not None
    sink_ids = [c.sink_id for c in decision.committables]
    assert sink_ids == [f"{GROUP}.orders"] * 2 + [f"{GROUP}.audit"] * 2


@pytest.mark.parametrize("point", ["between_members", "between_commits", "after_decision"])
def test_a_crash_after_the_decision_is_finished_in_every_member(tmp_path: Path, point: str) -> None:
    _writer(tmp_path).write(QUERY, 0, _batch(0))
    with pytest.raises(InjectedFault):
        _writer(tmp_path, f"{point}:raise@batch=1").write(QUERY, 1, _batch(1))
    if point == "between_members":
        assert _ids(tmp_path, "orders") == _expected(0, 1)
        assert _ids(tmp_path, "audit") == _expected(0)  # the window the docs describe
    restarted = _writer(tmp_path)
    assert restarted.write(QUERY, 1, _batch(1)).status == "skipped"
    restarted.write(QUERY, 2, _batch(2))
    for member in ("orders", "audit"):
        assert _ids(tmp_path, member) == _expected(0, 1, 2)


def test_a_crash_before_the_decision_leaves_no_member_with_the_batch(tmp_path: Path) -> None:
    with pytest.raises(InjectedFault):
        _writer(tmp_path, "before_decision:raise@batch=0").write(QUERY, 0, _batch(0))
    for member in ("orders", "audit"):
        assert _ids(tmp_path, member) == []
    restarted = _writer(tmp_path)
    assert restarted.write(QUERY, 0, _batch(0)).status == "committed"
    for member in ("orders", "audit"):
        assert _ids(tmp_path, member) == _expected(0)
    assert not list((tmp_path / "orders").rglob("*.staged"))


def test_a_row_one_member_rejects_fails_the_batch_in_every_member(tmp_path: Path) -> None:
    writer = _writer(tmp_path)
    writer.write(QUERY, 0, _batch(0))
    bad = _batch(1)
    # NaN cannot be written as JSON: the audit member (second) rejects partition 1
    bad[1] = bad[1].set_column(2, "event", pc.cast(pa.array([float("nan")] * 5), pa.float64()))
    with pytest.raises(twopc.BatchFailedError) as failed:
        writer.write(QUERY, 1, bad)
    error = failed.value
    assert (error.sink_id, error.batch_id, error.partition) == (f"{GROUP}.audit", 1, 1)
    for member in ("orders", "audit"):
        assert _ids(tmp_path, member) == _expected(0)
    assert writer.write(QUERY, 1, _batch(1)).status == "committed"
    for member in ("orders", "audit"):
        assert _ids(tmp_path, member) == _expected(0, 1)


def test_members_that_commit_in_their_tasks_are_refused() -> None:
    store = MemoryStore()
    with pytest.raises(twopc.ConfigurationError, match="commits inside its tasks"):
        SinkGroup({"a": MemoryDriverSink(store), "b": MemoryTaskSink(store)})


@pytest.mark.parametrize(
    ("members", "message"),
    [
        ({}, "at least two members"),
        ({"only": "x"}, "at least two members"),
        ({"a b": None, "c": None}, "member name 'a b'"),
        ({"a": "not a sink", "b": "x"}, "not a twopc sink"),
    ],
)
def test_bad_groups_are_refused(members: dict[str, Any], message: str) -> None:
    with pytest.raises(twopc.ConfigurationError, match=message):
        SinkGroup(members)


@pytest.mark.parametrize("point", ["after_decision", "between_members"])
def test_status_and_recover_see_and_finish_every_member(tmp_path: Path, point: str) -> None:
    """A decided batch left unfinished: ``twopc status`` shows each member's prepared work
    under the member's sink id, and recovery commits it in every member. (A raise before
    the decision aborts the batch at once; that crash, a kill, is in tests/crash.)"""
    writer = _writer(tmp_path, f"{point}:raise@batch=0")
    with pytest.raises(InjectedFault):
        writer.write(QUERY, 0, _batch(0))
    writer.close()  # the query stopped: recover acts only when no writer runs
    log = CommitLog(str(tmp_path / "log"))
    status = twopc.sink_status(_group(tmp_path), GROUP, log)
    assert status.warnings == () and status.other_sink_ids == ()
    work = [i for i in status.items if i.sink_id is not None]
    prepared = ["audit"] if point == "between_members" else ["audit", "orders"]  # orders done
    assert sorted({i.sink_id for i in work}) == [f"{GROUP}.{m}" for m in prepared]
    assert {i.action.value for i in work} == {"commit"}
    report = twopc.recover_sink(_group(tmp_path), GROUP, log, settle_seconds=0)
    assert report.performed and report.error is None
    for member in ("orders", "audit"):
        assert _ids(tmp_path, member) == _expected(0)
    assert report.after is not None and report.after.items == ()


def test_a_decided_batch_of_a_removed_member_is_not_finished_silently(tmp_path: Path) -> None:
    """A batch decided with a member that the restarted query's group no longer has: the
    restart refuses with a message naming the member, instead of finishing only part of
    the batch; with the member put back, the batch finishes everywhere."""
    with pytest.raises(InjectedFault):
        _writer(tmp_path, "after_decision:raise@batch=0").write(QUERY, 0, _batch(0))
    orders_only = SinkGroup(
        {
            "orders": _group(tmp_path).members["orders"],
            "archive": Member(MemoryDriverSink(f"unused-{tmp_path.name}")),
        }
    )
    shrunk = twopc.local.foreach_batch(
        orders_only, GROUP, commit_log=str(tmp_path / "log"), processes=False
    )
    with pytest.raises(twopc.TwoPCError, match=f"{GROUP}.audit names no member"):
        shrunk.write(QUERY, 1, _batch(1))
    assert _ids(tmp_path, "audit") == []
    restarted = _writer(tmp_path)
    assert restarted.write(QUERY, 0, _batch(0)).status == "skipped"
    for member in ("orders", "audit"):
        assert _ids(tmp_path, member) == _expected(0)


def test_a_member_sink_id_longer_than_a_sink_id_may_be_is_refused(tmp_path: Path) -> None:
    long_id = "g" * 60
    with pytest.raises(twopc.ConfigurationError, match="member 'orders' would write under"):
        twopc.local.foreach_batch(_group(tmp_path), long_id, commit_log=str(tmp_path / "log"))
