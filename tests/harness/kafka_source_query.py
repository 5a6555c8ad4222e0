"""A Spark query from a Kafka topic into a test sink, run as its own process so that a test
can SIGKILL its driver, delete its checkpoint and start it again elsewhere::

    python -m tests.harness.kafka_source_query --spec JSON --bootstrap B --topic T \\
        --checkpoint DIR [--starting-offsets JSON] [--max-offsets-per-trigger N]

Each record's value is an id (decimal text); the query writes ``id`` and ``payload``
through ``twopc.foreach_batch`` (repartitioned by id into ``--partitions``; with
``--dedupe``, after a stateful ``dropDuplicates``) until the topic is read
(``availableNow``). Prints ``{"event": "batch-done", ...}`` per committed batch and
``{"event": "query-finished"}``; fault injection comes from ``TWOPC_FAULTS``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import twopc
from tests.harness.group_recipe import build, recipe_of, writes_kafka
from tests.harness.spark_kafka_job import kafka_source_session


def query_args(
    spec: Any,
    bootstrap: str,
    topic: str,
    checkpoint: str,
    *,
    starting: str = "earliest",
    commit_log: str = "",
    per_batch: int = 20,
    partitions: int = 2,
) -> list[str]:
    """The command line (after the interpreter) of this query on ``spec``'s sink."""
    return [
        "-m",
        "tests.harness.kafka_source_query",
        "--spec",
        spec.dumps(),
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--checkpoint",
        checkpoint,
        "--starting-offsets",
        starting,
        "--max-offsets-per-trigger",
        str(per_batch),
        "--commit-log",
        commit_log,
        "--partitions",
        str(partitions),
    ]


def emit(event: str, **fields: object) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def run(spark: Any, args: argparse.Namespace) -> int:
    from pyspark.sql import functions as F

    spec = recipe_of(args.spec)
    frame = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.topic)
        .option("startingOffsets", args.starting_offsets)
        .option("maxOffsetsPerTrigger", args.max_offsets_per_trigger)
        .load()
        .select(
            F.col("value").cast("string").cast("long").alias("id"),
            F.concat(F.lit("p"), F.col("partition"), F.lit("@"), F.col("offset")).alias("payload"),
        )
    )
    if args.dedupe:
        # a stateful operator: a checkpoint written without it cannot be resumed with it
        frame = frame.dropDuplicates(["id"])
    frame = frame.repartition(args.partitions, "id")
    if writes_kafka(spec):
        frame = frame.withColumn("key", F.col("id").cast("string"))

    def report(metrics: Any) -> None:
        emit("batch-done", batch=metrics.batch_id, status=metrics.status, rows=metrics.rows)

    writer = twopc.foreach_batch(
        build(spec),
        sink_id=spec.sink_id,
        commit_log=args.commit_log or None,
        on_metrics=report,
    )
    query = (
        frame.writeStream.option("checkpointLocation", args.checkpoint)
        .foreachBatch(writer)
        .trigger(availableNow=True)
        .start()
    )
    emit("query-started")
    try:
        query.awaitTermination()
    except Exception as exc:  # StreamingQueryException: report it, exit non-zero
        emit("query-failed", error=str(exc)[:2000])
        return 1
    emit("query-finished")
    writer.close()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.harness.kafka_source_query")
    parser.add_argument("--spec", required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--commit-log", default="")
    parser.add_argument("--starting-offsets", default="earliest")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument(
        "--dedupe", action="store_true", help="drop duplicate ids (a stateful operator)"
    )
    args = parser.parse_args()
    spark = kafka_source_session()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        return run(spark, args)
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
