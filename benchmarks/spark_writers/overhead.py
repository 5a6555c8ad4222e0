"""Coordination overhead: time per micro-batch of 1,000 rows, twopc against no-op functions.

Several ``foreachBatch`` functions get the same cached 1,000-row frame, batch after batch
(batch ids 0, 1, 2, ... of one query, one writer each, like a running query), in balanced
orders (:func:`~benchmarks.spark_writers.runner.balanced_orders`: every function follows
every other equally often, since a Spark job's time depends on the job before it; the
measured batches are rounded up to whole cycles of those orders):

* ``empty``: a function that does nothing (the issue's "no-op foreachBatch");
* ``spark_noop_job``: one Spark job over the batch that writes nothing
  (``df.write.format("noop")``), what any writer pays at least;
* ``python_job``: one ``mapInArrow`` job that only counts rows in the Python workers and
  collects one row per partition: what any writer pays that runs Python on executors
  (twopc's phase 1 is such a job);
* ``twopc_null``: twopc with a sink that writes nothing, so everything measured is twopc's
  coordination (recovery check, phase 1 job, decision record, commit, log pruning);
* ``twopc_files`` / ``spark_parquet``: a real small write, for scale; ``twopc_files`` is
  the files sink as ``write_path="auto"`` runs it here (Spark's own writer),
  ``twopc_files_python`` the same with phase 1 in Python tasks.
"""

from __future__ import annotations

import shutil
import statistics
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from benchmarks.spark_writers.config import COORDINATION_GOAL_MS, OVERHEAD_GOAL_MS, BenchConfig
from benchmarks.spark_writers.data import generate
from benchmarks.spark_writers.runner import balanced_orders, call

import twopc


@dataclass
class NullTransaction:
    ctx: twopc.TaskContext
    rows: int = 0


@dataclass(frozen=True)
class NullPayload(twopc.Payload):
    rows: int


class NullSink(twopc.Sink[NullTransaction], twopc.CommitsOnDriver):
    """Counts rows and writes nothing: isolates the coordinator's own cost."""

    backend_name = "null"

    def begin_transaction(self, ctx: twopc.TaskContext) -> NullTransaction:
        return NullTransaction(ctx)

    def invoke(self, txn: NullTransaction, batch: pa.RecordBatch) -> None:
        txn.rows += batch.num_rows

    def pre_commit(self, txn: NullTransaction) -> twopc.Committable:
        return twopc.Committable.for_task(txn.ctx, NullPayload(txn.rows))

    def abort(self, txn: NullTransaction) -> None:
        return None

    def commit(self, committables: Sequence[twopc.Committable]) -> list[twopc.CommitOutcome]:
        return [twopc.CommitOutcome.COMMITTED for _ in committables]

    def abort_prepared(self, committables: Sequence[twopc.Committable]) -> None:
        return None

    def recover(self, sink_id: str) -> list[twopc.Committable]:
        return []


VARIANTS = (
    "empty",
    "spark_noop_job",
    "python_job",
    "twopc_null",
    "spark_parquet",
    "twopc_files",
    "twopc_files_python",
)


WARMUP_BATCHES = 2
"""Untimed batches of every variant before the measured ones."""

PHASES = ("recover", "write", "decide", "commit", "total")
"""twopc's phases in its batch metrics (``<phase>_seconds``)."""


def _count_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    rows = sum(batch.num_rows for batch in batches)
    yield pa.RecordBatch.from_pydict({"rows": pa.array([rows], pa.int64())})


def writers_of(config: BenchConfig) -> dict[str, Any]:
    """Every variant's ``foreachBatch`` function, writing under ``config.work_dir``."""
    root = config.work_dir / "overhead"
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    parquet = str(root / "spark")

    def empty(df: Any, batch_id: int) -> None:
        return None

    def spark_noop_job(df: Any, batch_id: int) -> None:
        df.write.format("noop").mode("overwrite").save()

    def python_job(df: Any, batch_id: int) -> None:
        df.mapInArrow(_count_rows, "rows bigint").collect()

    def spark_parquet(df: Any, batch_id: int) -> None:
        df.write.mode("append").parquet(parquet)

    files = twopc.create_sink("files", path=str(root / "twopc"), format="parquet")
    files_python = twopc.create_sink(
        "files", path=str(root / "twopc-python"), format="parquet", write_path="python"
    )
    return {
        "empty": empty,
        "spark_noop_job": spark_noop_job,
        "python_job": python_job,
        "twopc_null": twopc.foreach_batch(
            NullSink(), sink_id="bench-null", commit_log=str(root / "null-log")
        ),
        "spark_parquet": spark_parquet,
        "twopc_files": twopc.foreach_batch(files, sink_id="bench-files-small"),
        "twopc_files_python": twopc.foreach_batch(files_python, sink_id="bench-files-python-small"),
    }


