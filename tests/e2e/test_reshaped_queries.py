"""A query that changes between restarts, on every backend and mode, through real Spark.

Rescaled (2 → 8 → 1 → 12 partitions), restarted with other naming options, and restarted
from an older copy of its checkpoint: the target must hold every row exactly once, nothing
may stay prepared, staged or open, and a replay twopc cannot make exact must fail clearly.
Checks read the targets (``tests.harness.targets``), never twopc's own log.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

import twopc
from tests.harness.backend_cases import add_input, run_query, start_query
from tests.harness.exactly_once import assert_target_exactly_once
from tests.harness.sink_recipe import SinkRecipe, build_sink
from tests.harness.targets import Target

pytestmark = [pytest.mark.e2e, pytest.mark.integration]


def test_rescaled_between_restarts(
    spark: Any, tmp_path: Path, case: tuple[Target, SinkRecipe]
) -> None:
    """2 → 8 → 1 → 12 partitions, one new input file per restart."""
    target, spec = case
    expected: set[int] = set()
    for index, partitions in enumerate([2, 8, 1, 12]):
        expected |= add_input(tmp_path / "in", index)
        writer = run_query(spark, spec, tmp_path / "in", tmp_path / "chk", partitions=partitions)
        assert [m.status for m in writer.metrics] == ["committed"]
    assert_target_exactly_once(target, spec, expected)


def test_rescaled_before_the_first_commit(
    spark: Any, tmp_path: Path, case: tuple[Target, SinkRecipe]
) -> None:
    """The first batch ever fails with 12 partitions before any task writes; the restart
    runs it with 2."""
    from pyspark.errors import StreamingQueryException

    target, spec = case
    expected = add_input(tmp_path / "in", 0)
    query, writer = start_query(
        spark,
        spec,
        tmp_path / "in",
        tmp_path / "chk",
        partitions=12,
        faults="before_begin:raise@batch=0",
        retry=twopc.RetryPolicy(max_attempts=1),
    )
    with pytest.raises(StreamingQueryException):
        query.awaitTermination()
    writer.close()
    assert target.committed(spec) == Counter()

    run_query(spark, spec, tmp_path / "in", tmp_path / "chk", partitions=2)
    assert_target_exactly_once(target, spec, expected)


def _restore_after_first_batch(
    spark: Any, spec: SinkRecipe, tmp_path: Path, commit_log: str | None, *, later: int = 2
) -> set[int]:
    """Batch 0, a copy of the checkpoint, ``later`` more batches, then the copy put back."""
    expected = add_input(tmp_path / "in", 0)
    run_query(spark, spec, tmp_path / "in", tmp_path / "chk", partitions=2, commit_log=commit_log)
    shutil.copytree(tmp_path / "chk", tmp_path / "chk-after-0")
    for index in range(1, later + 1):
        expected |= add_input(tmp_path / "in", index)
    run_query(spark, spec, tmp_path / "in", tmp_path / "chk", partitions=2, commit_log=commit_log)
    shutil.rmtree(tmp_path / "chk")
    shutil.copytree(tmp_path / "chk-after-0", tmp_path / "chk")
    return expected


def test_restored_checkpoint_over_the_same_input_skips_what_was_committed(
    spark: Any, tmp_path: Path, case: tuple[Target, SinkRecipe]
) -> None:
    """With the commit log outside the checkpoint, the replays are checked against the
    input they were committed with, and skipped."""
    target, spec = case
    log = str(tmp_path / "log")
    expected = _restore_after_first_batch(spark, spec, tmp_path, log)
    writer = run_query(spark, spec, tmp_path / "in", tmp_path / "chk", partitions=2, commit_log=log)
    assert [(m.batch_id, m.status) for m in writer.metrics] == [(1, "skipped"), (2, "skipped")]
    assert_target_exactly_once(target, spec, expected)


def test_restored_checkpoint_with_its_commit_log_inside_is_refused_or_skipped(
    spark: Any, tmp_path: Path, case: tuple[Target, SinkRecipe]
) -> None:
    """SQL and Kafka keep their log inside the checkpoint by default: the older copy brings
    an older log back, which cannot vouch for the replays' input. The markers show newer
    batches, so the writer refuses; files keep the log next to the data and skip."""
    from pyspark.errors import StreamingQueryException

    target, spec = case
    expected = _restore_after_first_batch(spark, spec, tmp_path, None)
    before = target.committed(spec)
    if spec.backend == "files":
        writer = run_query(spark, spec, tmp_path / "in", tmp_path / "chk", partitions=2)
        assert [m.status for m in writer.metrics] == ["skipped", "skipped"]
    else:
        with pytest.raises(StreamingQueryException) as failure:
            run_query(spark, spec, tmp_path / "in", tmp_path / "chk", partitions=2)
        assert "put back from an older copy" in str(failure.value)
        assert "commit_log=" in str(failure.value)
    assert target.committed(spec) == before
    assert_target_exactly_once(target, spec, expected)


def test_restored_checkpoint_over_other_input_is_refused(
    spark: Any, tmp_path: Path, case: tuple[Target, SinkRecipe]
) -> None:
    """Put back after batch 0, the query plans batch 1 over two files instead of one:
    skipping it would lose the second file's rows, rewriting it would duplicate the first's."""
    from pyspark.errors import StreamingQueryException

    target, spec = case
    log = str(tmp_path / "log")  # outside the checkpoint: the copy put back leaves it alone
    expected = _restore_after_first_batch(spark, spec, tmp_path, log)
    before = target.committed(spec)
    with pytest.raises(StreamingQueryException) as failure:
        run_query(
            spark,
            spec,
            tmp_path / "in",
            tmp_path / "chk",
            partitions=2,
            files_per_trigger=2,
            commit_log=log,
        )
    message = str(failure.value)
    assert "batch 1 of query" in message
    assert "other input" in message
    assert target.committed(spec) == before
    assert_target_exactly_once(target, spec, expected)


def test_restart_with_changed_naming_options(
    spark: Any, tmp_path: Path, case: tuple[Target, SinkRecipe]
) -> None:
    target, spec = case
    expected = add_input(tmp_path / "in", 0)
    run_query(spark, spec, tmp_path / "in", tmp_path / "chk", partitions=2)
    expected |= add_input(tmp_path / "in", 1)
    writer = run_query(
        spark,
        spec,
        tmp_path / "in",
        tmp_path / "chk",
        partitions=2,
        sink=build_sink(spec.renamed()),
    )
    assert [m.status for m in writer.metrics] == ["committed"]
    expected |= add_input(tmp_path / "in", 2)
    run_query(spark, spec, tmp_path / "in", tmp_path / "chk", partitions=3)
    assert_target_exactly_once(target, spec, expected)


@pytest.mark.parametrize("input_", ["same", "more"])
def test_restored_one_batch_behind_with_its_commit_log_inside_is_refused_or_skipped(
    spark: Any, tmp_path: Path, case: tuple[Target, SinkRecipe], input_: str
) -> None:
    """The copy is one batch behind: its log has never heard of batch 1, which the restart
    plans anew, over the same file or, with new input waiting, over two files (skipping it
    would lose the new file's rows, writing it would duplicate the old file's). The
    target's markers show batch 1 committed, so SQL and Kafka refuse; files keep the log
    next to the data, which knows batch 1 and checks its input."""
    from pyspark.errors import StreamingQueryException

    target, spec = case
    expected = _restore_after_first_batch(spark, spec, tmp_path, None, later=1)
    if input_ == "more":
        add_input(tmp_path / "in", 2)
    if spec.backend == "files" and input_ == "same":
        writer = run_query(spark, spec, tmp_path / "in", tmp_path / "chk", partitions=2)
        assert [m.status for m in writer.metrics] == ["skipped"]
    else:
        with pytest.raises(StreamingQueryException) as failure:
            run_query(
                spark,
                spec,
                tmp_path / "in",
                tmp_path / "chk",
                partitions=2,
                files_per_trigger=2 if input_ == "more" else 1,
            )
        message = str(failure.value)
        assert "batch 1 or a later one" in message or "other input" in message, message
    assert_target_exactly_once(target, spec, expected)
