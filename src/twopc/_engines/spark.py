"""``foreach_batch``: turns ``foreachBatch``'s ``(DataFrame, batch_id)`` into a batch of the
coordinator, run by :class:`~twopc._engines.spark_engine.SparkEngine` (phase 1 on the
executors), with the query's identity read from Spark (classic, or a Spark Connect
client's checkpoint).

A sink with the :class:`~twopc.WritesWithSpark` role whose options Spark's own writer can
serve gets phase 1 as one Spark write job instead (``df.write...save(<its location>)``),
after which the sink describes what was written as prepared work: no Python worker touches
the rows. The choice is made, and logged, once per writer.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from twopc._contract.boundary import leaving_twopc
from twopc._contract.retry import RetryPolicy
from twopc._coordination.deciding import DEFAULT_COMMIT_PARALLELISM
from twopc._coordination.engine import BatchEngine
from twopc._coordination.group_engine import GroupEngine
from twopc._engines.batch_shape import Narrowing, arrange_for, check_max_tasks, narrows
from twopc._engines.checkpoint import planned_input, query_id_of
from twopc._engines.spark_engine import JobTracker, SparkEngine, is_connect_session
from twopc._engines.writer import BatchWriter, MetricsCallback, WriterOptions
from twopc.errors import ConfigurationError
from twopc.faults import FaultPlan
from twopc.groups import SinkGroup, member_sink_id
from twopc.progress import ProgressReporter, SourceOffsets
from twopc.protocol import CommitsOnDriver, Sink, WritesWithSpark
from twopc.storage import filesystem_for, join

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = [
    "SparkBatchWriter",
    "choose_spark_write",
    "foreach_batch",
    "is_connect_session",
]

_log = logging.getLogger("twopc")

_QUERY_ID_KEY = "sql.streaming.queryId"
_RUN_ID_KEY = "spark.jobGroup.id"


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


@dataclass(frozen=True)
class _SparkBatch:
    """One micro-batch as the writer found it, checked, before the coordinator runs it."""

    df: DataFrame
    query_id: str
    checkpoint: str | None
    run_id: str
    source_offsets: SourceOffsets | None
    fingerprint: str | None
    """The batch's input as the checkpoint's offset log plans it."""


class SparkBatchWriter(BatchWriter):
    """The function given to ``foreachBatch``: ``writer(df, batch_id)``.

    Create it with :func:`twopc.foreach_batch`. It is called on the driver; it resolves the
    query id from Spark (so markers are tied to the checkpoint), refuses modes that give up
    exactly-once, and runs the coordinator.
    """

    def __init__(
        self,
        sink: Sink[Any],
        sink_id: str,
        options: WriterOptions | None = None,
        *,
        persist: bool = False,
        checkpoint_location: str | None = None,
        background_commit: bool = False,
        max_tasks: int | None = None,
    ) -> None:
        super().__init__(sink, sink_id, options)
        self._max_tasks = check_max_tasks(max_tasks)
        self._background_commit = background_commit
        # a group's members each read the batch: cached, they read it once and the same
        self._persist = persist or isinstance(sink, SinkGroup)
        self._checkpoint_location = checkpoint_location
        self._connect_query_id: str | None = None
        self._checked_queries: set[str] = set()
        self._queries_of_runs: dict[str, str] = {}
        """The query id of each run id met (Spark's job group during a run)."""
        self._checkpoints: dict[str, str | None] = {}
        self._speculation: bool | None = None
        self._phase1_chosen = False
        self._spark_write: WritesWithSpark | None = None
        self._member_writes: dict[str, WritesWithSpark | None] = {}
        self._tracker: JobTracker | None = None
        self._said_no_offsets = False

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        """One micro-batch. Everything that leaves is a twopc error naming the sink and the
        batch: the checks here are stamped by this method, the batch itself by
        :meth:`BatchWriter.run`."""
        batch_id = int(batch_id)
        self.wait_for_commit()  # the previous batch's phase 2, if it runs in the background
        with leaving_twopc(self.sink_id, batch_id):
            batch = self._batch(df, batch_id)
            frame = batch.df.persist() if self._persist else batch.df
        engine = self._engine(frame)
        # over Spark Connect the function runs in the server's Python worker, which the
        # client's close() never reaches: a commit is never left running there
        background = self._background_commit and not is_connect_session(df.sparkSession)
        try:
            started = self.start(
                batch.query_id,
                batch_id,
                engine,
                lambda: batch.checkpoint,
                run_id=batch.run_id,
                input_fingerprint=batch.fingerprint,
                source_offsets=batch.source_offsets,
            )
            if background:
                self.finish_in_background(started)
            else:
                self.finish(started)
        finally:
            if self._persist:
                with leaving_twopc(self.sink_id, batch_id):
                    frame.unpersist()

    def _engine(self, frame: DataFrame) -> BatchEngine:
        """Phase 1's engine for one batch; a group's runs each member on its projection."""
        if isinstance(self.sink, SinkGroup):
            return GroupEngine(
                self.sink,
                {
                    name: self._spark_engine(
                        arrange_for(member.sink, member.projected(frame), self._max_tasks),
                        self._member_writes.get(name),
                        narrows(member.sink, self._max_tasks),
                    )
                    for name, member in self.sink.members.items()
                },
            )
        return self._spark_engine(frame, self._spark_write, narrows(self.sink, self._max_tasks))

    def _spark_engine(
        self, frame: DataFrame, spark_write: WritesWithSpark | None, narrowing: Narrowing | None
    ) -> SparkEngine:
        return SparkEngine(
            frame,
            speculation=bool(self._speculation),
            spark_write=spark_write,
            tracker=self._tracker,
            narrowing=narrowing,
        )

    def _choose_phase1(self) -> None:
        """Where each sink's phase 1 runs (a group's members each choose), once."""
        if isinstance(self.sink, SinkGroup):
            self._member_writes = {
                name: choose_spark_write(member.sink, member_sink_id(self.sink_id, name))
                for name, member in self.sink.members.items()
            }
        else:
            self._spark_write = choose_spark_write(self.sink, self.sink_id)
        self._phase1_chosen = True

    def _batch(self, df: DataFrame, batch_id: int) -> _SparkBatch:
        spark = df.sparkSession
        if is_connect_session(spark):
            query_id, checkpoint, run_id = self._over_connect(df, batch_id)
        else:
            query_id, checkpoint, run_id = self._classic(spark)
        planned = planned_input(checkpoint, batch_id)  # one read of the offset log
        source_offsets = self._source_offsets(planned.offsets, checkpoint, batch_id)
        if not self._phase1_chosen:
            self._choose_phase1()
        df = arrange_for(self.sink, df, self._max_tasks)
        self._tracker = JobTracker.of(df.sparkSession, self._tracker)
        return _SparkBatch(df, query_id, checkpoint, run_id, source_offsets, planned.fingerprint)

    def _classic(self, spark: Any) -> tuple[str, str | None, str]:
        """The query id, checkpoint and run id of a batch of classic PySpark."""
        context = spark.sparkContext
        # Spark sets the job group to the run id, new at every start of a query: the same
        # run id means the same query, whose id is then not asked again (a py4j call)
        run_id = context.getLocalProperty(_RUN_ID_KEY) or ""
        known = self._queries_of_runs.get(run_id) if run_id else None
        query_id = known or context.getLocalProperty(_QUERY_ID_KEY)
        if not query_id:
            raise ConfigurationError(
                "no streaming query id: call the writer from "
                "df.writeStream.foreachBatch(...), not directly",
            )
        if run_id:
            self._queries_of_runs[run_id] = query_id
        if query_id not in self._checked_queries:
            _refuse_inexact_modes(spark, query_id)
            self._checked_queries.add(query_id)
        if self._speculation is None:
            # the session's settings hold the context's (getConf() would copy all of them)
            setting = spark.conf.get("spark.speculation", "false")
            self._speculation = str(setting).lower() == "true"
        if query_id not in self._checkpoints:
            self._checkpoints[query_id] = (
                _checkpoint_root(spark, query_id) or self._checkpoint_location
            )
        return query_id, self._checkpoints[query_id], run_id

    def _over_connect(self, df: DataFrame, batch_id: int) -> tuple[str, str | None, str]:
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
        return query_id, checkpoint, ""

    def _source_offsets(
        self, offsets: SourceOffsets | None, checkpoint: str | None, batch_id: int
    ) -> SourceOffsets | None:
        """The source offsets the batch ends at (a Kafka source's, from the checkpoint),
        which the batch stores with its output; ``None`` for another source (logged once).
        With ``progress=``, a query without them is refused before anything is written."""
        if offsets is None and not self._said_no_offsets:
            self._said_no_offsets = True
            _log.info(
                "twopc sink=%s: %s holds no Kafka source offsets: the output stores none, "
                "and twopc.starting_offsets cannot restart this query from it",
                self.sink_id,
                f"{checkpoint}/offsets/{batch_id}" if checkpoint else "the query's checkpoint",
            )
        if self.progress is None:
            return offsets
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
    background_commit: bool = False,
    commit_parallelism: int = DEFAULT_COMMIT_PARALLELISM,
    max_tasks: int | None = None,
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
        background_commit: return from ``foreachBatch`` once the batch's decision is
            durable and run its phase 2 (the target's commit) in a thread, while Spark
            records the batch and plans the next one. Still exactly once (a crash before
            the commit ends is finished by recovery), but a batch becomes visible a
            moment after ``foreachBatch`` returns; the next batch waits for it, and
            ``writer.close()`` waits for the last. Classic PySpark only (over Spark
            Connect the commit stays in ``foreachBatch``). See docs/entry-points.md.
        commit_parallelism: at most this many commit calls at once when the driver
            commits a batch (phase 2, and recovery), for sinks that can commit side by side
            (the files and SQL sinks, groups of them; default 8; 1: one partition after
            another).
        max_tasks: run phase 1 in at most this many tasks: a batch of more partitions is
            coalesced first where the sink commits on the driver (no shuffle), else hashed
            into this many partitions by its keys (upserts) or by the rows' values (sinks
            that commit in their tasks: a replay must see the same rows in each
            partition). Fewer transactions, connections and prepared transactions per
            batch, and Spark's cost per task paid fewer times. Default: one task per
            partition of the batch; see docs/entry-points.md, "Wide batches".

    Call ``writer.close()`` after ``query.stop()``: it waits for a commit still running
    in the background and removes the liveness record that makes ``twopc recover`` refuse
    to act while the query runs.
    """
    options = WriterOptions(
        commit_log=commit_log,
        storage_options=storage_options,
        retry=retry,
        faults=faults,
        on_metrics=on_metrics,
        progress=progress,
        commit_parallelism=commit_parallelism,
    )
    return SparkBatchWriter(
        sink,
        sink_id,
        options,
        persist=persist,
        checkpoint_location=checkpoint_location,
        background_commit=background_commit,
        max_tasks=max_tasks,
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
