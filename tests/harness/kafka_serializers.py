"""Row serializers the Kafka sink imports by name (``value_serializer="module:factory"``)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

ORDER_AVRO_SCHEMA = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "namespace": "twopc.test",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "name", "type": "string"},
            {"name": "amount", "type": "double"},
            {"name": "note", "type": ["null", "string"], "default": None},
        ],
    }
)


def versioned_json() -> Callable[[dict[str, Any], str], bytes]:
    """A tiny wire format: a version prefix, the topic, then the row as JSON."""

    def serialize(row: dict[str, Any], topic: str) -> bytes:
        if row["id"] < 0:
            raise ValueError(f"id must not be negative, got {row['id']}")
        return b"v1|" + topic.encode() + b"|" + json.dumps(row, sort_keys=True).encode()

    return serialize


def orders_avro() -> Callable[[dict[str, Any], str], bytes]:
    """confluent-kafka's AvroSerializer against the registry at ``$SCHEMA_REGISTRY_URL``:
    the ``value_serializer`` recipe of docs/backends/kafka.md."""
    from confluent_kafka.schema_registry import SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    from confluent_kafka.serialization import MessageField, SerializationContext

    client = SchemaRegistryClient({"url": os.environ["SCHEMA_REGISTRY_URL"]})
    avro = AvroSerializer(client, ORDER_AVRO_SCHEMA)

    def serialize(row: dict[str, Any], topic: str) -> bytes:
        data = avro(row, SerializationContext(topic, MessageField.VALUE))
        assert data is not None
        return data

    return serialize
