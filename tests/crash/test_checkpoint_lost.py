"""The checkpoint is gone: a query restarted on a new checkpoint from the offsets stored
with the output (``twopc offsets``, :func:`twopc.starting_offsets`) writes every record
exactly once, on real Spark.

Each first run reads a Kafka topic with Spark's Kafka source and is SIGKILLed after the
decision of a middle batch; its checkpoint is then deleted (or replaced by an empty
directory). The start is refused while the killed batch's work is unsettled, with
``twopc recover`` named; after the recovery it is the killed batch's end, and a query on a
new checkpoint that starts there finishes the topic. A reader of every target sees each id
once. In CI: one group whose members are a files directory, PostgreSQL and MariaDB tables
(``two_phase``), an Iceberg table and a Kafka topic (``atomic``), so that each backend's
stored offsets are read on real Spark; the files sink through the command line, every
backend and mode alone, and every backend after a query change Spark refuses to resume
under ``--extended``.
"""

from __future__ import annotations

import json
import shutil
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

import twopc
from tests.harness.backend_cases import new_target
from tests.harness.exactly_once import assert_target_exactly_once
from tests.harness.group_recipe import GroupRecipe, build
from tests.harness.kafka_source_query import query_args
from tests.harness.kafka_topics import create_topic, unique
from tests.harness.processes import RunResult, run_process
from tests.harness.sink_recipe import SinkRecipe
from tests.harness.status_cli import twopc_cli
from tests.harness.targets import FilesTarget, Target

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

RECORDS = 120
PER_BATCH = 20
KILLED_BATCH = 2


