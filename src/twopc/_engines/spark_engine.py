"""Phase 1 as Spark jobs: ``mapInArrow`` over the batch's partitions (Arrow in, one tiny
report row out per partition), or, for a sink with the :class:`~twopc.WritesWithSpark`
role, one Spark write job whose output the sink then describes as prepared work. The
status tracker tells how many tasks ran and whether a stage was re-attempted."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa

from twopc._contract.boundary import leaving_sink
from twopc._contract.retry import wait_until
from twopc._coordination.engine import BatchEngine
from twopc._coordination.phase1 import Phase1Task
from twopc._coordination.reports import TaskOutcome, TaskReport
from twopc._engines.batch_shape import Narrowing
from twopc._engines.job_tracker import JobTracker, is_connect_session
from twopc._engines.run_location import run_location_options
from twopc.errors import PermanentSinkError, SinkError
from twopc.protocol import SparkWrite, TaskContext, WritesWithSpark

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["JobTracker", "SparkEngine", "is_connect_session", "worker_error"]

_log = logging.getLogger("twopc")

_REPORT_SCHEMA = "report string, stage int"

T = TypeVar("T")


_last_run = 0


def _new_run_attempt() -> int:
    """An id for one run of a batch's Spark write job: greater than every earlier one in
    this process, and apart from those of earlier processes by the clock (milliseconds in
    31 bits, which wrap after 24.8 days; recovery resolves an earlier process's runs of a
    batch before a new one starts, so only this process's must differ)."""
    global _last_run
    now = int(time.time() * 1000) & 0x7FFFFFFF
    _last_run = now if now > _last_run else (_last_run + 1) & 0x7FFFFFFF
    return _last_run


class SparkEngine(BatchEngine):
    """Runs phase 1 on every partition of the batch DataFrame with ``mapInArrow``.

    Over Spark Connect there is no status tracker: stage re-attempts and speculative
    copies cannot be observed, so the engine says duplicates are possible and the
    coordinator cleans up after every batch as if a copy had run."""

    def __init__(
        self,
        df: DataFrame,
        *,
        speculation: bool = False,
        spark_write: WritesWithSpark | None = None,
        tracker: JobTracker | None = None,
        evaluate_replays: bool = True,
        narrowing: Narrowing | None = None,
    ) -> None:
        self._df = df
        self._narrowing = narrowing
        """How a wider batch is fitted into ``max_tasks`` partitions before phase 1."""
        self._max_tasks = narrowing.tasks if narrowing is not None else None
        self._planned: int | None = None
        """The batch's own partition count, once read."""
        self._narrowed = False
        self._evaluate_replays = evaluate_replays
        self._speculation = speculation
        self._spark_write = spark_write
        self._tag: str | None = None
        """The job tag phase 1's action ran under (its jobs are read from it if needed)."""
        self._jobs_read = False
        self._result_stage: int | None = None
        """The stage phase 1's tasks ran in, as they reported it (``None``: no report came
        back, or phase 1 ran as Spark's write job)."""
        self._result_info: Any | None = None
        self._tracker = tracker or JobTracker.of(df.sparkSession)
        self._partitions_run: int | None = None
        """How many tasks phase 1's result stage ran (``None``: not known)."""
        self._stages: list[int] | None = None
        """The stages of phase 1's jobs, read once after its action (see :meth:`_phase1_stages`)."""

    def partition_count(self) -> int | None:
        """Partitions phase 1 will run, known before anything runs: for a frame that is an
        RDD already (classic ``foreachBatch``'s, passed on as it came) that RDD's
        partitions, without planning; else the physical plan's output partitioning (before
        adaptive execution coalesces: an upper bound), or, for a plan without a shuffle (a
        scan), its RDD's partitions, which costs no job. ``None`` where none of these can
        be read without running a job. With ``max_tasks``, at most that many."""
        if self._planned is None:
            self._planned = self._input_partitions()
        if self._planned is not None and self._max_tasks is not None:
            return min(self._planned, self._max_tasks)
        return self._planned

    def _input_partitions(self) -> int | None:
        try:
            execution = self._df._jdf.queryExecution()
            count = _rdd_partitions(execution.logical())
            if count is not None:
                return count
            plan = execution.sparkPlan()
            count = int(plan.outputPartitioning().numPartitions())
            if count <= 0 and "Exchange" not in str(plan.treeString()):
                count = int(self._df._jdf.rdd().getNumPartitions())
        except Exception:
            _log.debug("cannot read the batch's partition count from its plan", exc_info=True)
            return None
        return count if count > 0 else None

    def task_slots(self) -> int | None:
        """Spark's default parallelism: the cores of its executors (``None`` over Spark
        Connect, which does not tell)."""
        spark = self._df.sparkSession
        if is_connect_session(spark):
            return None
        try:
            return int(spark.sparkContext.defaultParallelism)
        except Exception:
            _log.debug("cannot read Spark's default parallelism", exc_info=True)
            return None

    def concurrent_attempts(self) -> bool:
        """Whether Spark may run a copy of a task next to it (``spark.speculation``)."""
        return self._speculation

    def duplicate_attempts_possible(self) -> bool:
        """Whether a losing run of a task may have prepared: with ``spark.speculation`` on
        (a speculative copy), or when phase 1's job re-attempted a stage (an executor was
        lost: the old attempt's tasks may still run, and attempt numbers start again)."""
        return self._speculation or self._stage_reattempted()

    def _stage_reattempted(self) -> bool:
        """Whether the stage phase 1's tasks ran in was re-attempted. Only that stage runs
        the sink: a re-attempted shuffle stage before it left no work behind."""
        tracker = self._tracker
        if tracker is None:
            return True  # cannot tell over Spark Connect: clean up as if it did
        try:
            stages = self._phase1_stages(tracker)
            if stages is None:
                return True  # phase 1's stages are not known: clean up as if it did
            if self._result_stage is not None and self._result_info is not None:
                return int(self._result_info.currentAttemptId()) > 0
            # the result stage (created last: the highest id) is the one that ran the
            # sink; a lost shuffle stage after it started re-attempts it too
            return bool(stages) and tracker.attempt(max(stages)) > 0
        except Exception:
            _log.debug("cannot read the stage attempts of phase 1's job", exc_info=True)
            return True  # cannot tell: clean up as if it did

    def wait_for_stragglers(self, timeout: float) -> bool:
        """Wait (bounded) until phase 1's job has no running task attempt left: Spark kills
        the losing copies of speculated tasks only after the job has its results. Whether
        they all ended (``False`` over Spark Connect, which cannot tell)."""
        tracker = self._tracker
        stages = self._phase1_stages(tracker) if tracker is not None else None
        if tracker is None or stages is None:
            return False
        running: list[int] = []

        def ended() -> bool:
            running[:] = [stage for stage in stages if tracker.active_tasks(stage) > 0]
            return not running

        if wait_until(ended, timeout=timeout):
            return True
        _log.warning(
            "task attempts of stage(s) %s still run after %.0fs; cleaning up anyway "
            "(recovery at the next batch catches what they write later)",
            running,
            timeout,
        )
        return False

    def _narrow(self) -> None:
        """With ``max_tasks``, a wider batch fitted into that many partitions
        (:class:`~twopc._engines.batch_shape.Narrowing`): coalesced (no shuffle, each task
        reads several of the batch's partitions in turn) where the sink commits on the
        driver, so that a replay grouping the partitions otherwise commits nothing twice;
        hashed by every column Spark can hash where the sink commits in its tasks."""
        narrowing = self._narrowing
        if narrowing is None or self._narrowed:
            return
        self._narrowed = True  # once, for every job of this batch
        count = self.partition_count()
        if count is not None and (self._planned or 0) <= count:
            return
        if not narrowing.by_rows:
            self._df = self._df.coalesce(narrowing.tasks)
            return
        columns = [name for name, kind in self._df.dtypes if not kind.startswith("map<")]
        self._df = self._df.repartition(narrowing.tasks, *columns)

    def run_phase1(self, task: Phase1Task) -> list[TaskReport]:
        self._narrow()
        if self._spark_write is not None:
            return self._write_with_spark(task, self._spark_write)

        def phase1(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            from pyspark import TaskContext as SparkTaskContext

            context = SparkTaskContext.get()
            partition = context.partitionId() if context else 0
            attempt = context.attemptNumber() if context else 0
            # attemptNumber counts from 0 again in a re-attempted stage (after an executor
            # was lost): the task attempt id is what tells two runs of a partition apart
            report = task.run(
                partition,
                attempt,
                batches,
                attempt_id=context.taskAttemptId() if context else None,
            )
            # the stage the task ran in: the driver reads its task count and attempts
            # from it instead of looking phase 1's jobs and stages up (py4j calls)
            stage = context.stageId() if context else -1
            yield pa.RecordBatch.from_pydict(
                {
                    "report": pa.array([report.dumps()], pa.string()),
                    "stage": pa.array([stage], pa.int32()),
                }
            )

        rows = self._tracked(lambda: self._df.mapInArrow(phase1, _REPORT_SCHEMA).collect())
        stages = {int(row["stage"]) for row in rows if int(row["stage"]) >= 0}
        self._result_stage = max(stages) if stages else None
        self._partitions_run = self._result_stage_tasks()
        return [TaskReport.loads(row["report"]) for row in rows]

    def partitions_run(self) -> int | None:
        """The tasks of phase 1's result stage, as Spark's status tracker counts them:
        each one returns one report. ``None`` over Spark Connect (no status tracker) and for
        the Spark write path (its reports are the sink's, made of the job's output)."""
        return self._partitions_run

    def _phase1_stages(self, tracker: JobTracker) -> list[int] | None:
        """The stages phase 1 ran: the one its tasks reported, else (no report came back,
        or Spark's write job ran phase 1) those of its jobs, read from the status tracker
        by its job tag, once. ``None``: not known."""
        if self._result_stage is not None:
            return [self._result_stage]
        if not self._jobs_read:
            jobs = tracker.jobs(self._tag)
            self._stages = None if jobs is None else tracker.stages(jobs)
            self._jobs_read = True
        return self._stages

    def _result_stage_tasks(self) -> int | None:
        tracker = self._tracker
        if tracker is None:
            return None
        try:
            stages = self._phase1_stages(tracker)
            if not stages:
                return None
            # the result stage is created last: the highest id of the action's stages
            info = tracker.stage_info(max(stages))
            if info is None:
                return None
            if self._result_stage is not None:
                self._result_info = info  # its attempt is read from it later
            if int(info.currentAttemptId()) > 0:
                # A re-attempted stage (shuffle output lost with an executor) runs only the
                # partitions its earlier attempts did not finish, and the status tracker
                # counts the newest attempt's tasks: not the batch's partitions. The
                # reports' partition numbers are trusted then (0..n-1, none missing).
                _log.info(
                    "phase 1's stage %d was re-attempted: its partitions are counted from "
                    "the tasks' reports",
                    max(stages),
                )
                return None
            return int(info.numTasks())
        except Exception:
            _log.debug("cannot read the task count of phase 1's result stage", exc_info=True)
            return None

    def _tracked(self, action: Callable[[], T], what: str = "the Spark job failed") -> T:
        """Run one Spark action of phase 1, remembering its jobs (for the stage attempts
        and the stragglers); a failure is raised as a :class:`~twopc.SinkError`."""
        tracker = self._tracker
        tag = tracker.tag() if tracker is not None else None
        self._tag, self._jobs_read, self._result_stage, self._result_info = tag, False, None, None
        try:
            return action()
        except Exception as exc:
            # The one place twopc reads structure out of message text, because nothing else
            # reaches the driver: a task's Python exception is formatted into a string on
            # the executor, carried inside the JVM's SparkException, and handed back through
            # py4j (or Spark Connect) as text; the exception object, its class and its
            # sink/batch/partition never cross. What must keep its class does not go this
            # way: data a sink rejects is reported in-band, in the task's report (see
            # Phase1Task._rejected). Everything else here failed after Spark's own retries,
            # so a SinkError that quotes the worker's error line is all that is left to say.
            raise SinkError(f"{what}: {worker_error(exc)}") from exc
        finally:
            if tracker is not None:
                tracker.untag(tag)

    def _write_with_spark(self, task: Phase1Task, sink: WritesWithSpark) -> list[TaskReport]:
        """Phase 1 as one Spark write job into the location the sink names for this run,
        then the sink's prepared work made of the job's output, one report per partition.
        Spark's committer settles failed, retried and speculative task attempts inside
        that location; a failure anywhere leaves only what the sink's sweep removes."""
        ctx = TaskContext(
            task.sink_id,
            task.query_id,
            task.batch_id,
            0,
            _new_run_attempt(),
            task.run_id,
            concurrent_attempts=task.concurrent_attempts,
            source_offsets=task.source_offsets,
            partitions=task.partitions,
        )
        started = time.monotonic()
        with leaving_sink(task.sink_id, task.batch_id):
            write = sink.plan_spark_write(ctx, tuple(self._df.columns))
        self._save(task, write)
        with leaving_sink(task.sink_id, task.batch_id, what="preparing Spark's output failed: "):
            outputs = sink.spark_written(ctx, write)
        seconds = time.monotonic() - started
        return [
            TaskReport(
                output.committable.partition,
                0,
                TaskOutcome.PREPARED,
                output.committable,
                rows=output.rows,
                bytes=output.bytes,
                seconds=seconds,
            )
            for output in outputs
        ]

    def _save(self, task: Phase1Task, write: SparkWrite) -> None:
        """Run the sink's planned write job; a refusal or a value the job cannot write is a
        :class:`~twopc.PermanentSinkError` (a retry fails the same), anything else a
        :class:`~twopc.SinkError`."""

        def save() -> None:
            with _session_conf(self._df.sparkSession, write.session_conf):
                # the projection is analysed here (eagerly in classic Spark), under the
                # write's settings (its casts take ANSI mode as set now): a cast the data
                # cannot take is refused like the writer's own refusals
                frame = self._df.selectExpr(*write.select) if self._projects(write) else self._df
                writer = frame.write.format(write.format).mode("overwrite")
                writer = writer.options(**{**run_location_options(write.path), **write.options})
                if write.partition_by:
                    writer = writer.partitionBy(*write.partition_by)
                writer.save(write.path)

        try:
            self._tracked(save, "the Spark write job failed")
        except SinkError as exc:
            cause = exc.__cause__
            if cause is not None and _is_analysis_error(cause):
                # refused while planning, before any task ran: the data cannot be written
                # this way (a type the format cannot hold), so a retry would fail the same
                raise PermanentSinkError(
                    f"Spark's {write.format} writer refused the batch: {worker_error(cause)}",
                    sink_id=task.sink_id,
                    batch_id=task.batch_id,
                ) from cause
            if cause is not None and (data_error := _data_error(cause)) is not None:
                # a value the projection's casts cannot take (ANSI casts fail the task):
                # the same rows fail the same way on every retry
                raise PermanentSinkError(
                    f"Spark's writer cannot write a value of the batch ({data_error}): "
                    f"{worker_error(cause)}",
                    sink_id=task.sink_id,
                    batch_id=task.batch_id,
                ) from cause
            raise

    def _projects(self, write: SparkWrite) -> bool:
        """Whether the write's ``select`` changes the batch (it does not when the batch's
        columns and types are the write's ``identity_dtypes``)."""
        if not write.select:
            return False
        if not write.identity_dtypes:
            return True
        return tuple(self._df.dtypes) != write.identity_dtypes

    def discard(self) -> None:
        """Evaluate every partition, writing nothing: a stateful query's state stores must
        commit for the replayed batch too, or Spark fails its commit validation. A batch
        write (``evaluate_replays=False``) has no state: its skipped write reads nothing."""
        if self._evaluate_replays:
            self._df.write.format("noop").mode("overwrite").save()


def _rdd_partitions(logical: Any) -> int | None:
    """The partitions of a plan that is an RDD already (classic ``foreachBatch`` hands the
    micro-batch over as one, a ``LogicalRDD``), read without planning anything; ``None``
    for any other plan (a batch the function transformed first)."""
    try:
        rdd = logical.rdd()
    except Exception:  # py4j: the plan has no RDD of its own
        return None
    count = int(rdd.getNumPartitions())
    return count if count > 0 else None


@contextlib.contextmanager
def _session_conf(spark: Any, settings: Mapping[str, str]) -> Iterator[None]:
    """``settings`` on the session for the block, then each put back as it was (unset
    where it was not set). The batch's session is the query's own (a clone of the user's
    in classic Spark), used by one batch at a time."""
    if not settings:
        yield
        return
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, value)


def _is_analysis_error(exc: BaseException) -> bool:
    """Whether Spark refused a write while planning it (``AnalysisException``), classic or
    over Spark Connect."""
    return any(cls.__name__ == "AnalysisException" for cls in type(exc).__mro__)


_DATA_ERRORS = (
    "CAST_INVALID_INPUT",
    "CAST_OVERFLOW",
    "CAST_OVERFLOW_IN_TABLE_INSERT",
    "NUMERIC_VALUE_OUT_OF_RANGE",
)
"""Spark's error classes for a value a cast cannot take (with ANSI casts)."""


def _data_error(exc: BaseException) -> str | None:
    """The error class when Spark's job failed on a value a cast cannot take, else
    ``None``. Read from the text: the task's error reaches the driver only as text."""
    text = str(exc)
    return next((name for name in _DATA_ERRORS if f"[{name}" in text), None)


def worker_error(exc: BaseException, limit: int = 2000) -> str:
    """The useful line of a failed Spark job's error: Spark reports a task's Python
    exception as text inside its own, after the JVM's frames. The last line that reads
    like a Python exception (``module.Type: message``) is the task's; a job that failed
    for another reason (an executor lost) keeps Spark's own first line."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for line in reversed(lines):
        head, sep, _ = line.partition(": ")
        python_like = head.rsplit(".", 1)[-1].endswith(("Error", "Exception", "Fault"))
        if sep and python_like and not head.startswith(("org.", "java.", "scala.", "py4j.")):
            return line[:limit]
    return (lines[0] if lines else type(exc).__name__)[:limit]
