"""``max_tasks`` (issue 46): every sink takes it; how a wider batch is fitted into that
many tasks depends on the sink (coalesced for a driver commit, hashed by key for upserts,
hashed by the rows' values for sinks that commit in their tasks, one task for a single-task
sink)."""

from __future__ import annotations

import pytest

import twopc
from twopc._engines.batch_shape import Narrowing, narrows
from twopc.testing import MemoryDriverSink, MemoryTaskSink

pytestmark = pytest.mark.unit

DSN = "postgresql://twopc@db.example/shop"


@pytest.mark.parametrize(
    "sink",
    [
        pytest.param(lambda: MemoryDriverSink("unused"), id="driver"),
        pytest.param(
            lambda: twopc.create_sink("postgres", dsn=DSN, table="t", transaction_mode="two_phase"),
            id="postgres-two_phase",
        ),
        pytest.param(
            lambda: twopc.create_sink(
                "postgres", dsn=DSN, table="t", mode="upsert", key_columns=["id"]
            ),
            id="postgres-transaction-upsert",
        ),
        pytest.param(
            lambda: twopc.create_sink(
                "kafka", bootstrap_servers="k:9092", topic="t", mode="atomic"
            ),
            id="kafka-atomic",
        ),
        pytest.param(lambda: twopc.create_sink("files", path="/tmp/out"), id="files"),
    ],
)
def test_sinks_whose_tasks_can_be_merged_take_max_tasks(sink: object) -> None:
    writer = twopc.foreach_batch(sink(), "orders", max_tasks=8)  # type: ignore[operator]
    assert writer is not None


@pytest.mark.parametrize(
    ("sink", "expected"),
    [
        pytest.param(lambda: MemoryDriverSink("unused"), Narrowing(8), id="driver: coalesced"),
        pytest.param(
            lambda: MemoryTaskSink("unused"), Narrowing(8, by_rows=True), id="in-task: hashed"
        ),
        pytest.param(
            lambda: twopc.create_sink("postgres", dsn=DSN, table="t"),
            Narrowing(8, by_rows=True),
            id="postgres-transaction: hashed by row",
        ),
        pytest.param(
            lambda: twopc.create_sink(
                "kafka", bootstrap_servers="k:9092", topic="t", mode="per_partition"
            ),
            Narrowing(8, by_rows=True),
            id="kafka-per_partition: hashed by row",
        ),
        pytest.param(
            lambda: twopc.create_sink(
                "postgres", dsn=DSN, table="t", mode="upsert", key_columns=["id"]
            ),
            None,
            id="upsert: by key, before the engine",
        ),
        pytest.param(
            lambda: twopc.create_sink(
                "kafka", bootstrap_servers="k:9092", topic="t", mode="atomic"
            ),
            None,
            id="atomic: one task anyway",
        ),
    ],
)
def test_how_each_sink_is_narrowed(sink: object, expected: Narrowing | None) -> None:
    """Sinks that commit in their tasks are hashed by the rows' values (a replay must see
    the same rows in each partition, which coalesce does not promise)."""
    assert narrows(sink(), 8) == expected  # type: ignore[operator]


def test_a_group_takes_it_when_every_member_does() -> None:
    group = twopc.SinkGroup({"a": MemoryDriverSink("unused"), "b": MemoryDriverSink("unused")})
    twopc.foreach_batch(group, "orders", max_tasks=4)


@pytest.mark.parametrize("value", [0, -3, 2.0, True, "8"])
def test_max_tasks_must_be_a_whole_number(value: object) -> None:
    with pytest.raises(twopc.ConfigurationError, match="max_tasks must be a whole number"):
        twopc.foreach_batch(MemoryDriverSink("unused"), "orders", max_tasks=value)  # type: ignore[arg-type]