def _produce(bootstrap: str, topic: str, ids: range, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in ids:
        producer.produce(topic, value=str(i).encode(), partition=i % partitions)
    assert producer.flush(30) == 0


def _query(
    spec: SinkRecipe | GroupRecipe,
    bootstrap: str,
    topic: str,
    checkpoint: Path,
    *,
    starting: str = "earliest",
    commit_log: str = "",
) -> list[str]:
    return query_args(
        spec,
        bootstrap,
        topic,
        str(checkpoint),
        starting=starting,
        commit_log=commit_log,
        per_batch=PER_BATCH,
    )


def _files_options(spec: SinkRecipe) -> list[str]:
    return [
        "files",
        "--sink-id",
        spec.sink_id,
        "--option",
        f"path={spec.address}",
        "--option",
        f"format={spec.mode}",
    ]


def _lose(checkpoint: Path, how: str) -> None:
    shutil.rmtree(checkpoint)
    if how == "emptied":
        checkpoint.mkdir()


def _batches(run: RunResult) -> list[int]:
    return [e["batch"] for e in run.of("batch-done")]


@pytest.mark.extended  # CI: the group below (a files member); the CLI in tests/unit
@pytest.mark.parametrize("how", ["deleted", "emptied"])
def test_files_restart_from_stored_offsets_after_driver_killed_and_checkpoint_lost(
    kafka_bootstrap: str, tmp_path: Path, how: str
) -> None:
    topic = _topic_with_records(kafka_bootstrap)
    target = FilesTarget()
    spec = target.prepare(unique("lost"), "parquet", tmp_path, 2)
    checkpoint = tmp_path / "checkpoint"
    _killed_then_lost(spec, kafka_bootstrap, topic, checkpoint, how=how)

    # the killed batch is decided but not committed: no position is safe until recovery
    refused = twopc_cli("offsets", *_files_options(spec))
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "twopc recover" in refused.stderr and f"batch {KILLED_BATCH}" in refused.stderr
    recovered = twopc_cli("recover", *_files_options(spec))
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr

    found = twopc_cli("offsets", *_files_options(spec), "--topic", topic, "--json")
    assert found.returncode == 0, found.stderr
    point = json.loads(found.stdout)
    assert point["batch_id"] == KILLED_BATCH
    starting = json.dumps(point["starting_offsets"])
    assert sum(point["starting_offsets"][topic].values()) == (KILLED_BATCH + 1) * PER_BATCH

    _restart(spec, kafka_bootstrap, topic, checkpoint, starting)
    assert_target_exactly_once(target, spec, set(range(RECORDS)))


def _topic_with_records(bootstrap: str) -> str:
    topic = create_topic(bootstrap, unique("checkpoint-lost"), partitions=2)
    _produce(bootstrap, topic, range(RECORDS), partitions=2)
    return topic


def _killed_then_lost(
    spec: SinkRecipe | GroupRecipe,
    bootstrap: str,
    topic: str,
    checkpoint: Path,
    log: str = "",
    *,
    how: str = "deleted",
) -> None:
    """The first run, SIGKILLed after the decision of the middle batch; then its
    checkpoint deleted (or replaced by an empty directory)."""
    _killed(spec, bootstrap, topic, checkpoint, log)
    _lose(checkpoint, how)


def _killed(
    spec: SinkRecipe | GroupRecipe, bootstrap: str, topic: str, checkpoint: Path, log: str = ""
) -> None:
    """The first run, SIGKILLed after the decision of the middle batch."""
    first = run_process(
        _query(spec, bootstrap, topic, checkpoint, commit_log=log),
        faults=f"after_decision:kill@batch={KILLED_BATCH}",
        timeout=300,
    )
    assert first.returncode == -signal.SIGKILL, first.stderr[-4000:]
    assert _batches(first) == list(range(KILLED_BATCH)), first.events


def _restart(
    spec: SinkRecipe | GroupRecipe,
    bootstrap: str,
    topic: str,
    checkpoint: Path,
    start: str,
    *extra: str,
) -> None:
    """A query on ``checkpoint`` from ``start`` to the topic's end (``extra``: more of the
    query's options, e.g. ``--dedupe``)."""
    query = [*_query(spec, bootstrap, topic, checkpoint, starting=start), *extra]
    second = run_process(query, timeout=300)
    assert second.returncode == 0, second.stderr[-4000:]
    assert second.of("query-finished"), second.events


GROUP = [
    ("files", "files", "parquet", ("id",)),
    ("pg", "postgres", "two_phase", ("id", "payload")),
    ("maria", "mysql", "two_phase", ("id", "payload")),
    ("lake", "iceberg", "sqlite", ("id", "payload")),
    ("outbox", "kafka", "atomic", ("id", "key", "payload")),
]


@pytest.fixture
def every_backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[tuple[GroupRecipe, list[Target]]]:
    members, targets = [], []
    for name, backend, mode, columns in GROUP:
        target, spec = new_target(request, backend, mode, tmp_path / name, prefix=f"l{name[0]}")
        members.append((name, spec, columns))
        targets.append(target)
    recipe = GroupRecipe.of(f"lost-{uuid.uuid4().hex[:8]}", *members)
    yield recipe, targets
    for target, member in zip(targets, recipe.members, strict=True):
        target.cleanup(member.sink)


def test_every_backend_restarts_from_its_stored_offsets_in_one_group(
    kafka_bootstrap: str, tmp_path: Path, every_backend: tuple[GroupRecipe, list[Target]]
) -> None:
    recipe, targets = every_backend
    topic = _topic_with_records(kafka_bootstrap)
    checkpoint, log = tmp_path / "checkpoint", str(tmp_path / "commit-log")
    _killed_then_lost(recipe, kafka_bootstrap, topic, checkpoint, log)
    group: Any = build(recipe)
    with pytest.raises(twopc.UnsafeStartError, match="twopc recover"):
        twopc.starting_offsets(group, recipe.sink_id, commit_log=log)
    report = twopc.recover_sink(group, recipe.sink_id, twopc.CommitLog(log), force=True)
    assert report.ok, report
    start = twopc.starting_offsets(group, recipe.sink_id, topics=[topic], commit_log=log)
    assert sum(json.loads(start)[topic].values()) == (KILLED_BATCH + 1) * PER_BATCH
    _restart(recipe, kafka_bootstrap, topic, checkpoint, start)
    for target, member in zip(targets, recipe.members, strict=True):
        assert_target_exactly_once(target, member.sink, set(range(RECORDS)))


ALONE = [
    ("postgres", "transaction"),
    ("postgres", "two_phase"),
    ("mysql", "transaction"),
    ("mysql", "two_phase"),
    ("kafka", "per_partition"),
    ("kafka", "atomic"),
    ("iceberg", "sqlite"),
]


@pytest.mark.extended
@pytest.mark.parametrize("how", ["deleted", "emptied"])
@pytest.mark.parametrize("case", ALONE, ids=[f"{b}-{m}" for b, m in ALONE])
def test_a_backend_alone_restarts_from_its_stored_offsets(
    request: pytest.FixtureRequest,
    kafka_bootstrap: str,
    tmp_path: Path,
    case: tuple[str, str],
    how: str,
) -> None:
    """The commit log inside the checkpoint (the SQL and Kafka sinks' default) is lost
    with it: waiting prepared work is aborted by a forced recovery, and the start follows
    what the target holds."""
    backend, mode = case
    target, spec = new_target(request, backend, mode, tmp_path / "target", prefix="la")
    try:
        topic = _topic_with_records(kafka_bootstrap)
        checkpoint = tmp_path / "checkpoint"
        _killed_then_lost(spec, kafka_bootstrap, topic, checkpoint, how=how)
        sink = build(spec)
        lost_log = twopc.CommitLog(str(checkpoint / "twopc" / spec.sink_id))
        assert twopc.recover_sink(sink, spec.sink_id, lost_log, force=True).ok
        start = twopc.starting_offsets(sink, spec.sink_id, topics=[topic])
        # a batch that committed in the task (or by the decision) stays; one whose
        # prepared work was aborted is written again from its start
        assert sum(json.loads(start)[topic].values()) in {
            KILLED_BATCH * PER_BATCH,
            (KILLED_BATCH + 1) * PER_BATCH,
        }
        _restart(spec, kafka_bootstrap, topic, checkpoint, start)
        assert_target_exactly_once(target, spec, set(range(RECORDS)))
    finally:
        target.cleanup(spec)


CHANGED = [("files", "parquet"), *ALONE]


@pytest.mark.extended
@pytest.mark.parametrize("case", CHANGED, ids=[f"{b}-{m}" for b, m in CHANGED])
def test_a_query_change_spark_refuses_continues_on_a_new_checkpoint(
    request: pytest.FixtureRequest, kafka_bootstrap: str, tmp_path: Path, case: tuple[str, str]
) -> None:
    """A stateless query is SIGKILLed after the decision of a middle batch; the same query
    with a stateful operator added cannot resume its checkpoint (Spark refuses it: the
    operator's state does not exist there). After recovery the output's offsets end at the
    killed batch; a query on a new checkpoint started there continues exactly where the
    output ends."""
    backend, mode = case
    target, spec = new_target(request, backend, mode, tmp_path / "target", prefix="lc")
    try:
        topic = _topic_with_records(kafka_bootstrap)
        checkpoint, log = tmp_path / "checkpoint", str(tmp_path / "commit-log")
        _killed(spec, kafka_bootstrap, topic, checkpoint, log)
        _produce(kafka_bootstrap, topic, range(RECORDS, 2 * RECORDS), partitions=2)

        changed = [*_query(spec, kafka_bootstrap, topic, checkpoint, commit_log=log), "--dedupe"]
        refused = run_process(changed, timeout=300)
        assert refused.returncode != 0 and refused.of("query-failed"), refused.events
        why = refused.of("query-failed")[0]["error"]  # Spark's refusal, not twopc's
        assert "STREAMING_STATEFUL_OPERATOR_MISSING_STATE_DIRECTORY" in why, why

        sink = build(spec)
        assert twopc.recover_sink(sink, spec.sink_id, twopc.CommitLog(log)).ok
        start = twopc.starting_offsets(sink, spec.sink_id, topics=[topic], commit_log=log)
        # the decided batch is finished, nothing of the refused query's batches is kept
        assert sum(json.loads(start)[topic].values()) == (KILLED_BATCH + 1) * PER_BATCH
        _restart(spec, kafka_bootstrap, topic, tmp_path / "new-checkpoint", start, "--dedupe")
        assert_target_exactly_once(target, spec, set(range(2 * RECORDS)))
    finally:
        target.cleanup(spec)