def measure(spark: Any, config: BenchConfig) -> dict[str, Any]:
    """Median milliseconds per micro-batch of each variant, and twopc's overhead."""
    spark.conf.set("spark.sql.shuffle.partitions", str(config.partitions))
    df = generate(spark, config.overhead_rows, config.partitions)
    writers = writers_of(config)
    query_id = str(uuid.uuid4())
    times: dict[str, list[float]] = {v: [] for v in VARIANTS}
    orders = balanced_orders(VARIANTS)
    batches = whole_cycles(config.overhead_batches, len(orders))
    try:
        for batch_id in range(WARMUP_BATCHES + batches):
            for variant in orders[(batch_id - WARMUP_BATCHES) % len(orders)]:
                seconds = call(spark, writers[variant], df, batch_id, query_id)
                if batch_id >= WARMUP_BATCHES:
                    times[variant].append(seconds * 1000)
    finally:
        df.unpersist()
    null_metrics = [m for m in writers["twopc_null"].metrics if m.batch_id >= WARMUP_BATCHES]
    medians = {v: round(statistics.median(ms), 1) for v, ms in times.items()}
    overhead = medians["twopc_null"] - medians["empty"]
    return {
        "rows_per_batch": config.overhead_rows,
        "partitions": config.partitions,
        "batches": batches,
        "median_ms": medians,
        "min_ms": {v: round(min(ms), 1) for v, ms in times.items()},
        "max_ms": {v: round(max(ms), 1) for v, ms in times.items()},
        "twopc_null_phases_median_ms": _phases(null_metrics),
        "overhead_ms": round(overhead, 1),
        "overhead_beyond_one_spark_job_ms": round(
            medians["twopc_null"] - medians["spark_noop_job"], 1
        ),
        "overhead_beyond_one_python_job_ms": round(
            medians["twopc_null"] - medians["python_job"], 1
        ),
        "goal_ms": OVERHEAD_GOAL_MS,
        "met": overhead <= OVERHEAD_GOAL_MS,
        **issue_18_goals(medians),
    }


def whole_cycles(batches: int, cycle: int) -> int:
    """``batches`` rounded up to a whole number of ``cycle``-long cycles."""
    return -(-batches // cycle) * cycle


def issue_18_goals(medians: dict[str, float]) -> dict[str, Any]:
    """Issue 18's two per-batch goals from the variants' median milliseconds: twopc's own
    work over the one job it runs, and a small files batch on the Spark write path over a
    no-op function."""
    coordination = medians["twopc_null"] - medians["python_job"]
    files_overhead = medians["twopc_files"] - medians["empty"]
    return {
        "coordination_ms": round(coordination, 1),
        "coordination_goal_ms": COORDINATION_GOAL_MS,
        "coordination_met": coordination <= COORDINATION_GOAL_MS,
        "files_overhead_ms": round(files_overhead, 1),
        "files_goal_ms": OVERHEAD_GOAL_MS,
        "files_met": files_overhead <= OVERHEAD_GOAL_MS,
        "files_beyond_spark_parquet_ms": round(
            medians["twopc_files"] - medians["spark_parquet"], 1
        ),
    }


FLOOR_VARIANTS = ("spark_noop_job", "python_job", "twopc_null")


def measure_floor(spark: Any, config: BenchConfig) -> dict[str, Any]:
    """Seconds per batch of the main workload's size for the variants that write nothing:
    how long moving the rows into the Python workers takes, which every twopc sink pays
    and Spark's JVM writers do not."""
    spark.conf.set("spark.sql.shuffle.partitions", str(config.partitions))
    df = generate(spark, config.rows, config.partitions)
    writers = {v: w for v, w in writers_of(config).items() if v in FLOOR_VARIANTS}
    query_id = str(uuid.uuid4())
    times: dict[str, list[float]] = {v: [] for v in FLOOR_VARIANTS}
    try:
        for batch_id in range(1 + config.reps):  # batch 0 warms up
            for variant in FLOOR_VARIANTS:
                seconds = call(spark, writers[variant], df, batch_id, query_id)
                if batch_id > 0:
                    times[variant].append(seconds)
    finally:
        df.unpersist()
    return {
        "rows": config.rows,
        "partitions": config.partitions,
        "median_seconds": {v: round(statistics.median(t), 3) for v, t in times.items()},
        "min_seconds": {v: round(min(t), 3) for v, t in times.items()},
        "max_seconds": {v: round(max(t), 3) for v, t in times.items()},
    }


def _phases(metrics: list[Any]) -> dict[str, float]:
    if not metrics:
        return {}
    return {
        phase: round(statistics.median(getattr(m, f"{phase}_seconds") for m in metrics) * 1000, 1)
        for phase in PHASES
    }
