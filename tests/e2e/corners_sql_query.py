"""A real-Spark streaming query that upserts and deletes keys in a PostgreSQL or MariaDB
table through ``twopc.foreach_batch`` with the SQL sink's ``delete_column``.

``tests/e2e/test_spark_corners.py`` runs it as its own process, SIGKILLs it at a crash point
(``TWOPC_FAULTS``) and starts it again over the same checkpoint; it also calls
:func:`run_query` in its own Spark session (with a fault plan that raises instead).

Input: JSON files, one per micro-batch (``maxFilesPerTrigger=1``), rows
``{"id", "val", "seq", "gone"}``. Every row written carries ``--run`` in the column ``run``,
so the table shows which run of the query wrote each row: a batch that one run committed
and a later run applied again would carry the later run's token.

    python tests/e2e/corners_sql_query.py --backend postgres --dsn DSN --table T \\
        --mode upsert --transaction-mode two_phase --source DIR --checkpoint DIR --run A

Prints one JSON line per batch: ``{"event": "batch", "batch": N, "status": "committed"}``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from typing import Any

import twopc

SCHEMA = "id long, val string, seq long, gone boolean"
_COALESCE = "spark.sql.adaptive.coalescePartitions.enabled"


def run_query(
    spark: Any,
    *,
    backend: str,
    dsn: str,
    table: str,
    mode: str,
    transaction_mode: str,
    source: str,
    checkpoint: str,
    run: str,
    sink_id: str = "corners-sql",
    faults: twopc.FaultPlan | None = None,
    on_metrics: Callable[[twopc.BatchMetrics], None] | None = None,
    sink_options: dict[str, Any] | None = None,
) -> None:
    """Run the query over every input file not yet in ``checkpoint`` and wait for it
    (Spark's ``StreamingQueryException`` when a batch fails). ``faults=None``: the plan in
    ``TWOPC_FAULTS``; ``sink_options``: more options of the sink."""
    from pyspark.sql import functions as F

    # Adaptive execution would coalesce the sink's repartition by key of a small batch into
    # one partition: keep spark.sql.shuffle.partitions of them (two partitions per batch).
    previous = spark.conf.get(_COALESCE, None)
    spark.conf.set(_COALESCE, "false")
    frame = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .json(source)
        .withColumn("run", F.lit(run))
    )
    sink = twopc.create_sink(
        backend,
        dsn=dsn,
        table=table,
        mode=mode,
        key_columns=["id"],
        order_column="seq",  # among rows of one key in a batch, the largest seq wins
        delete_column="gone",
        transaction_mode=transaction_mode,
        **(sink_options or {}),
    )
    # the commit log at its default place, inside the checkpoint
    writer = twopc.foreach_batch(sink, sink_id=sink_id, faults=faults, on_metrics=on_metrics)
    query = (
        frame.writeStream.option("checkpointLocation", checkpoint)
        .foreachBatch(writer)
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination()
    finally:
        writer.close()
        if previous is None:
            spark.conf.unset(_COALESCE)
        else:
            spark.conf.set(_COALESCE, previous)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=["postgres", "mysql"], required=True)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--mode", choices=["upsert", "append"], required=True)
    parser.add_argument("--transaction-mode", default="transaction")
    parser.add_argument("--source", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--sink-id", default="corners-sql")
    parser.add_argument("--run", required=True, help="written into every row's `run` column")
    args = parser.parse_args()

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("twopc-corners-sql")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")

    def report(metrics: twopc.BatchMetrics) -> None:
        line = {"event": "batch", "batch": metrics.batch_id, "status": str(metrics.status)}
        print(json.dumps(line), flush=True)

    run_query(
        spark,
        backend=args.backend,
        dsn=args.dsn,
        table=args.table,
        mode=args.mode,
        transaction_mode=args.transaction_mode,
        source=args.source,
        checkpoint=args.checkpoint,
        run=args.run,
        sink_id=args.sink_id,
        on_metrics=report,
    )
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
