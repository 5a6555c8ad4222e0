"""Shared helpers and the shared test cases of the SQL sinks (``twopc_jdbc``).

Every test reads the database back (``SELECT``, ``pg_prepared_xacts``, ``XA RECOVER``);
nothing here inspects the framework's own bookkeeping except where a test drives the
coordinator's commit log on purpose.

:class:`SqlSinkCases` holds the cases both databases must pass; ``test_jdbc_postgres.py``
and ``test_jdbc_mysql.py`` subclass it and provide the ``db`` fixture (a :class:`Db`).
The class name does not start with ``Test``, so pytest collects the cases only through
the subclasses.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import decimal
import hashlib
import json
import multiprocessing
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import twopc
from tests.harness.services import ServiceControl
from tests.harness.sink_errors import in_task
from twopc._coordination.coordinator import Coordinator
from twopc.local import LocalEngine
from twopc_jdbc._base import SqlPayload, SqlSink, SqlTransaction, attempt_lock_name

MODES = ("transaction", "two_phase")
SECRET = "s3cr3t-Pa55w0rd-never-shown"


# -- the databases, as the tests see them ---------------------------------------------------


class Db(ABC):
    """One database server, reached with its own driver (not through the sink)."""

    name: str
    dsn: str

    @abstractmethod
    def sink_class(self) -> type[SqlSink]: ...

    @abstractmethod
    def query(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement on a fresh autocommit connection; rows (or [])."""

    def execute(self, statement: str, params: Sequence[Any] = ()) -> None:
        self.query(statement, params)

    @abstractmethod
    def q(self, identifier: str) -> str:
        """The identifier quoted for this database."""

    @abstractmethod
    def prepared(self, gtrid_prefix: str) -> list[str]:
        """Prepared transactions (``gtrid:bqual``) whose gtrid starts with the prefix."""

    @abstractmethod
    def rollback_prepared(self, gid: str) -> None: ...

    @abstractmethod
    def column_types(self, table: str) -> dict[str, str]:
        """Column name -> the database's type name, lower case."""

    @abstractmethod
    def primary_key(self, table: str) -> list[str]: ...

    @abstractmethod
    def terminate(self, txn: SqlTransaction) -> None:
        """Cut the server side of the sink's open connection, from another connection."""

    @abstractmethod
    def staging_tables(self, sink_id: str) -> list[str]:
        """Staging tables of a sink id that exist outside a transaction."""

    @abstractmethod
    def is_closed(self, conn: Any) -> bool: ...

    # shared conveniences

    def rows(self, table: str, order_by: str = "id") -> list[tuple[Any, ...]]:
        return self.query(f"SELECT * FROM {self.q(table)} ORDER BY {self.q(order_by)}")

    def count(self, table: str) -> int:
        return int(self.query(f"SELECT count(*) FROM {self.q(table)}")[0][0])

    def table_exists(self, table: str) -> bool:
        found = self.query(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = %s "
            f"AND table_schema = {self.current_schema_sql}",
            (table,),
        )
        return int(found[0][0]) > 0

    current_schema_sql = "current_schema()"

    def markers(self, marker_table: str, sink_id: str) -> list[tuple[Any, ...]]:
        if not self.table_exists(marker_table):
            return []
        return self.query(
            f"SELECT query_id, batch_id, partition_id FROM {self.q(marker_table)} "
            "WHERE sink_id = %s ORDER BY query_id, batch_id, partition_id",
            (sink_id,),
        )

    def create(self, table: str, columns: str) -> None:
        self.execute(f"CREATE TABLE {self.q(table)} ({columns})")

    @abstractmethod
    def drop(self, table: str) -> None:
        """DROP TABLE IF EXISTS, giving up after a few seconds on a lock."""


def gtrid_prefix(sink_id: str) -> str:
    """The prefix of every prepared transaction of a sink id (documented in ``_base``)."""
    from twopc_jdbc._base import TransactionId

    return TransactionId.gtrid_prefix(sink_id)


# -- per-test names and clean-up ------------------------------------------------------------


class Env:
    """Unique names for one test, sinks built from them, and clean-up at the end."""

    def __init__(self, db: Db, tmp_path: Path, label: str) -> None:
        self.db = db
        self.tmp_path = tmp_path
        self.suffix = uuid.uuid4().hex[:10]
        self.label = label
        self.marker_table = f"itm_{self.suffix}"
        self.query_id = f"q-{self.suffix}"
        self._tables: set[str] = set()
        self._sink_ids: set[str] = set()

    def table(self, name: str = "t") -> str:
        table = f"it_{name}_{self.suffix}"
        self._tables.add(table)
        return table

    def track_table(self, table: str) -> str:
        self._tables.add(table)
        return table

    def sink_id(self, name: str = "s") -> str:
        sink_id = f"{self.label}-{name}-{self.suffix}"
        self._sink_ids.add(sink_id)
        return sink_id

    def sink(self, table: str, *, dsn: str | None = None, **options: Any) -> SqlSink:
        options.setdefault("marker_table", self.marker_table)
        self._tables.add(table)
        return self.db.sink_class()(dsn or self.db.dsn, table=table, **options)

    def ctx(
        self, sink_id: str, batch_id: int = 0, partition: int = 0, attempt: int = 0
    ) -> twopc.TaskContext:
        self._sink_ids.add(sink_id)
        return twopc.TaskContext(sink_id, self.query_id, batch_id, partition, attempt)

    def coordinator(
        self, sink: SqlSink, sink_id: str, *, faults: str | None = None, log: str = "log"
    ) -> Coordinator:
        self._sink_ids.add(sink_id)
        return Coordinator(
            sink,
            sink_id,
            twopc.CommitLog(str(self.tmp_path / log)),
            faults=twopc.FaultPlan.parse(faults) if faults else None,
            retry=twopc.RetryPolicy(max_attempts=2, initial_backoff_seconds=0.05),
        )

    def prepared(self, sink_id: str) -> list[str]:
        return self.db.prepared(gtrid_prefix(sink_id))

    def leftovers(self, sink_id: str) -> tuple[list[str], list[str]]:
        """Prepared branches and staging tables the sink id left behind."""
        return self.prepared(sink_id), self.db.staging_tables(sink_id)

    def cleanup(self) -> None:
        for sink_id in self._sink_ids:
            for gid in self.prepared(sink_id):
                self.db.rollback_prepared(gid)
            for staging in self.db.staging_tables(sink_id):
                self.db.drop(staging)
        for table in self._tables:
            self.db.drop(table)
        self.db.drop(self.marker_table)


# -- data -----------------------------------------------------------------------------------


def batch(**columns: Any) -> pa.RecordBatch:
    """A record batch; ``id``, ``n`` default to int64, ``v`` to string."""
    arrays = {}
    for name, values in columns.items():
        if isinstance(values, pa.Array):
            arrays[name] = values
        elif name in ("id", "n", "k", "seq"):
            arrays[name] = pa.array(values, pa.int64())
        else:
            arrays[name] = pa.array(values)
    return pa.RecordBatch.from_pydict(arrays)


def table_of(*batches: pa.RecordBatch) -> pa.Table:
    return pa.Table.from_batches(list(batches))


def write(
    sink: SqlSink, ctx: twopc.TaskContext, *batches: pa.RecordBatch
) -> tuple[SqlTransaction, twopc.Committable]:
    """Phase 1 for one task: begin, invoke each batch, pre_commit."""
    with in_task(ctx):
        txn = sink.begin_transaction(ctx)
        try:
            for item in batches:
                sink.invoke(txn, item)
            committable = sink.pre_commit(txn)
        except BaseException:
            sink.abort(txn)
            raise
    return txn, committable


