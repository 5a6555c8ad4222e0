"""``schema_evolution="add_columns"`` of the SQL sinks on real PostgreSQL and MariaDB.

Every test reads the table back from the database (``information_schema`` and ``SELECT``):
new columns are added as nullable columns before a row is written, the partitions of a
batch racing to add the same column add it once (in ``two_phase`` mode while a sibling's
branch is prepared), and changes the sink cannot follow fail the batch before anything is
written, naming the sink, batch, partition and column.
"""

from __future__ import annotations

import threading
from typing import Any

import pyarrow as pa
import pytest

import twopc
from tests.harness.sql_servers import PostgresDb
from tests.harness.sql_sink_cases import MODES, Db, Env, assert_names_task, batch, commit, write

pytestmark = pytest.mark.integration


def nullable(db: Db, table: str) -> dict[str, bool]:
    schema = "current_schema()" if isinstance(db, PostgresDb) else "DATABASE()"
    rows = db.query(
        "SELECT column_name, is_nullable FROM information_schema.columns "
        f"WHERE table_schema = {schema} AND table_name = %s",
        (table,),
    )
    return {str(n): v == "YES" for n, v in rows}


def write_partitions_concurrently(
    sink: Any, env: Env, sink_id: str, batch_id: int, parts: list[pa.RecordBatch]
) -> None:
    """Every partition's task in its own thread, as executors run them (``transaction``
    mode commits in the task); then the driver commits the prepared ones."""
    results: dict[int, Any] = {}

    def task(partition: int) -> None:
        try:
            txn, committable = write(sink, env.ctx(sink_id, batch_id, partition), parts[partition])
            if isinstance(sink, twopc.CommitsInTask):
                commit(sink, txn, committable)
            results[partition] = (txn, committable)
        except BaseException as exc:  # reported below
            results[partition] = exc

    threads = [threading.Thread(target=task, args=(p,)) for p in range(len(parts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    for partition in range(len(parts)):
        outcome = results[partition]
        if isinstance(outcome, BaseException):
            raise outcome
    if not isinstance(sink, twopc.CommitsInTask):
        for txn, committable in results.values():
            commit(sink, txn, committable)


@pytest.mark.parametrize("tm", MODES)
def test_later_batch_adds_nullable_columns(db: Db, env: Env, tm: str) -> None:
    """Batch 1 brings two new columns; its four partitions race to add them."""
    table = env.table()
    db.create(table, "id bigint, v varchar(20)")
    sink = env.sink(table, transaction_mode=tm, schema_evolution="add_columns")
    sink_id = env.sink_id()
    write_partitions_concurrently(sink, env, sink_id, 0, [batch(id=[1, 2], v=["a", "b"])])
    parts = [
        batch(id=[10 + p], v=[f"p{p}"], n=[100 + p], note=pa.array([f"x{p}"], pa.string()))
        for p in range(4)
    ]
    write_partitions_concurrently(sink, env, sink_id, 1, parts)

    assert list(db.column_types(table)) == ["id", "v", "n", "note"]
    assert db.column_types(table)["n"] == "bigint"
    assert nullable(db, table) == {"id": True, "v": True, "n": True, "note": True}
    assert db.rows(table) == [
        (1, "a", None, None),
        (2, "b", None, None),
        *[(10 + p, f"p{p}", 100 + p, f"x{p}") for p in range(4)],
    ]
    assert env.prepared(sink_id) == []


@pytest.mark.parametrize("tm", MODES)
def test_upsert_with_a_new_column(db: Db, env: Env, tm: str) -> None:
    table = env.table()
    db.create(table, "id bigint PRIMARY KEY, v varchar(20)")
    sink = env.sink(
        table,
        mode="upsert",
        key_columns=["id"],
        transaction_mode=tm,
        schema_evolution="add_columns",
    )
    sink_id = env.sink_id()
    write_partitions_concurrently(sink, env, sink_id, 0, [batch(id=[1, 2], v=["a", "b"])])
    write_partitions_concurrently(sink, env, sink_id, 1, [batch(id=[2, 3], v=["B", "c"], n=[7, 8])])
    assert db.rows(table) == [(1, "a", None), (2, "B", 7), (3, "c", 8)]


def test_none_keeps_refusing_new_columns(db: Db, env: Env) -> None:
    table = env.table()
    db.create(table, "id bigint, v varchar(20)")
    sink = env.sink(table)
    sink_id = env.sink_id()
    with pytest.raises(twopc.PermanentSinkError, match="are not in table") as failure:
        write(sink, env.ctx(sink_id, 3), batch(id=[1], v=["a"], n=[1]))
    assert_names_task(failure.value, sink_id, 3, 0)
    assert list(db.column_types(table)) == ["id", "v"]
    assert db.count(table) == 0


@pytest.mark.parametrize("tm", MODES)
def test_type_change_is_refused_before_anything_is_written(db: Db, env: Env, tm: str) -> None:
    """A float where the table has an integer column: nothing written, nothing added (the
    batch's new column too), the error names the column."""
    table = env.table()
    db.create(table, "id bigint, n integer")
    sink = env.sink(table, transaction_mode=tm, schema_evolution="add_columns")
    sink_id = env.sink_id()
    data = batch(id=[1], n=pa.array([1.5]), extra=["new"])
    with pytest.raises(twopc.PermanentSinkError, match="column 'n' is double") as failure:
        write(sink, env.ctx(sink_id, 2, 1), data)
    assert_names_task(failure.value, sink_id, 2, 1)
    assert "change the column's type" in str(failure.value)
    assert list(db.column_types(table)) == ["id", "n"]
    assert db.count(table) == 0
    assert env.prepared(sink_id) == []


def test_widening_data_into_a_wider_column_is_accepted(db: Db, env: Env) -> None:
    table = env.table()
    db.create(table, "id bigint, ratio double precision, amount numeric(10, 2), small bigint")
    sink = env.sink(table, schema_evolution="add_columns")
    data = batch(
        id=[1],
        ratio=pa.array([3], pa.int32()),
        amount=pa.array([4], pa.int64()),
        small=pa.array([5], pa.int16()),
    )
    txn, committable = write(sink, env.ctx(env.sink_id()), data)
    commit(sink, txn, committable)
    assert db.query(f"SELECT id, ratio, amount, small FROM {db.q(table)}") == [(1, 3.0, 4, 5)]


@pytest.mark.parametrize("tm", MODES)
def test_dropped_not_null_column_is_refused(db: Db, env: Env, tm: str) -> None:
    table = env.table()
    db.create(
        table, "id bigint, req varchar(10) NOT NULL, opt varchar(10), dflt int NOT NULL DEFAULT 0"
    )
    sink = env.sink(table, transaction_mode=tm, schema_evolution="add_columns")
    sink_id = env.sink_id()
    with pytest.raises(twopc.PermanentSinkError, match="'req' of table") as failure:
        write(sink, env.ctx(sink_id, 5), batch(id=[1], opt=["o"], extra=[1]))
    assert_names_task(failure.value, sink_id, 5, 0)
    assert "NOT NULL" in str(failure.value)
    assert list(db.column_types(table)) == ["id", "req", "opt", "dflt"]
    # nullable and defaulted columns may go missing
    txn, committable = write(sink, env.ctx(sink_id, 6), batch(id=[2], req=["r"]))
    commit(sink, txn, committable)
    assert db.rows(table) == [(2, "r", None, 0)]


def test_create_table_then_evolve(db: Db, env: Env) -> None:
    table = env.table()
    sink = env.sink(table, create_table=True, schema_evolution="add_columns")
    sink_id = env.sink_id()
    txn, committable = write(sink, env.ctx(sink_id, 0), batch(id=[1]))
    commit(sink, txn, committable)
    txn, committable = write(sink, env.ctx(sink_id, 1), batch(id=[2], v=["b"]))
    commit(sink, txn, committable)
    assert db.rows(table) == [(1, None), (2, "b")]


def test_rejects_an_unknown_evolution(db: Db) -> None:
    with pytest.raises(twopc.ConfigurationError, match="schema_evolution must be one of"):
        db.sink_class()(db.dsn, table="t", schema_evolution="everything")
