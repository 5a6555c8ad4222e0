"""The thin Spark adapter: turns ``foreachBatch``'s ``(DataFrame, batch_id)`` into phase 1 on
executors (``mapInArrow``: Arrow in, one tiny report row out per partition) and hands the
rest to the engine-agnostic coordinator on the driver.

A sink with the :class:`~twopc.WritesWithSpark` role whose options Spark's own writer can
serve gets phase 1 as one Spark write job instead (``df.write...save(<its location>)``),
after which the sink describes what was written as prepared work: no Python worker touches
the rows. The choice is made, and logged, once per writer.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

import pyarrow as pa

from twopc._contract.boundary import leaving_sink, leaving_twopc
from twopc._contract.retry import RetryPolicy, wait_until
from twopc._coordination.engine import BatchEngine
from twopc._coordination.phase1 import Phase1Task
from twopc._coordination.reports import TaskOutcome, TaskReport
from twopc._engines.checkpoint import input_fingerprint, query_id_of
from twopc._engines.writer import BatchWriter, MetricsCallback
from twopc.errors import ConfigurationError, PermanentSinkError, SinkError
from twopc.faults import FaultPlan
from twopc.progress import ProgressReporter, SourceOffsets, kafka_offsets_of
from twopc.protocol import CommitsOnDriver, Sink, TaskContext, WritesWithSpark
from twopc.storage import filesystem_for, join

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "SparkBatchWriter",
    "arrange_for",
    "choose_spark_write",
    "foreach_batch",
    "is_connect_session",
]

_log = logging.getLogger("twopc")

_QUERY_ID_KEY = "sql.streaming.queryId"
_RUN_ID_KEY = "spark.jobGroup.id"
_REPORT_SCHEMA = "report string"

T = TypeVar("T")


def spark_write_of(sink: Sink[Any]) -> tuple[WritesWithSpark | None, str]:
    """The sink's Spark write role when Spark's own writer runs its phase 1, else ``None``
    and why not. Raises :class:`~twopc.ConfigurationError` when the sink's options insist
    on Spark's writer and it cannot serve them."""
    if not isinstance(sink, WritesWithSpark):
        return None, "the sink has no Spark write path"
    if not isinstance(sink, CommitsOnDriver):
        return None, "a Spark write path needs a sink that commits on the driver"
    refusal = sink.spark_write_refusal()
    return (None, refusal) if refusal is not None else (sink, "")


def choose_spark_write(sink: Sink[Any], sink_id: str) -> WritesWithSpark | None:
    """Choose where phase 1 runs for a writer, and say so once in the log."""
    role, why_not = spark_write_of(sink)
    if role is None:
        _log.info("twopc sink=%s: phase 1 runs in Python tasks (mapInArrow): %s", sink_id, why_not)
    else:
        _log.info(
            "twopc sink=%s: phase 1 runs as one Spark write job per batch (%s): no Python "
            "worker touches the rows",
            sink_id,
            sink.describe(),
        )
    return role


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


def arrange_for(sink: Sink[Any], df: DataFrame) -> DataFrame:
    """The batch partitioned as the sink needs it: one task for a single-task sink, by its
    partition columns (all rows of a key in one task) where it names any."""
    if sink.single_task:
        return df.repartition(1)
    if keys := sink.partition_columns():
        return df.repartition(*keys)
    return df


