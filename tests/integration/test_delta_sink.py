"""The Delta sink against real Delta tables on the local filesystem, through the local
engine: one commit per batch with its app transaction, partitioned tables, upsert, schema
changes, bad input, replays, recovery, and two writers racing for one table. Every check
reads the table back with deltalake (and DuckDB's Parquet reader over the files the log
references)."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import twopc
from tests.harness.delta import (
    duckdb_parquet_ids,
    ids,
    load,
    records_left,
    referenced,
    scan,
    unreferenced_data_files,
)
from tests.harness.local_runs import run
from twopc import CommitOutcome, Committable, TaskContext

pytest.importorskip("deltalake")

from deltalake import DeltaTable, write_deltalake

from twopc_delta import DeltaSink

pytestmark = pytest.mark.integration


def rows(start: int, stop: int, value: str = "a", **extra: Any) -> pa.Table:
    columns: dict[str, Any] = {
        "id": pa.array(range(start, stop), pa.int64()),
        "v": pa.array([value] * (stop - start)),
    }
    columns.update(extra)
    return pa.table(columns)


def prepare(
    sink: DeltaSink,
    batch: pa.Table,
    *,
    batch_id: int = 0,
    partition: int = 0,
    attempt: int = 0,
    query: str = "q1",
) -> Committable:
    ctx = TaskContext("ev", query, batch_id, partition, attempt)
    txn = sink.begin_transaction(ctx)
    for piece in batch.to_batches():
        sink.invoke(txn, piece)
    return sink.pre_commit(txn)


def test_each_batch_is_one_commit_with_its_app_transaction(tmp_path: Path) -> None:
    uri = tmp_path / "t"
    sink = DeltaSink(str(uri), create_table=True)
    run(sink, tmp_path, [[rows(0, 10), rows(10, 20)], [rows(20, 30)], [rows(30, 40)]])
    table = load(uri)
    assert table.version() == 2  # created by batch 0, one commit each for batches 1 and 2
    assert ids(uri) == Counter(range(40))
    assert duckdb_parquet_ids(uri) == Counter(range(40))
    (query_id,) = {h["twopc.queryId"] for h in table.history() if "twopc.queryId" in h}
    assert table.transaction_version(DeltaSink.app_id("ev", query_id)) == 2
    assert [h["twopc.batchId"] for h in table.history()] == [2, 1, 0]
    assert len(referenced(uri)) == len(set(referenced(uri))) == 4  # no file twice
    assert records_left(uri) == [] and unreferenced_data_files(uri) == []


def test_a_partitioned_table_keeps_partition_values_in_the_log(tmp_path: Path) -> None:
    uri = tmp_path / "t"
    sink = DeltaSink(str(uri), create_table=True, partition_by=["v"])
    run(sink, tmp_path, [[pa.concat_tables([rows(0, 10, "a"), rows(10, 20, "b")])]])
    table = load(uri)
    assert table.metadata().partition_columns == ["v"]
    assert ids(uri) == Counter(range(20))
    only_b = table.to_pyarrow_table(filters=[("v", "=", "b")])
    assert sorted(only_b["id"].to_pylist()) == list(range(10, 20))
    actions = pa.table(table.get_add_actions(flatten=True)).to_pylist()
    assert sorted(a["partition.v"] for a in actions) == ["a", "b"]
    for action in actions:  # statistics readers skip files by
        assert action["num_records"] == 10 and action["min.id"] % 10 == 0


def test_upsert_keeps_the_last_row_of_each_key(tmp_path: Path) -> None:
    uri = tmp_path / "t"
    sink = DeltaSink(str(uri), create_table=True, mode="upsert", key_columns=["id"])
    first = [rows(0, 50, "old")]
    # batch 1 repeats ids 10..19 twice within one task (the later value wins) and 40..59
    second = [pa.concat_tables([rows(10, 20, "mid"), rows(10, 20, "new"), rows(40, 60, "new")])]
    run(sink, tmp_path, [first, second])
    table = scan(uri)
    assert Counter(table["id"].to_pylist()) == Counter(range(60))
    values = dict(zip(table["id"].to_pylist(), table["v"].to_pylist(), strict=True))
    assert {values[i] for i in range(10, 20)} == {"new"}
    assert {values[i] for i in range(40, 60)} == {"new"}
    assert {values[i] for i in range(20, 40)} == {"old"}
    last = load(uri).history()[0]
    assert last["twopc.batchId"] == 1  # the removes and adds went in the batch's one commit
    assert unreferenced_data_files(uri) == [] and records_left(uri) == []


def test_upsert_on_a_partitioned_table_with_a_key_in_two_columns(tmp_path: Path) -> None:
    uri = tmp_path / "t"
    sink = DeltaSink(
        str(uri), create_table=True, partition_by=["v"], mode="upsert", key_columns=["id", "v"]
    )
    run(
        sink,
        tmp_path,
        [
            [pa.concat_tables([rows(0, 10, "a"), rows(0, 10, "b")])],
            [rows(5, 15, "a")],
        ],
        name="p",
    )
    table = scan(uri)
    assert Counter(zip(table["id"].to_pylist(), table["v"].to_pylist(), strict=True)) == Counter(
        [(i, "a") for i in range(15)] + [(i, "b") for i in range(10)]
    )


def test_new_columns_are_refused_unless_add_columns(tmp_path: Path) -> None:
    uri = tmp_path / "t"
    run(DeltaSink(str(uri), create_table=True), tmp_path, [[rows(0, 5)]], name="a")
    wider = rows(5, 10, extra=pa.array([1.5] * 5))
    with pytest.raises(twopc.BatchFailedError, match=r"'extra'.*schema_evolution='add_columns'"):
        run(DeltaSink(str(uri)), tmp_path, [[wider]], name="b")
    assert ids(uri) == Counter(range(5))
    assert unreferenced_data_files(uri) == []
    run(DeltaSink(str(uri), schema_evolution="add_columns"), tmp_path, [[wider]], name="c")
    table = scan(uri)
    assert "extra" in table.column_names
    assert (
        sorted(table["extra"].to_pylist(), key=lambda x: (x is None, x)) == [1.5] * 5 + [None] * 5
    )


def test_bad_input_names_the_table_and_cause_and_commits_nothing(tmp_path: Path) -> None:
    uri = tmp_path / "t"
    run(DeltaSink(str(uri), create_table=True), tmp_path, [[rows(0, 5)]], name="a")
    bad = pa.table({"id": pa.array(["not-a-number"]), "v": ["x"]})
    with pytest.raises(twopc.BatchFailedError) as failed:
        run(DeltaSink(str(uri)), tmp_path, [[bad]], name="b")
    text = str(failed.value)
    assert str(uri) in text and "'id'" in text and "batch 0" in text
    assert ids(uri) == Counter(range(5)) and load(uri).version() == 0
    assert unreferenced_data_files(uri) == [] and records_left(uri) == []


def test_a_missing_table_without_create_table_is_a_clear_error(tmp_path: Path) -> None:
    uri = tmp_path / "none"
    with pytest.raises(twopc.BatchFailedError, match=r"does not exist \(set create_table=True"):
        run(DeltaSink(str(uri)), tmp_path, [[rows(0, 5)]])
    assert load(uri) is None


def test_a_table_with_a_check_constraint_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    uri = tmp_path / "t"
    write_deltalake(str(uri), rows(0, 5).to_batches()[0])
    DeltaTable(str(uri)).alter.add_constraint({"positive": "id >= 0"})
    version = load(uri).version()
    with pytest.raises(twopc.BatchFailedError, match=r"cannot write: check constraints"):
        run(DeltaSink(str(uri)), tmp_path, [[rows(5, 10)]])
    assert load(uri).version() == version and ids(uri) == Counter(range(5))
    assert unreferenced_data_files(uri) == []


@pytest.mark.skipif(__import__("os").geteuid() == 0, reason="root ignores file permissions")
def test_a_location_without_permission_is_a_clear_error(tmp_path: Path) -> None:
    uri = tmp_path / "t"
    run(DeltaSink(str(uri), create_table=True), tmp_path, [[rows(0, 5)]], name="a")
    uri.chmod(0o555)
    try:
        with pytest.raises(twopc.BatchFailedError, match="permission denied"):
            run(DeltaSink(str(uri)), tmp_path, [[rows(5, 10)]], name="b")
    finally:
        uri.chmod(0o755)
    assert ids(uri) == Counter(range(5))


def test_a_replayed_commit_writes_nothing_and_an_undecided_attempt_is_removed(
    tmp_path: Path,
) -> None:
    uri = tmp_path / "t"
    sink = DeltaSink(str(uri), create_table=True)
    first = prepare(sink, rows(0, 10))
    assert sink.commit([first]) == [CommitOutcome.COMMITTED]
    version = load(uri).version()
    assert sink.commit([first]) == [CommitOutcome.ALREADY_COMMITTED]
    assert load(uri).version() == version
    # batch 1: two attempts of partition 0 prepared; only one is decided
    kept = prepare(sink, rows(10, 20), batch_id=1, attempt=1)
    lost = prepare(sink, rows(10, 20), batch_id=1, attempt=2)
    assert {c.attempt for c in sink.recover("ev")} == {1, 2}
    assert sink.commit([kept]) == [CommitOutcome.COMMITTED]
    sink.abort_prepared([lost])
    sink.abort_prepared([kept])  # committed: its files stay
    assert ids(uri) == Counter(range(20))
    assert sink.recover("ev") == []
    assert unreferenced_data_files(uri) == [] and records_left(uri) == []
    # a later batch id than the table holds, replayed for an older one: nothing written
    assert sink.commit([first]) == [CommitOutcome.ALREADY_COMMITTED]
    assert ids(uri) == Counter(range(20))


def test_the_sweep_removes_an_attempt_that_never_prepared(tmp_path: Path) -> None:
    uri = tmp_path / "t"
    sink = DeltaSink(str(uri), create_table=True)
    run(sink, tmp_path, [[rows(0, 5)]])
    txn = sink.begin_transaction(TaskContext("ev", "q9", 3, 0, 7))
    sink.invoke(txn, rows(5, 10).to_batches()[0])  # the task dies here: files, no committable
    assert unreferenced_data_files(uri) != []
    assert sink.sweep("ev") == 1
    assert unreferenced_data_files(uri) == [] and records_left(uri) == []


def test_two_queries_racing_for_one_table_lose_nothing_and_duplicate_nothing(
    tmp_path: Path,
) -> None:
    uri = tmp_path / "t"
    write_deltalake(str(uri), rows(0, 1))
    errors: list[BaseException] = []

    def query(name: str, start: int) -> None:
        try:
            batches = [[rows(start + b * 10, start + b * 10 + 10)] for b in range(6)]
            run(DeltaSink(str(uri)), tmp_path, batches, name=name, sink_id=name)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=query, args=(n, s)) for n, s in (("x", 100), ("y", 200))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert ids(uri) == Counter([0, *range(100, 160), *range(200, 260)])
    assert unreferenced_data_files(uri) == []


def test_two_upserting_queries_racing_for_one_table_rewrite_on_the_new_version(
    tmp_path: Path,
) -> None:
    uri = tmp_path / "t"
    write_deltalake(str(uri), rows(0, 100, "old"))
    errors: list[BaseException] = []

    def query(name: str) -> None:
        try:
            batches = [[rows(0, 100, f"{name}{b}")] for b in range(4)]
            sink = DeltaSink(str(uri), mode="upsert", key_columns=["id"])
            run(sink, tmp_path, batches, name=name, sink_id=name)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=query, args=(n,)) for n in ("x", "y")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    table = scan(uri)
    assert Counter(table["id"].to_pylist()) == Counter(range(100))  # one row per key
    assert set(table["v"].to_pylist()) <= {"x3", "y3"}
    assert unreferenced_data_files(uri) == [] and records_left(uri) == []


def test_the_tasks_log_reader_agrees_with_deltalake_across_a_checkpoint(tmp_path: Path) -> None:
    from twopc_delta._log import TableInfo, read_log

    uri = tmp_path / "t"
    sink = DeltaSink(str(uri), create_table=True, partition_by=["v"])
    assert read_log(sink.access.place) is None
    run(sink, tmp_path, [[rows(0, 5)], [rows(5, 10, "b")]], name="a")
    table = DeltaTable(str(uri))
    table.create_checkpoint()
    table.alter.set_table_properties({"delta.logRetentionDuration": "interval 60 days"})
    run(
        DeltaSink(str(uri), schema_evolution="add_columns"),
        tmp_path,
        [[rows(10, 15, extra=pa.array([1] * 5))]],
        name="b",
    )
    expected = TableInfo.of(DeltaTable(str(uri)))
    assert read_log(sink.access.place) == expected
    assert expected.partition_columns == ("v",) and "extra" in expected.arrow_schema().names


def test_a_losing_attempt_of_an_older_batch_is_removed_after_later_batches(
    tmp_path: Path,
) -> None:
    uri = tmp_path / "t"
    sink = DeltaSink(str(uri), create_table=True)
    winner = prepare(sink, rows(0, 10), attempt=1)
    loser = prepare(sink, rows(0, 10), attempt=2)  # a speculative attempt nobody decided
    sink.commit([winner])
    sink.commit([prepare(sink, rows(10, 20), batch_id=1)])
    assert unreferenced_data_files(uri) != []
    sink.abort_prepared([loser])
    assert ids(uri) == Counter(range(20))
    assert unreferenced_data_files(uri) == [] and records_left(uri) == []
