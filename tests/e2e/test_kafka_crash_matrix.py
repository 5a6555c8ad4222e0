"""Crash matrix for the Kafka sink on a real broker: the query process (local engine, no
JVM) is SIGKILLed at every crash point of each mode, restarted from its checkpoint, and a
read_committed consumer must then see every key exactly once.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from tests.helpers import run_process
from twopc.faults import CrashPoint

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

BATCHES, PARTITIONS, ROWS, CRASH_BATCH = 3, 2, 20, 1
EXPECTED = {str(b * 1000 + i) for b in range(BATCHES) for i in range(PARTITIONS * ROWS)}

TASK_POINTS = [
    CrashPoint.BEFORE_BEGIN,
    CrashPoint.AFTER_INVOKE,
    CrashPoint.BEFORE_PRE_COMMIT,
    CrashPoint.AFTER_PRE_COMMIT,
    CrashPoint.BEFORE_TASK_COMMIT,
    CrashPoint.AFTER_TASK_COMMIT,
]
DRIVER_POINTS = [CrashPoint.BEFORE_DECISION, CrashPoint.AFTER_DECISION, CrashPoint.AFTER_COMMIT]
CASES = [(mode, p) for mode in ("per_partition", "atomic") for p in [*TASK_POINTS, *DRIVER_POINTS]]


def create_topic(bootstrap: str, partitions: int = 3) -> str:
    name = f"crash-{uuid.uuid4().hex[:10]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
        future.result(30)
    return name


def read_committed_keys(bootstrap: str, topic: str, timeout: float = 30.0) -> Counter[str]:
    """Every key a read_committed consumer sees, read up to the last stable offsets."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        metadata = consumer.list_topics(topic, timeout=timeout)
        partitions = [TopicPartition(topic, p, 0) for p in metadata.topics[topic].partitions]
        consumer.assign(partitions)
        ends = {
            tp.partition: consumer.get_watermark_offsets(tp, timeout=timeout, cached=False)[1]
            for tp in partitions
        }
        keys: Counter[str] = Counter()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is not None and message.error() is None:
                keys[message.key().decode()] += 1
                continue
            positions = consumer.position(partitions)
            if all(tp.offset >= ends[tp.partition] for tp in positions if ends[tp.partition] > 0):
                break
        return keys
    finally:
        consumer.close()


@pytest.mark.parametrize(("mode", "point"), CASES, ids=[f"{m}-{p.value}" for m, p in CASES])
def test_sigkill_at_crash_point_then_restart(
    kafka_bootstrap: str, tmp_path: Path, mode: str, point: CrashPoint
) -> None:
    topic = create_topic(kafka_bootstrap)
    sink_id = f"k-{uuid.uuid4().hex[:8]}"
    args = [
        "tests/e2e/local_kafka_query.py",
        "--bootstrap",
        kafka_bootstrap,
        "--topic",
        topic,
        "--mode",
        mode,
        "--checkpoint",
        str(tmp_path / "chk"),
        "--sink-id",
        sink_id,
        "--batches",
        str(BATCHES),
        "--partitions",
        str(PARTITIONS),
        "--rows",
        str(ROWS),
    ]
    where = "" if point.on_driver or mode == "atomic" else ",partition=1"
    rows = ",rows=10" if point is CrashPoint.AFTER_INVOKE else ""
    first = run_process(args, faults=f"{point.value}:kill@batch={CRASH_BATCH}{where}{rows}")
    assert first.returncode == (-signal.SIGKILL if point.on_driver else 1), first.stderr[-3000:]
    seen = read_committed_keys(kafka_bootstrap, topic)
    assert all(n == 1 for n in seen.values()), "duplicates after the crash"
    assert set(seen) <= EXPECTED

    second = run_process(args)
    assert second.returncode == 0, second.stderr[-3000:]
    keys = read_committed_keys(kafka_bootstrap, topic)
    duplicates = {k: n for k, n in keys.items() if n > 1}
    assert not duplicates, f"duplicates: {sorted(duplicates.items())[:10]}"
    assert set(keys) == EXPECTED, f"missing: {sorted(EXPECTED - set(keys))[:10]}"
