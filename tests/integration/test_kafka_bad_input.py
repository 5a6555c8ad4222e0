"""Bad input to the Kafka sink, against the real broker: each case is refused with a message
that names the sink, the option or the row, and what to do, and a ``read_committed``
consumer sees nothing of the refused batch.

* NaN and infinities in ``json`` values (refused, or ``null`` with ``json_non_finite``);
* ``producer_config`` settings librdkafka does not take (refused when the sink is created,
  without connecting);
* a ``partition`` value the topic does not have;
* names Kafka does not allow for topics (options and ``topic`` column values);
* the SASL password, which appears in no error, log line (librdkafka's debug output
  included), ``repr`` or ``describe()``.
"""

from __future__ import annotations

import gc
import json
import logging
import traceback
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import twopc
from tests.harness.kafka_topics import TIMEOUT, create_topic, read_messages, topic_exists, unique
from tests.harness.sink_errors import in_task
from twopc import local
from twopc_kafka.sink import KafkaSink

pytestmark = pytest.mark.integration

QUERY = "query-1"
KAFKA_RULE = (
    "(Kafka allows ASCII letters, digits, '.', '_' and '-', 1 to 249 characters, and "
    "neither '.' nor '..')"
)


def _sink(bootstrap: str, topic: str, **options: Any) -> KafkaSink:
    options.setdefault("operation_timeout_seconds", TIMEOUT)
    options.setdefault("lingering_probe", 1)
    return KafkaSink(bootstrap, topic=topic, transactional_id_prefix=unique("tp"), **options)


def _write(sink: KafkaSink, sink_id: str, tmp_path: Path, *parts: pa.Table) -> Any:
    writer = local.foreach_batch(sink, sink_id, commit_log=str(tmp_path / "log"), processes=False)
    return writer.write(QUERY, 0, list(parts))


def _strict_json(value: bytes | None) -> Any:
    """Parse like a strict JSON reader: ``NaN``/``Infinity`` are not JSON."""

    def refuse(constant: str) -> None:
        raise ValueError(f"not JSON: {constant}")

    assert value is not None
    return json.loads(value, parse_constant=refuse)


def _readings() -> pa.Table:
    return pa.table(
        {
            "id": pa.array([0, 1, 2, 3], pa.int64()),
            "reading": pa.array([1.5, 2.5, 3.5, float("nan")], pa.float64()),
            "limits": pa.array([[0.0], [1.0], [float("inf")], [2.0]], pa.list_(pa.float64())),
        }
    )


# -- NaN and infinity in json values ---------------------------------------------------------


