"""Empty and partial batches through real Spark, on every backend and mode.

* Empty partitions: four partitions, every row in one of them, so three tasks prepare (or
  commit) a transaction without rows.
* Empty micro-batches: an input file with no lines, and a file whose rows a filter
  removes; the driver fails right after the decision of the empty batch, and the restart
  must finish it and go on. The same for a batch without any partition (an empty file
  read without repartitioning).
* A batch where one task failed after the others prepared (or, for sinks that commit in
  the task, committed): the batch fails, then the restart without the fault writes it.
  Here the SQL sinks also upsert (MySQL's staging tables must not outlive the failure).

Each ends with every row exactly once in the target and nothing left prepared, staged or
open (``pg_prepared_xacts``, ``XA RECOVER``, MySQL staging tables, the files staging area,
Kafka's last stable offset == high watermark).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import twopc
from tests.harness.backend_runs import BACKENDS, SQL_UPSERTS, BackendRun, run_query, write_input
from tests.harness.exactly_once import assert_exactly_once

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

KEEP = "id < 5000"
"""The query's filter: input ids from 5000 on never reach the sink."""


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_empty_partitions_and_empty_batches(
    spark: Any,
    tmp_path: Path,
    backend: BackendRun,
) -> None:
    from pyspark.errors import StreamingQueryException

    batches = [
        list(range(30)),  # batch 0: one partition of four holds every row
        [],  # batch 1: an input file with no lines
        list(range(9000, 9010)),  # batch 2: every row filtered out
        list(range(100, 130)),  # batch 3
    ]
    expected = {*batches[0], *batches[3]}
    write_input(tmp_path / "in", batches)

    def query(writer: twopc.SparkBatchWriter) -> None:
        run_query(
            spark,
            backend,
            tmp_path / "in",
            tmp_path / "chk",
            writer,
            partitions=4,
            one_partition=True,
            keep=KEEP,
        )

    crashing = backend.writer(faults="after_decision:raise@batch=1")
    with pytest.raises(StreamingQueryException, match="after_decision"):
        query(crashing)
    assert [(m.batch_id, m.status, m.rows) for m in crashing.metrics] == [
        (0, "committed", 30),
        (1, "failed", 0),
    ]
    assert_exactly_once(backend.committed(), set(batches[0]))

    restarted = backend.writer()
    query(restarted)

    statuses = [(m.batch_id, m.status, m.rows) for m in restarted.metrics]
    assert statuses == [(1, "skipped", 0), (2, "committed", 0), (3, "committed", 30)]
    assert_exactly_once(backend.committed(), expected)
    assert backend.leftovers() == []


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_batch_without_any_partition(
    spark: Any,
    tmp_path: Path,
    backend: BackendRun,
) -> None:
    """An empty input file read without repartitioning: Spark hands over a DataFrame with
    no partition at all, and the decision names no partition."""
    from pyspark.errors import StreamingQueryException

    write_input(tmp_path / "in", [[], list(range(20))])
    crashing = backend.writer(faults="after_decision:raise@batch=0")
    with pytest.raises(StreamingQueryException, match="after_decision"):
        run_query(spark, backend, tmp_path / "in", tmp_path / "chk", crashing, partitions=None)
    assert [(m.batch_id, m.status) for m in crashing.metrics] == [(0, "failed")]
    assert backend.committed() == {}

    restarted = backend.writer()
    run_query(spark, backend, tmp_path / "in", tmp_path / "chk", restarted, partitions=None)
    assert [(m.batch_id, m.status, m.rows) for m in restarted.metrics] == [
        (0, "skipped", 0),
        (1, "committed", 20),
    ]
    assert_exactly_once(backend.committed(), set(range(20)))
    assert backend.leftovers() == []


@pytest.mark.parametrize("backend", BACKENDS + SQL_UPSERTS, indirect=True)
def test_task_failing_after_the_others_prepared(
    spark: Any,
    tmp_path: Path,
    backend: BackendRun,
) -> None:
    from pyspark.errors import StreamingQueryException

    batches = [list(range(40)), list(range(1000, 1040))]
    write_input(tmp_path / "in", batches)
    # Kafka's atomic mode writes a batch in one task: partition 0 is the one that fails.
    failing = 0 if backend.name == "kafka-atomic" else 1
    no_retry = twopc.RetryPolicy(max_attempts=1)
    # the fault fires on every attempt Spark makes (local[2,3]), so the batch fails
    faults = f"after_invoke:raise@batch=1,partition={failing}"

    broken = backend.writer(faults=faults, retry=no_retry)
    with pytest.raises(StreamingQueryException) as failure:
        run_query(spark, backend, tmp_path / "in", tmp_path / "chk", broken)
    message = str(failure.value)
    assert f"sink {backend.sink_id!r}, batch 1, partition {failing}" in message, message
    assert "InjectedFault" in message or "after_invoke" in message, message

    visible = backend.committed()
    assert_exactly_once(visible, set(batches[0]) | (set(visible) & set(batches[1])))
    in_batch_1 = set(visible) & set(batches[1])
    if "-transaction" in backend.name or backend.name.endswith("-per_partition"):
        # partition 0 committed in its own task; the failing partition never did
        assert in_batch_1 < set(batches[1])
    else:
        assert in_batch_1 == set(), "part of a failed batch is visible"
    assert backend.leftovers() == []

    restarted = backend.writer(retry=no_retry)
    run_query(spark, backend, tmp_path / "in", tmp_path / "chk", restarted)

    assert [(m.batch_id, m.status) for m in restarted.metrics] == [(1, "committed")]
    assert_exactly_once(backend.committed(), {*batches[0], *batches[1]})
    assert backend.leftovers() == []
