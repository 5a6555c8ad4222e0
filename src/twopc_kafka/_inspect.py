"""What ``twopc status`` sees of a Kafka sink's open transactions, without touching them.

confluent-kafka's AdminClient cannot list or describe transactions, and
``init_transactions`` (the sweep's probe) aborts what it finds, so an open transaction is
only visible as a partition whose last stable offset (what a ``read_committed`` reader may
read up to) is below its high watermark.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from confluent_kafka import IsolationLevel, TopicPartition

# confluent-kafka's own type hints do not declare this re-export
from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]  # isort: skip

from twopc import PendingWork, WorkKind
from twopc_kafka._clients import KafkaClients

__all__ = ["open_transactions"]


def open_transactions(
    clients: KafkaClients, admin: Any, topics: Iterable[str], group: str
) -> list[PendingWork]:
    """Every partition of ``topics`` held back by an open transaction, with its age (read
    by a consumer of ``group`` that never commits)."""
    timeout = clients.timeout
    metadata = admin.list_topics(timeout=timeout)
    partitions = [
        TopicPartition(topic, p)
        for topic in sorted(topics)
        if topic in metadata.topics
        for p in sorted(metadata.topics[topic].partitions)
    ]
    if not partitions:
        return []
    stable = _end_offsets(clients, admin, partitions, IsolationLevel.READ_COMMITTED)
    high = _end_offsets(clients, admin, partitions, IsolationLevel.READ_UNCOMMITTED)
    stuck = [
        tp for tp in partitions if stable[tp.topic, tp.partition] < high[tp.topic, tp.partition]
    ]
    ages = _first_unstable_ages(clients, group, stuck, stable)
    return [
        PendingWork(
            kind=WorkKind.OPEN,
            ident=f"{tp.topic}[{tp.partition}]",
            age_seconds=ages.get((tp.topic, tp.partition)),
            detail=(
                f"open transaction: last stable offset {stable[tp.topic, tp.partition]} < "
                f"high watermark {high[tp.topic, tp.partition]} holds read_committed "
                "readers back"
            ),
        )
        for tp in stuck
    ]


def _end_offsets(
    clients: KafkaClients, admin: Any, partitions: list[TopicPartition], isolation: Any
) -> dict[tuple[str, int], int]:
    timeout = clients.timeout
    request = {tp: OffsetSpec.latest() for tp in partitions}  # type: ignore[no-untyped-call]
    futures = admin.list_offsets(request, isolation_level=isolation, request_timeout=timeout)
    return {
        (tp.topic, tp.partition): int(future.result(timeout).offset)
        for tp, future in futures.items()
    }


def _first_unstable_ages(
    clients: KafkaClients,
    group: str,
    stuck: list[TopicPartition],
    stable: dict[tuple[str, int], int],
) -> dict[tuple[str, int], float]:
    """Age of the first record past the last stable offset: how long the open transaction
    has held readers back (read_uncommitted, never committing offsets)."""
    if not stuck:
        return {}
    consumer = clients.consumer(
        group, **{"enable.auto.commit": False, "isolation.level": "read_uncommitted"}
    )
    ages: dict[tuple[str, int], float] = {}
    try:
        consumer.assign(
            [TopicPartition(tp.topic, tp.partition, stable[tp.topic, tp.partition]) for tp in stuck]
        )
        deadline = time.monotonic() + min(clients.timeout, 10.0)
        while len(ages) < len(stuck) and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None or msg.error() is not None:
                continue
            key = (str(msg.topic()), int(msg.partition() or 0))
            _, stamp = msg.timestamp()
            if key not in ages and stamp > 0:
                ages[key] = max(0.0, time.time() - stamp / 1000.0)
    finally:
        consumer.close()
    return ages
