"""PostgreSQL ``two_phase`` + Kafka ``atomic`` as a SinkGroup's last resource, on the real
services (local engine; the SIGKILL matrix on real Spark is tests/crash/
test_group_crash_matrix.py). What is read back: the table with SQL, the topic with a
``read_committed`` consumer, and the broker's last stable offsets (an open transaction)."""

from __future__ import annotations

import contextlib
import io
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import KafkaException, Producer

import twopc
import twopc.cli
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


def _cli(command: str, recipe: GroupRecipe, tmp_path: Path, *extra: str) -> dict[str, Any]:
    """``twopc <command> group`` on the group's commit log, its members in a JSON file and
    the PostgreSQL DSN from the environment (as a secret would be); the JSON it prints."""
    orders, outbox = recipe.members
    members = {
        "orders": {
            "backend": "postgres",
            "options": {"table": orders.sink.table, "transaction_mode": "two_phase"},
        },
        "outbox": {
            "backend": "kafka",
            "options": {
                "bootstrap_servers": outbox.sink.address,
                "topic": outbox.sink.table,
                "mode": "atomic",
                **({"transactional_id_prefix": outbox.sink.prefix} if outbox.sink.prefix else {}),
            },
        },
    }
    spec = tmp_path / "group.json"
    spec.write_text(json.dumps({"members": members}))
    output = io.StringIO()
    with contextlib.redirect_stdout(output):
        code = twopc.cli.main(
            [
                *(command, "group", "--sink-id", recipe.sink_id),
                *("--commit-log", str(tmp_path / "log"), "--options-json", str(spec)),
                *("--option-env", "orders.dsn=TWOPC_TEST_GROUP_DSN", "--json", *extra),
            ]
        )
    assert code == 0, output.getvalue()
    return dict(json.loads(output.getvalue()))


def test_status_and_recover_on_the_command_line_ask_the_last_resource(
    group: Group, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch cut short before its Kafka transaction ran: ``twopc status group`` shows it
    waiting on its last resource (not as a plain abort), and ``twopc recover group`` fences
    Kafka, finds no commit, and aborts PostgreSQL's prepared work."""
    recipe, _ = group
    monkeypatch.setenv("TWOPC_TEST_GROUP_DSN", recipe.members[0].sink.address)
    writer = _writer(recipe, tmp_path)
    writer.write(QUERY, 0, _batch(0))
    writer.close()
    crashed = _writer(recipe, tmp_path, "before_last_resource:raise@batch=1")
    with pytest.raises(twopc.InjectedFault):
        crashed.write(QUERY, 1, _batch(1))
    crashed.close()
    status = _cli("status", recipe, tmp_path)
    actions = {(i["kind"], i["action"]) for i in status["in_doubt"]}
    assert actions == {("decision", "ask_last_resource"), ("prepared", "ask_last_resource")}
    assert status["backend"] == "group"
    _cli("recover", recipe, tmp_path)
    _shows(group, _expected(0))
    assert twopc.CommitLog(str(tmp_path / "log")).decision(QUERY, 1) is None
    assert _writer(recipe, tmp_path).write(QUERY, 1, _batch(1)).status == "committed"
    _shows(group, _expected(0, 1))


def test_a_second_query_of_the_group_is_refused_by_the_tables_writer_registry(
    group: Group, tmp_path: Path
) -> None:
    """Another query (on another host) writes the group's sink id, with its own checkpoint
    and commit log: only the PostgreSQL member's writer registry shows it, and the group
    reads it there, so this query is refused and writes nothing to any target."""
    recipe, _ = group
    writer = _writer(recipe, tmp_path)
    registry = writer.sink
    assert isinstance(registry, twopc.SinkGroup)
    elsewhere = twopc.WriterRecord(recipe.sink_id, "q-elsewhere", "other-host", 4242, time.time())
    registry.record_writer(elsewhere)
    assert [(r.sink_id, r.query_id) for r in registry.writers(recipe.sink_id)] == [
        (recipe.sink_id, "q-elsewhere")
    ]
    with pytest.raises(twopc.TwoPCError, match="another query writes sink id"):
        writer.write(QUERY, 0, _batch(0))
    _shows(group, set())
    registry.remove_writer(recipe.sink_id, "q-elsewhere")
    assert writer.write(QUERY, 0, _batch(0)).status == "committed"
    _shows(group, _expected(0))


def test_a_row_postgres_rejects_never_reaches_kafka(group: Group, tmp_path: Path) -> None:
    """A payload longer than the table's VARCHAR(40): PostgreSQL's phase 1 fails, so the
    Kafka transaction never runs; the error names the member, batch, partition and cause."""
    recipe, _ = group
    writer = _writer(recipe, tmp_path)
    bad = _batch(0)
    bad[1] = bad[1].set_column(1, "payload", pa.array(["x" * 100] * ROWS))
    with pytest.raises(twopc.BatchFailedError) as failed:
        writer.write(QUERY, 0, bad)
    error = failed.value
    assert (error.sink_id, error.batch_id, error.partition) == (f"{recipe.sink_id}.orders", 0, 1)
    _shows(group, set())
    assert writer.write(QUERY, 0, _batch(0)).status == "committed"
    _shows(group, _expected(0))
