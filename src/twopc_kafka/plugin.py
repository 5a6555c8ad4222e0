"""Registers the ``kafka`` backend; imports nothing from confluent-kafka."""

from __future__ import annotations

from twopc import SinkSpec, hookimpl


@hookimpl
def twopc_sinks() -> list[SinkSpec]:
    return [
        SinkSpec(
            name="kafka",
            factory="twopc_kafka.sink:KafkaSink",
            description="Kafka transactions (per partition, or atomic per batch)",
            requires=("confluent_kafka",),
            install_hint='pip install "twopc[kafka]"',
        )
    ]