def is_connect_session(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (no SparkContext, no py4j)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


class _JobTracker:
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
    def of(cls, spark: Any, known: _JobTracker | None = None) -> _JobTracker | None:
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

    def untag(self, tag: str | None) -> set[int] | None:
        """Stop tagging; the ids of the jobs that ran under ``tag`` (``None``: unknown)."""
        if tag is None:
            return None
        try:
            self.context.removeJobTag(tag)
            return set(self._ints(self._scala.getJobIdsForTag(tag)))
        except Exception:
            _log.debug("cannot read phase 1's Spark jobs", exc_info=True)
            return None

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

    def tasks(self, stage: int) -> int | None:
        """How many tasks (partitions) the stage has; ``None`` for a stage Spark forgot."""
        info = self._java.getStageInfo(stage)
        return int(info.numTasks()) if info is not None else None

    def _ints(self, array: Any) -> list[int]:
        text = str(self._arrays.toString(array)).strip("[]")
        return [int(x) for x in text.split(",") if x.strip()]


class _SparkEngine(BatchEngine):
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
        tracker: _JobTracker | None = None,
    ) -> None:
        self._df = df
        self._speculation = speculation
        self._spark_write = spark_write
        self._jobs: set[int] | None = set()
        """Phase 1's Spark jobs; ``None`` when they could not be told."""
        self._tracker = tracker or _JobTracker.of(df.sparkSession)
        self._partitions_run: int | None = None
        """How many tasks phase 1's result stage ran (``None``: not known)."""
        self._stages: list[int] | None = None
        """The stages of phase 1's jobs, read once after its action (see :meth:`_phase1_stages`)."""

    def partition_count(self) -> int | None:
        """Partitions phase 1 will run, known before anything runs: the physical plan's
        output partitioning (before adaptive execution coalesces: an upper bound), or, for a
        plan without a shuffle (a scan), its RDD's partitions, which costs no job. ``None``
        where neither can be read without running a job."""
        try:
            execution = self._df._jdf.queryExecution()
            plan = execution.sparkPlan()
            count = int(plan.outputPartitioning().numPartitions())
            if count <= 0 and "Exchange" not in str(plan.treeString()):
                count = int(self._df._jdf.rdd().getNumPartitions())
        except Exception:
            _log.debug("cannot read the batch's partition count from its plan", exc_info=True)
            return None
        return count if count > 0 else None

    def concurrent_attempts(self) -> bool:
        """Whether Spark may run a copy of a task next to it (``spark.speculation``)."""
        return self._speculation

    def duplicate_attempts_possible(self) -> bool:
        """Whether a losing run of a task may have prepared: with ``spark.speculation`` on
        (a speculative copy), or when phase 1's job re-attempted a stage (an executor was
        lost: the old attempt's tasks may still run, and attempt numbers start again)."""
        return self._speculation or self._stage_reattempted()

    def _stage_reattempted(self) -> bool:
        tracker = self._tracker
        if tracker is None:
            return True  # cannot tell over Spark Connect: clean up as if it did
        if self._jobs is None:
            return True  # phase 1's jobs are not known: clean up as if it did
        try:
            return any(tracker.attempt(stage) > 0 for stage in self._phase1_stages(tracker))
        except Exception:
            _log.debug("cannot read the stage attempts of phase 1's job", exc_info=True)
            return True  # cannot tell: clean up as if it did

    def wait_for_stragglers(self, timeout: float) -> bool:
        """Wait (bounded) until phase 1's job has no running task attempt left: Spark kills
        the losing copies of speculated tasks only after the job has its results. Whether
        they all ended (``False`` over Spark Connect, which cannot tell)."""
        tracker = self._tracker
        if tracker is None or self._jobs is None:
            return False
        stages = self._phase1_stages(tracker)
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

    def run_phase1(self, task: Phase1Task) -> list[TaskReport]:
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
            yield pa.RecordBatch.from_pydict({"report": pa.array([report.dumps()], pa.string())})

        rows = self._tracked(lambda: self._df.mapInArrow(phase1, _REPORT_SCHEMA).collect())
        self._partitions_run = self._result_stage_tasks()
        return [TaskReport.loads(row["report"]) for row in rows]

    def partitions_run(self) -> int | None:
        """The tasks of phase 1's result stage, as Spark's status tracker counts them:
        each one returns one report. ``None`` over Spark Connect (no status tracker) and for
        the Spark write path (its reports are the sink's, made of the job's output)."""
        return self._partitions_run

    def _phase1_stages(self, tracker: _JobTracker) -> list[int]:
        """The stages of phase 1's jobs, read from the status tracker once: they do not
        change after the action, and the completeness check, the stage-attempt check and
        the straggler wait all need them (py4j calls on every batch)."""
        if self._stages is None:
            self._stages = tracker.stages(self._jobs or set())
        return self._stages

    def _result_stage_tasks(self) -> int | None:
        tracker, jobs = self._tracker, self._jobs
        if tracker is None or not jobs:
            return None
        try:
            stages = self._phase1_stages(tracker)
            # the result stage is created last: the highest id of the action's stages
            return tracker.tasks(max(stages)) if stages else None
        except Exception:
            _log.debug("cannot read the task count of phase 1's result stage", exc_info=True)
            return None

    def _tracked(self, action: Callable[[], T], what: str = "the Spark job failed") -> T:
        """Run one Spark action of phase 1, remembering its jobs (for the stage attempts
        and the stragglers); a failure is raised as a :class:`~twopc.SinkError`."""
        tracker = self._tracker
        tag = tracker.tag() if tracker is not None else None
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
            raise SinkError(f"{what}: {_worker_error(exc)}") from exc
        finally:
            if tracker is not None:
                self._jobs = tracker.untag(tag)
                self._stages = None

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
        )
        started = time.monotonic()
        with leaving_sink(task.sink_id, task.batch_id):
            write = sink.plan_spark_write(ctx, tuple(self._df.columns))
        writer = self._df.write.format(write.format).mode("overwrite")
        if write.options:
            writer = writer.options(**write.options)
        if write.partition_by:
            writer = writer.partitionBy(*write.partition_by)
        try:
            self._tracked(lambda: writer.save(write.path), "the Spark write job failed")
        except SinkError as exc:
            cause = exc.__cause__
            if cause is not None and _is_analysis_error(cause):
                # refused while planning, before any task ran: the data cannot be written
                # this way (a type the format cannot hold), so a retry would fail the same
                raise PermanentSinkError(
                    f"Spark's {write.format} writer refused the batch: {_worker_error(cause)}",
                    sink_id=task.sink_id,
                    batch_id=task.batch_id,
                ) from cause
            raise
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

    def discard(self) -> None:
        # Evaluate every partition, writing nothing: a stateful query's state stores must
        # commit for the replayed batch too, or Spark fails its commit validation.
        self._df.write.format("noop").mode("overwrite").save()


