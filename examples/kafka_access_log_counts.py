"""Requests per IP in 5-second windows, from one Kafka topic to another, exactly once.

The input topic holds access-log lines ``<ISO-8601 time> <ip>``, for example
``2026-01-01T00:00:03.250Z 10.0.0.7``. The query reads it with Spark's Kafka source, counts
requests per IP in 5-second tumbling windows of event time (watermark: 5 seconds), and
writes each finished window (output mode ``append``) to the output topic through twopc's
Kafka sink: key ``ip``, value ``{"window_start", "window_end", "ip", "count"}`` as JSON.

    python examples/kafka_access_log_counts.py --bootstrap 127.0.0.1:19092 \\
        --input access-log --output access-counts --checkpoint /tmp/access-counts-chk

Kill it at any moment, even with SIGKILL, and start it again with the same checkpoint: a
consumer of the output topic with ``isolation.level=read_committed`` sees every
(window, ip) exactly once. ``--mode atomic`` also makes each micro-batch visible all at
once. The output topic must exist (the sink never creates topics). The consumer group
``access-counts-progress`` (``--progress-group``) shows the query's progress and lag on the
input topic to ``kafka-consumer-groups.sh`` and other lag tools.

Spark's Kafka source is not part of pyspark: it comes from ``--packages`` (default
``org.apache.spark:spark-sql-kafka-0-10_2.13:<pyspark version>``, resolved from Maven).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import twopc

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

WINDOW = "5 seconds"
WATERMARK = "5 seconds"
TIME_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSX"  # 2026-01-01T00:00:03.250Z


def access_log(
    spark: SparkSession, bootstrap: str, topic: str, max_offsets_per_trigger: int
) -> DataFrame:
    """The input topic as a stream of ``(time, ip)``; unparsable lines are dropped."""
    from pyspark.sql import functions as F

    raw = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(max_offsets_per_trigger))
        # never count lines of an aborted producer transaction
        .option("kafka.isolation.level", "read_committed")
        .load()
    )
    parts = F.split(F.trim(F.col("value").cast("string")), " ")
    return raw.select(
        F.try_to_timestamp(parts.getItem(0), F.lit(TIME_FORMAT)).alias("time"),
        parts.getItem(1).alias("ip"),
    ).where(F.col("time").isNotNull() & F.col("ip").isNotNull())


def window_rows(lines: DataFrame) -> DataFrame:
    """Requests per (5-second window, ip): ``window_start``, ``window_end`` (ISO text),
    ``ip``, ``count``."""
    from pyspark.sql import functions as F

    counts = (
        lines.withWatermark("time", WATERMARK)
        .groupBy(F.window("time", WINDOW), F.col("ip"))
        .agg(F.count("*").alias("count"))
    )
    iso = "yyyy-MM-dd'T'HH:mm:ss'Z'"  # the session time zone is UTC (see start_query)
    return counts.select(
        F.date_format("window.start", iso).alias("window_start"),
        F.date_format("window.end", iso).alias("window_end"),
        F.col("ip"),
        F.col("count"),
    )


def window_counts(lines: DataFrame) -> DataFrame:
    """The window rows as Kafka records: ``key`` = ip, ``value`` = the row as JSON."""
    from pyspark.sql import functions as F

    rows = window_rows(lines)
    return rows.select(
        F.col("ip").alias("key"),
        F.to_json(F.struct(*[F.col(c) for c in rows.columns])).alias("value"),
    )


def start_query(
    spark: SparkSession,
    *,
    bootstrap: str,
    input_topic: str,
    output_topic: str,
    checkpoint: str,
    mode: str = "per_partition",
    sink_id: str = "access-counts",
    transactional_id_prefix: str = "twopc",
    max_offsets_per_trigger: int = 1000,
    available_now: bool = True,
    on_metrics: Callable[[twopc.BatchMetrics], None] | None = None,
    progress_group: str | None = None,
    sink: twopc.Sink[Any] | None = None,
) -> StreamingQuery:
    """Start the query; the caller awaits it. Keep ``checkpoint`` and ``sink_id`` stable
    across restarts: together they are what makes a restart exactly-once.

    ``progress_group`` names a consumer group that shows the query's progress on the input
    topic (``kafka-consumer-groups.sh --describe --group ...``): committed in each batch's
    transaction in ``atomic`` mode, right after each batch's commit otherwise. ``sink``
    writes the window rows somewhere else than ``output_topic`` (a SQL table, files)."""
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    lines = access_log(spark, bootstrap, input_topic, max_offsets_per_trigger)
    if sink is None:
        sink = twopc.create_sink(
            "kafka",
            bootstrap_servers=bootstrap,
            topic=output_topic,
            mode=mode,
            transactional_id_prefix=transactional_id_prefix,
        )
        records = window_counts(lines)
    else:
        records = window_rows(lines)
    progress = None
    if progress_group:
        from twopc_kafka import ConsumerGroup

        progress = ConsumerGroup(progress_group, bootstrap_servers=bootstrap)
    writer = (
        records.writeStream.outputMode("append")
        .option("checkpointLocation", checkpoint)
        .foreachBatch(
            twopc.foreach_batch(sink, sink_id=sink_id, on_metrics=on_metrics, progress=progress)
        )
    )
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime="5 seconds")
    return writer.start()


def print_metrics(metrics: twopc.BatchMetrics) -> None:
    """One JSON line per micro-batch on stdout."""
    event: dict[str, Any] = {
        "event": "batch",
        "batch": metrics.batch_id,
        "status": metrics.status,
        "rows": metrics.rows,
        "partitions": metrics.partitions,
        "source_offsets": metrics.source_offsets,
        "source_lag": metrics.source_lag,
        "progress_error": metrics.progress_error,
    }
    print(json.dumps(event), flush=True)


def main(argv: list[str] | None = None) -> int:
    import pyspark

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers")
    parser.add_argument("--input", required=True, help="topic with the access-log lines")
    parser.add_argument("--output", required=True, help="topic for the window counts")
    parser.add_argument("--checkpoint", required=True, help="the query's checkpoint location")
    parser.add_argument("--mode", default="per_partition", choices=["per_partition", "atomic"])
    parser.add_argument("--sink-id", default="access-counts")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=1000)
    parser.add_argument(
        "--progress-group",
        default="access-counts-progress",
        help="consumer group that shows the query's progress on the input topic ('' for none)",
    )
    parser.add_argument(
        "--continuous",
        action="store_true",
        help="keep running (a batch every 5 s) instead of stopping once caught up",
    )
    parser.add_argument(
        "--packages",
        default=f"org.apache.spark:spark-sql-kafka-0-10_2.13:{pyspark.__version__}",
        help="Maven coordinates of Spark's Kafka source",
    )
    args = parser.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("twopc-kafka-access-log-counts")
        .config("spark.jars.packages", args.packages)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    query = start_query(
        spark,
        bootstrap=args.bootstrap,
        input_topic=args.input,
        output_topic=args.output,
        checkpoint=args.checkpoint,
        mode=args.mode,
        sink_id=args.sink_id,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        available_now=not args.continuous,
        on_metrics=print_metrics,
        progress_group=args.progress_group or None,
    )
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
