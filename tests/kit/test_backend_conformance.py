"""The SQL and Kafka backends pass the conformance kit, against the real servers."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pymysql
import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.services import parse_mysql_dsn
from tests.kit import factories
from twopc.testing import SinkConformanceSuite

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


class _PostgresTarget:
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


class TestPostgresTwoPhaseConformance(_PostgresTarget, SinkConformanceSuite):
    sink_factory = "tests.kit.factories:postgres_two_phase_sink"
    large_rows = 50_000


class TestMySQLTransactionConformance(_MySQLTarget, SinkConformanceSuite):
    sink_factory = "tests.kit.factories:mysql_sink"
    large_rows = 50_000


class TestMySQLTwoPhaseConformance(_MySQLTarget, SinkConformanceSuite):
    sink_factory = "tests.kit.factories:mysql_two_phase_sink"
    large_rows = 50_000


class _KafkaTarget:
    def new_target(self, tmp_path: Path) -> str:
        topic = f"kit-{uuid.uuid4().hex[:12]}"
        admin = AdminClient({"bootstrap.servers": factories.kafka_bootstrap()})
        for future in admin.create_topics([NewTopic(topic, 2, 1)]).values():
            future.result(30)
        return topic

    def read_committed(self, target: str) -> list[int]:
        consumer = Consumer(
            {
                "bootstrap.servers": factories.kafka_bootstrap(),
                "group.id": f"kit-reader-{uuid.uuid4().hex[:8]}",
                "isolation.level": "read_committed",
                "enable.auto.commit": False,
            }
        )
        try:
            partitions = [TopicPartition(target, p, 0) for p in range(2)]
            consumer.assign(partitions)
            ends = {
                tp.partition: consumer.get_watermark_offsets(tp, timeout=20, cached=False)[1]
                for tp in partitions
            }
            ids: list[int] = []
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                message = consumer.poll(0.2)
                if message is not None and message.error() is None:
                    ids.append(int(json.loads(message.value())["id"]))
                    continue
                positions = consumer.position(partitions)
                if all(tp.offset >= ends[tp.partition] for tp in positions if ends[tp.partition]):
                    break
            return ids
        finally:
            consumer.close()


    def bad_batch(self) -> pa.RecordBatch:
        # larger than the producer's message.max.bytes (1 MB by default)
        return pa.record_batch({"id": pa.array([1], pa.int64()), "payload": ["x" * 2_000_000]})


class TestKafkaPerPartitionConformance(_KafkaTarget, SinkConformanceSuite):
    sink_factory = "tests.kit.factories:kafka_sink"
    large_rows = 50_000


class TestKafkaAtomicConformance(_KafkaTarget, SinkConformanceSuite):
    sink_factory = "tests.kit.factories:kafka_atomic_sink"
    large_rows = 50_000
