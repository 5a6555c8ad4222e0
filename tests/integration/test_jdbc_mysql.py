"""The ``mysql`` SQL sink against a real MariaDB 10.11 server (``scripts/services``).

The shared cases live in :class:`tests.harness.sql_sink_cases.SqlSinkCases`; this module
adds what only MySQL/MariaDB has: ``KILL <connection>``, a server SIGKILL with a prepared XA
branch, and ``LOAD DATA LOCAL`` turning bad values into warnings that must fail the batch.
"""

from __future__ import annotations

import threading
from typing import Any

import pyarrow as pa
import pytest

import twopc
from tests.harness.services import MysqlParams
from tests.harness.sql_servers import MariaDb
from tests.harness.sql_sink_cases import (
    MODES,
    Db,
    Env,
    SqlSinkCases,
    assert_names_task,
    batch,
    in_task,
    table_of,
    write,
    write_and_commit,
)
from twopc.local import LocalEngine

pytestmark = pytest.mark.integration


@pytest.fixture
def db(mysql_dsn: str, mysql_params: MysqlParams) -> MariaDb:
    return MariaDb(mysql_dsn, mysql_params)


class TestMariaDbSink(SqlSinkCases):
    service = "mariadb"
    bad_type_needles = ("Incorrect integer value", "`n`")
    auth_needle = "Access denied"

    def check_created_types(self, types: dict[str, str]) -> None:
        assert types == {
            "id": "bigint",
            "name": "varchar",  # a key: TEXT cannot be a key without a length
            "small": "int",
            "ratio": "double",
            "flag": "tinyint",
            "day": "date",
            "at": "datetime",
            "amount": "decimal",
        }

    def test_commit_waits_for_the_preparing_session_to_let_go(
        self, db: Db, env: Env, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """MariaDB lets another session commit a prepared branch only once the session
        that prepared it has disconnected (until then: XAER_NOTA, although XA RECOVER
        lists it). A task's disconnect that the server finishes after the driver's commit
        must not be taken for a lost branch: the commit waits for it; a session that keeps
        holding the branch makes the commit fail transiently, and its retry commits."""
        import twopc_jdbc._base as base
        from twopc_jdbc import mysql

        table = env.table()
        db.create(table, "id bigint")
        sid = env.sink_id()
        sink = env.sink(table, transaction_mode="two_phase")
        held: list[Any] = []
        monkeypatch.setattr(base, "_close_quietly", held.append)  # the task keeps its session
        txn = sink.begin_transaction(env.ctx(sid))
        with in_task(txn.ctx):
            sink.invoke(txn, batch(id=[1, 2]))
            committable = sink.pre_commit(txn)
        monkeypatch.undo()
        assert len(held) == 1
        timer = threading.Timer(0.3, held[0].close)  # the disconnect, finished late
        timer.start()
        try:
            assert sink.commit([committable]) == [twopc.CommitOutcome.COMMITTED]
        finally:
            timer.join()
        assert db.rows(table) == [(1,), (2,)]

        table2 = env.table("held")
        db.create(table2, "id bigint")
        sink2 = env.sink(table2, transaction_mode="two_phase")
        monkeypatch.setattr(base, "_close_quietly", held.append)
        txn = sink2.begin_transaction(env.ctx(sid, batch_id=1))
        with in_task(txn.ctx):
            sink2.invoke(txn, batch(id=[3]))
            committable = sink2.pre_commit(txn)
        monkeypatch.undo()
        monkeypatch.setattr(mysql, "_DETACH_WAIT_SECONDS", 0.3)
        with pytest.raises(twopc.TransientSinkError, match="still held by a connected session"):
            sink2.commit([committable])
        assert db.rows(table2) == []
        held[-1].close()
        assert sink2.commit([committable]) == [twopc.CommitOutcome.COMMITTED]
        assert db.rows(table2) == [(3,)]

    def test_an_xid_a_dying_attempt_still_holds_is_a_transient_error(
        self, db: Db, env: Env
    ) -> None:
        """A restart within seconds of a stopped query may give a task the attempt id (so
        the XID) that a dying attempt of the earlier run still holds: MariaDB answers
        XAER_DUPID, which must be transient (Spark retries the task under a new id), name
        the task, and leave the other attempt's branch alone."""
        table = env.table()
        db.create(table, "id bigint")
        sid = env.sink_id()
        sink = env.sink(table, transaction_mode="two_phase")
        dying = sink.begin_transaction(env.ctx(sid, attempt=3))  # XA START, still active
        try:
            with pytest.raises(twopc.TransientSinkError, match=r"XAER_DUPID|1440") as failure:
                write(sink, env.ctx(sid, attempt=3), batch(id=[1]))
            assert_names_task(failure.value, sid, 0, 0)
            with in_task(dying.ctx):
                sink.invoke(dying, batch(id=[1]))
                committable = sink.pre_commit(dying)
        except BaseException:
            sink.abort(dying)
            raise
        assert sink.commit([committable]) == [twopc.CommitOutcome.COMMITTED]
        assert db.rows(table) == [(1,)]

    @pytest.mark.parametrize("tm", ["transaction", "two_phase"])
    @pytest.mark.parametrize(
        "case",
        [
            # LOAD DATA LOCAL turns all of these into warnings, not errors
            ("n int", {"n": pa.array([2**40], pa.int64())}, "Out of range value"),
            ("n varchar(3)", {"n": pa.array(["abcdef"])}, "Data truncated for column 'n'"),
            ("n int NOT NULL", {"n": pa.array([None], pa.int64())}, "NULL"),
            ("n date", {"n": pa.array(["2024-13-45"])}, "Data truncated for column 'n'"),
            ("n tinyint", {"n": pa.array([300], pa.int64())}, "Out of range value"),
            # (numbers a DECIMAL column cannot hold exactly are refused before the load:
            # tests/integration/test_sql_bad_input.py)
        ],
    )
    def test_load_data_warnings_fail_the_batch(
        self, db: Db, env: Env, tm: str, case: tuple[str, dict[str, Any], str]
    ) -> None:
        ddl, data, needle = case
        table = env.table()
        db.create(table, f"id bigint PRIMARY KEY, {ddl}")
        for mode in ("append", "upsert"):
            sink = env.sink(
                table, mode=mode, key_columns=["id"] if mode == "upsert" else (),
                transaction_mode=tm,
            )  # fmt: skip
            sid = env.sink_id(mode)
            rows = pa.RecordBatch.from_pydict({"id": pa.array([1], pa.int64()), **data})
            ctx = env.ctx(sid, batch_id=7, partition=2)
            txn = sink.begin_transaction(ctx)
            try:
                # LOAD DATA reports the warning when the task's buffered rows are loaded:
                # in invoke every 100,000 rows, else (here) in pre_commit
                sink.invoke(txn, rows)
                with pytest.raises(twopc.PermanentSinkError) as caught, in_task(ctx):
                    sink.pre_commit(txn)
            finally:
                sink.abort(txn)
            assert_names_task(caught.value, sid, 7, 2)
            assert needle in str(caught.value), caught.value
            assert db.count(table) == 0
            assert env.prepared(sid) == []
            assert db.markers(env.marker_table, sid) == []

    @pytest.mark.parametrize("tm", MODES)
    def test_an_early_load_that_fails_fails_the_batch(
        self, db: Db, env: Env, tm: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A task loads its rows every ``_LOAD_ROWS``: a value the server refuses in the
        first of many loads fails the batch, names the task, and leaves no row, marker or
        prepared branch."""
        from twopc_jdbc import mysql

        monkeypatch.setattr(mysql, "_LOAD_ROWS", 10)
        table = env.table()
        db.create(table, "id bigint PRIMARY KEY, n tinyint")
        sink = env.sink(table, transaction_mode=tm)
        sid = env.sink_id()
        ctx = env.ctx(sid, batch_id=3, partition=1)
        good = [
            pa.RecordBatch.from_pydict({"id": pa.array(range(s, s + 10), pa.int64()),
                                        "n": pa.array([1] * 10, pa.int64())})
            for s in range(100, 200, 10)
        ]  # fmt: skip
        bad = pa.RecordBatch.from_pydict(
            {"id": pa.array(range(10), pa.int64()), "n": pa.array([300] * 10, pa.int64())}
        )
        txn = sink.begin_transaction(ctx)

        def write_all() -> None:
            for rows in (bad, *good):
                sink.invoke(txn, rows)
            sink.pre_commit(txn)

        try:
            with pytest.raises(twopc.PermanentSinkError) as caught, in_task(ctx):
                write_all()
        finally:
            sink.abort(txn)
        assert_names_task(caught.value, sid, 3, 1)
        assert "Out of range value" in str(caught.value), caught.value
        assert db.count(table) == 0
        assert env.prepared(sid) == []
        assert db.markers(env.marker_table, sid) == []

    @pytest.mark.parametrize("tm", MODES)
    def test_rows_over_many_loads_all_land_once(
        self, db: Db, env: Env, tm: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Thirty loads of 7 rows: every row once, in both transaction modes."""
        from twopc_jdbc import mysql

        monkeypatch.setattr(mysql, "_LOAD_ROWS", 7)
        table = env.table()
        db.create(table, "id bigint PRIMARY KEY")
        sink = env.sink(table, transaction_mode=tm)
        batches = [batch(id=list(range(s, s + 3))) for s in range(0, 210, 3)]
        outcomes = write_and_commit(sink, env.ctx(env.sink_id()), *batches)
        assert outcomes == [twopc.CommitOutcome.COMMITTED]
        assert db.query(f"SELECT count(*), count(DISTINCT id), sum(id) FROM {db.q(table)}") == [
            (210, 210, 209 * 210 // 2)
        ]

    @pytest.mark.parametrize("tm", MODES)
    def test_upsert_of_unique_keys_over_several_loads(self, db: Db, env: Env, tm: str) -> None:
        """Unique keys skip the ranking and rows are loaded 100,000 at a time: existing
        rows are updated and new ones inserted, across more than one LOAD DATA."""
        table = env.table()
        db.create(table, self.KV)
        db.execute(f"INSERT INTO {db.q(table)} VALUES (5, 'old', 0), (119999, 'old', 0)")
        rows = 120_000
        ids = list(range(rows - 1, -1, -1))  # not in key order
        data = pa.RecordBatch.from_pydict(
            {
                "id": pa.array(ids, pa.int64()),
                "v": pa.array([f"v{i}" for i in ids]),
                "n": pa.array(ids, pa.int64()),
            }
        )
        sink = env.sink(table, mode="upsert", key_columns=["id"], transaction_mode=tm)
        batches = [data.slice(start, 10_000) for start in range(0, rows, 10_000)]
        outcomes = write_and_commit(sink, env.ctx(env.sink_id()), *batches)
        assert outcomes == [twopc.CommitOutcome.COMMITTED]
        assert db.query(f"SELECT count(*), sum(n) FROM {db.q(table)}") == [
            (rows, rows * (rows - 1) // 2)
        ]
        changed = db.query(
            f"SELECT id, v, n FROM {db.q(table)} WHERE id IN (5, 119999) ORDER BY id"
        )
        assert changed == [(5, "v5", 5), (119999, "v119999", 119999)]
        assert env.leftovers(env.sink_id()) == ([], [])

    def test_staging_tables_do_not_linger(self, db: Db, env: Env) -> None:
        table = env.table()
        db.create(table, self.KV)
        sink = env.sink(table, mode="upsert", key_columns=["id"], transaction_mode="two_phase")
        sid = env.sink_id()
        _, committable = write(sink, env.ctx(sid), batch(id=[1, 1], v=["a", "b"], n=[1, 2]))
        assert len(db.staging_tables(sid)) == 1  # kept while the branch is prepared
        # an aborted transaction's staging table goes with it
        txn = sink.begin_transaction(env.ctx(sid, batch_id=1))
        sink.invoke(txn, batch(id=[5], v=["x"], n=[5]))
        assert len(db.staging_tables(sid)) == 2
        sink.abort(txn)
        assert len(db.staging_tables(sid)) == 1
        assert sink.commit([committable]) == [twopc.CommitOutcome.COMMITTED]
        assert env.leftovers(sid) == ([], [])
        assert db.rows(table) == [(1, "b", 2)]

    def test_recovery_sweeps_staging_of_a_dead_task(self, db: Db, env: Env) -> None:
        """A task that died after creating its staging table, before preparing."""
        table = env.table()
        db.create(table, self.KV)
        sid = env.sink_id()
        sink = env.sink(table, mode="upsert", key_columns=["id"], transaction_mode="two_phase")
        txn = sink.begin_transaction(env.ctx(sid, batch_id=0, partition=0))
        sink.invoke(txn, batch(id=[1], v=["a"], n=[1]))
        txn.conn.close()  # the task's process dies: no abort, the table stays
        assert len(db.staging_tables(sid)) == 1
        (leftover,) = sink.inspect(sid).pending  # status sees it, read-only
        assert leftover.kind == "unprepared" and leftover.committable is None
        assert "staging table" in leftover.detail
        assert len(db.staging_tables(sid)) == 1
        coordinator = env.coordinator(env.sink(table, mode="upsert", key_columns=["id"],
                                               transaction_mode="two_phase"), sid)  # fmt: skip
        coordinator.run_batch(
            env.query_id, 0, LocalEngine([table_of(batch(id=[1], v=["b"], n=[2]))], processes=False)
        )
        assert env.leftovers(sid) == ([], [])
        assert db.rows(table) == [(1, "b", 2)]
        inspection = sink.inspect(sid)
        assert inspection.pending == ()
        assert inspection.markers == (twopc.TargetMarker(env.query_id, 0, 0),)
