"""The Kafka sink's options, checked when the sink is created: one
:class:`~twopc.ConfigurationError` per bad option, before anything connects."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from twopc import ConfigurationError
from twopc_kafka._clients import ENFORCED
from twopc_kafka._records import VALUE_FORMATS
from twopc_kafka._registry import REGISTRY_FORMATS, RegistryOptions

__all__ = ["MODES", "KafkaOptions", "registry_options"]

MODES = ("per_partition", "atomic")


@dataclass(frozen=True)
class KafkaOptions:
    """The options of one :class:`~twopc_kafka.sink.KafkaSink`, checked (see its docstring
    for each). Build it with :meth:`of`, from the sink's keyword arguments."""

    bootstrap_servers: str
    topic: str | None
    mode: str
    transactional_id_prefix: str
    value_format: str
    key_column: str | None
    value_serializer: str | None
    registry: RegistryOptions | None
    """The Avro/Protobuf settings; ``None`` for the other value formats."""
    marker_topic: str
    """The marker topic given, else ``topic``."""
    marker_log_topic: str | None
    transaction_timeout_ms: int
    producer_config: dict[str, Any]
    operation_timeout_seconds: float
    lingering_probe: int

    @classmethod
    def of(
        cls,
        bootstrap_servers: str,
        *,
        topic: str | None = None,
        mode: str = "per_partition",
        transactional_id_prefix: str = "twopc",
        value_format: str = "json",
        key_column: str | None = None,
        value_serializer: str | None = None,
        schema_registry_url: str | None = None,
        value_schema: str | None = None,
        schema_registry_config: dict[str, Any] | None = None,
        serializer_config: dict[str, Any] | None = None,
        marker_topic: str | None = None,
        marker_log_topic: str | None = None,
        transaction_timeout_ms: int = 60_000,
        producer_config: dict[str, Any] | None = None,
        operation_timeout_seconds: float = 30.0,
        lingering_probe: int = 8,
    ) -> KafkaOptions:
        """Check the sink's options, in the order a user reads them, and keep them."""
        if not bootstrap_servers:
            raise ConfigurationError("kafka sink: bootstrap_servers is required")
        if mode not in MODES:
            raise ConfigurationError(f"kafka sink: mode must be one of {', '.join(MODES)}")
        if value_format not in VALUE_FORMATS:
            raise ConfigurationError(
                f"kafka sink: value_format must be one of {', '.join(VALUE_FORMATS)}"
            )
        if not (marker_topic or topic):
            raise ConfigurationError(
                "kafka sink: give topic= (or marker_topic=): the commit markers need an "
                "existing topic"
            )
        config = dict(producer_config or {})
        for key, value in ENFORCED.items():
            if key in config and str(config[key]).lower() != str(value).lower():
                raise ConfigurationError(
                    f"kafka sink: {key}={config[key]!r} would give up exactly-once; twopc "
                    f"needs {key}={value}"
                )
        if "transactional.id" in config:
            raise ConfigurationError(
                "kafka sink: transactional.id is derived from transactional_id_prefix, the "
                "sink id and the partition; do not set it"
            )
        if value_serializer is not None and ":" not in value_serializer:
            raise ConfigurationError(
                "kafka sink: value_serializer must be 'package.module:factory', not "
                f"{value_serializer!r}"
            )
        registry = registry_options(
            value_format,
            value_serializer=value_serializer,
            url=schema_registry_url,
            value_schema=value_schema,
            client_config=schema_registry_config,
            serializer_config=serializer_config,
        )
        markers = marker_topic or topic or ""
        if marker_log_topic is not None and marker_log_topic in (markers, topic):
            raise ConfigurationError(
                "kafka sink: marker_log_topic must be a topic of its own (compacted), not the "
                f"output or marker topic {marker_log_topic!r}"
            )
        return cls(
            bootstrap_servers=bootstrap_servers,
            topic=topic,
            mode=mode,
            transactional_id_prefix=transactional_id_prefix,
            value_format=value_format,
            key_column=key_column,
            value_serializer=value_serializer,
            registry=registry,
            marker_topic=markers,
            marker_log_topic=marker_log_topic or None,
            transaction_timeout_ms=int(transaction_timeout_ms),
            producer_config=config,
            operation_timeout_seconds=float(operation_timeout_seconds),
            lingering_probe=int(lingering_probe),
        )


def registry_options(
    value_format: str,
    *,
    value_serializer: str | None,
    url: str | None,
    value_schema: str | None,
    client_config: dict[str, Any] | None,
    serializer_config: dict[str, Any] | None,
) -> RegistryOptions | None:
    """The Avro/Protobuf settings, checked now; None for the other value formats."""
    if value_format not in REGISTRY_FORMATS:
        given = {
            "schema_registry_url": url,
            "value_schema": value_schema,
            "schema_registry_config": client_config,
            "serializer_config": serializer_config,
        }
        extra = sorted(name for name, value in given.items() if value is not None)
        if extra:
            raise ConfigurationError(
                f"kafka sink: {', '.join(extra)} only apply to value_format='avro' or "
                f"'protobuf', not {value_format!r}"
            )
        return None
    if value_serializer is not None:
        raise ConfigurationError(
            f"kafka sink: value_format={value_format!r} and value_serializer both say how "
            "to serialize values; give one"
        )
    return RegistryOptions(
        value_format,
        url or "",
        value_schema or "",
        dict(client_config or {}),
        dict(serializer_config or {}),
    )
