"""The Spark version of the chaos query: JSON files in (one per micro-batch), the run's sink
out through ``twopc.foreach_batch``. Prints ``{"event": "query-started"}`` once the query
runs (the runner counts delayed kills from there), ``{"event": "batch-done", ...}`` with the
task attempts each committed batch took, and exits 0 when every file is committed,
1 when the query failed, 3 when it was stopped (``TWOPC_CHAOS_STOP_AFTER`` seconds after it
started). Fault injection comes from ``TWOPC_FAULTS``.

    python -m tests.harness.recipe_spark_query --spec JSON --checkpoint DIR --input DIR [--master M]
                                      [--speculation] [--partitions N] [--max-tasks N]

``session`` and ``run_query`` are shared with the long-lived ``tests.chaos.spark_host``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from typing import Any

from tests.harness.group_recipe import GroupRecipe, build, recipe_of, writes_kafka
from tests.harness.sink_recipe import SinkRecipe

STOP_AFTER_ENV = "TWOPC_CHAOS_STOP_AFTER"
"""Seconds after the query started when it is stopped with ``query.stop()`` (exit 3)."""
STOPPED_EXIT = 3


def emit(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


SPECULATION_CONF = {
    "spark.speculation": "true",
    "spark.speculation.interval": "100ms",
    "spark.speculation.multiplier": "1.5",
    "spark.speculation.quantile": "0.5",
    "spark.speculation.minTaskRuntime": "200ms",
    "spark.speculation.efficiency.enabled": "false",
    # one single-core executor per worker host of tests/harness/standalone.py, small ones
    "spark.executor.cores": "1",
    "spark.cores.max": "2",
    "spark.executor.memory": "512m",
}
"""Speculation that fires within a second on a slow task of a two-partition stage."""


def session(master: str, *, speculation: bool = False) -> Any:
    """The campaign's SparkSession on ``master``; ``speculation``: with
    :data:`SPECULATION_CONF` (``master`` then is a standalone cluster's URL)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master)
        .appName("twopc-chaos")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "512m")
        .config("spark.pyspark.python", sys.executable)
    )
    for key, value in (SPECULATION_CONF if speculation else {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run_query(
    spark: Any,
    spec: SinkRecipe | GroupRecipe,
    checkpoint: str,
    source: str,
    partitions: int,
    *,
    stop_after: float | None = None,
    faults: str | None = None,
    max_tasks: int | None = None,
) -> int:
    """Run the query until its input is committed; the exit code as documented above.

    ``faults``: a ``TWOPC_FAULTS`` plan for this query only (default: the environment's)."""
    from pyspark.sql import functions as F

    import twopc
    from twopc.faults import FaultPlan

    frame = (
        spark.readStream.schema("id long, payload string")
        .option("maxFilesPerTrigger", 1)
        .json(source)
        # hash partitioning is deterministic: a replayed batch splits the same way
        .repartition(partitions, "id")
    )
    if writes_kafka(spec):
        frame = frame.withColumn("key", F.col("id").cast("string"))
    plan = FaultPlan.parse(faults) if faults else None

    def report_batch(metrics: Any) -> None:
        # which attempt of each partition the batch committed: shows a speculative copy win
        attempts = {str(t.partition): t.attempt for t in metrics.tasks}
        emit(
            "batch-done",
            batch=metrics.batch_id,
            status=metrics.status,
            attempts=attempts,
            partitions=metrics.partitions,
        )

    writer = twopc.foreach_batch(
        build(spec),
        sink_id=spec.sink_id,
        commit_log=spec.commit_log(checkpoint),
        faults=plan,
        on_metrics=report_batch,
        max_tasks=max_tasks,
    )
    query = (
        frame.writeStream.option("checkpointLocation", checkpoint)
        .foreachBatch(writer)
        .trigger(availableNow=True)
        .start()
    )
    emit("query-started", pid=os.getpid())
    # the campaign's "stop" event: query.stop() after a delay, as an operator would
    stopped = threading.Event()

    def stop_query() -> None:
        stopped.set()
        query.stop()

    stopper = threading.Timer(stop_after, stop_query) if stop_after is not None else None
    if stopper is not None:
        stopper.start()
    try:
        query.awaitTermination()
    except Exception as exc:  # StreamingQueryException: report it, exit non-zero
        emit("query-failed", error=str(exc)[:2000])
        return 1
    finally:
        if stopper is not None:
            stopper.cancel()
    if stopped.is_set():
        emit("query-stopped")
        writer.close()
        return STOPPED_EXIT
    emit("query-finished")
    writer.close()  # a clean stop: the writer's liveness record goes (a crash leaves it)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.harness.recipe_spark_query")
    parser.add_argument("--spec", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--speculation", action="store_true", help="SPECULATION_CONF on")
    parser.add_argument("--max-tasks", type=int, default=None, help="foreach_batch's max_tasks")
    args = parser.parse_args()
    spark = session(args.master, speculation=args.speculation)
    stop_after = os.environ.get(STOP_AFTER_ENV)
    code = run_query(
        spark,
        recipe_of(args.spec),
        args.checkpoint,
        args.input,
        args.partitions,
        stop_after=float(stop_after) if stop_after else None,
        max_tasks=args.max_tasks,
    )
    spark.stop()
    return code


if __name__ == "__main__":
    sys.exit(main())
