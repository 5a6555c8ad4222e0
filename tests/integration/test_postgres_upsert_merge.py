"""The PostgreSQL upsert's ``MERGE`` and its ``INSERT ... ON CONFLICT`` fallback, against a
real server.

Which statement ran is read from the table itself: a ``BEFORE INSERT`` row trigger counts
the rows it sees. ``ON CONFLICT`` fires it for every row it proposes (updates too);
``MERGE`` only for the rows it inserts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

from tests.harness.sql_servers import PostgresDb
from tests.harness.sql_sink_cases import Env, batch, commit, write, write_and_commit
from twopc_jdbc.postgres import PostgresSink

pytestmark = pytest.mark.integration

MODES = ["transaction", "two_phase"]


@pytest.fixture
def db(postgres_dsn: str) -> PostgresDb:
    return PostgresDb(postgres_dsn)


@pytest.fixture
def counted(db: PostgresDb, env: Env) -> Iterator[tuple[str, str]]:
    """A key-value table whose ``BEFORE INSERT`` trigger counts rows into a second table
    (dropped with its function after the test)."""
    table, counts = env.table(), env.table("inserts")
    db.create(table, "id bigint PRIMARY KEY, v text, n bigint")
    db.create(counts, "id bigint")
    function = f"count_{table}"
    db.execute(
        f"CREATE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"INSERT INTO {counts} VALUES (NEW.id); RETURN NEW; END $$"
    )
    db.execute(
        f"CREATE TRIGGER {table}_count BEFORE INSERT ON {table} "
        f"FOR EACH ROW EXECUTE FUNCTION {function}()"
    )
    yield table, counts
    db.execute(f"DROP FUNCTION IF EXISTS {function}() CASCADE")


def _seed(db: PostgresDb, table: str, counts: str, rows: int) -> None:
    db.execute(f"INSERT INTO {table} SELECT g, 'old', g FROM generate_series(1, %s) g", (rows,))
    db.execute(f"TRUNCATE {counts}")


@pytest.mark.parametrize("mode", MODES)
def test_upsert_merges_existing_and_new_keys(
    db: PostgresDb, env: Env, counted: tuple[str, str], mode: str
) -> None:
    """Keys 1-3 exist, 4-5 are new, key 2 comes twice (the later row wins): the table ends
    as ON CONFLICT would leave it, and only the two new rows were proposed for insert."""
    table, counts = counted
    _seed(db, table, counts, 3)
    sink = env.sink(table, mode="upsert", key_columns=["id"], transaction_mode=mode)
    data = batch(id=[1, 2, 4, 2, 5], v=["a", "b1", "d", "b2", "e"], n=[10, 20, 40, 21, 50])
    write_and_commit(sink, env.ctx(env.sink_id()), data)
    assert db.rows(table) == [
        (1, "a", 10),
        (2, "b2", 21),
        (3, "old", 3),
        (4, "d", 40),
        (5, "e", 50),
    ]
    assert sorted(r[0] for r in db.query(f"SELECT id FROM {counts}")) == [4, 5]


def test_on_conflict_statement_proposes_every_row(
    db: PostgresDb, env: Env, counted: tuple[str, str]
) -> None:
    """The counter tells the two statements apart: ON CONFLICT (the benchmark's baseline,
    and the fallback) proposes every row for insert, existing keys included."""
    table, counts = counted
    _seed(db, table, counts, 3)
    sink = env.sink(table, mode="upsert", key_columns=["id"])
    sink._upsert_statement = "on_conflict"  # type: ignore[attr-defined]
    write_and_commit(sink, env.ctx(env.sink_id()), batch(id=[1, 4], v=["a", "d"], n=[10, 40]))
    assert db.rows(table) == [(1, "a", 10), (2, "old", 2), (3, "old", 3), (4, "d", 40)]
    assert sorted(r[0] for r in db.query(f"SELECT id FROM {counts}")) == [1, 4]


@pytest.mark.parametrize("mode", MODES)
def test_key_inserted_concurrently_falls_back_to_on_conflict(
    db: PostgresDb,
    env: Env,
    counted: tuple[str, str],
    mode: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Another writer inserts key 7 and commits while the sink's MERGE waits on its index
    entry: MERGE raises a unique violation (ON CONFLICT would have updated the row), the
    sink rolls back to its savepoint and upserts with ON CONFLICT. Key 7 ends with the
    sink's value, once; nothing else is lost."""
    caplog.set_level(logging.INFO, logger="twopc.jdbc")
    table, counts = counted
    _seed(db, table, counts, 3)
    other = psycopg.connect(db.dsn)
    try:
        other.execute(f"INSERT INTO {table} VALUES (7, 'other', 0)")  # open, not committed
        sink = env.sink(table, mode="upsert", key_columns=["id"], transaction_mode=mode)
        data = batch(id=[1, 7, 8], v=["a", "sink", "h"], n=[10, 70, 80])
        done: dict[str, object] = {}

        def phase1() -> None:
            try:
                done["written"] = write(sink, env.ctx(env.sink_id()), data)
            except BaseException as exc:  # reported by the assertion below
                done["error"] = exc

        worker = threading.Thread(target=phase1)
        worker.start()
        _wait_for_lock_wait(db, table)
        other.commit()
        worker.join(timeout=60)
        assert not worker.is_alive() and "error" not in done, done
    finally:
        other.close()
    txn, committable = done["written"]  # type: ignore[misc]
    commit(sink, txn, committable)
    assert db.rows(table) == [
        (1, "a", 10),
        (2, "old", 2),
        (3, "old", 3),
        (7, "sink", 70),
        (8, "h", 80),
    ]
    fallbacks = _fallbacks(caplog)
    assert len(fallbacks) == 1 and "UniqueViolation" in fallbacks[0], fallbacks
    # a race is not remembered: the next task merges again
    assert isinstance(sink, PostgresSink) and sink._merge_refused is None


