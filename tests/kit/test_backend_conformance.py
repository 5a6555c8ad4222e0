"""The SQL and Kafka backends pass the conformance kit, against the real servers."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pymysql
import pytest

from tests.harness.kafka_topics import create_topic, read_messages, unique
from tests.harness.services import parse_mysql_dsn
from tests.kit import factories
from twopc.testing import GroupMemberChecks, SinkConformanceSuite

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


class _PostgresTarget:
    sink_factory: str

    def format_options(self, target: str) -> dict[str, str]:
        mode = "two_phase" if "two_phase" in self.sink_factory else "transaction"
        return {
            "sink": "postgres",
            "dsn": factories.postgres_dsn(),
            "table": target,
            "transaction_mode": mode,
        }

    def new_target(self, tmp_path: Path) -> str:
        table = f"kit_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(factories.postgres_dsn(), autocommit=True) as conn:
            conn.execute(f"CREATE TABLE {table} (id bigint, payload text)")
        return table

    def read_committed(self, target: str) -> list[int]:
        with psycopg.connect(factories.postgres_dsn(), autocommit=True) as conn:
            return [int(r[0]) for r in conn.execute(f"SELECT id FROM {target}").fetchall()]

    def bad_batch(self) -> pa.RecordBatch:
        return pa.record_batch({"id": pa.array([1]), "no_such_column": ["x"]})


class _MySQLTarget:
    sink_factory: str

    def format_options(self, target: str) -> dict[str, str]:
        mode = "two_phase" if "two_phase" in self.sink_factory else "transaction"
        return {
            "sink": "mysql",
            "dsn": factories.mysql_dsn(),
            "table": target,
            "transaction_mode": mode,
        }

    def _connect(self) -> Any:
        return pymysql.connect(
            **parse_mysql_dsn(factories.mysql_dsn()).connect_kwargs(), autocommit=True
        )

    def new_target(self, tmp_path: Path) -> str:
        table = f"kit_{uuid.uuid4().hex[:12]}"
        conn = self._connect()
        try:
            with conn.cursor() as cursor:
                cursor.execute(f"CREATE TABLE {table} (id BIGINT, payload TEXT) ENGINE=InnoDB")
        finally:
            conn.close()
        return table

    def read_committed(self, target: str) -> list[int]:
        conn = self._connect()
        try:
            with conn.cursor() as cursor:
                cursor.execute(f"SELECT id FROM {target}")
                return [int(r[0]) for r in cursor.fetchall()]
        finally:
            conn.close()

    def bad_batch(self) -> pa.RecordBatch:
        return pa.record_batch({"id": pa.array(["not a number"]), "payload": ["x"]})


class TestPostgresTransactionConformance(_PostgresTarget, SinkConformanceSuite):
    sink_factory = "tests.kit.factories:postgres_sink"
    large_rows = 50_000


class TestPostgresTwoPhaseConformance(_PostgresTarget, SinkConformanceSuite, GroupMemberChecks):
    sink_factory = "tests.kit.factories:postgres_two_phase_sink"
    large_rows = 50_000


class TestMySQLTransactionConformance(_MySQLTarget, SinkConformanceSuite):
    sink_factory = "tests.kit.factories:mysql_sink"
    large_rows = 50_000


class TestMySQLTwoPhaseConformance(_MySQLTarget, SinkConformanceSuite, GroupMemberChecks):
    sink_factory = "tests.kit.factories:mysql_two_phase_sink"
    large_rows = 50_000


class _KafkaTarget:
    sink_factory: str

    def format_options(self, target: str) -> dict[str, str]:
        return {
            "sink": "kafka",
            "bootstrap_servers": factories.kafka_bootstrap(),
            "topic": target,
            "mode": "atomic" if "atomic" in self.sink_factory else "per_partition",
            "operation_timeout_seconds": "20",
        }

    def new_target(self, tmp_path: Path) -> str:
        return create_topic(factories.kafka_bootstrap(), unique("kit"), partitions=2)

    def read_committed(self, target: str) -> list[int]:
        messages = read_messages(factories.kafka_bootstrap(), target)
        return [int(json.loads(m.value or b"{}")["id"]) for m in messages]

    def bad_batch(self) -> pa.RecordBatch:
        # larger than the producer's message.max.bytes (1 MB by default)
        return pa.record_batch({"id": pa.array([1], pa.int64()), "payload": ["x" * 2_000_000]})


class TestKafkaPerPartitionConformance(_KafkaTarget, SinkConformanceSuite):
    sink_factory = "tests.kit.factories:kafka_sink"
    large_rows = 50_000


class TestKafkaAtomicConformance(_KafkaTarget, SinkConformanceSuite, GroupMemberChecks):
    sink_factory = "tests.kit.factories:kafka_atomic_sink"
    large_rows = 50_000
