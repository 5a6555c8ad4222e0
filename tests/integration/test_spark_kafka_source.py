"""Spark reads a Kafka topic as a stream with its own Kafka source (availableNow).

The Spark job runs in a subprocess (``tests/harness/spark_kafka_job.py``) so that its
SparkSession and JVM cannot leak into other test files.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
JOB = "tests.harness.spark_kafka_job"
RECORDS = 500


def test_spark_kafka_source_reads_every_record(kafka_bootstrap: str, tmp_path: Path) -> None:
    topic = f"twopc-it-spark-{uuid.uuid4().hex[:12]}"
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.create_topics(
        [NewTopic(topic, num_partitions=2, replication_factor=1)]
    ).values():
        future.result(30)
    producer = Producer({"bootstrap.servers": kafka_bootstrap, "linger.ms": 5})
    for i in range(RECORDS):
        producer.produce(topic, key=str(i).encode(), value=str(i).encode())
    assert producer.flush(30) == 0

    proc = subprocess.run(
        [sys.executable, "-m", JOB, kafka_bootstrap, topic, str(tmp_path / "checkpoint")],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, f"spark job failed:\n{proc.stderr[-6000:]}"
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["count"] == RECORDS, result
    assert result["distinct"] == RECORDS, result
    assert (result["min"], result["max"]) == (0, RECORDS - 1), result