class SparkBatchWriter(BatchWriter):
    """The function given to ``foreachBatch``: ``writer(df, batch_id)``.

    Create it with :func:`twopc.foreach_batch`. It is called on the driver; it resolves the
    query id from Spark (so markers are tied to the checkpoint), refuses modes that give up
    exactly-once, and runs the coordinator.
    """

    def __init__(
        self,
        *args: Any,
        persist: bool = False,
        checkpoint_location: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._persist = persist
        self._checkpoint_location = checkpoint_location
        self._connect_query_id: str | None = None
        self._checked_queries: set[str] = set()
        self._checkpoints: dict[str, str | None] = {}
        self._speculation: bool | None = None
        self._phase1_chosen = False
        self._spark_write: WritesWithSpark | None = None
        self._tracker: _JobTracker | None = None

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        """One micro-batch. Everything that leaves is a twopc error naming the sink and
        the batch: the stamp is put on here, once, for every check below."""
        with leaving_twopc(self.sink_id, int(batch_id)):
            self._call(df, int(batch_id))

    def _call(self, df: DataFrame, batch_id: int) -> None:
        spark = df.sparkSession
        if is_connect_session(spark):
            self._call_over_connect(df, batch_id)
            return
        context = spark.sparkContext
        query_id = context.getLocalProperty(_QUERY_ID_KEY)
        if not query_id:
            raise ConfigurationError(
                "no streaming query id: call the writer from "
                "df.writeStream.foreachBatch(...), not directly",
            )
        run_id = context.getLocalProperty(_RUN_ID_KEY) or ""
        if query_id not in self._checked_queries:
            _refuse_inexact_modes(spark, query_id)
            self._checked_queries.add(query_id)

        if self._speculation is None:
            self._speculation = context.getConf().get("spark.speculation", "false") == "true"
        if query_id not in self._checkpoints:
            self._checkpoints[query_id] = (
                _checkpoint_root(spark, query_id) or self._checkpoint_location
            )
        checkpoint = self._checkpoints[query_id]
        self._write(df, batch_id, query_id, checkpoint, run_id)

    def _call_over_connect(self, df: DataFrame, batch_id: int) -> None:
        """foreachBatch started from a Spark Connect client: the function runs in a Python
        process next to the Connect server, with no SparkContext and no local properties.
        The query id is the one Spark keeps in ``<checkpoint>/metadata``."""
        checkpoint = self._checkpoint_location
        if not checkpoint:
            raise ConfigurationError(
                "over Spark Connect, twopc cannot discover the query's checkpoint: pass "
                "checkpoint_location=<the query's checkpointLocation> to "
                "twopc.foreach_batch(...)",
            )
        # the checkpoint's query id never changes: read its metadata file once
        query_id = self._connect_query_id = self._connect_query_id or query_id_of(checkpoint)
        if query_id is None:
            raise ConfigurationError(
                f"no query id in {checkpoint}/metadata: checkpoint_location must be the "
                "query's own checkpointLocation",
            )
        if query_id not in self._checked_queries:
            _refuse_a_foreign_checkpoint(
                df.sparkSession, checkpoint, query_id, self.sink_id, batch_id
            )
            self._checked_queries.add(query_id)
        if self._speculation is None:
            setting = df.sparkSession.conf.get("spark.speculation", "false")
            self._speculation = str(setting).lower() == "true"
        self._write(df, batch_id, query_id, checkpoint, "")

    def _write(
        self, df: DataFrame, batch_id: int, query_id: str, checkpoint: str | None, run_id: str
    ) -> None:
        source_offsets = self._source_offsets(checkpoint, batch_id)
        if not self._phase1_chosen:
            self._spark_write = choose_spark_write(self.sink, self.sink_id)
            self._phase1_chosen = True
        df = arrange_for(self.sink, df)
        self._tracker = _JobTracker.of(df.sparkSession, self._tracker)
        if self._persist:
            df = df.persist()
        try:
            self.run(
                query_id,
                batch_id,
                _SparkEngine(
                    df,
                    speculation=bool(self._speculation),
                    spark_write=self._spark_write,
                    tracker=self._tracker,
                ),
                lambda: checkpoint,
                run_id=run_id,
                input_fingerprint=input_fingerprint(checkpoint, batch_id) if checkpoint else None,
                source_offsets=source_offsets,
            )
        finally:
            if self._persist:
                df.unpersist()

    def _source_offsets(self, checkpoint: str | None, batch_id: int) -> SourceOffsets | None:
        """The source offsets the batch ends at, when the writer reports progress; a query
        without a source whose offsets twopc reads from the checkpoint (a Kafka source's),
        or whose checkpoint it cannot read, is refused before anything is written."""
        if self.progress is None:
            return None
        offsets = kafka_offsets_of(checkpoint, batch_id) if checkpoint else None
        if offsets is None:
            where = f"{checkpoint}/offsets/{batch_id}" if checkpoint else "the checkpoint"
            raise ConfigurationError(
                f"progress=... reports the source offsets each batch consumed, but {where} "
                "holds none twopc reads (it reads a Kafka source's): use it with queries "
                "that read Kafka (spark.readStream.format('kafka')), or drop progress="
                + ("" if checkpoint else "; pass checkpoint_location=... if the query has one"),
            )
        return offsets


def foreach_batch(
    sink: Sink[Any],
    sink_id: str,
    *,
    commit_log: str | None = None,
    storage_options: dict[str, Any] | None = None,
    retry: RetryPolicy | None = None,
    faults: FaultPlan | None = None,
    on_metrics: MetricsCallback | None = None,
    persist: bool = False,
    checkpoint_location: str | None = None,
    progress: ProgressReporter | None = None,
) -> SparkBatchWriter:
    """The exactly-once ``foreachBatch`` function for ``sink``.

    Usage::

        sink = twopc.create_sink("files", path="/data/orders", format="parquet")
        query = (
            df.writeStream.option("checkpointLocation", "/chk/orders")
            .foreachBatch(twopc.foreach_batch(sink, sink_id="orders"))
            .start()
        )

    Args:
        sink: the sink, usually from :func:`twopc.create_sink`.
        sink_id: a stable name for this output. Keep it across restarts; two queries must
            not share one.
        commit_log: where decisions are recorded (an fsspec URL). Default: the sink's own
            choice (files: next to the data), else ``<checkpoint>/twopc/<sink_id>``.
        storage_options: fsspec options for ``commit_log``.
        retry: bounded retries with backoff for phase 2.
        faults: fault injection plan; default from ``TWOPC_FAULTS``, off when unset.
        on_metrics: called with :class:`~twopc.BatchMetrics` after every batch.
        persist: cache the batch DataFrame during the write (only useful when the sink
            runs more than one Spark job per batch).
        checkpoint_location: the query's ``checkpointLocation``. Needed when the query is
            started from a Spark Connect client (the query id is read from its
            ``metadata`` file); classic PySpark discovers it.
        progress: where to publish the source offsets each batch consumed, for lag tools
            (a :class:`~twopc.ProgressReporter`, e.g. ``twopc_kafka.ConsumerGroup``): in
            the batch's own transaction when the sink commits them there (the Kafka sink in
            ``atomic`` mode on the group's cluster), else right after the batch's commit.
            The query must read a source whose offsets twopc reads from the checkpoint
            (Kafka). See docs/kafka-to-kafka.md.

    Call ``writer.close()`` after ``query.stop()``: it removes the liveness record that
    makes ``twopc recover`` refuse to act while the query runs.
    """
    return SparkBatchWriter(
        sink,
        sink_id,
        commit_log=commit_log,
        storage_options=storage_options,
        retry=retry,
        faults=faults,
        on_metrics=on_metrics,
        persist=persist,
        checkpoint_location=checkpoint_location,
        progress=progress,
    )


def _streaming_query(spark: Any, query_id: str) -> Any | None:
    """The JVM StreamExecution of the running query, or None if it cannot be reached."""
    # foreachBatch gets a clone of the session that started the query; the query is
    # registered with the original one, which is usually the JVM's default session.
    for manager in _query_managers(spark):
        try:
            wrapper = manager.get(query_id)
            if wrapper is not None:
                return wrapper.streamingQuery()
        except Exception:  # py4j errors: an internal API, so degrade gracefully
            _log.debug("cannot reach the JVM streaming query %s", query_id, exc_info=True)
    return None


def _query_managers(spark: Any) -> Iterator[Any]:
    try:
        yield spark._jsparkSession.streams()
    except Exception:
        _log.debug("no JVM session behind the batch's SparkSession", exc_info=True)
    try:
        default = spark.sparkContext._jvm.org.apache.spark.sql.SparkSession.getDefaultSession()
        if default.isDefined():
            yield default.get().streams()
    except Exception:
        _log.debug("no default JVM SparkSession", exc_info=True)


def _checkpoint_root(spark: Any, query_id: str) -> str | None:
    execution = _streaming_query(spark, query_id)
    if execution is None:
        return None
    try:
        return str(execution.resolvedCheckpointRoot())
    except Exception:
        _log.debug("cannot read the checkpoint root of %s", query_id, exc_info=True)
        return None


def _refuse_inexact_modes(spark: Any, query_id: str) -> None:
    """Asynchronous progress tracking and real-time mode give up exactly-once."""
    execution = _streaming_query(spark, query_id)
    if execution is None:
        return
    try:
        kind = str(execution.getClass().getSimpleName())
        trigger = str(execution.trigger())
    except Exception:
        return
    if "AsyncProgress" in kind:
        raise ConfigurationError(
            "asynchronous progress tracking (asyncProgressTrackingEnabled) gives up "
            "exactly-once; turn it off for queries that use twopc",
        )
    if "RealTime" in trigger or "RealTime" in kind:
        raise ConfigurationError(
            "real-time mode gives up exactly-once; use a micro-batch trigger with twopc",
        )


def _refuse_a_foreign_checkpoint(
    spark: Any, checkpoint: str, query_id: str, sink_id: str, batch_id: int
) -> None:
    """Over Spark Connect the query's identity comes from ``checkpoint_location``, which
    the user typed: make sure it is the checkpoint of the query that calls the writer, so
    that another query's (an older checkpoint, a copy-pasted path) never makes this query's
    batches look committed. Spark writes ``offsets/<batch>`` before it runs the batch and
    ``commits/<batch>`` after; and the checkpoint's query must be one this session runs."""
    fs, root = filesystem_for(checkpoint)
    offsets, commits = join(root, "offsets", str(batch_id)), join(root, "commits", str(batch_id))
    planned = fs.exists(offsets)
    if not planned or fs.exists(commits):
        why = "it holds the batch as committed" if planned else "it has no offsets for it"
        raise ConfigurationError(
            f"checkpoint_location={checkpoint!r} is not the checkpoint of the query that "
            f"runs batch {batch_id} ({why}): pass the checkpointLocation of the query this "
            "writer serves",
            sink_id=sink_id,
            batch_id=batch_id,
        )
    try:
        running = {str(query.id) for query in spark.streams.active}
    except Exception:  # an older Connect server, a session that cannot list them
        _log.debug("cannot list the session's streaming queries", exc_info=True)
        return
    if running and query_id not in running:
        raise ConfigurationError(
            f"checkpoint_location={checkpoint!r} belongs to query {query_id}, which does not "
            f"run in this Spark Connect session (running: {', '.join(sorted(running))}): pass "
            "the checkpointLocation of the query this writer serves",
            sink_id=sink_id,
            batch_id=batch_id,
        )


def _is_analysis_error(exc: BaseException) -> bool:
    """Whether Spark refused a write while planning it (``AnalysisException``), classic or
    over Spark Connect."""
    return any(cls.__name__ == "AnalysisException" for cls in type(exc).__mro__)


def _worker_error(exc: BaseException, limit: int = 2000) -> str:
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