def commit(
    sink: SqlSink, txn: SqlTransaction, committable: twopc.Committable
) -> list[twopc.CommitOutcome]:
    """Commit one task's work the way its mode does: in the task, or on the driver."""
    with in_task(txn.ctx):
        if isinstance(sink, twopc.CommitsInTask):
            return [sink.commit_in_task(txn)]
        return sink.commit([committable])


def write_and_commit(
    sink: SqlSink, ctx: twopc.TaskContext, *batches: pa.RecordBatch
) -> list[twopc.CommitOutcome]:
    txn, committable = write(sink, ctx, *batches)
    return commit(sink, txn, committable)


def assert_names_task(exc: BaseException, sink_id: str, batch_id: int, partition: int) -> None:
    text = str(exc)
    assert f"sink {sink_id!r}" in text, text
    assert f"batch {batch_id}" in text, text
    assert f"partition {partition}" in text, text


# -- committing from another process ----------------------------------------------------------


def _commit_child(kind: str, dsn: str, table: str, options: dict[str, Any], raw: str) -> str:
    """Runs in a spawned interpreter: a brand-new sink object commits the committable."""
    if kind == "postgres":
        from twopc_jdbc.postgres import PostgresSink

        sink: SqlSink = PostgresSink(dsn, table=table, **options)
    else:
        from twopc_jdbc.mysql import MySQLSink

        sink = MySQLSink(dsn, table=table, **options)
    outcomes = sink.commit([twopc.Committable.loads(raw)])
    return json.dumps([o.value for o in outcomes])


def commit_in_fresh_process(
    kind: str, dsn: str, table: str, options: dict[str, Any], committable: twopc.Committable
) -> list[twopc.CommitOutcome]:
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        raw = pool.apply(_commit_child, (kind, dsn, table, options, committable.dumps()))
    return [twopc.CommitOutcome(v) for v in json.loads(raw)]


