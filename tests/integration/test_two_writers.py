"""Two queries (two checkpoints) writing one sink id at once are refused (issue 28).

The files sink keeps its commit log next to its data, so two checkpoints of one sink id share
it, and the second query finds the first one's liveness record there: it refuses to write,
naming the first, and nothing of its batch becomes visible. Once the first query is gone,
the second may run.

The SQL sinks keep each query's commit log under its checkpoint, so two checkpoints have two
logs: only the database sees both queries, in the writer registry next to the marker table
(``<marker_table>_writers``). The same scenario runs against PostgreSQL and MariaDB, and
the registry's own operations (record, read, remove) are checked on the real servers.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

import twopc
from tests.harness.databases import Database
from tests.harness.outputs import read_ids
from tests.harness.processes import REPO, local_query, run_process
from twopc import CommitLog, WriterRecord
from twopc_jdbc._base import SqlSink, writer_table_name
from twopc_jdbc._options import TableName

pytestmark = pytest.mark.integration

SINK_ID = "local-orders"  # fixed by tests/harness/local_query.py
ROWS = 10


def _batch_ids(batch: int) -> Counter[int]:
    return Counter(batch * 1000 + p * ROWS + i for p in range(2) for i in range(ROWS))


def _start_stalled_writer(output: Path, checkpoint: Path) -> subprocess.Popen[bytes]:
    """Query A: commits batch 0, then stalls in batch 1 before its decision."""
    env = {
        **os.environ,
        "TWOPC_FAULTS": "before_decision:sleep=60@batch=1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    args = local_query("local_query", checkpoint=checkpoint, output=output, batches=3, rows=ROWS)
    return subprocess.Popen(
        [sys.executable, *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _wait_for_batch(log: CommitLog, batch_id: int, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        records = [h for h in log.heartbeats() if h.batch_id == batch_id]
        if records:
            return records[0].query_id
        time.sleep(0.1)
    raise AssertionError(f"query A never reached batch {batch_id}")


def test_a_second_query_on_the_same_sink_id_is_refused(tmp_path: Path) -> None:
    output = tmp_path / "out"
    first = _start_stalled_writer(output, tmp_path / "chk-a")
    try:
        first_query = _wait_for_batch(CommitLog(f"{output}/_twopc/{SINK_ID}"), 1)
        assert read_ids(output) == _batch_ids(0)

        second = local_query(
            "local_query", checkpoint=tmp_path / "chk-b", output=output, batches=3, rows=ROWS
        )
        refused = run_process(second, timeout=120)
        assert refused.returncode != 0
        assert (
            f"another query writes sink id {SINK_ID!r} right now: query {first_query}"
            in refused.stderr
        )
        assert "stop the other query, or give this one its own sink_id" in refused.stderr
        assert read_ids(output) == _batch_ids(0), "the refused query wrote something"
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()

    # the first query is gone (its record is stale): the second one runs
    ran = run_process(second, timeout=120)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert read_ids(output) == _batch_ids(0) + sum((_batch_ids(b) for b in range(3)), Counter())


# -- the SQL sinks: the writer registry in the database --------------------------------------

SQL_CASES = [
    ("postgres", "two_phase"),
    ("postgres", "transaction"),
    ("mysql", "transaction"),
    ("mysql", "two_phase"),
]
DEFAULT_REGISTRY = "twopc_markers_writers"  # local_sql_query.py keeps the default marker table
SECRET = "s3cr3t-Pa55w0rd-never-shown"


@pytest.fixture(params=["postgres", "mysql"])
def database(request: pytest.FixtureRequest) -> Database:
    backend = request.param
    dsn = request.getfixturevalue("postgres_dsn" if backend == "postgres" else "mysql_dsn")
    return Database(backend, dsn)


def _registry_rows(db: Database, registry: str, sink_id: str) -> list[tuple[str, str, int]]:
    """``(query_id, host, pid)`` of the sink id's rows, read with the database's own driver."""
    rows = db.query(
        f"SELECT query_id, host, pid FROM {registry} WHERE sink_id = %s ORDER BY query_id",
        (sink_id,),
    )
    return [(str(q), str(h), int(p)) for q, h, p in rows]


def _marker_queries(db: Database, sink_id: str) -> set[str]:
    rows = db.query("SELECT DISTINCT query_id FROM twopc_markers WHERE sink_id = %s", (sink_id,))
    return {str(r[0]) for r in rows}


def _table_exists(db: Database, table: str) -> bool:
    schema = "current_schema()" if db.backend == "postgres" else "DATABASE()"
    rows = db.query(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = %s "
        f"AND table_schema = {schema}",
        (table,),
    )
    return int(rows[0][0]) > 0


def _forget(db: Database, sink_id: str) -> None:
    """Remove the sink id's rows from the shared default marker table and registry."""
    for table in ("twopc_markers", DEFAULT_REGISTRY):
        if _table_exists(db, table):
            db.query(f"DELETE FROM {table} WHERE sink_id = %s", (sink_id,))