def _fallbacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The sink's log lines saying a MERGE failed and ON CONFLICT ran instead."""
    return [r.getMessage() for r in caplog.records if "MERGE failed" in r.getMessage()]


def _wait_for_lock_wait(db: PostgresDb, table: str, timeout: float = 30.0) -> None:
    """Until a backend waits for a transaction lock (the sink's MERGE on key 7)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        waiting = db.query(
            "SELECT count(*) FROM pg_locks WHERE NOT granted AND locktype = 'transactionid'"
        )
        if waiting[0][0]:
            return
        time.sleep(0.05)
    raise AssertionError(f"no backend waited on a lock for {table} within {timeout}s")


def test_view_refuses_merge_and_upserts_by_on_conflict(
    db: PostgresDb, env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    """PostgreSQL 15 refuses MERGE into a view (16 takes it); the upsert goes through ON
    CONFLICT, and the sink remembers the refusal: the next task does not try MERGE."""
    caplog.set_level(logging.INFO, logger="twopc.jdbc")
    base = env.table("base")
    db.create(base, "id bigint PRIMARY KEY, v text, n bigint")
    db.execute(f"INSERT INTO {base} VALUES (1, 'old', 1)")
    view = f"v_{base}"
    db.execute(f"CREATE VIEW {view} AS SELECT * FROM {base}")
    try:
        sink = PostgresSink(db.dsn, table=view, mode="upsert", key_columns=["id"],
                            marker_table=env.marker_table)  # fmt: skip
        sink_id = env.sink_id()
        for batch_id, data in enumerate(
            [batch(id=[1, 2], v=["a", "b"], n=[1, 2]), batch(id=[2, 3], v=["B", "c"], n=[2, 3])]
        ):
            write_and_commit(sink, env.ctx(sink_id, batch_id=batch_id), data)
    finally:
        db.execute(f"DROP VIEW IF EXISTS {view}")
    assert db.rows(base) == [(1, "a", 1), (2, "B", 2), (3, "c", 3)]
    fallbacks = _fallbacks(caplog)
    version = db.query("SHOW server_version_num")[0][0]
    if int(version) >= 160000:
        assert fallbacks == []
    else:
        assert len(fallbacks) == 1 and "FeatureNotSupported" in fallbacks[0], fallbacks