def wait_until(predicate: Any, timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def staging_prefix(sink_id: str) -> str:
    """Name prefix of a sink id's staging tables (``twopc_stage_<sha256(sink_id)[:8]>_``)."""
    return f"twopc_stage_{hashlib.sha256(sink_id.encode()).hexdigest()[:8]}_"


# -- the cases both databases must pass -------------------------------------------------------


class SqlSinkCases:
    """Shared cases; subclasses provide a ``db`` fixture returning a :class:`Db`."""

    # column DDL both servers accept
    KV = "id bigint PRIMARY KEY, v varchar(64), n bigint"
    KV_NO_KEY = "id bigint, v varchar(64), n bigint"
    service: str
    """The name ``scripts/services`` knows the subclass's server by."""

    # 1. round trips ---------------------------------------------------------------------

    @pytest.mark.parametrize("tm", MODES)
    def test_append_round_trip(self, db: Db, env: Env, tm: str) -> None:
        table = env.table()
        db.create(table, self.KV_NO_KEY)
        sink = env.sink(table, transaction_mode=tm)
        sid = env.sink_id()
        outcomes = write_and_commit(
            sink,
            env.ctx(sid),
            batch(id=[1, 2], v=["a", "b"], n=[10, 20]),
            batch(id=[2, 3], v=["b2", None], n=[None, 30]),
        )
        assert outcomes == [twopc.CommitOutcome.COMMITTED]
        assert db.query(f"SELECT id, v, n FROM {db.q(table)} ORDER BY id, v") == [
            (1, "a", 10),
            (2, "b", 20),
            (2, "b2", None),
            (3, None, 30),
        ]
        assert db.markers(env.marker_table, sid) == [(env.query_id, 0, 0)]
        assert env.leftovers(sid) == ([], [])

    @pytest.mark.parametrize("tm", MODES)
    @pytest.mark.parametrize("processes", [False, True])
    def test_coordinator_append_two_partitions(
        self, db: Db, env: Env, tm: str, processes: bool
    ) -> None:
        table = env.table()
        db.create(table, self.KV)
        sink = env.sink(table, transaction_mode=tm)
        sid = env.sink_id()
        coordinator = env.coordinator(sink, sid)
        parts = [
            table_of(batch(id=[1, 2], v=["a", "b"], n=[1, 2])),
            table_of(batch(id=[3], v=["c"], n=[3])),
        ]
        metrics = coordinator.run_batch(env.query_id, 0, LocalEngine(parts, processes=processes))
        assert metrics.status == "committed"
        # a replay of the same batch (same checkpoint) is skipped
        again = coordinator.run_batch(env.query_id, 0, LocalEngine(parts, processes=processes))
        assert again.status == "skipped"
        coordinator.run_batch(
            env.query_id, 1, LocalEngine([table_of(batch(id=[4], v=["d"], n=[4]))], processes=False)
        )
        assert db.query(f"SELECT id, v, n FROM {db.q(table)} ORDER BY id") == [
            (1, "a", 1),
            (2, "b", 2),
            (3, "c", 3),
            (4, "d", 4),
        ]
        assert db.markers(env.marker_table, sid) == [
            (env.query_id, 0, 0),
            (env.query_id, 0, 1),
            (env.query_id, 1, 0),
        ]
        assert env.leftovers(sid) == ([], [])

    def test_tasks_racing_to_create_tables(self, db: Db, env: Env) -> None:
        """Many tasks start at once with neither the marker table nor the target table
        created yet (``create_table=True``)."""
        partitions = 8
        for round_ in range(5):
            table = env.table(f"race{round_}")
            marker = env.track_table(f"itm_race{round_}_{env.suffix}")
            sink = env.sink(table, marker_table=marker, create_table=True)
            sid = env.sink_id(f"race{round_}")
            parts = [table_of(batch(id=[p], v=["x"], n=[round_])) for p in range(partitions)]
            env.coordinator(sink, sid, log=f"log{round_}").run_batch(
                env.query_id, 0, LocalEngine(parts, processes=True)
            )
            assert len(db.markers(marker, sid)) == partitions
            assert db.count(table) == partitions

    @pytest.mark.parametrize("tm", MODES)
    def test_upsert_last_wins_by_input_order(self, db: Db, env: Env, tm: str) -> None:
        table = env.table()
        db.create(table, self.KV)
        db.execute(f"INSERT INTO {db.q(table)} VALUES (1, 'old', 1), (9, 'keep', 9)")
        sink = env.sink(table, mode="upsert", key_columns=["id"], transaction_mode=tm)
        outcomes = write_and_commit(
            sink,
            env.ctx(env.sink_id()),
            batch(id=[1, 2, 1], v=["x", "y", "z"], n=[100, 200, 300]),
            # duplicates across invoke calls: later call wins
            batch(id=[2, 3, 3], v=["y2", "c1", "c2"], n=[201, 1, 2]),
        )
        assert outcomes == [twopc.CommitOutcome.COMMITTED]
        assert db.rows(table) == [(1, "z", 300), (2, "y2", 201), (3, "c2", 2), (9, "keep", 9)]
        assert env.leftovers(env.sink_id()) == ([], [])

    @pytest.mark.parametrize("tm", MODES)
    def test_upsert_last_wins_by_order_column(self, db: Db, env: Env, tm: str) -> None:
        table = env.table()
        db.create(table, self.KV)
        db.execute(f"INSERT INTO {db.q(table)} VALUES (1, 'old', 0)")
        sink = env.sink(
            table, mode="upsert", key_columns=["id"], order_column="n", transaction_mode=tm
        )
        write_and_commit(
            sink,
            env.ctx(env.sink_id()),
            # id 1: n=5 is largest though not last; id 2: tie on n -> input order decides
            batch(id=[1, 1, 2, 2, 1], v=["a", "b", "p", "q", "c"], n=[3, 5, 7, 7, 4]),
        )
        assert db.rows(table) == [(1, "b", 5), (2, "q", 7)]

    @pytest.mark.parametrize("tm", MODES)
    def test_upsert_composite_key_and_key_only_table(self, db: Db, env: Env, tm: str) -> None:
        table = env.table()
        db.create(table, "id bigint, k bigint, v varchar(64), PRIMARY KEY (id, k)")
        db.execute(f"INSERT INTO {db.q(table)} VALUES (1, 1, 'old')")
        sink = env.sink(table, mode="upsert", key_columns=["id", "k"], transaction_mode=tm)
        write_and_commit(
            sink,
            env.ctx(env.sink_id()),
            batch(id=[1, 1, 1], k=[1, 2, 1], v=["a", "b", "c"]),
        )
        assert db.query(f"SELECT id, k, v FROM {db.q(table)} ORDER BY id, k") == [
            (1, 1, "c"),
            (1, 2, "b"),
        ]
        # only key columns: duplicates collapse, existing keys stay
        keys = env.table("keys")
        db.create(keys, "id bigint PRIMARY KEY")
        db.execute(f"INSERT INTO {db.q(keys)} VALUES (1)")
        sink2 = env.sink(keys, mode="upsert", key_columns=["id"], transaction_mode=tm)
        write_and_commit(sink2, env.ctx(env.sink_id("keys")), batch(id=[1, 2, 2, 3]))
        assert db.rows(keys) == [(1,), (2,), (3,)]

    @pytest.mark.parametrize("tm", MODES)
    def test_delete_column(self, db: Db, env: Env, tm: str) -> None:
        table = env.table()
        db.create(table, self.KV)
        db.execute(
            f"INSERT INTO {db.q(table)} VALUES (1, 'a', 1), (2, 'b', 2), (3, 'c', 3), (4, 'd', 4)"
        )
        sink = env.sink(
            table, mode="upsert", key_columns=["id"], delete_column="gone", transaction_mode=tm
        )
        write_and_commit(
            sink,
            env.ctx(env.sink_id()),
            batch(
                id=[1, 2, 2, 3, 5, 6, 6],
                v=["x", "b2", None, None, "e", "f", None],
                n=[0, 20, 0, 0, 5, 6, 0],
                #  del,  upd, then del, del, ins, ins, then del
                gone=pa.array([True, False, True, True, False, False, True]),
            ),
            # in a later invoke: 3 comes back, 4 is deleted
            batch(id=[3, 4], v=["c2", None], n=[33, 0], gone=pa.array([False, True])),
        )
        assert db.rows(table) == [(3, "c2", 33), (5, "e", 5)]

    @pytest.mark.parametrize("tm", MODES)
    def test_columns_mapped_by_name(self, db: Db, env: Env, tm: str) -> None:
        table = env.table()
        db.create(table, "n bigint, extra varchar(8) DEFAULT 'dflt', v varchar(64), id bigint")
        sink = env.sink(table, transaction_mode=tm)
        write_and_commit(sink, env.ctx(env.sink_id()), batch(id=[1, 2], v=["a", "b"], n=[10, 20]))
        assert db.query(f"SELECT id, v, n, extra FROM {db.q(table)} ORDER BY id") == [
            (1, "a", 10, "dflt"),
            (2, "b", 20, "dflt"),
        ]
        keyed = env.table("keyed")
        db.create(keyed, "v varchar(64), n bigint, id bigint PRIMARY KEY")
        db.execute(f"INSERT INTO {db.q(keyed)} (id, v, n) VALUES (1, 'old', 1)")
        upsert = env.sink(keyed, mode="upsert", key_columns=["id"], transaction_mode=tm)
        write_and_commit(
            upsert,
            env.ctx(env.sink_id("keyed")),
            batch(n=[5, 6], v=["new", "two"], id=[1, 2]),
        )
        assert db.query(f"SELECT id, v, n FROM {db.q(keyed)} ORDER BY id") == [
            (1, "new", 5),
            (2, "two", 6),
        ]

    @pytest.mark.parametrize("tm", MODES)
    def test_create_table_from_arrow_schema(self, db: Db, env: Env, tm: str) -> None:
        table = env.table()
        assert not db.table_exists(table)
        data = pa.RecordBatch.from_pydict(
            {
                "id": pa.array([1, 2], pa.int64()),
                "name": pa.array(["a", "b"], pa.string()),
                "small": pa.array([1, 2], pa.int32()),
                "ratio": pa.array([0.5, 1.5], pa.float64()),
                "flag": pa.array([True, False]),
                "day": pa.array([dt.date(2024, 1, 2), None], pa.date32()),
                "at": pa.array(
                    [dt.datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=dt.UTC), None],
                    pa.timestamp("us", tz="UTC"),
                ),
                "amount": pa.array([decimal.Decimal("12.34"), None], pa.decimal128(10, 2)),
            }
        )
        sink = env.sink(
            table,
            mode="upsert",
            key_columns=["id", "name"],
            create_table=True,
            transaction_mode=tm,
        )
        write_and_commit(sink, env.ctx(env.sink_id()), data)
        types = db.column_types(table)
        assert list(types) == [
            "id", "name", "small", "ratio", "flag", "day", "at", "amount"
        ]  # fmt: skip
        self.check_created_types(types)
        assert db.primary_key(table) == ["id", "name"]
        rows = db.query(
            f"SELECT id, name, small, ratio, day, amount FROM {db.q(table)} ORDER BY id"
        )
        assert rows == [
            (1, "a", 1, 0.5, dt.date(2024, 1, 2), decimal.Decimal("12.34")),
            (2, "b", 2, 1.5, None, None),
        ]
        assert db.query(f"SELECT count(*) FROM {db.q(table)} WHERE flag")[0][0] == 1

    def check_created_types(self, types: dict[str, str]) -> None:
        raise NotImplementedError

    @pytest.mark.parametrize("mode", ["append", "upsert"])
    def test_tricky_values_round_trip(self, db: Db, env: Env, mode: str) -> None:
        table = env.table()
        db.create(table, "id bigint PRIMARY KEY, v varchar(64), n double precision")
        values = [
            "plain",
            "comma, and \"quotes\" and 'single'",
            "new\nline\r\nand\ttab",
            "back\\slash \\N \\",
            "NULL",
            "\\N",
            "",
            None,
            "unicode: é ß 漢字 🎉",
            '"',
        ]
        numbers = [0.1, -1e300, 1.0 / 3.0, None, 2.5e-300, 0.0, 123456789.125, None, 1e15, -0.5]
        sink = env.sink(
            table,
            mode=mode,
            key_columns=["id"] if mode == "upsert" else (),
            transaction_mode="transaction",
        )
        data = batch(
            id=list(range(len(values))),
            v=pa.array(values, pa.string()),
            n=pa.array(numbers, pa.float64()),
        )
        write_and_commit(sink, env.ctx(env.sink_id()), data)
        assert db.query(f"SELECT id, v, n FROM {db.q(table)} ORDER BY id") == [
            (i, v, n) for i, (v, n) in enumerate(zip(values, numbers, strict=True))
        ]

    @pytest.mark.parametrize("tm", MODES)
    def test_many_rows_two_partitions(self, db: Db, env: Env, tm: str) -> None:
        table = env.table()
        db.create(table, self.KV)
        sink = env.sink(table, mode="upsert", key_columns=["id"], transaction_mode=tm)
        rows = 30_000
        ids = list(range(rows))
        parts = [
            # every key twice in its partition; the second copy (n = 2) must win
            table_of(
                batch(
                    id=ids[: rows // 2] * 2, v=["x"] * rows, n=[1] * (rows // 2) + [2] * (rows // 2)
                )
            ),
            table_of(batch(id=ids[rows // 2 :], v=["y"] * (rows // 2), n=[2] * (rows // 2))),
        ]
        coordinator = env.coordinator(sink, env.sink_id())
        coordinator.run_batch(env.query_id, 0, LocalEngine(parts, processes=True, chunk_rows=7000))
        assert db.query(
            f"SELECT count(*), count(DISTINCT id), min(n), max(n) FROM {db.q(table)}"
        ) == [(rows, rows, 2, 2)]

    # 2. exactly-once --------------------------------------------------------------------

    @pytest.mark.parametrize("tm", MODES)
    @pytest.mark.parametrize("mode", ["append", "upsert"])
    def test_nothing_visible_before_commit(self, db: Db, env: Env, tm: str, mode: str) -> None:
        table = env.table()
        db.create(table, self.KV)
        sink = env.sink(
            table, mode=mode, key_columns=["id"] if mode == "upsert" else (), transaction_mode=tm
        )
        sid = env.sink_id()
        txn, committable = write(sink, env.ctx(sid), batch(id=[1, 2], v=["a", "b"], n=[1, 2]))
        # a second connection sees nothing: no rows, no marker
        assert db.count(table) == 0
        assert db.markers(env.marker_table, sid) == []
        if tm == "two_phase":
            assert env.prepared(sid) == [f"{committable.payload['gtrid']}:0-0-0"]
            assert db.is_closed(txn.conn)
        else:
            assert env.prepared(sid) == []
            assert committable.payload["gtrid"] is None
        assert commit(sink, txn, committable) == [twopc.CommitOutcome.COMMITTED]
        assert db.count(table) == 2
        assert env.leftovers(sid) == ([], [])

    def test_commit_is_idempotent(self, db: Db, env: Env) -> None:
        """Two-phase commits on the driver are idempotent (transaction mode: the replay
        test below, where the marker makes the task write nothing)."""
        tm = "two_phase"
        table = env.table()
        db.create(table, self.KV_NO_KEY)
        sink = env.sink(table, transaction_mode=tm)
        sid = env.sink_id()
        _, committable = write(sink, env.ctx(sid), batch(id=[1, 2], v=["a", "b"], n=[1, 2]))
        assert sink.commit([committable]) == [twopc.CommitOutcome.COMMITTED]
        before = db.rows(table)
        assert sink.commit([committable]) == [twopc.CommitOutcome.ALREADY_COMMITTED]
        # from a fresh sink object too, and through the JSON form
        fresh = env.sink(table, transaction_mode=tm)
        again = twopc.Committable.loads(committable.dumps())
        assert fresh.commit([again, again]) == [twopc.CommitOutcome.ALREADY_COMMITTED] * 2
        assert db.rows(table) == before
        assert db.markers(env.marker_table, sid) == [(env.query_id, 0, 0)]

    def test_transaction_mode_replay_is_skipped(self, db: Db, env: Env) -> None:
        table = env.table()
        db.create(table, self.KV_NO_KEY)
        sink = env.sink(table)
        sid = env.sink_id()
        write_and_commit(sink, env.ctx(sid), batch(id=[1, 2], v=["a", "b"], n=[1, 2]))
        # the same (query, batch, partition), another attempt and even other data
        txn = sink.begin_transaction(env.ctx(sid, attempt=1))
        assert txn.skip
        sink.invoke(txn, batch(id=[7], v=["replayed"], n=[7]))
        committable = sink.pre_commit(txn)
        assert SqlPayload.of(committable) == SqlPayload(rows=0)  # nothing prepared
        assert commit(sink, txn, committable) == [twopc.CommitOutcome.ALREADY_COMMITTED]
        # through a coordinator that lost its commit log: the markers alone skip the replay
        coordinator = env.coordinator(sink, sid, log="other-log")
        replay = table_of(batch(id=[8], v=["again"], n=[8]))
        coordinator.run_batch(env.query_id, 0, LocalEngine([replay], processes=False))
        assert db.query(f"SELECT id, v FROM {db.q(table)} ORDER BY id") == [(1, "a"), (2, "b")]
        # another partition of the same batch was never written: it is not skipped
        write_and_commit(sink, env.ctx(sid, partition=1), batch(id=[3], v=["c"], n=[3]))
        assert db.count(table) == 3

    def test_two_phase_task_that_found_its_marker_prepares_nothing(self, db: Db, env: Env) -> None:
        """Its committable names no branch; committing it on the driver reads the marker
        row and reports the partition committed before, writing nothing."""
        table = env.table()
        db.create(table, self.KV_NO_KEY)
        sink = env.sink(table, transaction_mode="two_phase")
        sid = env.sink_id()
        write_and_commit(sink, env.ctx(sid), batch(id=[1, 2], v=["a", "b"], n=[1, 2]))
        txn = sink.begin_transaction(env.ctx(sid, attempt=1))
        assert txn.skip
        sink.invoke(txn, batch(id=[7], v=["replayed"], n=[7]))
        committable = sink.pre_commit(txn)
        assert SqlPayload.of(committable).xid is None
        fresh = env.sink(table, transaction_mode="two_phase")
        again = twopc.Committable.loads(committable.dumps())
        assert fresh.commit([again]) == [twopc.CommitOutcome.ALREADY_COMMITTED]
        assert db.query(f"SELECT id, v FROM {db.q(table)} ORDER BY id") == [(1, "a"), (2, "b")]
        assert env.leftovers(sid) == ([], [])

    def test_two_phase_replay_without_commit_log_never_duplicates(self, db: Db, env: Env) -> None:
        """Two-phase sinks rely on the commit log to skip whole replays (``is_committed``
        is not answered from the markers); without it each task still finds its partition's
        marker row and writes nothing, so the batch is not written twice (nor refused: a
        batch partly committed before its decision was lost must be able to finish)."""
        table = env.table()
        db.create(table, self.KV_NO_KEY)
        sid = env.sink_id()
        parts = [table_of(batch(id=[1], v=["a"], n=[1]))]
        sink = env.sink(table, transaction_mode="two_phase")
        env.coordinator(sink, sid).run_batch(env.query_id, 0, LocalEngine(parts, processes=False))
        replay = env.coordinator(sink, sid, log="lost-log").run_batch(
            env.query_id, 0, LocalEngine([*parts, table_of(batch(id=[2], v=["b"], n=[2]))])
        )
        assert replay.status == "committed"
        # partition 0 committed before: skipped; partition 1 is new: written once
        assert db.rows(table) == [(1, "a", 1), (2, "b", 2)]
        assert db.markers(env.marker_table, sid) == [(env.query_id, 0, 0), (env.query_id, 0, 1)]
        assert env.leftovers(sid) == ([], [])

    # attempts of one task (a retry, a speculative copy) in two_phase mode ----------------

    @staticmethod
    def _prepared_attempt(env: Env, sid: str, table: str, attempt: int, ids: list[int]) -> Any:
        sink = env.sink(table, transaction_mode="two_phase")
        _, committable = write(sink, env.ctx(sid, attempt=attempt), batch(id=ids))
        return committable

    def test_a_failed_attempt_s_prepared_branch_is_rolled_back_by_the_retry(
        self, db: Db, env: Env
    ) -> None:
        """Without speculation an ended attempt that prepared is a failed one (its report
        never reached the driver): the retry rolls its branch back and writes the rows."""
        table = env.table()
        db.create(table, "id bigint")
        sid = env.sink_id()
        self._prepared_attempt(env, sid, table, 0, [1, 2])
        assert len(env.prepared(sid)) == 1
        sink = env.sink(table, transaction_mode="two_phase")
        _, retry = write(sink, env.ctx(sid, attempt=1), batch(id=[1, 2]))
        assert [gid.rsplit("-", 1)[1] for gid in env.prepared(sid)] == ["1"]
        assert sink.commit([retry]) == [twopc.CommitOutcome.COMMITTED]
        assert db.rows(table) == [(1,), (2,)]
        assert env.leftovers(sid) == ([], [])

    def test_a_copy_never_rolls_back_an_ended_attempt_it_may_lose_to(
        self, db: Db, env: Env
    ) -> None:
        """With speculative copies possible, attempt 0 may have prepared, reported and be
        about to be committed: the copy that starts then fails (Spark keeps attempt 0),
        and attempt 0's branch stays for the driver, who commits it."""
        table = env.table()
        db.create(table, "id bigint")
        sid = env.sink_id()
        first = self._prepared_attempt(env, sid, table, 0, [1, 2])
        sink = env.sink(table, transaction_mode="two_phase")
        copy = dataclasses.replace(env.ctx(sid, attempt=1), concurrent_attempts=True)
        with pytest.raises(twopc.TransientSinkError, match="gives way") as failure:
            write(sink, copy, batch(id=[1, 2]))
        assert_names_task(failure.value, sid, 0, 0)
        assert len(env.prepared(sid)) == 1
        assert sink.commit([first]) == [twopc.CommitOutcome.COMMITTED]
        assert db.rows(table) == [(1,), (2,)]
        assert env.leftovers(sid) == ([], [])

    @pytest.mark.parametrize("attempt0", ["running", "ended"])
    def test_a_copy_waits_and_skips_once_the_driver_committed_attempt_0(
        self, db: Db, env: Env, attempt0: str
    ) -> None:
        """Attempt 0 has prepared and still runs (its session lock is held), or has ended
        and reported: the copy that starts then waits and, once the driver commits attempt
        0, finds the marker and writes nothing (the race that used to roll the winner
        back)."""
        table = env.table()
        db.create(table, "id bigint")
        sid = env.sink_id()
        sink = env.sink(table, transaction_mode="two_phase")
        holder = sink.connect(autocommit=True)  # attempt 0's task, still running
        try:
            if attempt0 == "running":
                sink.hold_attempt_lock(holder, attempt_lock_name(env.ctx(sid, attempt=0)))
            first = self._prepared_attempt(env, sid, table, 0, [1, 2])
            copy = dataclasses.replace(env.ctx(sid, attempt=1), concurrent_attempts=True)
            outcome: dict[str, Any] = {}

            def run_copy() -> None:
                try:
                    outcome["txn"], outcome["committable"] = write(sink, copy, batch(id=[1, 2]))
                except BaseException as exc:  # handed to the test thread
                    outcome["error"] = exc

            thread = threading.Thread(target=run_copy)
            thread.start()
            time.sleep(1.5)
            assert thread.is_alive(), outcome  # waiting for attempt 0's branch
            assert sink.commit([first]) == [twopc.CommitOutcome.COMMITTED]
            thread.join(30)
            assert not thread.is_alive()
        finally:
            holder.close()
        assert "error" not in outcome, outcome
        assert outcome["txn"].skip
        assert db.rows(table) == [(1,), (2,)]
        assert env.leftovers(sid) == ([], [])

    def test_a_decided_branch_rolled_back_by_a_copy_commits_the_copy_instead(
        self, db: Db, env: Env
    ) -> None:
        """The decision names attempt 0, whose branch a copy rolled back before preparing
        the same partition: the commit commits the copy's branch, so the partition still
        commits exactly once, and a second commit finds the marker."""
        table = env.table()
        db.create(table, "id bigint")
        sid = env.sink_id()
        decided = self._prepared_attempt(env, sid, table, 0, [1, 2])
        self._prepared_attempt(env, sid, table, 1, [1, 2])  # rolls attempt 0 back
        sink = env.sink(table, transaction_mode="two_phase")
        assert sink.commit([decided]) == [twopc.CommitOutcome.COMMITTED]
        assert sink.commit([decided]) == [twopc.CommitOutcome.ALREADY_COMMITTED]
        assert db.rows(table) == [(1,), (2,)]
        assert env.leftovers(sid) == ([], [])

    def test_two_in_task_attempts_commit_the_partition_once(self, db: Db, env: Env) -> None:
        """``transaction`` mode: attempt 0 and a copy both begin before either committed;
        attempt 0 commits first, so the copy's marker insert finds attempt 0's marker. The
        copy rolls back and reports the partition already committed (whichever attempt
        Spark then keeps, the batch does not fail and the rows are there once)."""
        table = env.table()
        db.create(table, "id bigint")
        sid = env.sink_id()
        sink = env.sink(table)
        first = sink.begin_transaction(env.ctx(sid, attempt=0))
        copy = sink.begin_transaction(env.ctx(sid, attempt=1))
        assert not first.skip and not copy.skip
        with in_task(first.ctx):
            sink.invoke(first, batch(id=[1, 2]))
            committable = sink.pre_commit(first)
            assert commit(sink, first, committable) == [twopc.CommitOutcome.COMMITTED]
        with in_task(copy.ctx):
            sink.invoke(copy, batch(id=[1, 2]))
            late = sink.pre_commit(copy)
            assert commit(sink, copy, late) == [twopc.CommitOutcome.ALREADY_COMMITTED]
        assert db.rows(table) == [(1,), (2,)]
        assert db.markers(env.marker_table, sid) == [(env.query_id, 0, 0)]

    @pytest.mark.parametrize("tm", MODES)
    def test_abort_leaves_nothing(self, db: Db, env: Env, tm: str) -> None:
        table = env.table()
        db.create(table, self.KV)
        sink = env.sink(table, mode="upsert", key_columns=["id"], transaction_mode=tm)
        sid = env.sink_id()
        # abort of an open transaction
        txn = sink.begin_transaction(env.ctx(sid))
        sink.invoke(txn, batch(id=[1], v=["a"], n=[1]))
        sink.abort(txn)
        sink.abort(txn)  # idempotent
        # abort of pre-committed work: in the task (transaction mode), or on the driver
        txn, committable = write(sink, env.ctx(sid, attempt=1), batch(id=[2], v=["b"], n=[2]))
        if tm == "transaction":
            sink.abort(txn)
            sink.abort(txn)  # idempotent
        sink.abort_prepared([committable])
        sink.abort_prepared([committable])  # idempotent
        env.sink(table, transaction_mode=tm).abort_prepared([committable])
        assert db.count(table) == 0
        assert db.markers(env.marker_table, sid) == []
        assert env.leftovers(sid) == ([], [])
        # and the batch can be written afterwards
        write_and_commit(sink, env.ctx(sid, attempt=2), batch(id=[3], v=["c"], n=[3]))
        assert db.rows(table) == [(3, "c", 3)]

    def test_two_phase_commit_from_fresh_process(self, db: Db, env: Env) -> None:
        table = env.table()
        db.create(table, self.KV)
        options = {
            "mode": "upsert",
            "key_columns": ["id"],
            "transaction_mode": "two_phase",
            "marker_table": env.marker_table,
        }
        sink = env.sink(table, **options)
        sid = env.sink_id()
        _, committable = write(
            sink, env.ctx(sid, batch_id=3, partition=2), batch(id=[1, 1], v=["a", "b"], n=[1, 2])
        )
        assert db.count(table) == 0
        kind = "postgres" if db.name == "postgres" else "mysql"
        outcome = commit_in_fresh_process(kind, db.dsn, table, options, committable)
        assert outcome == [twopc.CommitOutcome.COMMITTED]
        assert db.rows(table) == [(1, "b", 2)]
        assert env.leftovers(sid) == ([], [])
        again = commit_in_fresh_process(kind, db.dsn, table, options, committable)
        assert again == [twopc.CommitOutcome.ALREADY_COMMITTED]
        assert db.rows(table) == [(1, "b", 2)]

    def test_recover_lists_only_this_sink(self, db: Db, env: Env) -> None:
        table = env.table()
        db.create(table, self.KV_NO_KEY)
        sink = env.sink(table, transaction_mode="two_phase")
        mine, other = env.sink_id("mine"), env.sink_id("other")
        _, c0 = write(sink, env.ctx(mine, batch_id=0, partition=0), batch(id=[1], v=["a"], n=[1]))
        _, c1 = write(sink, env.ctx(mine, batch_id=0, partition=1), batch(id=[2], v=["b"], n=[2]))
        _, foreign = write(sink, env.ctx(other), batch(id=[3], v=["c"], n=[3]))
        found = sink.recover(mine)
        assert sorted((c.batch_id, c.partition, c.attempt) for c in found) == [(0, 0, 0), (0, 1, 0)]
        assert {c.query_id for c in found} == {env.query_id}
        assert {c.sink_id for c in found} == {mine}
        assert len(env.prepared(mine)) == 2
        assert len(env.prepared(other)) == 1
        # a coordinator of `mine` with no decision rolls back its own branches only
        stats = env.coordinator(env.sink(table, transaction_mode="two_phase"), mine).recover()
        assert stats.aborted == 2
        assert env.prepared(mine) == []
        assert env.prepared(other) == [f"{foreign.payload['gtrid']}:{foreign.payload['bqual']}"]
        assert db.count(table) == 0
        assert sink.commit([foreign]) == [twopc.CommitOutcome.COMMITTED]
        assert db.rows(table) == [(3, "c", 3)]
        # recover in transaction mode has nothing to report
        assert env.sink(table).recover(mine) == []
        del c0, c1

    @pytest.mark.parametrize("point", ["after_decision", "before_decision"])
    def test_two_phase_driver_crash_then_recovery(self, db: Db, env: Env, point: str) -> None:
        table = env.table()
        db.create(table, self.KV)
        sid = env.sink_id()
        parts = [
            table_of(batch(id=[1, 2], v=["a", "b"], n=[1, 2])),
            table_of(batch(id=[3], v=["c"], n=[3])),
        ]
        options: dict[str, Any] = {
            "mode": "upsert",
            "key_columns": ["id"],
            "transaction_mode": "two_phase",
        }
        crashing = env.coordinator(env.sink(table, **options), sid, faults=f"{point}:raise")
        with pytest.raises(twopc.InjectedFault):
            crashing.run_batch(env.query_id, 0, LocalEngine(parts, processes=True))
        assert db.count(table) == 0
        if point == "after_decision":
            assert len(env.prepared(sid)) == 2  # decided, left prepared by the "crash"
        # a new driver: new coordinator, new sink object, same commit log
        restarted = env.coordinator(env.sink(table, **options), sid)
        stats = restarted.recover()
        assert env.leftovers(sid) == ([], [])
        if point == "after_decision":
            assert stats.committed == 2
            assert db.count(table) == 3
        else:
            assert db.count(table) == 0
        # the query restarts and replays the batch: exactly once either way
        restarted.run_batch(env.query_id, 0, LocalEngine(parts, processes=True))
        assert db.rows(table) == [(1, "a", 1), (2, "b", 2), (3, "c", 3)]
        assert env.leftovers(sid) == ([], [])
        assert len(db.markers(env.marker_table, sid)) == 2

    def test_two_phase_recovery_aborts_undecided_branches(self, db: Db, env: Env) -> None:
        """Branches prepared by tasks whose driver died before deciding (no cleanup ran)."""
        table = env.table()
        db.create(table, self.KV_NO_KEY)
        sid = env.sink_id()
        sink = env.sink(table, transaction_mode="two_phase")
        write(sink, env.ctx(sid, partition=0), batch(id=[1], v=["a"], n=[1]))
        write(sink, env.ctx(sid, partition=1, attempt=1), batch(id=[2], v=["b"], n=[2]))
        assert len(env.prepared(sid)) == 2
        coordinator = env.coordinator(env.sink(table, transaction_mode="two_phase"), sid)
        assert coordinator.recover().aborted == 2
        assert env.leftovers(sid) == ([], [])
        assert db.count(table) == 0
        coordinator.run_batch(
            env.query_id, 0, LocalEngine([table_of(batch(id=[1], v=["a"], n=[1]))] * 2)
        )
        assert db.count(table) == 2

    @pytest.mark.parametrize("point", ["after_decision", "before_decision"])
    def test_transaction_mode_driver_crash_then_replay(self, db: Db, env: Env, point: str) -> None:
        table = env.table()
        db.create(table, self.KV_NO_KEY)
        sid = env.sink_id()
        parts = [
            table_of(batch(id=[1, 2], v=["a", "b"], n=[1, 2])),
            table_of(batch(id=[3], v=["c"], n=[3])),
        ]
        crashing = env.coordinator(env.sink(table), sid, faults=f"{point}:raise")
        with pytest.raises(twopc.InjectedFault):
            crashing.run_batch(env.query_id, 0, LocalEngine(parts, processes=True))
        # the tasks committed their own transactions before the driver crashed
        assert db.count(table) == 3
        restarted = env.coordinator(env.sink(table), sid)
        restarted.run_batch(env.query_id, 0, LocalEngine(parts, processes=True))
        assert db.query(f"SELECT id FROM {db.q(table)} ORDER BY id") == [(1,), (2,), (3,)]
        assert len(db.markers(env.marker_table, sid)) == 2

    # 3. connection cut mid-transaction ----------------------------------------------------

    @pytest.mark.parametrize("tm", MODES)
    @pytest.mark.parametrize("next_call", ["invoke", "pre_commit"])
    def test_connection_terminated_mid_transaction(
        self, db: Db, env: Env, tm: str, next_call: str
    ) -> None:
        table = env.table()
        db.create(table, self.KV)
        db.execute(f"INSERT INTO {db.q(table)} VALUES (100, 'existing', 0)")
        sink = env.sink(table, mode="upsert", key_columns=["id"], transaction_mode=tm)
        sid = env.sink_id()
        ctx = env.ctx(sid, batch_id=4, partition=1)
        txn = sink.begin_transaction(ctx)
        try:
            sink.invoke(txn, batch(id=[1, 2], v=["a", "b"], n=[1, 2]))
            db.terminate(txn)
            if next_call == "invoke":
                with pytest.raises(twopc.SinkError) as caught, in_task(ctx):
                    sink.invoke(txn, batch(id=[3], v=["c"], n=[3]))
            else:
                with pytest.raises(twopc.SinkError) as caught, in_task(ctx):
                    sink.pre_commit(txn)
        finally:
            sink.abort(txn)  # must not raise on a dead connection
        assert_names_task(caught.value, sid, 4, 1)
        assert caught.value.retryable, caught.value  # a lost connection is transient
        assert db.rows(table) == [(100, "existing", 0)]
        assert env.leftovers(sid) == ([], [])
        assert db.markers(env.marker_table, sid) == []
        # the retried task writes the batch
        write_and_commit(
            sink, env.ctx(sid, batch_id=4, partition=1, attempt=1), batch(id=[1], v=["a"], n=[1])
        )
        assert db.rows(table) == [(1, "a", 1), (100, "existing", 0)]

    def test_connection_terminated_before_in_task_commit(self, db: Db, env: Env) -> None:
        table = env.table()
        db.create(table, self.KV_NO_KEY)
        sink = env.sink(table)
        sid = env.sink_id()
        txn, committable = write(sink, env.ctx(sid, batch_id=2), batch(id=[1], v=["a"], n=[1]))
        db.terminate(txn)
        with pytest.raises(twopc.SinkError) as caught:
            commit(sink, txn, committable)
        assert_names_task(caught.value, sid, 2, 0)
        assert db.count(table) == 0
        assert db.markers(env.marker_table, sid) == []
        write_and_commit(sink, env.ctx(sid, batch_id=2, attempt=1), batch(id=[1], v=["a"], n=[1]))
        assert db.rows(table) == [(1, "a", 1)]

    # 5. bad input -------------------------------------------------------------------------

    def _bad_batch_via_coordinator(
        self, env: Env, sink: SqlSink, data: pa.RecordBatch, tm: str, partition: int = 1
    ) -> twopc.BatchFailedError:
        sid = env.sink_id("coord")
        coordinator = env.coordinator(sink, sid)
        good = table_of(
            pa.RecordBatch.from_pydict(
                {name: pa.nulls(0, data.schema.field(name).type) for name in data.schema.names}
            )
        )
        with pytest.raises(twopc.BatchFailedError) as caught:
            coordinator.run_batch(
                env.query_id, 5, LocalEngine([good, table_of(data)], processes=False)
            )
        assert_names_task(caught.value, sid, 5, partition)
        assert env.leftovers(sid) == ([], [])
        del tm
        return caught.value

    def _bad_batch_direct(
        self, env: Env, sink: SqlSink, data: pa.RecordBatch
    ) -> twopc.PermanentSinkError:
        sid = env.sink_id("direct")
        ctx = env.ctx(sid, batch_id=6, partition=3)
        opened: list[SqlTransaction] = []

        def phase1() -> None:
            opened.append(sink.begin_transaction(ctx))
            sink.invoke(opened[0], data)
            sink.pre_commit(opened[0])

        try:
            with pytest.raises(twopc.PermanentSinkError) as caught, in_task(ctx):
                phase1()
        finally:
            for txn in opened:
                sink.abort(txn)
        assert_names_task(caught.value, sid, 6, 3)
        assert env.leftovers(sid) == ([], [])
        return caught.value

    def _assert_bad(
        self, env: Env, sink: SqlSink, data: pa.RecordBatch, tm: str, *needles: str
    ) -> None:
        direct = self._bad_batch_direct(env, sink, data)
        via = self._bad_batch_via_coordinator(env, sink, data, tm)
        for needle in needles:
            assert needle in str(direct), direct
            assert needle in str(via), via

    @pytest.mark.parametrize("tm", MODES)
    def test_bad_null_key_in_upsert(self, db: Db, env: Env, tm: str) -> None:
        table = env.table()
        db.create(table, self.KV)
        db.execute(f"INSERT INTO {db.q(table)} VALUES (1, 'a', 1)")
        sink = env.sink(table, mode="upsert", key_columns=["id"], transaction_mode=tm)
        data = batch(id=[2, None], v=["b", "c"], n=[2, 3])
        self._assert_bad(env, sink, data, tm, "key column 'id' is null")
        assert db.rows(table) == [(1, "a", 1)]

    @pytest.mark.parametrize("tm", MODES)
    @pytest.mark.parametrize("mode", ["append", "upsert"])
    def test_bad_value_type(self, db: Db, env: Env, tm: str, mode: str) -> None:
        table = env.table()
        db.create(table, self.KV)
        db.execute(f"INSERT INTO {db.q(table)} VALUES (1, 'a', 1)")
        sink = env.sink(
            table, mode=mode, key_columns=["id"] if mode == "upsert" else (), transaction_mode=tm
        )
        data = batch(id=[2, 3], v=["b", "c"], n=pa.array(["7", "not a number"]))
        self._assert_bad(env, sink, data, tm, *self.bad_type_needles)
        assert db.rows(table) == [(1, "a", 1)]

    bad_type_needles: tuple[str, ...] = ()

    @pytest.mark.parametrize("tm", MODES)
    def test_bad_data_column_missing_from_table(self, db: Db, env: Env, tm: str) -> None:
        table = env.table()
        db.create(table, self.KV)
        sink = env.sink(table, transaction_mode=tm)
        data = batch(id=[1], v=["a"], n=[1], surprise=["x"])
        self._assert_bad(env, sink, data, tm, "['surprise']", "are not in table")
        assert db.count(table) == 0

    @pytest.mark.parametrize("tm", MODES)
    def test_bad_missing_table(self, db: Db, env: Env, tm: str) -> None:
        table = env.table("missing")
        sink = env.sink(table, transaction_mode=tm)
        self._assert_bad(
            env, sink, batch(id=[1], v=["a"], n=[1]), tm, "does not exist", "create_table=True"
        )
        assert not db.table_exists(table)

    @pytest.mark.parametrize("tm", MODES)
    def test_bad_key_column_not_in_data(self, db: Db, env: Env, tm: str) -> None:
        table = env.table()
        db.create(table, self.KV)
        sink = env.sink(table, mode="upsert", key_columns=["id"], transaction_mode=tm)
        self._assert_bad(env, sink, batch(v=["a"], n=[1]), tm, "column 'id' is not in the data")
        assert db.count(table) == 0

    @pytest.mark.parametrize("tm", MODES)
    @pytest.mark.parametrize("mode", ["append", "upsert"])
    def test_weird_identifiers_are_quoted(self, db: Db, env: Env, tm: str, mode: str) -> None:
        table = env.track_table(f"we\"ird;tab`{env.suffix}'")
        key = 'k`e"y; DROP TABLE x'
        col = "co``l;x"
        canary = env.table("canary")
        db.create(canary, "id bigint")
        db.create(table, f"{db.q(key)} bigint PRIMARY KEY, {db.q(col)} varchar(64)")
        db.execute(f"INSERT INTO {db.q(table)} VALUES (1, 'old')")
        sink = env.sink(
            table,
            mode=mode,
            key_columns=[key] if mode == "upsert" else (),
            transaction_mode=tm,
            marker_table=f'm"ark`{env.suffix};',
        )
        env.track_table(f'm"ark`{env.suffix};')
        data = pa.RecordBatch.from_pydict(
            {key: pa.array([2, 2], pa.int64()), col: pa.array(["x'); --", 'y"`;'])}
        )
        if mode == "append":
            data = data.slice(0, 1)
        write_and_commit(sink, env.ctx(env.sink_id()), data)
        expected = [(1, "old"), (2, 'y"`;' if mode == "upsert" else "x'); --")]
        assert db.rows(table, order_by=key) == expected
        assert db.table_exists(canary)
        # create_table with such names works too
        created = env.track_table(f'new"t;`{env.suffix}')
        sink2 = env.sink(
            created,
            mode="upsert",
            key_columns=[key],
            create_table=True,
            transaction_mode=tm,
        )
        write_and_commit(sink2, env.ctx(env.sink_id("create")), data)
        assert db.primary_key(created) == [key]
        assert [r[1] for r in db.rows(created, order_by=key)] == [expected[-1][1]]

    @pytest.mark.parametrize("tm", MODES)
    def test_bad_password(self, db: Db, env: Env, tm: str) -> None:
        dsn = db.dsn.replace(":twopc@", f":{SECRET}@")
        assert SECRET in dsn
        table = env.table()
        sink = env.sink(table, dsn=dsn, transaction_mode=tm)
        sid = env.sink_id()
        ctx = env.ctx(sid, batch_id=1, partition=2)
        with pytest.raises(twopc.PermanentSinkError) as caught, in_task(ctx):
            sink.begin_transaction(ctx)
        assert_names_task(caught.value, sid, 1, 2)
        assert self.auth_needle in str(caught.value), caught.value
        for text in (str(caught.value), repr(caught.value), repr(sink), sink.describe()):
            assert SECRET not in text
        # through a coordinator: the driver connects before the batch (two_phase: its
        # recovery; both modes: the check of the markers), so the error comes from there
        coordinator_sid = env.sink_id("coord")
        coordinator = env.coordinator(sink, coordinator_sid)
        with pytest.raises(twopc.PermanentSinkError) as via:
            coordinator.run_batch(
                env.query_id, 5, LocalEngine([table_of(batch(id=[1]))], processes=False)
            )
        assert f"sink {coordinator_sid!r}" in str(via.value), via.value
        assert self.auth_needle in str(via.value), via.value
        assert SECRET not in str(via.value) and SECRET not in repr(via.value)

    auth_needle = ""

    @pytest.mark.parametrize("tm", MODES)
    def test_unreachable_host(self, db: Db, env: Env, tm: str) -> None:
        scheme = db.dsn.split("://", 1)[0]
        sink = env.sink(
            env.table(), dsn=f"{scheme}://twopc:{SECRET}@127.0.0.1:1/twopc", transaction_mode=tm
        )
        sid = env.sink_id()
        started = time.monotonic()
        ctx = env.ctx(sid, batch_id=3, partition=0)
        with pytest.raises(twopc.TransientSinkError) as caught, in_task(ctx):
            sink.begin_transaction(ctx)
        assert time.monotonic() - started < 10
        assert_names_task(caught.value, sid, 3, 0)
        text = str(caught.value)
        assert "cannot connect to twopc@127.0.0.1:1/twopc" in text, text
        assert SECRET not in text

    # 6. credentials ------------------------------------------------------------------------

    @pytest.mark.parametrize("where", ["userinfo", "query", "connect_options"])
    def test_credentials_never_shown(self, db: Db, env: Env, where: str) -> None:
        scheme = db.dsn.split("://", 1)[0]
        dsn = {
            "userinfo": f"{scheme}://twopc:{SECRET}@127.0.0.1:1/twopc",
            "query": f"{scheme}://twopc@127.0.0.1:1/twopc?password={SECRET}",
            "connect_options": f"{scheme}://twopc@127.0.0.1:1/twopc",
        }[where]
        options = {"sslpassword": SECRET + "y", "ssl_key": SECRET + "z"}
        if where == "connect_options":
            options["password"] = SECRET
        sink = env.sink(env.table(), dsn=dsn, connect_options=options)
        assert sink.settings.password == SECRET
        texts = [repr(sink), sink.describe(), repr(sink.settings), sink.settings.describe()]
        for text in texts:
            assert SECRET not in text, text
        assert "twopc@127.0.0.1:1/twopc" in sink.describe()

    def test_server_killed_after_prepare_then_recovered(
        self, db: Db, env: Env, services: ServiceControl
    ) -> None:
        table = env.table()
        db.create(table, self.KV)
        sid = env.sink_id()
        options: dict[str, Any] = {
            "mode": "upsert",
            "key_columns": ["id"],
            "transaction_mode": "two_phase",
        }
        decided = [table_of(batch(id=[1, 2], v=["a", "b"], n=[1, 2])), table_of(batch(id=[3]))]
        crashing = env.coordinator(env.sink(table, **options), sid, faults="after_decision:raise")
        with pytest.raises(twopc.InjectedFault):
            crashing.run_batch(env.query_id, 0, LocalEngine(decided, processes=False))
        # an undecided branch of the next batch, too
        write(env.sink(table, **options), env.ctx(sid, batch_id=1), batch(id=[9], v=["z"]))
        prepared = env.prepared(sid)
        assert len(prepared) == 3

        services.kill(self.service)
        services.restart(self.service)

        assert env.prepared(sid) == prepared  # prepared branches survive the crash
        assert db.count(table) == 0
        restarted = env.coordinator(env.sink(table, **options), sid)
        stats = restarted.recover()
        assert (stats.committed, stats.aborted) == (2, 1)
        assert env.prepared(sid) == []
        assert db.rows(table) == [(1, "a", 1), (2, "b", 2), (3, None, None)]
        # the query goes on: the replayed batch 0 is skipped, batch 1 is written once
        restarted.run_batch(env.query_id, 0, LocalEngine(decided, processes=False))
        restarted.run_batch(
            env.query_id, 1, LocalEngine([table_of(batch(id=[9], v=["z"]))], processes=False)
        )
        assert db.rows(table) == [(1, "a", 1), (2, "b", 2), (3, None, None), (9, "z", None)]
        assert env.prepared(sid) == []


OFFSETLESS_MARKER_DDL = {
    # a marker table of twopc before 0.3.0: a 64-bit attempt, no offset columns
    "postgres": (
        "CREATE TABLE {} (sink_id text NOT NULL, query_id text NOT NULL, "
        "batch_id bigint NOT NULL, partition_id integer NOT NULL, "
        "attempt bigint NOT NULL, committed_at timestamptz NOT NULL DEFAULT now(), "
        "PRIMARY KEY (sink_id, query_id, batch_id, partition_id))"
    ),
    "mariadb": (
        "CREATE TABLE {} (sink_id VARCHAR(64) NOT NULL, query_id VARCHAR(64) NOT NULL, "
        "batch_id BIGINT NOT NULL, partition_id INT NOT NULL, attempt BIGINT NOT NULL, "
        "committed_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), "
        "PRIMARY KEY (sink_id, query_id, batch_id, partition_id)) ENGINE=InnoDB"
    ),
}
"""``CREATE TABLE`` of that marker table per database (``Db.name``), ``{}`` its quoted name."""
