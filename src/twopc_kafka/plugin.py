"""Registers the ``kafka`` backend and the consumer-group progress reporter; imports
nothing from confluent-kafka."""

from __future__ import annotations

from twopc import ProgressSpec, SinkSpec, hookimpl


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


@hookimpl
def twopc_progress_reporters() -> list[ProgressSpec]:
    return [
        ProgressSpec(
            kind="kafka-consumer-group",
            factory="twopc_kafka.progress:ConsumerGroup.from_description",
            description="a Kafka consumer group, as lag tools read it",
            requires=("confluent_kafka",),
            install_hint='pip install "twopc[kafka]"',
        )
    ]
