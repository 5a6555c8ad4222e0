"""Phase 1's Spark jobs and their stages, read from Spark's status tracker in a few py4j
calls (see :class:`JobTracker`)."""

from __future__ import annotations

import logging
import uuid
from typing import Any

__all__ = ["JobTracker", "is_connect_session"]

_log = logging.getLogger("twopc")


def is_connect_session(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (no SparkContext, no py4j)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


class JobTracker:
    """The jobs of phase 1's action and their stages, read from Spark's status tracker in
    a few py4j calls.

    The action runs under a job tag of its own, so its jobs are looked up by that tag
    rather than by listing every job of the query's job group before and after it: a
    running query's group holds every job of the run that the status store retains
    (``spark.ui.retainedJobs``, 1,000 by default), and PySpark's ``StatusTracker`` turns
    a Java array into a list with one py4j call per element, so those two listings cost
    more every batch. Arrays come over in one call here, as text."""

    def __init__(self, context: Any) -> None:
        self.context = context
        self._arrays = context._jvm.java.util.Arrays
        self._java = context._jsc.statusTracker()  # null where Spark forgot a job or stage
        self._scala = context._jsc.sc().statusTracker()  # the one with getJobIdsForTag

    @classmethod
    def of(cls, spark: Any, known: JobTracker | None = None) -> JobTracker | None:
        """The tracker of ``spark``'s context (``known`` if it is that context's);
        ``None`` over Spark Connect, which has no status tracker, or where the tracker
        cannot be reached (phase 1's jobs then count as unknown)."""
        if is_connect_session(spark):
            return None
        context = spark.sparkContext
        if known is not None and known.context is context:
            return known
        try:
            return cls(context)
        except Exception:
            _log.debug("cannot reach Spark's status tracker", exc_info=True)
            return None

    def tag(self) -> str | None:
        """Tag the jobs this thread starts from now on; returns the tag (``None``: the
        tag could not be set)."""
        tag = f"twopc-phase1-{uuid.uuid4().hex}"
        try:
            self.context.addJobTag(tag)
        except Exception:
            _log.debug("cannot tag phase 1's Spark jobs", exc_info=True)
            return None
        return tag

    def untag(self, tag: str | None) -> None:
        """Stop tagging the jobs this thread starts."""
        if tag is None:
            return
        try:
            self.context.removeJobTag(tag)
        except Exception:
            _log.debug("cannot remove phase 1's job tag", exc_info=True)

    def jobs(self, tag: str | None) -> set[int] | None:
        """The ids of the jobs that ran under ``tag`` (``None``: unknown)."""
        if tag is None:
            return None
        try:
            return set(self._ints(self._scala.getJobIdsForTag(tag)))
        except Exception:
            _log.debug("cannot read phase 1's Spark jobs", exc_info=True)
            return None

    def stage_info(self, stage: int) -> Any | None:
        """The status tracker's view of a stage (``None`` for a stage Spark forgot)."""
        return self._java.getStageInfo(stage)

    def stages(self, jobs: set[int]) -> list[int]:
        """The stages of ``jobs`` that Spark still knows."""
        found: list[int] = []
        for job in sorted(jobs):
            info = self._java.getJobInfo(job)
            if info is not None:
                found += self._ints(info.stageIds())
        return found

    def attempt(self, stage: int) -> int:
        """The stage's current attempt number (0 for a stage Spark forgot)."""
        info = self._java.getStageInfo(stage)
        return int(info.currentAttemptId()) if info is not None else 0

    def active_tasks(self, stage: int) -> int:
        info = self._java.getStageInfo(stage)
        return int(info.numActiveTasks()) if info is not None else 0

    def _ints(self, array: Any) -> list[int]:
        text = str(self._arrays.toString(array)).strip("[]")
        return [int(x) for x in text.split(",") if x.strip()]
