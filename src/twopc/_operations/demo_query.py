"""The demo's streaming query, run as its own driver process by ``twopc demo``.

It prints one JSON event per line on stdout (the demo renders them as progress); Spark's
own logging goes to stderr. Fault injection comes from ``TWOPC_FAULTS`` in the environment,
so the first run dies by SIGKILL in the middle of a commit and the second one does not.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from twopc._coordination.batch_metrics import BatchMetrics

SINK_ID = "demo-orders"
INPUT_SCHEMA = "id long, customer string, amount double"


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def _on_metrics(metrics: BatchMetrics) -> None:
    emit(
        "batch",
        batch=metrics.batch_id,
        status=metrics.status,
        rows=metrics.rows,
        partitions=metrics.partitions,
        recovered=metrics.recovered_committed,
        aborted=metrics.recovered_aborted,
        seconds=round(metrics.total_seconds, 3),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m twopc._operations.demo_query")
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--expected", type=int, required=True)
    parser.add_argument("--read-back", action="store_true")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--sink-id", default=SINK_ID)
    parser.add_argument("--write-path", default="auto", choices=("auto", "spark", "python"))
    args = parser.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import twopc

    emit("starting", pid=os.getpid())
    spark = (
        SparkSession.builder.master(args.master)
        .appName("twopc-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    emit("spark-ready")

    sink = twopc.create_sink(
        "files", path=args.output, format="parquet", write_path=args.write_path
    )
    orders = (
        spark.readStream.schema(INPUT_SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .json(args.input)
        # Hash partitioning is deterministic, so a replayed batch splits the same way.
        .repartition(args.partitions, "id")
    )
    query = (
        orders.writeStream.option("checkpointLocation", args.checkpoint)
        .foreachBatch(twopc.foreach_batch(sink, sink_id=args.sink_id, on_metrics=_on_metrics))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination()
    except Exception as exc:  # StreamingQueryException: report it, exit non-zero
        emit("query-failed", error=str(exc))
        spark.stop()
        return 1
    emit("query-finished")

    if args.read_back:
        emit("read-back", **read_back(spark, args.output, args.expected))
    spark.stop()
    return 0


def read_back(spark: Any, output: str, expected: int) -> dict[str, int]:
    """Count what a Spark reader sees in the output: rows, duplicates, missing ids."""
    table = spark.read.parquet(output)
    table.createOrReplaceTempView("demo_output")
    row = spark.sql(
        f"""
        SELECT count(*) AS committed,
               count(*) - count(DISTINCT id) AS duplicates,
               {expected} - count(DISTINCT CASE WHEN id >= 0 AND id < {expected} THEN id END)
                   AS missing
        FROM demo_output
        """
    ).collect()[0]
    return {
        "committed": int(row["committed"]),
        "duplicates": int(row["duplicates"]),
        "missing": int(row["missing"]),
    }


if __name__ == "__main__":
    sys.exit(main())
