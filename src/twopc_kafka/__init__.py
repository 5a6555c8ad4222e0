"""Exactly-once Kafka sink for twopc (confluent-kafka).

Create it by name (``twopc.create_sink("kafka", bootstrap_servers=..., topic=...)``) or
import :class:`twopc_kafka.sink.KafkaSink` (needs ``twopc[kafka]``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twopc import BackendNotInstalledError

if TYPE_CHECKING:
    from twopc_kafka.sink import KafkaSink

__all__ = ["KafkaSink"]


def __getattr__(name: str) -> Any:
    if name != "KafkaSink":
        raise AttributeError(f"module 'twopc_kafka' has no attribute {name!r}")
    import importlib

    try:
        return importlib.import_module("twopc_kafka.sink").KafkaSink
    except ModuleNotFoundError as exc:
        if exc.name != "confluent_kafka":
            raise
        raise BackendNotInstalledError(
            'KafkaSink needs confluent-kafka: pip install "twopc[kafka]"'
        ) from exc
