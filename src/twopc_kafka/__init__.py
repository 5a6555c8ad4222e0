"""Exactly-once Kafka sink for twopc (confluent-kafka).

Create it by name (``twopc.create_sink("kafka", bootstrap_servers=..., topic=...)``) or
import :class:`twopc_kafka.sink.KafkaSink` (needs ``twopc[kafka]``).
:class:`twopc_kafka.ConsumerGroup` publishes a query's Kafka source offsets to a consumer
group (``twopc.foreach_batch(..., progress=ConsumerGroup(...))``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twopc import BackendNotInstalledError

if TYPE_CHECKING:
    from twopc_kafka.progress import ConsumerGroup
    from twopc_kafka.sink import KafkaSink

__all__ = ["ConsumerGroup", "KafkaSink"]

_MODULES = {"KafkaSink": "twopc_kafka.sink", "ConsumerGroup": "twopc_kafka.progress"}


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module 'twopc_kafka' has no attribute {name!r}")
    import importlib

    try:
        return getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as exc:
        if exc.name != "confluent_kafka":
            raise
        raise BackendNotInstalledError(
            f'{name} needs confluent-kafka: pip install "twopc[kafka]"'
        ) from exc
