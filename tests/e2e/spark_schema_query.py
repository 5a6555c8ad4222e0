"""A classic ``foreachBatch`` query into PostgreSQL whose batches from 1 on bring a new
column ``extra`` (id * 2); run as its own process by ``test_sql_schema_spark.py``. One input
file per micro-batch; fault injection comes from TWOPC_FAULTS."""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import twopc


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("input")
    parser.add_argument("checkpoint")
    parser.add_argument("dsn")
    parser.add_argument("--table", required=True)
    parser.add_argument("--transaction-mode", default="two_phase")
    args = parser.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("twopc-schema-evolution")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    rows = (
        spark.readStream.option("maxFilesPerTrigger", 1)
        .schema("id BIGINT, payload STRING")
        .json(args.input)
    )
    sink = twopc.create_sink(
        "postgres",
        dsn=args.dsn,
        table=args.table,
        transaction_mode=args.transaction_mode,
        schema_evolution="add_columns",
    )
    write = twopc.foreach_batch(sink, sink_id=f"evolve-{args.table}")

    def evolving(df: Any, batch_id: int) -> None:
        # the query's output gains a column from batch 1 on (deterministic on replays)
        write(df.withColumn("extra", F.col("id") * 2) if batch_id >= 1 else df, batch_id)

    query = (
        rows.repartition(2)
        .writeStream.option("checkpointLocation", args.checkpoint)
        .foreachBatch(evolving)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
