"""The campaign's leftover checks see what a crash can leave, on the real systems: a
prepared transaction (PostgreSQL, MariaDB), an open Kafka transaction, a staged file, a
Delta data file no version references. Without these, a check that never finds anything
would let every run pass."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections import Counter
from pathlib import Path

import psycopg
import pymysql
import pytest
from confluent_kafka import Producer

from tests.harness.processes import REPO
from tests.harness.services import parse_mysql_dsn
from tests.harness.sql_sink_cases import gtrid_prefix
from tests.harness.targets import DeltaTarget, FilesTarget, KafkaTarget, SqlTarget

pytestmark = pytest.mark.integration


def test_files_check_sees_a_staged_file(tmp_path: Path) -> None:
    target = FilesTarget()
    spec = target.prepare("chaos-check", "parquet", tmp_path, 1)
    assert target.leftovers(spec) == []
    staged = Path(spec.address, "_twopc_staging", "chaos-check", "q", "0", "00000-0")
    staged.mkdir(parents=True)
    (staged / "part-0.parquet").write_bytes(b"x")
    assert len(target.leftovers(spec)) == 1
    log = Path(spec.address, "_twopc", "chaos-check", "q")
    log.mkdir(parents=True)
    (log / ".heartbeat.json").write_text("{}")  # a crashed driver's liveness record: allowed
    assert len(target.leftovers(spec)) == 1
    (log / ".tmp-1234-00000000000000000000.done").write_bytes(b"")  # a crashed atomic write
    assert len(target.leftovers(spec)) == 2


def test_postgres_check_sees_a_prepared_transaction(postgres_dsn: str, tmp_path: Path) -> None:
    target = SqlTarget("postgres", postgres_dsn)
    spec = target.prepare(f"chaos-check-{uuid.uuid4().hex[:8]}", "two_phase", tmp_path, 1)
    gid = f"{gtrid_prefix(spec.sink_id)}query:0-0-0"
    try:
        assert target.leftovers(spec) == []
        writer = psycopg.connect(postgres_dsn)
        try:
            writer.tpc_begin(gid)
            writer.execute("SELECT 1")
            writer.tpc_prepare()  # prepared: it outlives the connection
        finally:
            writer.close()
        assert target.leftovers(spec) == [f"prepared transaction {gid}"]
    finally:
        with psycopg.connect(postgres_dsn, autocommit=True) as conn:
            if conn.execute("SELECT 1 FROM pg_prepared_xacts WHERE gid = %s", (gid,)).fetchone():
                conn.execute(
                    psycopg.sql.SQL("ROLLBACK PREPARED {}").format(psycopg.sql.Literal(gid))
                )
        target.cleanup(spec)


def test_mariadb_check_sees_a_prepared_xa_branch(mysql_dsn: str, tmp_path: Path) -> None:
    target = SqlTarget("mysql", mysql_dsn)
    spec = target.prepare(f"chaos-check-{uuid.uuid4().hex[:8]}", "two_phase", tmp_path, 1)
    gtrid, bqual = f"{gtrid_prefix(spec.sink_id)}query", "0-0-0"
    conn = pymysql.connect(**parse_mysql_dsn(mysql_dsn).connect_kwargs(), autocommit=True)
    try:
        assert target.leftovers(spec) == []
        with conn.cursor() as cursor:
            cursor.execute("XA START %s, %s", (gtrid, bqual))
            cursor.execute("SELECT 1")
            cursor.execute("XA END %s, %s", (gtrid, bqual))
            cursor.execute("XA PREPARE %s, %s", (gtrid, bqual))
        assert target.leftovers(spec) == [f"prepared transaction {gtrid}:{bqual}"]
    finally:
        with conn.cursor() as cursor:
            cursor.execute("XA ROLLBACK %s, %s", (gtrid, bqual))
        conn.close()
        target.cleanup(spec)


def test_kafka_check_sees_an_open_transaction(kafka_bootstrap: str, tmp_path: Path) -> None:
    target = KafkaTarget(kafka_bootstrap)
    spec = target.prepare(f"chaos-check-{uuid.uuid4().hex[:8]}", "per_partition", tmp_path, 2)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "transactional.id": spec.sink_id})
    try:
        assert target.open_transactions(spec.table) == []
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(spec.table, key=b"1", value=b"x", partition=1)
        assert producer.flush(30) == 0
        [found] = target.open_transactions(spec.table)
        assert f"{spec.table}[1]" in found
        producer.abort_transaction(30)
        assert target.leftovers(spec) == []
    finally:
        target.cleanup(spec)


def test_delta_check_sees_an_unreferenced_data_file_and_an_attempt_record(
    tmp_path: Path,
) -> None:
    pa = pytest.importorskip("pyarrow")
    deltalake = pytest.importorskip("deltalake")
    target = DeltaTarget()
    spec = target.prepare("chaos-check", "append", tmp_path, 1)
    deltalake.write_deltalake(spec.address, pa.table({"id": [1, 2], "payload": ["a", "b"]}))
    assert target.committed(spec) == Counter({1: 1, 2: 1})
    assert target.leftovers(spec) == []
    attempt = Path(spec.address, "twopc-data", "chaos-check", "q", "1", "0-0")
    attempt.mkdir(parents=True)
    (attempt / "part-00000.parquet").write_bytes(b"x")  # a crashed batch's file, in no version
    assert target.leftovers(spec) == [
        "data file no version references: twopc-data/chaos-check/q/1/0-0/part-00000.parquet"
    ]
    record = Path(spec.address, "_twopc", "chaos-check", "attempt.json")
    record.parent.mkdir(parents=True)
    record.write_text("{}")
    assert len(target.leftovers(spec)) == 2
    # a commit adding a file again, as a batch committed twice would: deltalake's reader
    # keeps one file per path (the ids look right), the log shows it
    log = Path(spec.address, "_delta_log")
    first = (log / f"{0:020d}.json").read_text().splitlines()
    adds = [line for line in first if '"add"' in line]
    (log / f"{1:020d}.json").write_text("\n".join(adds) + "\n")
    assert any(p.startswith("data file added by two commits: ") for p in target.leftovers(spec))


FORK_SAFE_READS = """
import sys
import pyarrow as pa
from tests.harness.procs import ForkedCallError, call_in_fork
from tests.harness.sink_recipe import SinkRecipe
from tests.harness.targets import DeltaTarget

spec = SinkRecipe("delta", "append", "chaos-check", sys.argv[1])

def write():
    from deltalake import write_deltalake

    write_deltalake(spec.address, pa.table({"id": [1, 2], "payload": ["a", "b"]}))

call_in_fork(write)
forked = DeltaTarget(fork_safe=True)
for _ in range(2):  # this process never starts deltalake: every child may
    assert dict(forked.committed(spec)) == {1: 1, 2: 1}
    assert forked.leftovers(spec) == []
DeltaTarget().committed(spec)  # deltalake's runtime started here: a child of it panics
try:
    forked.committed(spec)
except ForkedCallError as exc:
    print("refused:", "Forked process detected" in str(exc))
"""


def test_fork_safe_delta_reads_leave_deltalake_unstarted_in_the_campaign(
    tmp_path: Path,
) -> None:
    """The campaign forks its local drivers from its own process, and deltalake panics in
    a child forked from a process that used it: the campaign's Delta checks read in forked
    children, so every later local Delta driver can still use deltalake. Run in a fresh
    interpreter (this test process may have used deltalake already)."""
    pytest.importorskip("deltalake")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-c", FORK_SAFE_READS, str(tmp_path / "table")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == "refused: True", proc.stdout + proc.stderr[-3000:]
