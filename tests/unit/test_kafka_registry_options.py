"""The Kafka sink's Avro/Protobuf options are checked when the sink is created.

No broker and no registry: creating a sink and its serializer sends no request. What the
serializers do against a real registry is in tests/integration/test_kafka_schema_registry.py.
"""

from __future__ import annotations

import pickle
import sys
from typing import Any

import pytest

import twopc
from tests.harness.kafka_serializers import ORDER_AVRO_SCHEMA

pytestmark = pytest.mark.unit

URL = "http://127.0.0.1:1/apis/ccompat/v7"
PROTO_CLASS = "tests.harness.registry_protos:Order"


def _sink(**options: Any) -> Any:
    return twopc.create_sink("kafka", bootstrap_servers="127.0.0.1:1", topic="t", **options)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"value_format": "avro", "value_schema": ORDER_AVRO_SCHEMA}, "needs schema_registry_url"),
        ({"value_format": "protobuf", "schema_registry_url": URL}, "needs value_schema"),
        (
            {"value_format": "avro", "schema_registry_url": "127.0.0.1:8081", "value_schema": "{}"},
            "must be http:// or https:// URLs",
        ),
        (
            {"value_format": "avro", "schema_registry_url": URL, "value_schema": '{"type": "x"}'},
            "value_schema is not a valid Avro schema: UnknownType",
        ),
        (
            {"value_format": "avro", "schema_registry_url": URL, "value_schema": "not json"},
            "value_schema is not a valid Avro schema: JSONDecodeError",
        ),
        (
            {"value_format": "protobuf", "schema_registry_url": URL, "value_schema": "Order"},
            "must be the message class as 'package.module:Message'",
        ),
        (
            {
                "value_format": "protobuf",
                "schema_registry_url": URL,
                "value_schema": "tests.harness.registry_protos:Nope",
            },
            "cannot import the Protobuf message class",
        ),
        (
            {
                "value_format": "protobuf",
                "schema_registry_url": URL,
                "value_schema": "tests.harness.registry_protos:descriptor_pb2",
            },
            "is not a Protobuf message class",
        ),
        (
            {
                "value_format": "avro",
                "schema_registry_url": URL,
                "value_schema": ORDER_AVRO_SCHEMA,
                "value_serializer": "tests.harness.kafka_serializers:orders_avro",
            },
            "value_format='avro' and value_serializer both say",
        ),
        ({"schema_registry_url": URL}, "schema_registry_url only apply to value_format='avro'"),
        (
            {
                "value_format": "avro",
                "schema_registry_url": URL,
                "value_schema": ORDER_AVRO_SCHEMA,
                "schema_registry_config": {"url": URL},
            },
            "not as schema_registry_config['url']",
        ),
        (
            {
                "value_format": "avro",
                "schema_registry_url": URL,
                "value_schema": ORDER_AVRO_SCHEMA,
                "serializer_config": {"auto.register.schemaz": False},
            },
            "schema registry settings rejected: Unrecognized properties: auto.register.schemaz",
        ),
        (
            {
                "value_format": "avro",
                "schema_registry_url": URL,
                "value_schema": ORDER_AVRO_SCHEMA,
                "schema_registry_config": {"basic.auth.user.info": "no-colon"},
            },
            "basic.auth.user.info must be in the form",
        ),
    ],
)
def test_bad_options_are_refused_when_the_sink_is_created(
    options: dict[str, Any], expected: str
) -> None:
    with pytest.raises(twopc.ConfigurationError) as refused:
        _sink(**options)
    assert expected in str(refused.value)


def test_secrets_stay_out_of_repr_and_survive_pickling() -> None:
    in_config = _sink(
        value_format="avro",
        schema_registry_url="https://registry:8081",
        value_schema=ORDER_AVRO_SCHEMA,
        schema_registry_config={"basic.auth.user.info": "etl:config-secret", "timeout": 5},
    )
    in_url = _sink(
        value_format="avro",
        schema_registry_url="https://etl:url-secret@registry:8081",
        value_schema=ORDER_AVRO_SCHEMA,
    )
    shown = " ".join(repr(x) for x in (in_config, in_config.registry, in_url, in_url.registry))
    assert "config-secret" not in shown and "url-secret" not in shown
    assert "'basic.auth.user.info': '***'" in shown and "'timeout': 5" in shown
    assert "https://***@registry:8081" in shown
    copy = pickle.loads(pickle.dumps(in_config))  # what Spark ships to the executors
    assert copy.registry == in_config.registry


def test_protobuf_needs_no_protoc_generated_module_only_a_message_class() -> None:
    sink = _sink(value_format="protobuf", schema_registry_url=URL, value_schema=PROTO_CLASS)
    assert sink.registry.label == f"the Protobuf serializer (message {PROTO_CLASS})"


@pytest.mark.parametrize("value_format", ["avro", "protobuf"])
def test_a_missing_extra_names_the_install_command(
    monkeypatch: pytest.MonkeyPatch, value_format: str
) -> None:
    # what an environment without twopc[avro] / twopc[protobuf] looks like to an import
    monkeypatch.setitem(sys.modules, f"confluent_kafka.schema_registry.{value_format}", None)
    with pytest.raises(twopc.BackendNotInstalledError) as missing:
        _sink(
            value_format=value_format,
            schema_registry_url=URL,
            value_schema=ORDER_AVRO_SCHEMA if value_format == "avro" else PROTO_CLASS,
        )
    assert f'pip install "twopc[{value_format}]"' in str(missing.value)


def test_json_sinks_work_without_the_registry_extras(monkeypatch: pytest.MonkeyPatch) -> None:
    for module in ("avro", "protobuf"):
        monkeypatch.setitem(sys.modules, f"confluent_kafka.schema_registry.{module}", None)
    assert _sink(value_format="json").registry is None
