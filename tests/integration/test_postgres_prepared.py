"""What the Postgres backend relies on: prepared transactions, shown on a real server.

* ``PREPARE TRANSACTION`` on one connection, ``COMMIT PREPARED`` from another after the
  first has closed;
* a prepared transaction survives SIGKILL of the postmaster (crash recovery replays it
  from the WAL) and can be committed after the restart.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql

from tests.harness.services import ServiceControl

pytestmark = pytest.mark.integration


@pytest.fixture
def table(postgres_dsn: str) -> Iterator[str]:
    name = f"it_pg_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {name} (id bigint PRIMARY KEY, v text NOT NULL)")
    yield name
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {name}")


def _prepare(dsn: str, table: str, gid: str, rows: int) -> None:
    """Insert ``rows`` rows and PREPARE them as ``gid``, then close the connection."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("BEGIN")
        with conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO {table} (id, v) VALUES (%s, %s)",
                [(i, f"row-{i}") for i in range(rows)],
            )
        conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(gid)))
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def _commit_prepared(gid: str) -> sql.Composed:
    # utility statements take no bind parameters: quote the gid as a literal
    return sql.SQL("COMMIT PREPARED {}").format(sql.Literal(gid))


def _count(dsn: str, table: str) -> int:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
    assert row is not None
    return int(row[0])


def _prepared_gids(dsn: str) -> set[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()"
        ).fetchall()
    return {r[0] for r in rows}


def test_max_prepared_transactions_is_enabled(postgres_dsn: str) -> None:
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        row = conn.execute("SHOW max_prepared_transactions").fetchone()
    assert row is not None
    assert int(row[0]) >= 64


def test_commit_prepared_from_another_connection(postgres_dsn: str, table: str) -> None:
    gid = f"twopc-it:{uuid.uuid4().hex}"
    _prepare(postgres_dsn, table, gid, rows=5)

    # prepared but not committed: listed, and its rows are invisible
    assert gid in _prepared_gids(postgres_dsn)
    assert _count(postgres_dsn, table) == 0

    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(_commit_prepared(gid))

    assert gid not in _prepared_gids(postgres_dsn)
    assert _count(postgres_dsn, table) == 5

    # committing twice: the gid is unknown now
    with (
        psycopg.connect(postgres_dsn, autocommit=True) as conn,
        pytest.raises(psycopg.errors.UndefinedObject),
    ):
        conn.execute(_commit_prepared(gid))


def test_prepared_transaction_survives_postmaster_sigkill(
    postgres_dsn: str, table: str, services: ServiceControl
) -> None:
    gid = f"twopc-it-crash:{uuid.uuid4().hex}"
    _prepare(postgres_dsn, table, gid, rows=3)
    assert gid in _prepared_gids(postgres_dsn)

    services.kill("postgres")
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(postgres_dsn, connect_timeout=3).close()

    services.restart("postgres")
    assert gid in _prepared_gids(postgres_dsn)
    assert _count(postgres_dsn, table) == 0

    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute(_commit_prepared(gid))
    assert _count(postgres_dsn, table) == 3
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        rows = conn.execute(f"SELECT id, v FROM {table} ORDER BY id").fetchall()
    assert rows == [(0, "row-0"), (1, "row-1"), (2, "row-2")]
