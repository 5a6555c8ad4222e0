"""The campaign's leftover checks see what a crash can leave, on the real systems: a
prepared transaction (PostgreSQL, MariaDB), an open Kafka transaction, a staged file.
Without these, a check that never finds anything would let every run pass."""

from __future__ import annotations

import uuid
from pathlib import Path

import psycopg
import pymysql
import pytest
from confluent_kafka import Producer

from tests.harness.services import parse_mysql_dsn
from tests.harness.sql_sink_cases import gtrid_prefix
from tests.harness.targets import FilesTarget, KafkaTarget, SqlTarget

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
