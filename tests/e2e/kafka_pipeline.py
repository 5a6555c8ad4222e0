"""The Kafka-to-Kafka access-log query of ``examples/kafka_access_log_counts.py``, run as its
own process by ``test_kafka_spark.py`` (so the test can SIGKILL and restart it)::

    python tests/e2e/kafka_pipeline.py --bootstrap B --input A --output OUT --checkpoint DIR \\
        --mode per_partition --sink-id ID --prefix P --max-offsets-per-trigger 40

Spark's Kafka source package is resolved by the integration helpers
(``tests/harness/spark_kafka_job.py``: spark-sql-kafka for the installed pyspark, or
the 4.2.0 fallback). Prints one JSON line per micro-batch (``{"event": "batch", ...}``) and
``{"event": "done"}`` at the end. Fault injection comes from ``TWOPC_FAULTS``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from examples.kafka_access_log_counts import print_metrics, start_query

from tests.harness.spark_kafka_job import kafka_source_session


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", default="", help="the output topic (Kafka targets)")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--mode", default="per_partition")
    parser.add_argument("--sink-id", default="access-counts")
    parser.add_argument("--prefix", default="twopc")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=40)
    parser.add_argument("--progress-group", default=None)
    parser.add_argument("--postgres-dsn", default=None, help="write the rows to Postgres")
    parser.add_argument("--table", default=None)
    parser.add_argument(
        "--entry",
        default="foreach_batch",
        choices=["foreach_batch", "format"],
        help='format: writeStream.format("twopc") into Postgres (needs --postgres-dsn)',
    )
    args = parser.parse_args()
    sink = None
    if args.postgres_dsn:
        import twopc

        sink = twopc.create_sink(
            "postgres",
            dsn=args.postgres_dsn,
            table=args.table,
            create_table=True,
            transaction_mode="two_phase",
        )

    try:
        spark = kafka_source_session()
    except RuntimeError as exc:
        print(exc, file=sys.stderr)
        return 3
    spark.sparkContext.setLogLevel("ERROR")
    try:
        query = (
            _format_query(spark, args)
            if args.entry == "format"
            else start_query(
                spark,
                bootstrap=args.bootstrap,
                input_topic=args.input,
                output_topic=args.output,
                checkpoint=args.checkpoint,
                mode=args.mode,
                sink_id=args.sink_id,
                transactional_id_prefix=args.prefix,
                max_offsets_per_trigger=args.max_offsets_per_trigger,
                on_metrics=print_metrics,
                progress_group=args.progress_group,
                sink=sink,
            )
        )
        query.awaitTermination(240)
        if query.isActive:
            query.stop()
            print(json.dumps({"event": "timeout"}), flush=True)
            return 2
        if query.exception() is not None:
            print(json.dumps({"event": "failed", "error": str(query.exception())}), flush=True)
            return 1
    finally:
        spark.stop()
    print(json.dumps({"event": "done"}), flush=True)
    return 0


def _format_query(spark: Any, args: argparse.Namespace) -> Any:
    """The same windows, written to Postgres by ``writeStream.format("twopc")``, with the
    progress group as options."""
    from examples.kafka_access_log_counts import access_log, window_rows

    import twopc

    twopc.register(spark)
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    rows = window_rows(access_log(spark, args.bootstrap, args.input, args.max_offsets_per_trigger))
    writer = (
        rows.writeStream.format("twopc")
        .outputMode("append")
        .option("checkpointLocation", args.checkpoint)
        .option("sink", "postgres")
        .option("sink_id", args.sink_id)
        .option("dsn", args.postgres_dsn)
        .option("table", args.table)
        .option("create_table", "true")
        .option("transaction_mode", "two_phase")
        .trigger(availableNow=True)
    )
    if args.progress_group:
        writer = writer.option("progress_group", args.progress_group).option(
            "progress_bootstrap_servers", args.bootstrap
        )
    return writer.start()


if __name__ == "__main__":
    sys.exit(main())
