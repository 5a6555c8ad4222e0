"""The SQL sinks' client-side timeouts: validated when the sink is created, and the only
way to set them (a driver option of the same meaning is refused, not silently mixed in).
Creating a sink opens no connection; the behaviour against a stalled server is tested in
``tests/integration/test_service_stalls.py``."""

from __future__ import annotations

import pytest

import twopc
from twopc_jdbc.mysql import MySQLSink
from twopc_jdbc.postgres import PostgresSink

pytestmark = pytest.mark.unit

SINKS = [
    (PostgresSink, "postgresql://u:p@127.0.0.1:5432/db"),
    (MySQLSink, "mysql://u:p@127.0.0.1:3306/db"),
]


@pytest.mark.parametrize(("kind", "dsn"), SINKS)
def test_defaults_are_minutes(kind: type[PostgresSink], dsn: str) -> None:
    sink = kind(dsn, table="t")
    assert sink.options.connect_timeout_seconds == 60.0
    assert sink.options.read_timeout_seconds == 300.0


@pytest.mark.parametrize(("kind", "dsn"), SINKS)
@pytest.mark.parametrize("name", ["connect_timeout_seconds", "read_timeout_seconds"])
@pytest.mark.parametrize("value", [0, -1.0])
def test_a_timeout_must_be_positive(
    kind: type[PostgresSink], dsn: str, name: str, value: float
) -> None:
    with pytest.raises(twopc.ConfigurationError, match=f"{name} must be positive"):
        kind(dsn, table="t", **{name: value})


@pytest.mark.parametrize(
    ("kind", "dsn", "option"),
    [
        (PostgresSink, "postgresql://u:p@127.0.0.1:5432/db", "connect_timeout"),
        (MySQLSink, "mysql://u:p@127.0.0.1:3306/db", "connect_timeout"),
        (MySQLSink, "mysql://u:p@127.0.0.1:3306/db", "read_timeout"),
        (MySQLSink, "mysql://u:p@127.0.0.1:3306/db", "write_timeout"),
    ],
)
def test_driver_timeouts_point_to_the_sink_options(
    kind: type[PostgresSink], dsn: str, option: str
) -> None:
    with pytest.raises(twopc.ConfigurationError, match="connect_timeout_seconds"):
        kind(dsn, table="t", connect_options={option: 5})
    with pytest.raises(twopc.ConfigurationError, match=option):  # also from the DSN's query
        kind(f"{dsn}?{option}=5", table="t")
