"""The ``postgres`` SQL sink against a real PostgreSQL server (``scripts/services``).

The shared cases live in :class:`tests.harness.sql_sink_cases.SqlSinkCases`; this module
adds what only Postgres has: ``pg_terminate_backend``, a postmaster SIGKILL with a prepared
branch, binary ``COPY`` type errors and the ``max_prepared_transactions = 0`` error path.
"""

from __future__ import annotations

from typing import Any

import pytest

import twopc
from tests.harness.sql_servers import PostgresDb
from tests.harness.sql_sink_cases import (
    Db,
    Env,
    SqlSinkCases,
    assert_names_task,
    batch,
    in_task,
    write,
)
from twopc_jdbc.postgres import PostgresSink

pytestmark = pytest.mark.integration


@pytest.fixture
def db(postgres_dsn: str) -> PostgresDb:
    return PostgresDb(postgres_dsn)


class TestPostgresSink(SqlSinkCases):
    service = "postgres"
    bad_type_needles = ("n string -> int8",)
    auth_needle = "password authentication failed"

    def check_created_types(self, types: dict[str, str]) -> None:
        assert types == {
            "id": "bigint",
            "name": "text",
            "small": "integer",
            "ratio": "double precision",
            "flag": "boolean",
            "day": "date",
            "at": "timestamp with time zone",
            "amount": "numeric",
        }

    def test_staging_leaves_no_table_behind(self, db: Db, env: Env) -> None:
        table = env.table()
        db.create(table, self.KV)
        sink = env.sink(table, mode="upsert", key_columns=["id"], transaction_mode="two_phase")
        sid = env.sink_id()
        before = db.query(
            "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'twopc\\_stage\\_%%'"
        )
        _, committable = write(sink, env.ctx(sid), batch(id=[1], v=["a"], n=[1]))
        sink.commit([committable])
        after = db.query("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'twopc\\_stage\\_%%'")
        assert after == before
        assert db.rows(table) == [(1, "a", 1)]

    @pytest.mark.parametrize(
        ("column", "values", "needle"),
        [
            ("n", batch(n=[2**40]).column(0), "column 'n': 1099511627776 is out of range for int4"),
            ("v", batch(v=["x" * 20]).column(0), "too long"),
        ],
    )
    def test_bad_values_rejected_by_copy(
        self, db: Db, env: Env, column: str, values: Any, needle: str
    ) -> None:
        table = env.table()
        db.create(table, "id bigint PRIMARY KEY, v varchar(8), n integer")
        sink = env.sink(table, transaction_mode="two_phase")
        data = batch(id=[1], **{column: values})
        sid = env.sink_id()
        ctx = env.ctx(sid, batch_id=2, partition=1)
        txn = sink.begin_transaction(ctx)
        try:
            with pytest.raises(twopc.PermanentSinkError) as caught, in_task(ctx):
                sink.invoke(txn, data)
        finally:
            sink.abort(txn)
        assert_names_task(caught.value, sid, 2, 1)
        assert needle in str(caught.value), caught.value
        assert db.count(table) == 0
        assert env.prepared(sid) == []

    def test_two_phase_without_max_prepared_transactions(self, db: Db, env: Env) -> None:
        """The server cannot be restarted with the setting at 0 here; fake only the SHOW."""
        sink = _NoPreparedSink(db.dsn, table=env.table(), transaction_mode="two_phase",
                               marker_table=env.marker_table)  # fmt: skip
        sid = env.sink_id()
        ctx = env.ctx(sid, batch_id=1, partition=0)
        with pytest.raises(twopc.PermanentSinkError) as caught, in_task(ctx):
            sink.begin_transaction(ctx)
        assert "max_prepared_transactions = 0" in str(caught.value)
        assert "transaction_mode='transaction'" in str(caught.value)
        assert_names_task(caught.value, sid, 1, 0)
        assert sink.opened and all(c.closed for c in sink.opened)


class _FakeShowConnection:
    """A real connection, except that ``SHOW max_prepared_transactions`` answers 0."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def execute(self, statement: Any, *args: Any, **kwargs: Any) -> Any:
        if statement == "SHOW max_prepared_transactions":
            return self._conn.execute("SELECT '0'")
        return self._conn.execute(statement, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class _NoPreparedSink(PostgresSink):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.opened: list[Any] = []

    def connect(self, *, autocommit: bool) -> Any:
        conn = super().connect(autocommit=autocommit)
        self.opened.append(conn)
        return _FakeShowConnection(conn)
