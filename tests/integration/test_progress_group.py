"""``twopc_kafka.ConsumerGroup`` against the real broker: a group that another application
uses is refused; in ``atomic`` mode the source offsets are committed in the batch's own
transaction (a batch whose transaction aborts leaves the group where it was); per
partition, and for other targets, the group is set after the batch's commit. Spark runs of
the same are in tests/e2e/test_kafka_progress.py."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

import twopc
from tests.harness.kafka_topics import TIMEOUT, committed_keys, create_topic, group_offsets, unique
from tests.harness.sink_recipe import build_sink
from tests.harness.status_cli import status_json, twopc_cli
from tests.harness.targets import make_target
from twopc import CommitLog, FaultPlan, SourceOffsets
from twopc._coordination.coordinator import Coordinator
from twopc.local import LocalEngine
from twopc_kafka import ConsumerGroup

pytestmark = pytest.mark.integration

QUERY = "query-progress"


def _engine(batch_id: int, partitions: int = 1) -> LocalEngine:
    return LocalEngine(
        [
            pa.table({"key": [f"{batch_id}-{p}-{i}" for i in range(5)], "value": ["v"] * 5})
            for p in range(partitions)
        ],
        processes=False,
    )


def _coordinator(
    bootstrap: str, topic: str, mode: str, group: ConsumerGroup, log: Path, **options: Any
) -> Coordinator:
    sink = twopc.create_sink(
        "kafka",
        bootstrap_servers=bootstrap,
        topic=topic,
        mode=mode,
        value_format="string",
        key_column="key",
        transactional_id_prefix=f"pg-{topic}",  # one per test: the markers keep their names
    )
    return Coordinator(sink, "progress-sink", CommitLog(str(log)), progress=group, **options)


def test_a_group_another_application_uses_is_refused(kafka_bootstrap: str) -> None:
    source = create_topic(kafka_bootstrap, partitions=2)
    name = unique("busy")
    group = ConsumerGroup(name, kafka_bootstrap)
    group.check("orders")  # a group that does not exist yet is free

    member = Consumer(
        {"bootstrap.servers": kafka_bootstrap, "group.id": name, "auto.offset.reset": "earliest"}
    )
    member.subscribe([source])
    try:
        for _ in range(40):  # until the member has joined
            member.poll(0.25)
            if member.assignment():
                break
        with pytest.raises(twopc.ConfigurationError, match="active member") as refused:
            group.check("orders")
        assert "sink 'orders'" in str(refused.value) and name in str(refused.value)
        member.commit(
            offsets=[TopicPartition(source, 0, 1), TopicPartition(source, 1, 1)],
            asynchronous=False,
        )
    finally:
        member.close()

    # gone, but its offsets (without twopc's metadata) stay: still another application's
    with pytest.raises(twopc.ConfigurationError, match="did not commit") as foreign:
        group.check("orders")
    assert f"--delete --group {name}" in str(foreign.value)

    # offsets twopc published for one sink are that sink's; another sink is refused
    mine = ConsumerGroup(unique("mine"), kafka_bootstrap)
    mine.publish(SourceOffsets(0, {source: {0: 3, 1: 4}}), "orders", QUERY)
    mine.check("orders")
    with pytest.raises(twopc.ConfigurationError, match="did not commit"):
        mine.check("payments")
    progress = mine.progress(SourceOffsets(0, {source: {0: 3, 1: 4}}))
    assert dict(progress.committed) == {(source, 0): 3, (source, 1): 4}
    assert progress.lag == 0  # the topic is empty: end offsets 0, nothing to read


def test_atomic_mode_commits_the_source_offsets_with_the_batch(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    output = create_topic(kafka_bootstrap)
    src = create_topic(kafka_bootstrap)
    name = unique("atomic-progress")
    group = ConsumerGroup(name, kafka_bootstrap)
    first = _coordinator(kafka_bootstrap, output, "atomic", group, tmp_path / "log")
    metrics = first.run_batch(QUERY, 0, _engine(0), source_offsets=SourceOffsets(0, {src: {0: 7}}))
    assert metrics.status == "committed" and metrics.source_offsets == {src: {"0": 7}}
    assert group_offsets(kafka_bootstrap, name) == {(src, 0): 7}
    decision = first.commit_log.decision(QUERY, 0)
    assert decision is not None and decision.progress is not None and decision.progress.in_task

    # batch 1's transaction aborts (its task fails before the commit): neither its records
    # nor its offsets become visible
    failing = _coordinator(
        kafka_bootstrap,
        output,
        "atomic",
        group,
        tmp_path / "log",
        faults=FaultPlan.parse("before_task_commit:raise@batch=1"),
    )
    with pytest.raises(twopc.TwoPCError):
        failing.run_batch(QUERY, 1, _engine(1), source_offsets=SourceOffsets(1, {src: {0: 12}}))
    assert group_offsets(kafka_bootstrap, name) == {(src, 0): 7}
    assert set(committed_keys(kafka_bootstrap, output)) == {f"0-0-{i}" for i in range(5)}

    again = _coordinator(kafka_bootstrap, output, "atomic", group, tmp_path / "log")
    again.run_batch(QUERY, 1, _engine(1), source_offsets=SourceOffsets(1, {src: {0: 12}}))
    assert group_offsets(kafka_bootstrap, name) == {(src, 0): 12}
    assert len(committed_keys(kafka_bootstrap, output)) == 10


def test_per_partition_mode_sets_the_group_after_the_commit(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    output = create_topic(kafka_bootstrap, partitions=2)
    src = create_topic(kafka_bootstrap, partitions=2)
    name = unique("pp-progress")
    group = ConsumerGroup(name, kafka_bootstrap, timeout_seconds=TIMEOUT)
    coordinator = _coordinator(kafka_bootstrap, output, "per_partition", group, tmp_path / "log")
    offsets = SourceOffsets(0, {src: {0: 5, 1: 9}})
    metrics = coordinator.run_batch(QUERY, 0, _engine(0, partitions=2), source_offsets=offsets)
    assert metrics.status == "committed" and metrics.rows == 10
    assert group_offsets(kafka_bootstrap, name) == {(src, 0): 5, (src, 1): 9}
    decision = coordinator.commit_log.decision(QUERY, 0)
    assert decision is not None and decision.progress is not None
    assert not decision.progress.in_task

    # the group behind (an operator moved it): a replay of the decided batch sets it again,
    # and writes nothing
    group.publish(SourceOffsets(0, {src: {0: 1, 1: 1}}), "progress-sink", QUERY)
    replay = _coordinator(kafka_bootstrap, output, "per_partition", group, tmp_path / "log")
    assert replay.run_batch(QUERY, 0, _engine(0, 2), source_offsets=offsets).status == "skipped"
    assert group_offsets(kafka_bootstrap, name) == {(src, 0): 5, (src, 1): 9}
    assert len(committed_keys(kafka_bootstrap, output)) == 10


def test_twopc_status_shows_the_source_offsets_and_the_group_lag(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    output = create_topic(kafka_bootstrap)
    src = create_topic(kafka_bootstrap)
    name = unique("status-progress")
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    for i in range(12):
        producer.produce(src, f"line {i}".encode())
    assert producer.flush(TIMEOUT) == 0
    group = ConsumerGroup(name, kafka_bootstrap)
    coordinator = _coordinator(kafka_bootstrap, output, "per_partition", group, tmp_path / "log")
    coordinator.run_batch(QUERY, 0, _engine(0), source_offsets=SourceOffsets(0, {src: {0: 9}}))

    cli = [
        "kafka",
        "--sink-id",
        "progress-sink",
        "--commit-log",
        str(tmp_path / "log"),
        "--option",
        f"bootstrap_servers={kafka_bootstrap}",
        "--option",
        f"topic={output}",
        "--option",
        f"transactional_id_prefix=pg-{output}",
    ]
    shown = status_json(cli, dict(os.environ))
    (query,) = shown["queries"]
    assert query["source_offsets"] == {"batch_id": 0, "topics": {src: {"0": 9}}}
    assert query["group"]["lag"] == 3  # 12 records, the batch ended at offset 9
    assert query["progress_to"]["group"] == name

    text = twopc_cli("status", *cli)
    assert text.returncode == 0, text.stderr
    assert f"source offsets of batch 0: {src}[0]=9" in text.stdout
    assert f"progress group {name}: lag 3 ({src}[0] at 9 of 12)" in text.stdout


@pytest.mark.parametrize(
    ("backend", "mode"),
    [("files", "parquet"), ("postgres", "two_phase"), ("mysql", "transaction")],
    ids=["files", "postgres-two_phase", "mysql-transaction"],
)
def test_other_targets_move_the_group_only_after_a_commit(
    kafka_bootstrap: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    backend: str,
    mode: str,
) -> None:
    """Files, Postgres and MySQL: the group follows each committed batch; a batch whose
    phase 1 fails leaves the group where it was."""
    fixtures = {
        "files": {},
        "postgres": {"POSTGRES_DSN": "postgres_dsn"},
        "mysql": {"MYSQL_DSN": "mysql_dsn"},
    }[backend]
    env = {key: str(request.getfixturevalue(fixture)) for key, fixture in fixtures.items()}
    target = make_target(backend, env)
    spec = target.prepare(unique("pg").replace("-", "_"), mode, tmp_path / "run", 2)
    src = create_topic(kafka_bootstrap, partitions=2)
    name = unique("target-progress")

    def coordinator(**options: Any) -> Coordinator:
        return Coordinator(
            build_sink(spec),
            spec.sink_id,
            CommitLog(str(tmp_path / "log")),
            progress=ConsumerGroup(name, kafka_bootstrap),
            **options,
        )

    def ids(batch_id: int) -> LocalEngine:
        return LocalEngine(
            [
                pa.table(
                    {
                        "id": pa.array(
                            range(batch_id * 100 + p * 10, batch_id * 100 + p * 10 + 10), pa.int64()
                        )
                    }
                )
                for p in range(2)
            ],
            processes=False,
        )

    try:
        coordinator().run_batch(
            QUERY, 0, ids(0), source_offsets=SourceOffsets(0, {src: {0: 4, 1: 6}})
        )
        assert group_offsets(kafka_bootstrap, name) == {(src, 0): 4, (src, 1): 6}
        assert set(target.committed(spec)) == set(range(20))

        failing = coordinator(faults=FaultPlan.parse("before_pre_commit:raise@batch=1,partition=1"))
        with pytest.raises(twopc.TwoPCError):
            failing.run_batch(
                QUERY, 1, ids(1), source_offsets=SourceOffsets(1, {src: {0: 8, 1: 9}})
            )
        assert group_offsets(kafka_bootstrap, name) == {(src, 0): 4, (src, 1): 6}
        # a sink that commits in the task keeps partition 0's commit (the rerun skips it by
        # its marker); the group still does not move: the batch is not committed
        kept = set(range(100, 110)) if mode == "transaction" else set()
        assert set(target.committed(spec)) == set(range(20)) | kept

        coordinator().run_batch(
            QUERY, 1, ids(1), source_offsets=SourceOffsets(1, {src: {0: 8, 1: 9}})
        )
        assert group_offsets(kafka_bootstrap, name) == {(src, 0): 8, (src, 1): 9}
        seen = target.committed(spec)
        assert set(seen) == set(range(20)) | set(range(100, 120))
        assert max(seen.values()) == 1
    finally:
        target.cleanup(spec)
