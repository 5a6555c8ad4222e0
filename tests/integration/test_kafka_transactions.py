"""What the Kafka backend relies on, shown against a real broker with confluent-kafka.

* committed vs. aborted transactions and the two isolation levels;
* a second producer with the same ``transactional.id`` fences the first;
* ``send_offsets_to_transaction`` works with the group metadata of a consumer that never
  joined its group, and ``Consumer.committed()`` reads offset and metadata back.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.integration

TIMEOUT = 30.0


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def topic(kafka_bootstrap: str) -> str:
    """A fresh single-partition topic."""
    name = _name("twopc-it")
    admin = AdminClient({"bootstrap.servers": kafka_bootstrap})
    for future in admin.create_topics(
        [NewTopic(name, num_partitions=1, replication_factor=1)]
    ).values():
        future.result(TIMEOUT)
    return name


def _producer(bootstrap: str, transactional_id: str) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id,
            "transaction.timeout.ms": 60000,
        }
    )
    producer.init_transactions(TIMEOUT)
    return producer


def _read_all(bootstrap: str, topic: str, isolation: str) -> list[tuple[int, bytes]]:
    """(offset, value) of every record a consumer with this isolation level can see."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": _name("reader"),
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        seen: list[tuple[int, bytes]] = []
        for _ in range(200):
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    return seen
                raise KafkaException(err)
            seen.append((msg.offset(), msg.value()))
        raise AssertionError(f"no end of partition reached reading {topic}")
    finally:
        consumer.close()


@pytest.fixture
def producers() -> Iterator[list[Producer]]:
    """Producers created by a test; flushed (best effort) so no client is left busy."""
    made: list[Producer] = []
    yield made
    for producer in made:
        with contextlib.suppress(KafkaException):  # a fenced producer raises its fatal error
            producer.flush(1.0)


def test_read_committed_sees_only_committed_transactions(
    kafka_bootstrap: str, topic: str, producers: list[Producer]
) -> None:
    producer = _producer(kafka_bootstrap, _name("tx"))
    producers.append(producer)

    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=f"committed-{i}".encode())
    producer.commit_transaction(TIMEOUT)

    producer.begin_transaction()
    for i in range(2):
        producer.produce(topic, value=f"aborted-{i}".encode())
    producer.flush(TIMEOUT)  # the records reach the log before the abort marker
    producer.abort_transaction(TIMEOUT)

    committed = [v for _, v in _read_all(kafka_bootstrap, topic, "read_committed")]
    uncommitted = [v for _, v in _read_all(kafka_bootstrap, topic, "read_uncommitted")]

    assert committed == [b"committed-0", b"committed-1", b"committed-2"]
    assert uncommitted == [
        b"committed-0",
        b"committed-1",
        b"committed-2",
        b"aborted-0",
        b"aborted-1",
    ]
    # transaction markers take offsets too: offsets 3 (commit marker) and 6 (abort marker)
    offsets = [o for o, _ in _read_all(kafka_bootstrap, topic, "read_uncommitted")]
    assert offsets == [0, 1, 2, 4, 5]


def test_second_producer_with_same_transactional_id_fences_the_first(
    kafka_bootstrap: str, topic: str, producers: list[Producer]
) -> None:
    tid = _name("tx-fence")
    first = _producer(kafka_bootstrap, tid)
    producers.append(first)
    first.begin_transaction()
    first.produce(topic, value=b"zombie")
    first.flush(TIMEOUT)

    # A new incarnation (e.g. a retried task) takes over the id: its init_transactions
    # bumps the epoch and aborts the first producer's open transaction.
    second = _producer(kafka_bootstrap, tid)
    producers.append(second)
    second.begin_transaction()
    second.produce(topic, value=b"winner")
    second.commit_transaction(TIMEOUT)

    with pytest.raises(KafkaException) as excinfo:
        first.commit_transaction(TIMEOUT)
    error = excinfo.value.args[0]
    assert error.fatal(), f"expected a fatal error, got {error!r}"
    assert error.code() in (
        KafkaError._FENCED,
        KafkaError.PRODUCER_FENCED,
        KafkaError.INVALID_PRODUCER_EPOCH,
    ), f"unexpected error {error!r}"

    assert [v for _, v in _read_all(kafka_bootstrap, topic, "read_committed")] == [b"winner"]


def test_send_offsets_with_metadata_of_a_consumer_that_never_joined(
    kafka_bootstrap: str, topic: str, producers: list[Producer]
) -> None:
    source = topic  # offsets are committed for this (existing) topic
    sink = _name("twopc-it-sink")
    group = _name("twopc-group")

    # The consumer only provides group metadata: it never subscribes, polls or joins.
    idle = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group})
    try:
        group_metadata = idle.consumer_group_metadata()
    finally:
        idle.close()

    producer = _producer(kafka_bootstrap, _name("tx-offsets"))
    producers.append(producer)
    producer.begin_transaction()
    producer.produce(sink, value=b"output of batch 7")
    producer.send_offsets_to_transaction(
        [TopicPartition(source, 0, 42, metadata="twopc:batch=7")], group_metadata, TIMEOUT
    )
    producer.commit_transaction(TIMEOUT)

    reader = Consumer({"bootstrap.servers": kafka_bootstrap, "group.id": group})
    try:
        (committed,) = reader.committed([TopicPartition(source, 0)], timeout=TIMEOUT)
    finally:
        reader.close()
    assert committed.error is None
    assert committed.offset == 42
    assert committed.metadata == "twopc:batch=7"


def test_transaction_timeout_above_broker_maximum_is_rejected(kafka_bootstrap: str) -> None:
    # The broker keeps transaction.max.timeout.ms at its default, 900000 ms (15 min).
    producer = Producer(
        {
            "bootstrap.servers": kafka_bootstrap,
            "transactional.id": _name("tx-timeout"),
            "transaction.timeout.ms": 900_001,
        }
    )
    with pytest.raises(KafkaException) as excinfo:
        producer.init_transactions(TIMEOUT)
    assert excinfo.value.args[0].code() == KafkaError.INVALID_TRANSACTION_TIMEOUT
