"""The ``checkpoint-lost`` event of a chaos run: the checkpoint deleted after the crash,
what the crash left settled, and the query started on a new checkpoint from the offsets its
output stores (docs/operations.md, "The checkpoint is gone").

A local-engine run's stream has offsets shaped like a Kafka source's; a Spark run reads a
real topic with Spark's Kafka source (``tests.harness.kafka_source_query``), its records
produced before the first attempt, one topic partition per partition of the run.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from tests.chaos.scenario import Scenario
from tests.harness.kafka_source_query import query_args
from tests.harness.recipe_local_query import KAFKA_TOPIC

__all__ = ["LOCAL_TOPIC", "lose_checkpoint", "produce_input", "spark_query_args"]

LOCAL_TOPIC = KAFKA_TOPIC
"""The topic a local run's offsets name (``tests.harness.recipe_local_query``)."""


def lose_checkpoint(
    spec: Any, checkpoint: Path, result: Any, topic: str = LOCAL_TOPIC
) -> dict[int, int] | None:
    """The ``checkpoint-lost`` event: delete the checkpoint (a copy is kept aside), settle
    what the crash left (recovery with the commit log, where it survived), and ask the
    output where a new checkpoint starts. A start (or nothing committed yet, when the new
    checkpoint reads everything): ``result.lost = "restarted"`` and the start is returned.
    A partly committed batch refused (no start is exact without the old checkpoint):
    ``"refused"``, and the copy is put back, as an operator who still has it would.
    Anything else raises (the run fails)."""
    import twopc
    from tests.harness.group_recipe import build

    copy = checkpoint.with_name("chk-lost-copy")
    if checkpoint.exists():
        shutil.copytree(checkpoint, copy)
        shutil.rmtree(checkpoint)
    sink = build(spec)
    given = spec.commit_log(str(checkpoint))  # None: the sink's own (files: with the data)
    survived = given is None or not given.startswith(str(checkpoint) + "/")
    log = (
        twopc.CommitLog(given)
        if given
        else twopc.CommitLog(
            sink.default_commit_log(spec.sink_id) or "", sink.default_commit_log_options()
        )
    )
    asked = given if survived else None  # the sink's own log is found without naming it
    try:
        start = _ask_start(sink, spec.sink_id, asked, topic)
    except twopc.UnsafeStartError as exc:
        if "committed in partitions" in str(exc):
            return _put_back(copy, checkpoint, result)
        # work waits: recovery settles it, with the surviving log, else forced (the log is
        # lost only for sinks that leave no prepared work: it aborts open transactions)
        report = twopc.recover_sink(sink, spec.sink_id, log, force=not survived)
        if not report.ok:
            raise RuntimeError(f"recovery before the new checkpoint failed: {report}") from exc
        try:
            start = _ask_start(sink, spec.sink_id, asked, topic)
        except twopc.UnsafeStartError:
            return _put_back(copy, checkpoint, result)
    result.lost = "restarted"
    shutil.rmtree(copy, ignore_errors=True)
    return start


def _ask_start(sink: Any, sink_id: str, log: str | None, topic: str) -> dict[int, int] | None:
    """The stored start, or ``None`` when nothing of the sink id is committed yet."""
    import twopc

    try:
        found = twopc.starting_offsets(sink, sink_id, topics=[topic], commit_log=log)
    except twopc.NoStoredOffsetsError as exc:
        if "no committed batch" in str(exc):
            return None  # the crash came before any commit: the new checkpoint reads all
        raise
    return {int(p): int(o) for p, o in json.loads(found)[topic].items()}


def _put_back(copy: Path, checkpoint: Path, result: Any) -> None:
    result.lost = "refused"
    if copy.exists():
        copy.rename(checkpoint)


def produce_input(scenario: Scenario, bootstrap: str, topic: str) -> None:
    """The run's records into ``topic`` (one partition per partition of the run), batch by
    batch: with ``maxOffsetsPerTrigger`` of one batch's rows, Spark reads them in the run's
    batches."""
    from confluent_kafka import Producer

    from tests.harness.kafka_topics import create_topic

    create_topic(bootstrap, topic, partitions=scenario.partitions)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    rows = scenario.rows
    for b in range(scenario.batches):
        for p in range(scenario.partitions):
            for i in range(rows):
                producer.produce(topic, value=str(b * 1000 + p * rows + i).encode(), partition=p)
    if producer.flush(60) != 0:
        raise RuntimeError(f"the run's records did not all reach {topic}")


def spark_query_args(
    scenario: Scenario,
    spec: Any,
    checkpoint: str,
    *,
    bootstrap: str,
    topic: str,
    start: dict[int, int] | None,
) -> list[str]:
    """The Spark query of a ``checkpoint-lost`` run: Spark's Kafka source on the run's
    topic, from ``start`` (a new checkpoint's) or the earliest offsets."""
    starting = json.dumps({topic: {str(p): o for p, o in start.items()}}) if start else "earliest"
    return query_args(
        spec,
        bootstrap,
        topic,
        checkpoint,
        starting=starting,
        commit_log=spec.commit_log(checkpoint) or "",
        per_batch=scenario.partitions * scenario.rows,
        partitions=scenario.partitions,
    )
