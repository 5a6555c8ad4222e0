"""Wide batches against the real servers' limits (issue 46), read back from the servers.

A PostgreSQL ``two_phase`` batch wider than ``max_prepared_transactions`` is refused before
any task runs, with both numbers in the message: nothing prepared, no row, no marker. A
batch whose tasks run at once need more connections than a database allows (its
``CONNECTION LIMIT``) is refused the same way. A wide batch that fits commits side by side
(``commit_parallelism``) and every row is there once.
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

import twopc
import twopc.local
from tests.harness.databases import Database

pytestmark = pytest.mark.integration


def _parts(count: int, rows: int = 3) -> list[pa.Table]:
    return [
        pa.table({"id": pa.array(range(p * rows, (p + 1) * rows), pa.int64())})
        for p in range(count)
    ]


@pytest.fixture
def postgres(postgres_dsn: str) -> Database:
    return Database("postgres", postgres_dsn)


@pytest.fixture
def table(postgres: Database) -> Iterator[str]:
    name = f"limits_{uuid.uuid4().hex[:8]}"
    postgres.create(name)
    yield name
    postgres.drop(name)


def _markers(db: Database, sink_id: str) -> int:
    found = db.query("SELECT to_regclass('twopc_markers')")
    if not found or found[0][0] is None:
        return 0
    return int(db.query("SELECT count(*) FROM twopc_markers WHERE sink_id = %s", (sink_id,))[0][0])


def test_a_two_phase_batch_wider_than_max_prepared_transactions_is_refused_before_any_task(
    postgres: Database, postgres_dsn: str, table: str, tmp_path: Path
) -> None:
    allowed = int(postgres.query("SHOW max_prepared_transactions")[0][0])
    partitions = allowed + 36  # 100 against the test server's 64
    sink = twopc.create_sink(
        "postgres", dsn=postgres_dsn, table=table, transaction_mode="two_phase"
    )
    sink_id = f"limits-{uuid.uuid4().hex[:8]}"
    writer = twopc.local.foreach_batch(
        sink, sink_id, commit_log=str(tmp_path / "log"), processes=False
    )
    with pytest.raises(twopc.TargetLimitError) as caught:
        writer.write("q", 0, _parts(partitions))
    message = str(caught.value)
    assert f"the batch has {partitions} partitions" in message
    assert f"max_prepared_transactions allows only {allowed}" in message
    assert f"max_tasks={allowed}" in message and "nothing of the batch was written" in message
    assert isinstance(caught.value, twopc.ConfigurationError)
    # what the server shows: nothing of the batch
    assert postgres.prepared(sink_id) == []
    assert postgres.ids(table) == Counter()
    assert _markers(postgres, sink_id) == 0
    # the fix the message names: the same batch in at most `allowed` tasks commits once
    fewer = [pa.concat_tables(group) for group in _chunks(_parts(partitions), allowed)]
    assert writer.write("q", 0, fewer).status == "committed"
    assert postgres.ids(table) == Counter(range(partitions * 3))
    assert postgres.prepared(sink_id) == []


def _chunks(parts: list[pa.Table], count: int) -> list[list[pa.Table]]:
    return [parts[i * len(parts) // count : (i + 1) * len(parts) // count] for i in range(count)]


def test_more_tasks_at_once_than_the_database_allows_connections_is_refused(
    postgres: Database, postgres_dsn: str, tmp_path: Path
) -> None:
    database = f"twopc_limits_{uuid.uuid4().hex[:8]}"
    postgres.query(f"CREATE DATABASE {database} CONNECTION LIMIT 3")
    try:
        dsn = postgres_dsn.rsplit("/", 1)[0] + f"/{database}"
        sink = twopc.create_sink(
            "postgres", dsn=dsn, table="orders", transaction_mode="transaction", create_table=True
        )
        writer = twopc.local.foreach_batch(sink, "limits", commit_log=str(tmp_path / "log"))
        with pytest.raises(twopc.TargetLimitError) as caught:
            writer.write("q", 0, _parts(5))  # forked tasks: all 5 at once
        message = str(caught.value)
        assert "runs 5 tasks at once" in message
        assert "the database's CONNECTION LIMIT allows only 3" in message
        inline = twopc.local.foreach_batch(
            sink, "limits", commit_log=str(tmp_path / "log"), processes=False
        )
        inline.write("q", 0, _parts(5))  # one task at a time fits
        rows = Database("postgres", dsn).ids("orders")
        assert rows == Counter(range(15))
    finally:
        postgres.query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
            (database,),
        )
        postgres.query(f"DROP DATABASE IF EXISTS {database}")


@pytest.mark.parametrize("backend", ["postgres", "mysql"])
def test_a_wide_two_phase_batch_commits_side_by_side_once(
    backend: str, postgres_dsn: str, mysql_dsn: str, tmp_path: Path
) -> None:
    dsn = postgres_dsn if backend == "postgres" else mysql_dsn
    db = Database(backend, dsn)
    table = f"wide_{uuid.uuid4().hex[:8]}"
    db.create(table)
    try:
        sink = twopc.create_sink(backend, dsn=dsn, table=table, transaction_mode="two_phase")
        sink_id = f"wide-{uuid.uuid4().hex[:8]}"
        writer = twopc.local.foreach_batch(
            sink, sink_id, commit_log=str(tmp_path / "log"), processes=False
        )
        metrics = writer.write("q", 0, _parts(60))
        assert metrics.status == "committed" and metrics.partitions == 60
        assert db.ids(table) == Counter(range(180))
        assert db.prepared(sink_id) == []
        assert metrics.commit_seconds < 1.0  # one after another took 0.3 s (1.1 s on MariaDB)
    finally:
        db.drop(table)
