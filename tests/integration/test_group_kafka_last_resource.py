"""PostgreSQL ``two_phase`` + Kafka ``atomic`` as a SinkGroup's last resource, on the real
services (local engine; the SIGKILL matrix on real Spark is tests/crash/
test_group_crash_matrix.py). What is read back: the table with SQL, the topic with a
``read_committed`` consumer, and the broker's last stable offsets (an open transaction)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import KafkaException, Producer

import twopc
import twopc.local
from tests.harness.backend_cases import new_target
from tests.harness.group_recipe import GroupRecipe
from tests.harness.sink_recipe import build_sink
from tests.harness.targets import KafkaTarget, Target

pytestmark = pytest.mark.integration

QUERY, PARTITIONS, ROWS = "q-last-resource", 2, 10

Group = tuple[GroupRecipe, list[Target]]


@pytest.fixture
def group(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Group]:
    members, targets = [], []
    for name, backend, mode in [("orders", "postgres", "two_phase"), ("outbox", "kafka", "atomic")]:
        target, spec = new_target(request, backend, mode, tmp_path / name, prefix=f"l{name[0]}")
        members.append((name, spec, ()))
        targets.append(target)
    recipe = GroupRecipe.of(f"lr-{uuid.uuid4().hex[:8]}", *members)
    yield recipe, targets
    for target, member in zip(targets, recipe.members, strict=True):
        target.cleanup(member.sink)


def _batch(batch_id: int, amount: float = 1.0) -> list[pa.Table]:
    """Two partitions; the outbox gets an ``amount`` too (NaN: a value JSON cannot hold)."""
    parts = []
    for p in range(PARTITIONS):
        ids = [batch_id * 1000 + p * ROWS + i for i in range(ROWS)]
        parts.append(
            pa.table(
                {
                    "id": pa.array(ids, pa.int64()),
                    "payload": [f"b{batch_id}p{p}"] * ROWS,
                    "key": [str(i) for i in ids],
                    "amount": [amount] * ROWS,
                }
            )
        )
    return parts


def _expected(*batches: int) -> set[int]:
    return {b * 1000 + i for b in batches for i in range(PARTITIONS * ROWS)}


def _writer(
    recipe: GroupRecipe, tmp_path: Path, faults: str | None = None
) -> twopc.local.LocalBatchWriter:
    orders, outbox = recipe.members
    group = twopc.SinkGroup(
        {
            "orders": twopc.Member(
                build_sink(orders.sink), project=lambda t: t.select(["id", "payload"])
            ),
            "outbox": twopc.Member(build_sink(outbox.sink)),
        }
    )
    return twopc.local.foreach_batch(
        group,
        recipe.sink_id,
        commit_log=str(tmp_path / "log"),
        faults=twopc.FaultPlan.parse(faults) if faults else None,
        processes=False,
    )


def _shows(group: Group, expected: set[int]) -> None:
    """Each target shows exactly ``expected``, each id once; nothing prepared or open."""
    recipe, targets = group
    for target, member in zip(targets, recipe.members, strict=True):
        seen = target.committed(member.sink)
        assert max(seen.values(), default=1) == 1, member.name
        assert set(seen) == expected, member.name
        assert target.leftovers(member.sink) == [], member.name


def test_a_lost_reply_of_the_last_resource_is_decided_by_its_marker(
    group: Group, tmp_path: Path
) -> None:
    """The Kafka task commits, then fails before it reports: the driver fences the
    transactional id, reads the marker, and commits PostgreSQL too."""
    recipe, _ = group
    writer = _writer(recipe, tmp_path, "after_task_commit:raise@batch=0")
    assert writer.write(QUERY, 0, _batch(0)).status == "committed"
    _shows(group, _expected(0))


def test_a_row_kafka_rejects_leaves_the_batch_in_no_target(group: Group, tmp_path: Path) -> None:
    recipe, _ = group
    writer = _writer(recipe, tmp_path)
    writer.write(QUERY, 0, _batch(0))
    with pytest.raises(twopc.BatchFailedError) as failed:
        writer.write(QUERY, 1, _batch(1, amount=float("nan")))
    message = str(failed.value)
    assert f"last resource {recipe.sink_id}.outbox did not commit" in message
    assert "amount" in message  # the column Kafka could not write
    _shows(group, _expected(0))  # PostgreSQL's prepared transactions are rolled back
    assert twopc.CommitLog(str(tmp_path / "log")).decision(QUERY, 1) is None
    assert writer.write(QUERY, 1, _batch(1)).status == "committed"
    _shows(group, _expected(0, 1))


def test_a_transaction_left_open_is_fenced_and_never_commits(group: Group) -> None:
    """A zombie producer holds the last resource's transactional id with records in an
    open transaction: ``fence_and_check`` aborts it (the batch did not commit), and the
    zombie's commit fails afterwards."""
    recipe, targets = group
    outbox = recipe.members[1]
    sink: Any = build_sink(outbox.sink)
    zombie = Producer(
        {
            "bootstrap.servers": outbox.sink.address,
            "transactional.id": sink.transactional_id(outbox.sink.sink_id, 0),
        }
    )
    zombie.init_transactions(15)
    zombie.begin_transaction()
    zombie.produce(outbox.sink.table, value=b'{"id": 1}', key=b"1")
    zombie.flush(15)
    kafka = targets[1]
    assert isinstance(kafka, KafkaTarget) and kafka.open_transactions(outbox.sink.table)
    assert sink.fence_and_check(twopc.RecoveryScope(outbox.sink.sink_id, QUERY), 0) is False
    with pytest.raises(KafkaException):
        zombie.commit_transaction(15)
    _shows(group, set())
