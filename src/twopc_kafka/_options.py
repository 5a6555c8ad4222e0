"""The Kafka sink's options, checked when the sink is created: one
:class:`~twopc.ConfigurationError` per bad option, before anything connects."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from twopc import ConfigurationError
from twopc_kafka._clients import ENFORCED, settings_problem
from twopc_kafka._records import JSON_NON_FINITE, VALUE_FORMATS
from twopc_kafka._registry import REGISTRY_FORMATS, RegistryOptions
from twopc_kafka._topics import shown, topic_name_problem

__all__ = ["MODES", "KafkaOptions", "registry_options"]

MODES = ("per_partition", "atomic")
_DOCS = "https://github.com/confluentinc/librdkafka/blob/master/CONFIGURATION.md"


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
    json_non_finite: str
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
        json_non_finite: str = "error",
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
        if not isinstance(bootstrap_servers, str) or not bootstrap_servers:
            raise ConfigurationError(
                "kafka sink: bootstrap_servers is required: 'host:port[,host:port...]'"
            )
        for name, value in (("topic", topic), ("marker_topic", marker_topic)):
            _check_topic_option(name, value)
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
        _check_string("transactional_id_prefix", transactional_id_prefix)
        _check_string("key_column", key_column)
        _check_json_non_finite(json_non_finite, value_format, value_serializer)
        config = _producer_config(producer_config)
        if value_serializer is not None and (
            not isinstance(value_serializer, str) or ":" not in value_serializer
        ):
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
        _check_topic_option("marker_log_topic", marker_log_topic)
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
            json_non_finite=json_non_finite,
            registry=registry,
            marker_topic=markers,
            marker_log_topic=marker_log_topic or None,
            transaction_timeout_ms=_whole_number(
                "transaction_timeout_ms", transaction_timeout_ms, minimum=1
            ),
            producer_config=config,
            operation_timeout_seconds=_seconds(operation_timeout_seconds),
            lingering_probe=_whole_number("lingering_probe", lingering_probe, minimum=1),
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


def _check_topic_option(name: str, value: object) -> None:
    """A topic option is absent or a valid Kafka topic name."""
    if value is None:
        return
    problem = topic_name_problem(value)
    if problem is not None:
        what = shown(value) if isinstance(value, str) else repr(value)
        raise ConfigurationError(
            f"kafka sink: {name}={what} is not a valid Kafka topic name: {problem}"
        )


def _check_string(name: str, value: object) -> None:
    """An optional option that names something is a non-empty string when given."""
    if value is None or (isinstance(value, str) and value):
        return
    raise ConfigurationError(
        f"kafka sink: {name} must be a non-empty string, not {type(value).__name__} {value!r}"
    )


def _check_json_non_finite(value: object, value_format: str, serializer: str | None) -> None:
    """``json_non_finite`` is one of its choices, and says something: ``"null"`` only where
    twopc writes JSON values itself."""
    if value not in JSON_NON_FINITE:
        raise ConfigurationError(
            f"kafka sink: json_non_finite must be one of {', '.join(JSON_NON_FINITE)}, "
            f"not {value!r}"
        )
    if value != "error" and (value_format != "json" or serializer is not None):
        raise ConfigurationError(
            f"kafka sink: json_non_finite={value!r} applies to value_format='json' only "
            f"(twopc's own JSON values), not to "
            + ("value_serializer" if serializer is not None else f"value_format={value_format!r}")
        )


def _producer_config(given: object) -> dict[str, Any]:
    """The user's librdkafka settings, checked: exactly-once's own settings are not
    overridden, and librdkafka takes every name and value (checked without connecting)."""
    if given is None:
        return {}
    if not isinstance(given, Mapping) or not all(isinstance(k, str) for k in given):
        raise ConfigurationError(
            "kafka sink: producer_config must be a dict of librdkafka settings with string "
            f"names, not {type(given).__name__}"
        )
    config = dict(given)
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
    problem = settings_problem(config)
    if problem is not None:
        raise ConfigurationError(
            f"kafka sink: librdkafka refuses {problem}; fix or remove the setting (the "
            f"settings librdkafka knows: {_DOCS})"
        )
    return config


def _whole_number(name: str, value: object, *, minimum: int) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= minimum:
        return value
    raise ConfigurationError(
        f"kafka sink: {name} must be a whole number of at least {minimum}, not {value!r}"
    )


def _seconds(value: object) -> float:
    valid = isinstance(value, int | float) and not isinstance(value, bool)
    if valid and 0 < float(value) < float("inf"):  # type: ignore[arg-type]
        return float(value)  # type: ignore[arg-type]
    raise ConfigurationError(
        f"kafka sink: operation_timeout_seconds must be a positive number of seconds, not {value!r}"
    )
