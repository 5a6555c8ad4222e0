"""Avro and Protobuf values through a real schema registry (Apicurio, Confluent API) and a
real broker.

Every test reads back what a ``read_committed`` consumer sees and decodes it with
confluent-kafka's deserializers, which fetch the writer's schema from the registry by the
id framed into each value.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext

import twopc
from tests.harness.kafka_serializers import ORDER_AVRO_SCHEMA
from tests.harness.kafka_topics import Message, create_topic, read_messages
from tests.harness.registry_protos import Order
from tests.harness.services import ServiceControl
from twopc.local import foreach_batch

pytestmark = pytest.mark.integration

PROTO_CLASS = "tests.harness.registry_protos:Order"
SECRET = "registry-secret-42"


@pytest.fixture
def registry(schema_registry_url: str) -> Iterator[SchemaRegistryClient]:
    """A client of the test registry, for reading back; closed after the test."""
    with SchemaRegistryClient({"url": schema_registry_url}) as client:
        yield client


def _sink(bootstrap: str, topic: str, value_format: str, url: str, **options: Any) -> Any:
    return twopc.create_sink(
        "kafka",
        bootstrap_servers=bootstrap,
        topic=topic,
        key_column="name",
        value_format=value_format,
        schema_registry_url=url,
        value_schema=ORDER_AVRO_SCHEMA if value_format == "avro" else PROTO_CLASS,
        operation_timeout_seconds=20,
        **options,
    )


def _rows(value_format: str, ids: range) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [{"id": i, "name": f"n{i}", "amount": i * 1.25} for i in ids]
    if value_format == "avro":  # the Avro schema has a nullable field too
        for row in rows:
            row["note"] = None if row["id"] % 2 else f"note {row['id']}"
    return rows


def _decode(
    client: SchemaRegistryClient, value_format: str, topic: str, messages: list[Message]
) -> list[dict[str, Any]]:
    context = SerializationContext(topic, MessageField.VALUE)
    if value_format == "avro":
        avro = AvroDeserializer(client)  # no reader schema: the writer's, from the registry
        return [avro(m.value, context) for m in messages]
    proto = ProtobufDeserializer(Order, {}, schema_registry_client=client)
    decoded = [proto(m.value, context) for m in messages]
    return [{"id": d.id, "name": d.name, "amount": d.amount} for d in decoded]


def _schema_ids(messages: list[Message]) -> set[int]:
    """The schema ids framed into the values (magic byte 0, then a 4-byte id)."""
    values = [m.value or b"" for m in messages]
    assert all(v[:1] == b"\x00" for v in values)
    return {int.from_bytes(v[1:5], "big") for v in values}


@pytest.mark.parametrize("value_format", ["avro", "protobuf"])
def test_rows_are_written_through_the_registry_exactly_once(
    kafka_bootstrap: str,
    schema_registry_url: str,
    registry: SchemaRegistryClient,
    tmp_path: Path,
    value_format: str,
) -> None:
    topic = create_topic(kafka_bootstrap, partitions=2)
    sink = _sink(kafka_bootstrap, topic, value_format, schema_registry_url)
    writer = foreach_batch(sink, "reg", commit_log=str(tmp_path / "log"))
    first = _rows(value_format, range(6))
    batch0 = [pa.Table.from_pylist(first[:3]), pa.Table.from_pylist(first[3:])]
    writer.write("q", 0, batch0)
    writer.write("q", 0, batch0)  # the replay of batch 0 after a crash: skipped
    second = _rows(value_format, range(6, 9))
    writer.write("q", 1, [pa.Table.from_pylist(second)])

    messages = read_messages(kafka_bootstrap, topic)
    decoded = _decode(registry, value_format, topic, messages)
    assert Counter(row["id"] for row in decoded) == Counter(range(9))
    assert sorted(decoded, key=lambda row: row["id"]) == first + second
    assert sorted(m.text_key for m in messages) == sorted(f"n{i}" for i in range(9))

    subject = f"{topic}-value"
    assert subject in registry.get_subjects()
    registered = registry.get_latest_version(subject)
    assert registered.schema.schema_type == value_format.upper()
    assert _schema_ids(messages) == {registered.schema_id}


def test_a_user_serializer_factory_with_confluents_avro_serializer(
    kafka_bootstrap: str,
    schema_registry_url: str,
    registry: SchemaRegistryClient,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the recipe of docs/backends/kafka.md: the factory reads the URL where the task runs
    monkeypatch.setenv("SCHEMA_REGISTRY_URL", schema_registry_url)
    topic = create_topic(kafka_bootstrap)
    sink = twopc.create_sink(
        "kafka",
        bootstrap_servers=kafka_bootstrap,
        topic=topic,
        key_column="name",
        value_serializer="tests.harness.kafka_serializers:orders_avro",
        operation_timeout_seconds=20,
    )
    rows = _rows("avro", range(4))
    writer = foreach_batch(sink, "hook", commit_log=str(tmp_path / "log"))
    writer.write("q", 0, [pa.Table.from_pylist(rows)])

    messages = read_messages(kafka_bootstrap, topic)
    assert sorted(_decode(registry, "avro", topic, messages), key=lambda r: r["id"]) == rows
    assert _schema_ids(messages) == {registry.get_latest_version(f"{topic}-value").schema_id}


BAD_ROWS = {
    # a null where the Avro schema wants a long
    "avro": (pa.table({"id": [1, None], "name": ["a", "b"], "amount": [1.0, 2.0]}), "TypeError"),
    # an id beyond the range of the message's int64 field
    "protobuf": (
        pa.table(
            {
                "id": pa.array([1, 2**64 - 1], pa.uint64()),
                "name": ["a", "b"],
                "amount": [1.0, 2.0],
            }
        ),
        "ValueError",
    ),
}


@pytest.mark.parametrize("value_format", sorted(BAD_ROWS))
def test_a_row_that_does_not_fit_the_schema_fails_the_batch(
    kafka_bootstrap: str, schema_registry_url: str, tmp_path: Path, value_format: str
) -> None:
    table, cause = BAD_ROWS[value_format]
    topic = create_topic(kafka_bootstrap)
    sink = _sink(kafka_bootstrap, topic, value_format, schema_registry_url)
    writer = foreach_batch(sink, "bad", commit_log=str(tmp_path / "log"))
    with pytest.raises(twopc.BatchFailedError) as failure:
        writer.write("q", 0, [table])
    message = str(failure.value)
    assert "sink 'bad', batch 0, partition 0" in message
    serializer = "the Avro serializer" if value_format == "avro" else "the Protobuf serializer"
    assert f"{serializer}" in message and "rejected row 1 of the batch" in message
    assert f": {cause}: " in message
    assert read_messages(kafka_bootstrap, topic) == []  # row 0 was aborted with the batch


def test_an_unreachable_registry_fails_the_batch_then_the_rerun_commits_once(
    kafka_bootstrap: str,
    schema_registry_url: str,
    registry: SchemaRegistryClient,
    services: ServiceControl,
    tmp_path: Path,
) -> None:
    topic = create_topic(kafka_bootstrap)
    sink = _sink(
        kafka_bootstrap,
        topic,
        "avro",
        schema_registry_url,
        schema_registry_config={"basic.auth.user.info": f"etl:{SECRET}", "max.retries": 1},
    )
    rows = _rows("avro", range(3))
    writer = foreach_batch(sink, "down", commit_log=str(tmp_path / "log"))
    services.kill("registry")
    with pytest.raises(twopc.TwoPCError) as failure:
        writer.write("q", 0, [pa.Table.from_pylist(rows)])
    message = str(failure.value)
    assert "sink 'down', batch 0" in message and "partition 0" in message
    assert f"cannot reach the schema registry at {schema_registry_url}: ConnectError" in message
    assert SECRET not in message and SECRET not in repr(sink)
    assert read_messages(kafka_bootstrap, topic) == []

    services.restart("registry")
    writer.write("q", 0, [pa.Table.from_pylist(rows)])  # the query restarted: batch 0 again
    messages = read_messages(kafka_bootstrap, topic)
    assert sorted(_decode(registry, "avro", topic, messages), key=lambda r: r["id"]) == rows


def test_a_request_the_registry_refuses_fails_the_batch_for_good(
    kafka_bootstrap: str, schema_registry_url: str, tmp_path: Path
) -> None:
    topic = create_topic(kafka_bootstrap)
    # no auto-registration and no schema registered for this topic's subject yet
    sink = _sink(
        kafka_bootstrap,
        topic,
        "avro",
        schema_registry_url,
        serializer_config={"auto.register.schemas": False, "use.latest.version": True},
    )
    writer = foreach_batch(sink, "refused", commit_log=str(tmp_path / "log"))
    with pytest.raises(twopc.BatchFailedError) as failure:
        writer.write("q", 0, [pa.Table.from_pylist(_rows("avro", range(2)))])
    message = str(failure.value)
    assert "sink 'refused', batch 0, partition 0" in message
    assert f"the schema registry at {schema_registry_url} refused the request: HTTP 404" in message
    assert read_messages(kafka_bootstrap, topic) == []


def test_an_incompatible_schema_gives_the_registrys_message_and_produces_nothing(
    kafka_bootstrap: str,
    schema_registry_url: str,
    registry: SchemaRegistryClient,
    tmp_path: Path,
) -> None:
    """Schema evolution on Kafka is the registry's: under BACKWARD compatibility a new
    required field (no default) is refused with the registry's own message, the batch fails
    before anything is produced, and batch 0's messages stay the only ones."""
    topic = create_topic(kafka_bootstrap)
    log = str(tmp_path / "log")
    first = _sink(kafka_bootstrap, topic, "avro", schema_registry_url)
    foreach_batch(first, "evolve", commit_log=log).write(
        "q", 0, [pa.Table.from_pylist(_rows("avro", range(2)))]
    )
    registry.set_compatibility(f"{topic}-value", "BACKWARD")
    schema = json.loads(ORDER_AVRO_SCHEMA)
    schema["fields"].append({"name": "qty", "type": "long"})  # required: not backward
    second = twopc.create_sink(
        "kafka",
        bootstrap_servers=kafka_bootstrap,
        topic=topic,
        key_column="name",
        value_format="avro",
        schema_registry_url=schema_registry_url,
        value_schema=json.dumps(schema),
        operation_timeout_seconds=20,
    )
    rows = [{**row, "qty": 1} for row in _rows("avro", range(2, 4))]
    with pytest.raises(twopc.BatchFailedError) as failure:
        foreach_batch(second, "evolve", commit_log=log).write("q", 1, [pa.Table.from_pylist(rows)])
    message = str(failure.value)
    assert "sink 'evolve', batch 1, partition 0" in message
    assert f"the schema registry at {schema_registry_url} refused the request: HTTP 409" in message
    assert "incompatib" in message.lower(), message
    messages = read_messages(kafka_bootstrap, topic)
    assert sorted(r["id"] for r in _decode(registry, "avro", topic, messages)) == [0, 1]
