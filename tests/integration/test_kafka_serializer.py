"""A user serializer (the hook for schema-registry Avro/Protobuf serializers) on a real broker."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

import twopc
from tests.harness.kafka_topics import create_topic, read_messages
from twopc.local import foreach_batch

pytestmark = pytest.mark.integration


def _sink(bootstrap: str, topic: str) -> twopc.Sink[object]:
    return twopc.create_sink(
        "kafka",
        bootstrap_servers=bootstrap,
        topic=topic,
        key_column="name",
        value_serializer="tests.harness.kafka_serializers:versioned_json",
        operation_timeout_seconds=20,
    )


def test_rows_go_through_the_user_serializer(kafka_bootstrap: str, tmp_path: Path) -> None:
    topic = create_topic(kafka_bootstrap)
    writer = foreach_batch(_sink(kafka_bootstrap, topic), "ser", commit_log=str(tmp_path / "log"))
    rows = pa.table({"id": [1, 2, 3], "name": ["a", "b", "c"]})
    writer.write("q", 0, [rows])

    messages = read_messages(kafka_bootstrap, topic)
    decoded = sorted((m.text_key, (m.value or b"").split(b"|", 2)) for m in messages)
    assert [(k, v[0], v[1].decode(), json.loads(v[2])) for k, v in decoded] == [
        ("a", b"v1", topic, {"id": 1, "name": "a"}),
        ("b", b"v1", topic, {"id": 2, "name": "b"}),
        ("c", b"v1", topic, {"id": 3, "name": "c"}),
    ]


def test_a_row_the_serializer_rejects_fails_the_batch_clearly(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = create_topic(kafka_bootstrap)
    writer = foreach_batch(_sink(kafka_bootstrap, topic), "ser", commit_log=str(tmp_path / "log"))
    rows = pa.table({"id": [1, -5], "name": ["a", "b"]})
    with pytest.raises(twopc.BatchFailedError) as failure:
        writer.write("q", 0, [rows])
    message = str(failure.value)
    assert "sink 'ser', batch 0, partition 0" in message
    assert "value_serializer rejected row 1" in message and "must not be negative" in message
    assert read_messages(kafka_bootstrap, topic) == []


def test_a_malformed_serializer_path_is_refused() -> None:
    with pytest.raises(twopc.ConfigurationError, match=r"package\.module:factory"):
        twopc.create_sink(
            "kafka", bootstrap_servers="127.0.0.1:1", topic="t", value_serializer="no_colon"
        )