def _stalled_sql_writer(args: list[str]) -> subprocess.Popen[bytes]:
    """Query A: commits batch 0, then its tasks stall in batch 1 before they begin (nothing
    of batch 1 open or visible in either transaction mode)."""
    env = {
        **os.environ,
        "TWOPC_FAULTS": "before_begin:sleep=60@batch=1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    return subprocess.Popen(
        [sys.executable, *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


@pytest.mark.parametrize(("backend", "mode"), SQL_CASES, ids=[f"{b}-{m}" for b, m in SQL_CASES])
def test_a_second_sql_query_on_the_same_sink_id_is_refused(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str, mode: str
) -> None:
    dsn = request.getfixturevalue("postgres_dsn" if backend == "postgres" else "mysql_dsn")
    db = Database(backend, dsn)
    table = f"two_{uuid.uuid4().hex[:10]}"
    sink_id = f"two-{uuid.uuid4().hex[:8]}"
    db.create(table)

    def query(checkpoint: str) -> list[str]:
        # each checkpoint keeps its own commit log (<checkpoint>/twopc-log)
        return local_query(
            "local_sql_query",
            backend=backend,
            dsn=dsn,
            table=table,
            transaction_mode=mode,
            checkpoint=tmp_path / checkpoint,
            batches=3,
            partitions=2,
            rows=ROWS,
            sink_id=sink_id,
        )

    try:
        first = _stalled_sql_writer(query("chk-a"))
        try:
            first_query = _wait_for_batch(CommitLog(str(tmp_path / "chk-a" / "twopc-log")), 1)
            assert _registry_rows(db, DEFAULT_REGISTRY, sink_id) == [
                (first_query, socket.gethostname(), first.pid)
            ]
            assert db.ids(table) == _batch_ids(0)

            second = query("chk-b")
            refused = run_process(second, timeout=120)
            assert refused.returncode != 0
            where = twopc.create_sink(backend, dsn=dsn, table=table).describe()
            assert (
                f"another query writes sink id {sink_id!r} right now: query {first_query} on "
                f"{socket.gethostname()} (pid {first.pid}; process {first.pid} on this host "
                f"is alive), recorded in the target ({where})"
            ) in refused.stderr, refused.stderr[-3000:]
            assert "stop the other query, or give this one its own sink_id" in refused.stderr
            # the refused query wrote nothing: no row, no marker, no registry row, nothing
            # prepared
            assert db.ids(table) == _batch_ids(0), "the refused query wrote something"
            assert _marker_queries(db, sink_id) == {first_query}
            assert [r[0] for r in _registry_rows(db, DEFAULT_REGISTRY, sink_id)] == [first_query]
            assert db.prepared(sink_id) == []
        finally:
            os.killpg(first.pid, signal.SIGKILL)
            first.wait()

        # the first query is gone (its process is dead, its row stale): the second one runs
        ran = run_process(second, timeout=120)
        assert ran.returncode == 0, ran.stderr[-3000:]
        assert db.ids(table) == _batch_ids(0) + sum((_batch_ids(b) for b in range(3)), Counter())
        assert len(_marker_queries(db, sink_id)) == 2
        # the second query removed its row when it stopped cleanly; the killed one's stays
        assert [r[0] for r in _registry_rows(db, DEFAULT_REGISTRY, sink_id)] == [first_query]
        assert db.prepared(sink_id) == []
    finally:
        db.drop(table)
        _forget(db, sink_id)


# -- the registry's operations on the real servers -------------------------------------------


@pytest.fixture
def registry_sink(database: Database) -> Iterator[SqlSink]:
    """A sink with a marker table of its own, so its registry starts out missing."""
    suffix = uuid.uuid4().hex[:10]
    sink = twopc.create_sink(
        database.backend, dsn=database.dsn, table=f"t_{suffix}", marker_table=f"itw_{suffix}"
    )
    assert isinstance(sink, SqlSink)
    assert sink.writer_table.name == f"itw_{suffix}_writers"
    yield sink
    database.drop(sink.writer_table.name)


def _same(got: WriterRecord, want: WriterRecord) -> bool:
    """Equal, but for the microseconds the database rounds ``updated_at`` to."""
    return (
        got
        == WriterRecord(
            want.sink_id,
            want.query_id,
            want.host,
            want.pid,
            got.updated_at,
            want.process_start,
        )
        and abs(got.updated_at - want.updated_at) < 1e-5
    )


def test_registry_round_trip(database: Database, registry_sink: SqlSink) -> None:
    sink, registry = registry_sink, registry_sink.writer_table.name
    # a missing registry: no records, nothing to remove, and reading does not create it
    assert sink.writers("orders") == []
    sink.remove_writer("orders", "q-1")
    assert not _table_exists(database, registry)

    now = time.time()
    first = WriterRecord("orders", "q-1", "host-a", 4242, now, "linux:123456")
    second = WriterRecord("orders", "q-2", "host-b", 77, now - 10.5, None)
    other_sink = WriterRecord("payments", "q-1", "host-a", 4242, now, None)
    for record in (first, second, other_sink):
        sink.record_writer(record)  # the first call creates the registry
    assert _table_exists(database, registry)
    got = sink.writers("orders")
    assert [r.query_id for r in got] == ["q-1", "q-2"]
    assert _same(got[0], first) and _same(got[1], second)

    # the upsert replaces the row of (sink id, query id): one row, the newest values
    moved = WriterRecord("orders", "q-1", "host-c", 5151, now + 30.25, "linux:999")
    sink.record_writer(moved)
    sink.record_writer(moved)
    got = sink.writers("orders")
    assert [r.query_id for r in got] == ["q-1", "q-2"]
    assert _same(got[0], moved)
    assert _registry_rows(database, registry, "orders") == [
        ("q-1", "host-c", 5151),
        ("q-2", "host-b", 77),
    ]

    sink.remove_writer("orders", "q-1")
    sink.remove_writer("orders", "q-1")  # gone already: not an error
    assert [r.query_id for r in sink.writers("orders")] == ["q-2"]
    assert [r.query_id for r in sink.writers("payments")] == ["q-1"]


def test_registry_columns(database: Database, registry_sink: SqlSink) -> None:
    registry_sink.record_writer(WriterRecord("orders", "q-1", "h", 1, time.time()))
    schema = "current_schema()" if database.backend == "postgres" else "DATABASE()"
    rows = database.query(
        "SELECT column_name, data_type, is_nullable FROM information_schema.columns "
        f"WHERE table_name = %s AND table_schema = {schema} ORDER BY ordinal_position",
        (registry_sink.writer_table.name,),
    )
    columns = {str(n).lower(): (str(t).lower(), str(null)) for n, t, null in rows}
    if database.backend == "postgres":
        types = ["text", "text", "text", "bigint", "text", "timestamp with time zone"]
    else:
        types = ["varchar", "varchar", "varchar", "bigint", "varchar", "datetime"]
    names = ["sink_id", "query_id", "host", "pid", "process_start", "updated_at"]
    assert columns == {
        name: (kind, "YES" if name == "process_start" else "NO")
        for name, kind in zip(names, types, strict=True)
    }


def test_registry_created_by_writers_racing(database: Database, registry_sink: SqlSink) -> None:
    """Drivers of several sink ids meeting a missing registry at once all record."""
    errors: list[BaseException] = []

    def record(n: int) -> None:
        try:
            registry_sink.record_writer(WriterRecord("orders", f"q-{n}", "h", n, time.time()))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=record, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    assert [r.query_id for r in registry_sink.writers("orders")] == [f"q-{n}" for n in range(4)]


def test_registry_of_a_longest_marker_table_name(database: Database) -> None:
    """A marker table name at the identifier limit: the registry's name is cut and hashed
    to fit, never cut by the database into the marker table's name."""
    limit = 63 if database.backend == "postgres" else 64
    marker = ("itw" + uuid.uuid4().hex * 2)[:limit]
    sink = twopc.create_sink(database.backend, dsn=database.dsn, table="t", marker_table=marker)
    assert isinstance(sink, SqlSink)
    registry = sink.writer_table.name
    assert len(registry) == limit and registry.endswith("_writers")
    assert registry.startswith(marker[:40]) and registry != marker
    try:
        sink.record_writer(WriterRecord("orders", "q-1", "h", 1, time.time()))
        assert _table_exists(database, registry)
        assert not _table_exists(database, marker)
        assert [r.query_id for r in sink.writers("orders")] == ["q-1"]
    finally:
        database.drop(registry)


def test_registry_name() -> None:
    in_bytes = SqlSink.identifier_length
    assert writer_table_name(TableName("twopc_markers"), 63, in_bytes) == TableName(
        "twopc_markers_writers"
    )
    assert writer_table_name(TableName("m", "ops"), 63, in_bytes) == TableName("m_writers", "ops")
    # PostgreSQL counts bytes: 40 two-byte characters are cut, by whole characters
    cut = writer_table_name(TableName("ü" * 40), 63, in_bytes).name
    assert len(cut.encode()) <= 63 and cut.startswith("ü") and cut.endswith("_writers")
    assert cut != writer_table_name(TableName("ü" * 41), 63, in_bytes).name


@pytest.mark.parametrize("dsn", ["postgresql://etl@db.example/shop", "mysql://etl@db.example/shop"])
def test_a_table_named_as_the_registry_is_refused(dsn: str) -> None:
    backend = "postgres" if dsn.startswith("postgresql") else "mysql"
    with pytest.raises(twopc.ConfigurationError, match="the writer registry of marker_table"):
        twopc.create_sink(backend, dsn=dsn, table=DEFAULT_REGISTRY)


def test_registry_errors_never_show_the_password(database: Database) -> None:
    scheme, rest = database.dsn.split("://", 1)
    address = rest.split("@", 1)[1]
    dsn = f"{scheme}://twopc:{SECRET}@{address}"
    sink = twopc.create_sink(database.backend, dsn=dsn, table="t", marker_table="itw_secret")
    assert isinstance(sink, SqlSink)
    record = WriterRecord("orders", "q-1", "h", 1, time.time())
    for call in (
        lambda: sink.record_writer(record),
        lambda: sink.writers("orders"),
        lambda: sink.remove_writer("orders", "q-1"),
    ):
        with pytest.raises(twopc.SinkError) as caught:
            call()
        chain: list[BaseException] = []
        error: BaseException | None = caught.value
        while error is not None and error not in chain:
            chain.append(error)
            error = error.__cause__ or error.__context__
        assert all(SECRET not in str(e) for e in chain), [str(e) for e in chain]
