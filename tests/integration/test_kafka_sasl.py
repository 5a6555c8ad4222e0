"""Credentials on a real SASL/PLAIN listener: the right ones write, wrong ones fail clearly."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import twopc
from tests.harness.kafka_topics import create_topic, read_messages
from twopc.local import foreach_batch

pytestmark = pytest.mark.integration


def _sink(kafka_sasl: dict[str, str], topic: str, password: str) -> Any:
    return twopc.create_sink(
        "kafka",
        bootstrap_servers=kafka_sasl["bootstrap"],
        topic=topic,
        key_column="name",
        operation_timeout_seconds=5,
        lingering_probe=1,
        producer_config={
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": kafka_sasl["username"],
            "sasl.password": password,
        },
    )


def test_the_right_credentials_write(
    kafka_bootstrap: str, kafka_sasl: dict[str, str], tmp_path: Path
) -> None:
    topic = create_topic(kafka_bootstrap)
    sink = _sink(kafka_sasl, topic, kafka_sasl["password"])
    writer = foreach_batch(sink, "sasl", commit_log=str(tmp_path / "log"), processes=False)
    writer.write("q", 0, [pa.table({"id": [1, 2], "name": ["a", "b"]})])
    assert sorted(m.text_key for m in read_messages(kafka_bootstrap, topic)) == ["a", "b"]


def test_wrong_credentials_fail_clearly_and_write_nothing(
    kafka_bootstrap: str, kafka_sasl: dict[str, str], tmp_path: Path
) -> None:
    topic = create_topic(kafka_bootstrap)
    sink = _sink(kafka_sasl, topic, "not-the-password")
    assert "not-the-password" not in repr(sink)
    writer = foreach_batch(sink, "sasl", commit_log=str(tmp_path / "log"), processes=False)
    with pytest.raises(twopc.TwoPCError) as failure:
        writer.write("q", 0, [pa.table({"id": [1], "name": ["a"]})])
    message = str(failure.value)
    assert "authentication failed" in message.lower(), message
    assert "sink 'sasl', batch 0" in message
    assert "not-the-password" not in message
    assert read_messages(kafka_bootstrap, topic) == []
