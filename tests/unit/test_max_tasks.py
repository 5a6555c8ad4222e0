"""``max_tasks`` (issue 46) is checked against the sink when the writer is made: taken by
sinks that commit on the driver, by key or in one task; refused, with the reason and the
alternatives, by sinks that commit each partition in its own task and do not partition by
key (a replay must see the same rows in each partition, which ``coalesce`` does not
promise)."""

from __future__ import annotations

import pytest

import twopc
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
    "sink",
    [
        pytest.param(lambda: MemoryTaskSink("unused"), id="memory-task"),
        pytest.param(
            lambda: twopc.create_sink("postgres", dsn=DSN, table="t"), id="postgres-transaction"
        ),
        pytest.param(
            lambda: twopc.create_sink(
                "kafka", bootstrap_servers="k:9092", topic="t", mode="per_partition"
            ),
            id="kafka-per_partition",
        ),
    ],
)
def test_sinks_that_commit_each_partition_in_its_task_refuse_it(sink: object) -> None:
    with pytest.raises(twopc.ConfigurationError) as caught:
        twopc.foreach_batch(sink(), "orders", max_tasks=8)  # type: ignore[operator]
    message = str(caught.value)
    assert "commits each partition in its own task" in message
    assert "transaction_mode='two_phase'" in message and "spark.sql.shuffle.partitions" in message


def test_a_group_takes_it_when_every_member_does() -> None:
    group = twopc.SinkGroup({"a": MemoryDriverSink("unused"), "b": MemoryDriverSink("unused")})
    twopc.foreach_batch(group, "orders", max_tasks=4)


@pytest.mark.parametrize("value", [0, -3, 2.0, True, "8"])
def test_max_tasks_must_be_a_whole_number(value: object) -> None:
    with pytest.raises(twopc.ConfigurationError, match="max_tasks must be a whole number"):
        twopc.foreach_batch(MemoryDriverSink("unused"), "orders", max_tasks=value)  # type: ignore[arg-type]
