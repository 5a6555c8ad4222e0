"""One task's Kafka transaction and the loop that produces its records."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaException

from twopc import PermanentSinkError, TaskContext, TransientSinkError
from twopc_kafka._errors import PERMANENT_CODES, error
from twopc_kafka._records import RecordColumns
from twopc_kafka._topics import shown, topic_name_problem

__all__ = ["KafkaTransaction", "check_partitions", "produce_all", "require_topics"]


@dataclass
class KafkaTransaction:
    """One task's producer and open transaction."""

    ctx: TaskContext
    producer: Any
    transactional_id: str
    skip: bool = False
    rows: int = 0
    errors: list[str] = field(default_factory=list)
    permanent: bool = False
    """Whether a delivery error is one that retrying cannot fix (record too large...)."""

    def delivered(self, err: Any, _msg: Any) -> None:
        """librdkafka's delivery report; only failed deliveries report
        (``delivery.report.only.error``)."""
        if err is not None and len(self.errors) < 5:
            self.errors.append(f"{err.name()}: {err.str()}")
            self.permanent = self.permanent or err.code() in PERMANENT_CODES


def require_topics(txn: KafkaTransaction, columns: RecordColumns, default: str | None) -> set[str]:
    """Every row has a topic (its ``topic`` column or the sink's default); returns the
    topics the rows name besides the default, which must exist."""
    if columns.topics is None:
        if default is None:
            _no_topic(txn, 0)
        return set()
    named = set(columns.topics)
    if None in named and default is None:
        _no_topic(txn, columns.topics.index(None))
    others = {t for t in named if t is not None and t != default}
    for topic in sorted(others, key=columns.topics.index):
        problem = topic_name_problem(topic)
        if problem is not None:
            raise PermanentSinkError(
                f"row {txn.rows + columns.topics.index(topic)} names topic {shown(topic)}, "
                f"which is not a valid Kafka topic name: {problem}"
            )
    return others


def _no_topic(txn: KafkaTransaction, index: int) -> None:
    raise PermanentSinkError(
        f"row {txn.rows + index} has no topic (no topic column value and no default topic)"
    )


def check_partitions(
    txn: KafkaTransaction,
    columns: RecordColumns,
    default: str | None,
    partition_count: Callable[[str, bool], int],
) -> None:
    """Every row's ``partition`` value is a partition its topic has. librdkafka would fail
    the row with a bare ``_UNKNOWN_PARTITION``; ``partition_count(topic, refresh)`` is the
    topic's count, read again from the brokers with ``refresh`` (partitions may be added)."""
    if columns.partitions is None:
        return
    counts: dict[str, int] = {}
    for index, partition in enumerate(columns.partitions):
        if partition is None:
            continue
        topic = (columns.topics[index] if columns.topics else None) or default or ""
        if topic not in counts:
            counts[topic] = partition_count(topic, False)
        if 0 <= partition < counts[topic]:
            continue
        counts[topic] = partition_count(topic, True)
        if not counts[topic]:  # a topic being created, or without a leader for a moment
            raise TransientSinkError(f"the brokers report no partition of topic {topic!r}")
        if not 0 <= partition < counts[topic]:
            row = txn.rows + index
            raise PermanentSinkError(_partition_message(row, partition, topic, counts[topic]))


def _partition_message(row: int, partition: int, topic: str, count: int) -> str:
    return (
        f"row {row} names partition {partition} of topic {topic!r}, which has {count} "
        f"partition(s), 0 to {count - 1}; fix the partition column (null lets the "
        "partitioner choose), or add partitions to the topic first"
    )


def produce_all(txn: KafkaTransaction, columns: RecordColumns, default: str | None) -> None:
    """Produce every record; the loops are lean because they run once per row."""
    produce = txn.producer.produce
    delivered = txn.delivered
    values = columns.values
    keys = columns.keys or [None] * len(values)
    simple = columns.topics is None and columns.partitions is None and columns.headers is None
    start, current, end = 0, 0, len(values)
    while start < end:
        try:
            if simple:
                for current in range(start, end):
                    produce(default, values[current], keys[current], on_delivery=delivered)
            else:
                for current in range(start, end):
                    record = columns.record(current)
                    produce(
                        record.topic or default,
                        record.value,
                        record.key,
                        -1 if record.partition is None else record.partition,
                        on_delivery=delivered,
                        headers=record.headers,
                    )
            start = end
        except BufferError:
            # local queue full: serve the delivery queue until some records are acked (only
            # failures call back, so a long poll would wait out its whole timeout)
            txn.producer.flush(0.02)
            start = current
        except KafkaException as exc:
            raise error(exc, f"producing row {txn.rows + current} failed") from exc
    txn.rows += len(values)
