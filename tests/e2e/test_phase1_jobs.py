"""How the Spark adapter finds phase 1's jobs (for stage re-attempts and stragglers): by a
job tag of their own, not by listing every job of the query's group, which grows with the
run and cost one py4j call per job every batch."""

from __future__ import annotations

import time
from typing import Any

import pytest

from twopc._engines.spark_engine import JobTracker, SparkEngine

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
    engine._tracked(df.collect)
    assert engine._jobs is not None
    assert not engine.duplicate_attempts_possible()
    assert engine.wait_for_stragglers(5.0)
