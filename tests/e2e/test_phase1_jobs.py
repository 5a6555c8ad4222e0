"""How the Spark adapter finds phase 1's jobs (for stage re-attempts and stragglers): by a
job tag of their own, not by listing every job of the query's group, which grows with the
run and cost one py4j call per job every batch."""

from __future__ import annotations

import time
from typing import Any

import pytest

from twopc._contract.paths import CommitPath
from twopc._coordination.phase1 import Phase1Task
from twopc._engines.spark_engine import JobTracker, SparkEngine
from twopc.testing._memory import MemoryDriverSink

pytestmark = [pytest.mark.e2e]


def _settled(tracker: JobTracker, tag: str, seconds: float = 10.0) -> set[int]:
    """The tag's jobs once Spark's status store has seen them (it hears of a job
    asynchronously, after the action may have returned)."""
    deadline = time.monotonic() + seconds
    while True:
        jobs = set(tracker._ints(tracker._scala.getJobIdsForTag(tag)))
        if jobs or time.monotonic() > deadline:
            return jobs
        time.sleep(0.05)


def test_phase1_jobs_are_found_by_their_tag_alone(spark: Any) -> None:
    df = spark.range(1000).repartition(2)
    for _ in range(3):
        df.count()  # jobs of the same (absent) group, before phase 1
    tracker = JobTracker.of(spark)
    assert tracker is not None
    assert JobTracker.of(spark, tracker) is tracker  # kept across batches

    tag = tracker.tag()
    assert tag is not None
    assert tag in spark.sparkContext.getJobTags()
    df.collect()
    tracker.untag(tag)
    assert tag not in spark.sparkContext.getJobTags()
    jobs = _settled(tracker, tag)
    everything = set(spark.sparkContext.statusTracker().getJobIdsForGroup(None))
    assert jobs and jobs <= everything and len(jobs) < len(everything)
    stages = tracker.stages(jobs)
    assert stages and all(tracker.attempt(s) == 0 for s in stages)
    assert all(tracker.active_tasks(s) == 0 for s in stages)

    engine = SparkEngine(df, tracker=tracker)
    engine._tracked(df.collect)  # not phase 1's tasks: no stage reported, so looked up
    assert not engine.duplicate_attempts_possible()
    assert engine._jobs_read and engine._stages
    assert engine.wait_for_stragglers(5.0)


def test_phase1_takes_its_stage_from_its_tasks(spark: Any) -> None:
    """The tasks report the stage they ran in: its task count and attempt come from one
    stage's status, and phase 1's jobs and stages are not looked up."""
    df = spark.range(100).repartition(2)
    sink = MemoryDriverSink("phase1-stage")
    engine = SparkEngine(df)
    reports = engine.run_phase1(Phase1Task(sink, "orders", "q", 0, CommitPath.DRIVER))
    assert sorted(r.partition for r in reports) == [0, 1]
    assert engine._result_stage is not None
    assert engine.partitions_run() == 2
    assert not engine.duplicate_attempts_possible()
    assert not engine._jobs_read


def test_the_partition_count_of_a_foreach_batch_frame_is_what_phase1_runs(
    spark: Any, tmp_path: Any
) -> None:
    """Classic ``foreachBatch`` hands the micro-batch over as an RDD, whose partitions are
    read from it (no planning); a frame the function reshaped first is counted from its
    plan. Either count is the partitions a job over the frame runs."""
    counts: list[tuple[int | None, int, int | None, int]] = []

    def batch(df: Any, batch_id: int) -> None:
        reshaped = df.filter("value % 2 = 0").repartition(3)
        counts.append(
            (
                SparkEngine(df).partition_count(),
                df.rdd.getNumPartitions(),
                SparkEngine(reshaped).partition_count(),
                reshaped.rdd.getNumPartitions(),
            )
        )

    stream = spark.readStream.format("rate").option("rowsPerSecond", 100).load()
    query = (
        stream.repartition(4)
        .writeStream.foreachBatch(batch)
        .option("checkpointLocation", str(tmp_path / "chk"))
        .trigger(once=True)
        .start()
    )
    query.awaitTermination(60)
    assert counts and all(c == (4, 4, 3, 3) for c in counts), counts
