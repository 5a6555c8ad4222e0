"""Restarts with other options after a crash, on the real services (local engine: fast).

The commit log remembers how each batch ran (partitions, naming, mode), so a restart with
another Kafka ``transactional.id`` prefix and fewer partitions still aborts what the crashed
run left open, and a decision made in ``two_phase`` mode is still committed after a restart
in ``transaction`` mode.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import twopc
from tests.harness.kafka_topics import uncommitted_count
from tests.harness.sink_recipe import SinkRecipe, build_sink
from tests.harness.targets import KafkaTarget, SqlTarget, Target
from twopc.local import LocalStream

pytestmark = [pytest.mark.integration]


def _partitions(first: int, rows: int, count: int, key: bool) -> list[pa.Table]:
    ids = list(range(first, first + rows))
    tables = []
    for p in range(count):
        part = [i for i in ids if i % count == p]
        columns: dict[str, Any] = {"id": part, "payload": [f"p{i}" for i in part]}
        if key:
            columns["key"] = [str(i) for i in part]
        tables.append(pa.table(columns))
    return tables


def _kafka_sink(spec: SinkRecipe, prefix: str) -> twopc.Sink[Any]:
    return build_sink(replace(spec, prefix=prefix))


@pytest.fixture
def kafka_case(kafka_bootstrap: str, tmp_path: Path) -> Iterator[tuple[KafkaTarget, SinkRecipe]]:
    target = KafkaTarget(kafka_bootstrap)
    spec = target.prepare(f"co-{uuid.uuid4().hex[:10]}", "per_partition", tmp_path, 2)
    yield target, spec
    target.cleanup(spec)


def test_kafka_restart_with_another_prefix_and_fewer_partitions_aborts_the_old_run(
    tmp_path: Path, kafka_case: tuple[KafkaTarget, SinkRecipe]
) -> None:
    target, spec = kafka_case
    first = _partitions(0, 120, 12, key=True)
    stream = LocalStream(str(tmp_path / "chk"), [first])
    crashing = twopc.local.foreach_batch(
        _kafka_sink(spec, "old"),
        sink_id=spec.sink_id,
        commit_log=str(tmp_path / "log"),
        # every task dies holding an open transaction with its rows produced
        faults=twopc.FaultPlan.parse("before_task_commit:kill@batch=0"),
    )
    with pytest.raises(twopc.TwoPCError):
        stream.run(crashing)
    assert target.open_transactions(spec.table), "the killed tasks left no open transaction"
    assert uncommitted_count(spec.address, spec.table) == 120  # produced, never committed

    # The same batch again, now under another prefix and in 2 partitions (nothing of it was
    # committed, so a replay in another shape is allowed).
    stream = LocalStream(str(tmp_path / "chk"), [_partitions(0, 120, 2, key=True)])
    restarted = twopc.local.foreach_batch(
        _kafka_sink(spec, "new"), sink_id=spec.sink_id, commit_log=str(tmp_path / "log")
    )
    stream.run(restarted)

    assert target.open_transactions(spec.table) == []  # found and aborted at once
    seen = target.committed(spec)
    assert sorted(seen) == list(range(120))
    assert set(seen.values()) == {1}


@pytest.mark.parametrize(
    ("before", "after"), [("per_partition", "atomic"), ("atomic", "per_partition")]
)
def test_kafka_restart_in_the_other_mode_aborts_the_old_run(
    tmp_path: Path, kafka_case: tuple[KafkaTarget, SinkRecipe], before: str, after: str
) -> None:
    """The crashed run's tasks died holding open transactions; the restart in the other
    mode (one transaction per batch, or one per partition) still fences their
    transactional ids, as the commit log recorded them, and writes the batch once."""
    target, spec = kafka_case
    stream = LocalStream(str(tmp_path / "chk"), [_partitions(0, 120, 6, key=True)])
    crashing = twopc.local.foreach_batch(
        build_sink(replace(spec, mode=before)),
        sink_id=spec.sink_id,
        commit_log=str(tmp_path / "log"),
        faults=twopc.FaultPlan.parse("before_task_commit:kill@batch=0"),
    )
    with pytest.raises(twopc.TwoPCError):
        stream.run(crashing)
    assert target.open_transactions(spec.table), "the killed tasks left no open transaction"
    assert uncommitted_count(spec.address, spec.table) == 120

    stream = LocalStream(str(tmp_path / "chk"), [_partitions(0, 120, 3, key=True)])
    restarted = twopc.local.foreach_batch(
        build_sink(replace(spec, mode=after)),
        sink_id=spec.sink_id,
        commit_log=str(tmp_path / "log"),
    )
    stream.run(restarted)

    assert target.open_transactions(spec.table) == []  # found and aborted at once
    seen = target.committed(spec)
    assert sorted(seen) == list(range(120))
    assert set(seen.values()) == {1}


def test_kafka_replay_of_a_partly_committed_batch_in_another_shape_is_refused(
    tmp_path: Path, kafka_case: tuple[KafkaTarget, SinkRecipe]
) -> None:
    target, spec = kafka_case
    stream = LocalStream(str(tmp_path / "chk"), [_partitions(0, 60, 4, key=True)])
    crashing = twopc.local.foreach_batch(
        _kafka_sink(spec, "twopc"),
        sink_id=spec.sink_id,
        commit_log=str(tmp_path / "log"),
        faults=twopc.FaultPlan.parse("before_task_commit:kill@batch=0,partition=3"),
    )
    with pytest.raises(twopc.TwoPCError):
        stream.run(crashing)
    # Partitions 0-2 committed in their tasks; partition 3's open transaction holds
    # read_committed readers back, so count every record written, aborted ones included.
    written_before = uncommitted_count(spec.address, spec.table)
    assert written_before == 60  # 45 committed, 15 in partition 3's open transaction

    reshaped = LocalStream(str(tmp_path / "chk"), [_partitions(0, 60, 2, key=True)])
    writer = twopc.local.foreach_batch(
        _kafka_sink(spec, "twopc"), sink_id=spec.sink_id, commit_log=str(tmp_path / "log")
    )
    with pytest.raises(twopc.ReplayMismatchError, match=r"partition\(s\) 0, 1, 2 committed"):
        reshaped.run(writer)
    assert uncommitted_count(spec.address, spec.table) == written_before  # wrote nothing

    # As it ran before, the batch finishes exactly once.
    same = LocalStream(str(tmp_path / "chk"), [_partitions(0, 60, 4, key=True)])
    same.run(
        twopc.local.foreach_batch(
            _kafka_sink(spec, "twopc"), sink_id=spec.sink_id, commit_log=str(tmp_path / "log")
        )
    )
    seen = target.committed(spec)
    assert sorted(seen) == list(range(60))
    assert set(seen.values()) == {1}
    assert target.leftovers(spec) == []


@pytest.mark.parametrize("backend", ["postgres", "mysql"])
def test_two_phase_decision_is_committed_after_a_restart_in_transaction_mode(
    request: pytest.FixtureRequest, tmp_path: Path, backend: str
) -> None:
    dsn = request.getfixturevalue("postgres_dsn" if backend == "postgres" else "mysql_dsn")
    target: Target = SqlTarget(backend, dsn)
    spec = target.prepare(f"co_{uuid.uuid4().hex[:10]}", "two_phase", tmp_path, 1)
    try:
        batches = [_partitions(0, 50, 2, key=False), _partitions(50, 50, 2, key=False)]
        stream = LocalStream(str(tmp_path / "chk"), batches)
        crashing = twopc.local.foreach_batch(
            build_sink(spec),
            sink_id=spec.sink_id,
            commit_log=str(tmp_path / "log"),
            faults=twopc.FaultPlan.parse("after_decision:raise@batch=0"),
        )
        with pytest.raises(twopc.InjectedFault):
            stream.run(crashing)
        assert target.committed(spec) == {}  # decided, prepared, not yet committed

        restarted = twopc.local.foreach_batch(
            build_sink(replace(spec, mode="transaction")),
            sink_id=spec.sink_id,
            commit_log=str(tmp_path / "log"),
        )
        LocalStream(str(tmp_path / "chk"), batches).run(restarted)
        seen = target.committed(spec)
        assert sorted(seen) == list(range(100))
        assert set(seen.values()) == {1}
        assert target.leftovers(spec) == []
    finally:
        target.cleanup(spec)
