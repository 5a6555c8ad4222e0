"""The Spark version of the chaos query: JSON files in (one per micro-batch), the run's sink
out through ``twopc.foreach_batch``. Prints ``{"event": "query-started"}`` once the query
runs (the runner counts delayed kills from there) and exits 0 when every file is committed,
1 when the query failed, 3 when it was stopped (``TWOPC_CHAOS_STOP_AFTER`` seconds after it
started). Fault injection comes from ``TWOPC_FAULTS``.

    python -m tests.chaos.spark_query --spec JSON --checkpoint DIR --input DIR [--master M]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading

from tests.chaos.sinks import SinkSpec, build_sink

STOP_AFTER_ENV = "TWOPC_CHAOS_STOP_AFTER"
"""Seconds after the query started when it is stopped with ``query.stop()`` (exit 3)."""
STOPPED_EXIT = 3


def emit(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.spark_query")
    parser.add_argument("--spec", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--partitions", type=int, default=2)
    args = parser.parse_args()
    spec = SinkSpec.loads(args.spec)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import twopc

    spark = (
        SparkSession.builder.master(args.master)
        .appName("twopc-chaos")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "512m")
        # barrier stages (Kafka atomic mode) fail fast when slots are short
        .config("spark.scheduler.barrier.maxConcurrentTasksCheck.maxFailures", "1")
        .config("spark.scheduler.barrier.maxConcurrentTasksCheck.interval", "1s")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    frame = (
        spark.readStream.schema("id long, payload string")
        .option("maxFilesPerTrigger", 1)
        .json(args.input)
        # hash partitioning is deterministic: a replayed batch splits the same way
        .repartition(args.partitions, "id")
    )
    if spec.backend == "kafka":
        frame = frame.withColumn("key", F.col("id").cast("string"))
    writer = twopc.foreach_batch(
        build_sink(spec), sink_id=spec.sink_id, commit_log=spec.commit_log(args.checkpoint)
    )
    query = (
        frame.writeStream.option("checkpointLocation", args.checkpoint)
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

    stop_after = os.environ.get(STOP_AFTER_ENV)
    stopper = threading.Timer(float(stop_after), stop_query) if stop_after else None
    if stopper is not None:
        stopper.start()
    try:
        query.awaitTermination()
    except Exception as exc:  # StreamingQueryException: report it, exit non-zero
        emit("query-failed", error=str(exc)[:2000])
        spark.stop()
        return 1
    finally:
        if stopper is not None:
            stopper.cancel()
    if stopped.is_set():
        emit("query-stopped")
        writer.close()
        spark.stop()
        return STOPPED_EXIT
    emit("query-finished")
    writer.close()  # a clean stop: the writer's liveness record goes (a crash leaves it)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
