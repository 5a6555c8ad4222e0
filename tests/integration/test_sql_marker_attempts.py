"""Spark's task attempt ids are longs: the SQL sinks keep them whole, on real PostgreSQL and
MariaDB.

Every test reads the server back: the marker rows and the ``attempt`` column's type
(``information_schema``), the prepared transactions (``pg_prepared_xacts``, ``XA RECOVER``),
the table's storage (``pg_class.relfilenode``, ``information_schema.tables.create_time``).

- A task whose attempt id is ``2**40 + 7`` (the conformance kit's) commits, in both
  transaction modes and both write modes, and its marker row shows that attempt id; in
  ``two_phase`` mode its prepared transaction's id carries the whole attempt id and is
  within the servers' limits (PostgreSQL gid 200 bytes, XA gtrid and bqual 64 each).
- A marker table created with the old definition (``attempt integer`` / ``INT``) is
  migrated to a 64-bit column when a sink first ensures it, once, with its rows kept (a
  partition they show committed is still skipped), also when the tasks of a batch race to
  migrate it.
- A user who may not alter the old table gets a ``ConfigurationError`` naming the table and
  the statement to run; that statement, run on the server, migrates it.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import uuid
from typing import Any

import pytest

import twopc
from tests.harness.sql_servers import MariaDb, PostgresDb
from tests.harness.sql_sink_cases import (
    MODES,
    OFFSETLESS_MARKER_DDL,
    Db,
    Env,
    batch,
    commit,
    gtrid_prefix,
    write,
    write_and_commit,
)
from twopc_jdbc._base import SqlSink

pytestmark = pytest.mark.integration

ATTEMPT = 2**40 + 7
"""A task attempt id of a long-running Spark application (above 2**31; the kit's)."""

OLD_MARKER_DDL = {
    # the marker tables of twopc 0.2 and earlier, as they created them
    "postgres": (
        "CREATE TABLE {} (sink_id text NOT NULL, query_id text NOT NULL, "
        "batch_id bigint NOT NULL, partition_id integer NOT NULL, "
        "attempt integer NOT NULL, committed_at timestamptz NOT NULL DEFAULT now(), "
        "PRIMARY KEY (sink_id, query_id, batch_id, partition_id))"
    ),
    "mariadb": (
        "CREATE TABLE {} (sink_id VARCHAR(64) NOT NULL, query_id VARCHAR(64) NOT NULL, "
        "batch_id BIGINT NOT NULL, partition_id INT NOT NULL, attempt INT NOT NULL, "
        "committed_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), "
        "PRIMARY KEY (sink_id, query_id, batch_id, partition_id)) ENGINE=InnoDB"
    ),
}
NARROW = {"postgres": "integer", "mariadb": "int"}
MARKER_KEY = ["sink_id", "query_id", "batch_id", "partition_id"]


# -- what the server shows --------------------------------------------------------------------


def attempt_column(db: Db, table: str) -> tuple[str, str]:
    """The ``attempt`` column's type and nullability, from ``information_schema``."""
    rows = db.query(
        "SELECT data_type, is_nullable FROM information_schema.columns WHERE table_name = %s "
        f"AND table_schema = {db.current_schema_sql} AND column_name = 'attempt'",
        (table,),
    )
    assert len(rows) == 1, rows
    return str(rows[0][0]).lower(), str(rows[0][1])


def marker_rows(db: Db, marker: str, sink_id: str) -> list[tuple[Any, ...]]:
    return [
        (str(q), int(b), int(p), int(a), at)
        for q, b, p, a, at in db.query(
            f"SELECT query_id, batch_id, partition_id, attempt, committed_at FROM {db.q(marker)} "
            "WHERE sink_id = %s ORDER BY query_id, batch_id, partition_id",
            (sink_id,),
        )
    ]


def storage(db: Db, table: str) -> object:
    """What changes when the server rewrites the table (every ALTER that changes a column
    type does): its file node on PostgreSQL, its creation time on MariaDB (seconds)."""
    if isinstance(db, PostgresDb):
        return db.query("SELECT relfilenode FROM pg_class WHERE oid = %s::regclass", (table,))
    return db.query(
        "SELECT create_time FROM information_schema.tables "
        "WHERE table_schema = DATABASE() AND table_name = %s",
        (table,),
    )


def create_old_marker_table(
    db: Db, marker: str, rows: list[tuple[str, str, int, int, int]]
) -> None:
    db.execute(OLD_MARKER_DDL[db.name].format(db.q(marker)))
    for row in rows:
        db.execute(
            f"INSERT INTO {db.q(marker)} (sink_id, query_id, batch_id, partition_id, attempt) "
            "VALUES (%s, %s, %s, %s, %s)",
            row,
        )
    assert attempt_column(db, marker) == (NARROW[db.name], "NO")


# -- a long attempt id, end to end --------------------------------------------------------------


@pytest.mark.parametrize("mode", ["append", "upsert"])
@pytest.mark.parametrize("tm", MODES)
def test_long_attempt_id_commits_and_its_marker_shows_it(
    db: Db, env: Env, tm: str, mode: str
) -> None:
    table = env.table()
    if mode == "upsert":
        db.create(table, "id bigint PRIMARY KEY, v varchar(64), n bigint")
        sink = env.sink(table, transaction_mode=tm, mode="upsert", key_columns=["id"])
    else:
        db.create(table, "id bigint, v varchar(64), n bigint")
        sink = env.sink(table, transaction_mode=tm)
    sid = env.sink_id()
    # a Spark query id (a UUID) and the largest batch id and partition: the longest ids
    query_id, batch_id, partition = str(uuid.uuid4()), 2**63 - 1, 2**31 - 1
    ctx = twopc.TaskContext(sid, query_id, batch_id, partition, ATTEMPT)
    txn, committable = write(sink, ctx, batch(id=[1, 2, 3], v=["a", "b", "c"], n=[1, 2, 3]))
    assert committable.attempt == ATTEMPT
    if tm == "two_phase":
        # the server lists the branch under the whole attempt id, split as the sink split it
        gtrid, bqual = f"{gtrid_prefix(sid)}{query_id}", f"{batch_id}-{partition}-{ATTEMPT}"
        assert env.prepared(sid) == [f"{gtrid}:{bqual}"]
        assert len(gtrid.encode()) <= 64 and len(bqual.encode()) <= 64  # XA's limits
        assert len(f"{gtrid}:{bqual}".encode()) < 200  # PostgreSQL's gid limit
        assert db.rows(table) == []
    assert commit(sink, txn, committable) == [twopc.CommitOutcome.COMMITTED]
    assert env.prepared(sid) == []
    assert db.rows(table) == [(1, "a", 1), (2, "b", 2), (3, "c", 3)]
    assert attempt_column(db, env.marker_table) == ("bigint", "NO")
    [(q, b, p, attempt, _)] = marker_rows(db, env.marker_table, sid)
    assert (q, b, p, attempt) == (query_id, batch_id, partition, ATTEMPT)

    # the task's next attempt (id + 1) finds the marker and writes nothing
    retry = twopc.TaskContext(sid, query_id, batch_id, partition, ATTEMPT + 1)
    again = write_and_commit(sink, retry, batch(id=[1, 2, 3], v=["x", "y", "z"], n=[0, 0, 0]))
    assert again == [twopc.CommitOutcome.ALREADY_COMMITTED]
    assert db.rows(table) == [(1, "a", 1), (2, "b", 2), (3, "c", 3)]
    assert [r[3] for r in marker_rows(db, env.marker_table, sid)] == [ATTEMPT]


# -- a marker table of an earlier version --------------------------------------------------------


@pytest.mark.parametrize("tm", MODES)
def test_old_marker_table_is_migrated_once_and_keeps_its_rows(db: Db, env: Env, tm: str) -> None:
    marker, sid, other = env.marker_table, env.sink_id(), env.sink_id("old")
    create_old_marker_table(
        db,
        marker,
        [
            (sid, env.query_id, 0, 0, 3),  # this query's batch 0 committed under the old table
            (other, "q-old", 0, 0, 0),
            (other, "q-old", 1, 5, 2**31 - 1),  # the largest id the old column holds
        ],
    )
    before = marker_rows(db, marker, sid), marker_rows(db, marker, other)
    old_storage = storage(db, marker)
    table = env.table()
    db.create(table, "id bigint, v varchar(64), n bigint")
    sink = env.sink(table, transaction_mode=tm)

    # the first task migrates the table, and the old row still says batch 0 is committed
    replay = write_and_commit(sink, env.ctx(sid, 0, 0, ATTEMPT), batch(id=[1], v=["a"], n=[1]))
    assert replay == [twopc.CommitOutcome.ALREADY_COMMITTED]
    assert db.rows(table) == []
    assert attempt_column(db, marker) == ("bigint", "NO")
    assert db.primary_key(marker) == MARKER_KEY
    assert (marker_rows(db, marker, sid), marker_rows(db, marker, other)) == before
    migrated = storage(db, marker)
    if isinstance(db, PostgresDb):
        assert migrated != old_storage  # the server rewrote it (MariaDB: same second)

    # now a long attempt id commits
    first = write_and_commit(sink, env.ctx(sid, 1, 0, ATTEMPT), batch(id=[2], v=["b"], n=[2]))
    assert first == [twopc.CommitOutcome.COMMITTED]
    assert [r[:4] for r in marker_rows(db, marker, sid)] == [
        (env.query_id, 0, 0, 3),
        (env.query_id, 1, 0, ATTEMPT),
    ]
    assert marker_rows(db, marker, other) == before[1]
    assert db.rows(table) == [(2, "b", 2)]

    # once: a new sink (a new task's copy) finds the column wide and alters nothing
    if isinstance(db, MariaDb):
        time.sleep(1.1)  # create_time has whole seconds
    fresh = env.sink(table, transaction_mode=tm)
    second = write_and_commit(fresh, env.ctx(sid, 2, 0, ATTEMPT + 1), batch(id=[3], v=["c"], n=[3]))
    assert second == [twopc.CommitOutcome.COMMITTED]
    assert storage(db, marker) == migrated
    assert db.rows(table) == [(2, "b", 2), (3, "c", 3)]


@pytest.mark.parametrize("tm", MODES)
def test_tasks_racing_to_migrate_the_old_table_all_commit(db: Db, env: Env, tm: str) -> None:
    marker, sid = env.marker_table, env.sink_id()
    create_old_marker_table(db, marker, [(sid, "q-old", 0, 0, 1)])
    table = env.table()
    db.create(table, "id bigint, v varchar(64), n bigint")
    sink = env.sink(table, transaction_mode=tm)
    parts = 4
    results: dict[int, Any] = {}

    def task(partition: int) -> None:
        try:
            ctx = env.ctx(sid, 0, partition, ATTEMPT + partition)
            txn, committable = write(sink, ctx, batch(id=[partition], v=["v"], n=[partition]))
            results[partition] = commit(sink, txn, committable)
        except BaseException as exc:  # reported below
            results[partition] = exc

    threads = [threading.Thread(target=task, args=(p,)) for p in range(parts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert results == {p: [twopc.CommitOutcome.COMMITTED] for p in range(parts)}
    assert attempt_column(db, marker) == ("bigint", "NO")
    assert [r[:4] for r in marker_rows(db, marker, sid)] == [
        (env.query_id, 0, p, ATTEMPT + p) for p in range(parts)
    ] + [("q-old", 0, 0, 1)]
    assert sorted(r[0] for r in db.rows(table)) == list(range(parts))


# -- a user who may not alter the old table ------------------------------------------------------

# Statements the test user may not run, for the server's own refusal: the test servers have
# one user, which owns (PostgreSQL) or may alter (MariaDB) every table it can create.
_FORBIDDEN = {
    "postgres": "ALTER TABLE pg_catalog.pg_class ALTER COLUMN relname TYPE text",
    "mariadb": "ALTER TABLE mysql.global_priv MODIFY Priv LONGTEXT",
}


def refuse_alter(db: Db, sink: SqlSink, marker: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the server refuse the sink's ALTER of ``marker`` as it refuses a user without
    the privilege: the ALTER is swapped for one the test user may not run."""
    real_connect = sink.connect
    forbidden = _FORBIDDEN[db.name]

    def swapped(text: str) -> bool:
        return text.startswith("ALTER TABLE") and marker in text

    def connect(*, autocommit: bool) -> Any:
        conn = real_connect(autocommit=autocommit)
        if isinstance(db, PostgresDb):
            real_execute = conn.execute

            def execute(query: Any, params: Any = None, **kwargs: Any) -> Any:
                text = query if isinstance(query, str) else query.as_string(conn)
                return real_execute(forbidden if swapped(text) else query, params, **kwargs)

            conn.execute = execute
        else:

            class Refused(conn.cursorclass):  # type: ignore[misc, name-defined]
                def execute(self, query: str, args: Any = None) -> Any:
                    return super().execute(forbidden if swapped(query) else query, args)

            conn.cursorclass = Refused
        return conn

    monkeypatch.setattr(sink, "connect", connect)


def test_user_who_may_not_alter_is_told_the_statement(
    db: Db, env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker, sid = env.marker_table, env.sink_id()
    create_old_marker_table(db, marker, [(sid, "q-old", 0, 0, 1)])
    table = env.table()
    db.create(table, "id bigint, v varchar(64), n bigint")
    sink = env.sink(table, transaction_mode="two_phase")
    refuse_alter(db, sink, marker, monkeypatch)
    with pytest.raises(twopc.ConfigurationError) as caught:
        sink.begin_transaction(env.ctx(sid, 0, 0, ATTEMPT))
    message = str(caught.value)
    if isinstance(db, PostgresDb):
        schema = db.query("SELECT current_schema()")[0][0]
        where = f"{schema}.{marker}"
        statement = f'ALTER TABLE "{schema}"."{marker}" ALTER COLUMN "attempt" TYPE bigint;'
        refusal, who = "must be owner of table", "the table's owner"
    else:
        schema = db.query("SELECT DATABASE()")[0][0]
        where = f"{schema}.{marker}"
        statement = f"ALTER TABLE `{schema}`.`{marker}` MODIFY `attempt` BIGINT NOT NULL;"
        refusal, who = "ALTER command denied", "a user with the ALTER privilege on it"
    assert f"the marker table {where} was created by twopc 0.2 or earlier" in message
    assert refusal in message
    assert message.endswith(f"Have {who} run: {statement}"), message
    assert attempt_column(db, marker) == (NARROW[db.name], "NO")
    assert env.prepared(sid) == []

    # the statement, run as the message says, migrates the table; the sink then commits
    db.execute(statement.rstrip(";"))
    assert attempt_column(db, marker) == ("bigint", "NO")
    monkeypatch.undo()
    outcome = write_and_commit(sink, env.ctx(sid, 0, 0, ATTEMPT), batch(id=[1], v=["a"], n=[1]))
    assert outcome == [twopc.CommitOutcome.COMMITTED]
    assert [r[:4] for r in marker_rows(db, marker, sid)] == [
        (env.query_id, 0, 0, ATTEMPT),
        ("q-old", 0, 0, 1),
    ]


def test_a_user_who_may_not_add_the_offset_columns_writes_on_and_is_told_the_statement(
    db: Db, env: Env, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Without the right to add the source offset columns, batches still commit (without
    their offsets), a warning gives the statement, and once it is run the offsets are
    stored."""
    from twopc_jdbc import _offsets

    monkeypatch.setattr(_offsets, "_WARNED", set())
    marker, sid = env.marker_table, env.sink_id()
    db.execute(OFFSETLESS_MARKER_DDL[db.name].format(db.q(marker)))
    table = env.table()
    db.create(table, "id bigint, v varchar(64), n bigint")
    sink = env.sink(table)
    refuse_alter(db, sink, marker, monkeypatch)
    offsets = twopc.SourceOffsets(0, {"orders": {0: 7}})
    ctx = dataclasses.replace(env.ctx(sid, 0, 0, ATTEMPT), source_offsets=offsets, partitions=1)
    with caplog.at_level(logging.WARNING, logger="twopc.jdbc"):
        outcome = write_and_commit(sink, ctx, batch(id=[1], v=["a"], n=[1]))
    assert outcome == [twopc.CommitOutcome.COMMITTED]
    warned = [r.getMessage() for r in caplog.records if "source offset columns" in r.getMessage()]
    assert len(warned) == 1 and "ADD COLUMN" in warned[0], warned
    with pytest.raises(twopc.NoStoredOffsetsError, match="without source offsets"):
        twopc.starting_offsets(sink, sid)

    statement = warned[0].rsplit("run: ", 1)[1].rstrip(";")
    db.execute(statement)
    monkeypatch.undo()
    later = dataclasses.replace(
        ctx, batch_id=1, source_offsets=twopc.SourceOffsets(1, {"orders": {0: 9}})
    )
    assert write_and_commit(sink, later, batch(id=[2], v=["b"], n=[2])) == [
        twopc.CommitOutcome.COMMITTED
    ]
    assert twopc.starting_offsets(sink, sid) == '{"orders":{"0":9}}'