def test_nan_in_a_json_value_fails_the_batch_and_nothing_is_visible(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = create_topic(kafka_bootstrap)
    sink = _sink(kafka_bootstrap, topic, mode="atomic")
    good = pa.table({"id": [10, 11], "reading": [0.5, 0.25], "limits": [[1.0], [2.0]]})
    with pytest.raises(twopc.BatchFailedError) as failed:
        _write(sink, "nan-values", tmp_path, good, _readings())
    # atomic: the two partitions are one task; the bad rows are its rows 2 + 2 and 2 + 3
    assert str(failed.value).startswith(
        "sink 'nan-values', batch 0, partition 0: value_format='json': column 'limits' of "
        "row 4 holds Infinity, which JSON cannot represent (strict JSON readers refuse it); "
        "clean or filter the data, or pass json_non_finite='null' to write null instead"
    )
    assert read_messages(kafka_bootstrap, topic) == []


def test_nan_is_named_by_its_column_and_row_when_written_directly(kafka_bootstrap: str) -> None:
    topic = create_topic(kafka_bootstrap)
    sink = _sink(kafka_bootstrap, topic)
    context = twopc.TaskContext("nan-direct", QUERY, 3, 1)
    txn = sink.begin_transaction(context)
    table = _readings().select(["id", "reading"])
    sink.invoke(txn, table.slice(0, 2).to_batches()[0])  # rows 0 and 1 of the task
    with pytest.raises(twopc.PermanentSinkError) as refused, in_task(context):
        sink.invoke(txn, table.slice(2).to_batches()[0])
    sink.abort(txn)
    assert str(refused.value).startswith(
        "sink 'nan-direct', batch 3, partition 1: value_format='json': column 'reading' of "
        "row 3 holds NaN"
    )
    assert read_messages(kafka_bootstrap, topic) == []


def test_json_non_finite_null_writes_null(kafka_bootstrap: str, tmp_path: Path) -> None:
    topic = create_topic(kafka_bootstrap)
    sink = _sink(kafka_bootstrap, topic, json_non_finite="null", key_column="key")
    table = _readings().append_column("key", pa.array(["a", "b", "c", "d"]))
    table = table.append_column("low", pa.array([float("-inf"), 0.0, 1.0, 2.0]))
    assert _write(sink, "nan-null", tmp_path, table).status == "committed"

    values = {m.text_key: _strict_json(m.value) for m in read_messages(kafka_bootstrap, topic)}
    assert values == {
        "a": {"id": 0, "reading": 1.5, "limits": [0.0], "key": "a", "low": None},
        "b": {"id": 1, "reading": 2.5, "limits": [1.0], "key": "b", "low": 0.0},
        "c": {"id": 2, "reading": 3.5, "limits": [None], "key": "c", "low": 1.0},
        "d": {"id": 3, "reading": None, "limits": [2.0], "key": "d", "low": 2.0},
    }


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (
            {"json_non_finite": "zero"},
            "kafka sink: json_non_finite must be one of error, null, not 'zero'",
        ),
        (
            {"json_non_finite": "null", "value_format": "string"},
            "kafka sink: json_non_finite='null' applies to value_format='json' only (twopc's "
            "own JSON values), not to value_format='string'",
        ),
        (
            {"json_non_finite": "null", "value_serializer": "my.module:factory"},
            "kafka sink: json_non_finite='null' applies to value_format='json' only (twopc's "
            "own JSON values), not to value_serializer",
        ),
    ],
)
def test_json_non_finite_that_says_nothing_is_refused(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(twopc.ConfigurationError) as refused:
        KafkaSink("127.0.0.1:19092", topic="t", **options)
    assert str(refused.value) == message


# -- producer_config -------------------------------------------------------------------------

_DOCS = "https://github.com/confluentinc/librdkafka/blob/master/CONFIGURATION.md"


@pytest.mark.parametrize(
    ("setting", "refusal"),
    [
        (
            {"linger.msec": 5},
            "producer_config['linger.msec'] = 5: No such configuration property: \"linger.msec\"",
        ),
        (
            {"linger.ms": "soon"},
            "producer_config['linger.ms'] = 'soon': Invalid value for configuration property "
            '"queue.buffering.max.ms"',
        ),
        (
            {"compression.type": "zip"},
            "producer_config['compression.type'] = 'zip': Invalid value \"zip\" for "
            'configuration property "compression.codec"',
        ),
        (
            {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAINTEXT"},
            "producer_config: Failed to create producer: Unsupported SASL mechanism: PLAINTEXT",
        ),
    ],
    ids=["unknown-key", "bad-value", "bad-choice", "bad-combination"],
)
def test_producer_config_librdkafka_refuses_fails_when_the_sink_is_created(
    kafka_bootstrap: str, setting: dict[str, Any], refusal: str
) -> None:
    topic = create_topic(kafka_bootstrap)
    secret = "pw#with/delims?@x"
    config = {**setting, "sasl.username": "etl", "sasl.password": secret}
    expected = f"kafka sink: librdkafka refuses {refusal}; fix or remove the setting (the "
    expected += f"settings librdkafka knows: {_DOCS})"
    with pytest.raises(twopc.ConfigurationError) as direct:
        KafkaSink(kafka_bootstrap, topic=topic, producer_config=config)
    assert str(direct.value) == expected
    with pytest.raises(twopc.ConfigurationError) as by_name:
        twopc.create_sink(
            "kafka", bootstrap_servers=kafka_bootstrap, topic=topic, producer_config=config
        )
    assert str(by_name.value) == expected
    assert secret not in expected


def test_a_secret_setting_librdkafka_refuses_is_named_without_its_value() -> None:
    """``sasl.oauthbearer.*`` values count as secrets; librdkafka's message would quote it."""
    config = {"sasl.oauthbearer.method": "hunter2", "sasl.password": "hunter3"}
    with pytest.raises(twopc.ConfigurationError) as refused:
        KafkaSink("127.0.0.1:19092", topic="t", producer_config=config)
    assert str(refused.value).startswith(
        "kafka sink: librdkafka refuses producer_config['sasl.oauthbearer.method'] = ***: "
        'Invalid value "***" for configuration property "sasl.oauthbearer.method"; '
    )
    config = {"security.protocol": "SSL", "ssl.key.pem": "hunter2", "ssl.key.password": "x"}
    with pytest.raises(twopc.ConfigurationError) as combination:
        KafkaSink("127.0.0.1:19092", topic="t", producer_config=config)
    assert str(combination.value).startswith(
        "kafka sink: librdkafka refuses producer_config: Failed to create producer: "
        "ssl.key.pem failed: not in PEM format?"
    )
    assert "hunter" not in str(refused.value) + str(combination.value)


# -- partitions and topic names --------------------------------------------------------------


def _spark_shaped(partitions: list[int | None], topics: list[str | None] | None = None) -> pa.Table:
    columns: dict[str, Any] = {
        "key": [f"k{i}" for i in range(len(partitions))],
        "value": [f"v{i}" for i in range(len(partitions))],
        "partition": pa.array(partitions, pa.int32()),
    }
    if topics is not None:
        columns["topic"] = topics
    return pa.table(columns)


@pytest.mark.parametrize("partition", [7, 3, -1], ids=["seven", "count", "negative"])
def test_a_partition_the_topic_does_not_have_is_named_with_the_topics_count(
    kafka_bootstrap: str, tmp_path: Path, partition: int
) -> None:
    topic = create_topic(kafka_bootstrap, partitions=3)
    sink = _sink(kafka_bootstrap, topic, mode="atomic")
    with pytest.raises(twopc.BatchFailedError) as failed:
        _write(
            sink, "partitions", tmp_path, _spark_shaped([0, 2, None]), _spark_shaped([1, partition])
        )
    assert str(failed.value).startswith(
        f"sink 'partitions', batch 0, partition 0: row 4 names partition {partition} of topic "
        f"{topic!r}, which has 3 partition(s), 0 to 2; fix the partition column (null lets "
        "the partitioner choose), or add partitions to the topic first"
    )
    assert read_messages(kafka_bootstrap, topic) == []


def test_a_partition_of_a_topic_named_by_the_row_is_checked_against_that_topic(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    default = create_topic(kafka_bootstrap, partitions=4)
    other = create_topic(kafka_bootstrap, partitions=1)
    sink = _sink(kafka_bootstrap, default, mode="atomic")
    with pytest.raises(twopc.BatchFailedError) as failed:
        _write(sink, "row-topics", tmp_path, _spark_shaped([3, 0, 3], [None, other, other]))
    assert f"row 2 names partition 3 of topic {other!r}, which has 1 partition(s)" in str(
        failed.value
    )
    assert read_messages(kafka_bootstrap, default) == []
    assert read_messages(kafka_bootstrap, other) == []


@pytest.mark.parametrize(
    ("option", "name", "problem"),
    [
        ("topic", "bad topic!", "it contains ' ', '!'"),
        ("topic", "x" * 250, "it has 250 characters"),
        ("marker_topic", "..", "'..' is reserved"),
        ("marker_log_topic", "markers/log", "it contains '/'"),
        ("topic", "", "it is empty"),
    ],
    ids=["characters", "too-long", "reserved", "slash", "empty"],
)
def test_an_invalid_topic_name_is_refused_when_the_sink_is_created(
    option: str, name: str, problem: str
) -> None:
    options: dict[str, Any] = {"topic": "out", option: name}
    with pytest.raises(twopc.ConfigurationError) as refused:
        KafkaSink("127.0.0.1:19092", **options)
    shown = repr(name) if len(name) <= 60 else repr(name[:40]) + f"... ({len(name)} characters)"
    assert str(refused.value) == (
        f"kafka sink: {option}={shown} is not a valid Kafka topic name: {problem} {KAFKA_RULE}"
    )


def test_an_invalid_topic_in_a_topic_column_is_named_and_not_looked_up(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    topic = create_topic(kafka_bootstrap)
    sink = _sink(kafka_bootstrap, topic, mode="atomic")
    table = pa.table({"value": ["a", "b", "c"], "topic": [None, topic, "orders v2"]})
    with pytest.raises(twopc.BatchFailedError) as failed:
        _write(sink, "bad-topic", tmp_path, table)
    assert str(failed.value).startswith(
        "sink 'bad-topic', batch 0, partition 0: row 2 names topic 'orders v2', which is not "
        f"a valid Kafka topic name: it contains ' ' {KAFKA_RULE}"
    )
    assert "does not exist" not in str(failed.value)
    assert read_messages(kafka_bootstrap, topic) == []


def test_a_valid_but_missing_topic_is_still_reported_as_missing(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    missing = unique("twopc-missing")
    with pytest.raises(twopc.BatchFailedError) as failed:
        _write(_sink(kafka_bootstrap, missing), "missing", tmp_path, pa.table({"value": ["a"]}))
    assert f"topic {missing!r} does not exist on {kafka_bootstrap}; create it first" in str(
        failed.value
    )
    assert not topic_exists(kafka_bootstrap, missing)


# -- the SASL password -----------------------------------------------------------------------


def _everything_said(error: BaseException) -> str:
    """The error's text, its causes' and its traceback, as a log handler would print it."""
    said = []
    current: BaseException | None = error
    while current is not None:
        said += [str(current), repr(current)]
        current = current.__cause__ or current.__context__
    said.append("".join(traceback.format_exception(error)))
    return "\n".join(said)


def _sasl_sink(kafka_sasl: dict[str, str], topic: str, password: str) -> Any:
    return twopc.create_sink(
        "kafka",
        bootstrap_servers=kafka_sasl["bootstrap"],
        topic=topic,
        operation_timeout_seconds=2,
        lingering_probe=1,
        producer_config={
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": kafka_sasl["username"],
            "sasl.password": password,
            "debug": "security,broker,protocol,conf,eos",  # librdkafka's debug log, to stderr
        },
    )


def test_the_sasl_password_is_in_no_error_log_line_or_description(
    kafka_bootstrap: str,
    kafka_sasl: dict[str, str],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    topic = create_topic(kafka_bootstrap)
    wrong = "Wr0ng#pass/word?x@y"
    caplog.set_level(logging.DEBUG)
    refused = _sasl_sink(kafka_sasl, topic, wrong)
    with pytest.raises(twopc.TwoPCError) as failed:
        _write(refused, "sasl-secret", tmp_path / "wrong", pa.table({"value": ["a"]}))
    assert "authentication failed" in str(failed.value).lower()

    right = kafka_sasl["password"]
    accepted = _sasl_sink(kafka_sasl, topic, right)
    written = _write(accepted, "sasl-secret", tmp_path / "right", pa.table({"value": ["b"]}))
    assert written.status == "committed"
    assert [m.value for m in read_messages(kafka_bootstrap, topic)] == [b"b"]

    said = {
        "error": _everything_said(failed.value),
        "repr": repr(refused) + repr(accepted),
        "describe": refused.describe() + accepted.describe(),
    }
    del failed, refused, accepted
    gc.collect()  # the clients the error's traceback held log their last lines now
    said["stdout"], said["stderr"] = capfd.readouterr()
    said["log records"] = "\n".join(f"{r.getMessage()} {r.exc_text or ''}" for r in caplog.records)
    assert "sasl.password = [redacted]" in said["stderr"]  # librdkafka's debug output
    for password in (wrong, right):
        for name, text in said.items():
            assert password not in text, f"the password is in the {name}"
