"""Streaming word count, upserted exactly-once into a MySQL/MariaDB table.

    CREATE TABLE wc (word VARCHAR(255) PRIMARY KEY, num BIGINT NOT NULL);

Run it with text files arriving in INPUT_DIR (one micro-batch per file here):

    python examples/wordcount_mysql.py INPUT_DIR CHECKPOINT_DIR mysql://user:pass@host:3306/db

Kill it at any moment (even with SIGKILL) and start it again with the same checkpoint: the
table ends with the same counts as a run without a crash.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import twopc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("input")
    parser.add_argument("checkpoint")
    parser.add_argument("dsn")
    parser.add_argument("--backend", default="mysql", choices=["mysql", "postgres"])
    parser.add_argument("--table", default="wc")
    parser.add_argument("--transaction-mode", default="transaction")
    parser.add_argument(
        "--no-shuffle-by-key",
        dest="shuffle_by_key",
        action="store_false",
        help="the counts come grouped by word, so each word is in one partition already: "
        "skip twopc's shuffle by key",
    )
    args = parser.parse_args(argv)

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("twopc-wordcount")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")

    lines = spark.readStream.option("maxFilesPerTrigger", 1).text(args.input)
    counts = (
        lines.select(F.explode(F.split(F.col("value"), r"\s+")).alias("word"))
        .where(F.col("word") != "")
        .groupBy("word")
        .agg(F.count("*").alias("num"))
    )
    sink = twopc.create_sink(
        args.backend,
        dsn=args.dsn,
        table=args.table,
        mode="upsert",
        key_columns=["word"],
        transaction_mode=args.transaction_mode,
        shuffle_by_key=args.shuffle_by_key,
    )

    def report(metrics: twopc.BatchMetrics) -> None:
        print(
            json.dumps({"event": "batch", "batch": metrics.batch_id, "status": metrics.status}),
            flush=True,
        )

    query = (
        counts.writeStream.outputMode("update")
        .option("checkpointLocation", args.checkpoint)
        .foreachBatch(twopc.foreach_batch(sink, sink_id="wordcount", on_metrics=report))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
