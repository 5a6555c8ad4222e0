"""One run of a query through one of twopc's entry points, in its own process (so a test can
SIGKILL it): ``foreach`` (``twopc.foreach_batch``), ``format`` (``writeStream.format
("twopc")``), ``batch`` (``twopc.write_batch`` over the whole input) or ``batch-format``
(``df.write.format("twopc")``). Classic PySpark by default; ``--remote sc://...`` runs it from
a Spark Connect client. Streaming runs use ``availableNow``: they end when the input is
consumed.

    python -m tests.harness.entry_query --entry format --spec '<SinkRecipe JSON>' \\
        --source DIR --checkpoint DIR [--faults PLAN] [--remote URL] [--write-id KEY] [--master M]
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import twopc
from tests.harness.group_recipe import GroupRecipe, build, recipe_of, writes_kafka
from tests.harness.sink_recipe import SinkRecipe, build_sink

SCHEMA = "id long, payload string"


def format_options(spec: SinkRecipe) -> dict[str, str]:
    """The sink of ``spec`` as ``format("twopc")`` options: what :func:`build_sink` passes
    to ``create_sink``, as strings."""
    if spec.backend == "files":
        extra = spec.files_options()
        return {
            "sink": "files",
            "path": spec.address,
            "format": spec.mode,
            **{k: v if isinstance(v, str) else json.dumps(v) for k, v in extra.items()},
        }
    if spec.backend in ("postgres", "mysql"):
        return {
            "sink": spec.backend,
            "dsn": spec.address,
            "table": spec.table,
            "mode": "append",
            "transaction_mode": spec.mode,
        }
    if spec.backend == "kafka":
        options = {
            "sink": "kafka",
            "bootstrap_servers": spec.address,
            "topic": spec.table,
            "mode": spec.mode,
            "key_column": "key",
            "operation_timeout_seconds": "15",
        }
        if spec.prefix:
            options["transactional_id_prefix"] = spec.prefix
        return options
    if spec.backend == "iceberg":
        extra = spec.iceberg_options()
        return {
            "sink": "iceberg",
            "table": spec.table,
            "warehouse": spec.address,
            "create_table": "true",
            **{k: v if isinstance(v, str) else json.dumps(v) for k, v in extra.items()},
        }
    raise ValueError(f"unknown backend {spec.backend!r}")


def session(remote: str | None, master: str = "local[2]") -> Any:
    from pyspark.sql import SparkSession

    if remote:
        return SparkSession.builder.remote(remote).create()
    spark = (
        SparkSession.builder.master(master)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def with_key(frame: Any, spec: SinkRecipe | GroupRecipe) -> Any:
    from pyspark.sql import functions as F

    if writes_kafka(spec):
        return frame.withColumn("key", F.col("id").cast("string"))
    return frame


def slowed(frame: Any, slow_ids: str, slow_ms: int) -> Any:
    """``frame`` with every row whose id is in ``slow_ids`` (``A:B``, from A up to B)
    delayed by ``slow_ms`` in the JVM (``Thread.sleep`` through ``reflect``), where the rows
    are written: a Spark write job that is slow without any Python in its tasks. The sleep's
    result is written (a column ``slowed``), so that the optimizer cannot drop it, and its
    argument depends on the row, so that it cannot be folded into a constant."""
    if not slow_ids:
        return frame
    from pyspark.sql import functions as F

    low, high = (int(x) for x in slow_ids.split(":"))
    sleep = F.expr(f"reflect('java.lang.Thread', 'sleep', cast({slow_ms} + id * 0 as bigint))")
    return frame.withColumn("slowed", F.when((F.col("id") >= low) & (F.col("id") < high), sleep))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entry", choices=("foreach", "format", "batch", "batch-format"))
    parser.add_argument("--spec", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--faults", default="")
    parser.add_argument("--remote", default=None)
    parser.add_argument("--write-id", default="w1")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--files-per-trigger", type=int, default=1)
    parser.add_argument("--slow-ids", default="", help="A:B: ids whose rows the JVM delays")
    parser.add_argument("--slow-ms", type=int, default=0)
    parser.add_argument(
        "--checkpoint-location", default=None, help="foreach_batch's (default: --checkpoint)"
    )
    parser.add_argument(
        "--background-commit",
        action="store_true",
        help="foreach_batch(background_commit=True), and close() after the query",
    )
    args = parser.parse_args()
    recipe = recipe_of(args.spec)  # a group's (foreach only) or one sink's
    spark = session(args.remote, args.master)
    if isinstance(recipe, GroupRecipe):
        if args.entry != "foreach":
            raise SystemExit(f"a group runs with --entry foreach here, not {args.entry}")
        commit_log: str | None = recipe.commit_log(args.checkpoint)
    else:
        spec = recipe
        commit_log = spec.commit_log(args.checkpoint)

    if args.entry in ("batch", "batch-format"):
        frame = with_key(spark.read.schema(SCHEMA).json(args.source), spec)
        frame = frame.repartition(args.partitions, "id")
        if args.entry == "batch":
            metrics = twopc.write_batch(
                frame,
                build_sink(spec),
                spec.sink_id,
                write_id=args.write_id,
                commit_log=commit_log,
                faults=twopc.FaultPlan.parse(args.faults) if args.faults else twopc.FaultPlan(),
            )
            print(json.dumps({"status": str(metrics.status), "rows": metrics.rows}))
        else:
            writer = frame.write.format("twopc").mode("append")
            options = {**format_options(spec), "sink_id": spec.sink_id}
            options["write_id"] = args.write_id
            if commit_log:
                options["commit_log"] = commit_log
            if args.faults:
                options["faults"] = args.faults
            writer.options(**options).save()
            print(json.dumps({"status": "done"}))
        return

    frame = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", args.files_per_trigger)
        .json(args.source)
        .repartition(args.partitions, "id")
    )
    frame = slowed(with_key(frame, recipe), args.slow_ids, args.slow_ms)
    stream = frame.writeStream.option("checkpointLocation", args.checkpoint).trigger(
        availableNow=True
    )
    if args.entry == "foreach":
        writer = twopc.foreach_batch(
            build(recipe),
            sink_id=recipe.sink_id,
            commit_log=commit_log,
            checkpoint_location=args.checkpoint_location or args.checkpoint,
            faults=twopc.FaultPlan.parse(args.faults) if args.faults else twopc.FaultPlan(),
            background_commit=args.background_commit,
        )
        query = stream.foreachBatch(writer).start()
        if args.background_commit:
            query.awaitTermination()
            writer.close()  # waits for the last batch's commit
    else:
        options = {**format_options(spec), "sink_id": spec.sink_id}
        if commit_log:
            options["commit_log"] = commit_log
        if args.faults:
            options["faults"] = args.faults
        query = stream.format("twopc").options(**options).start()
    query.awaitTermination()
    print(json.dumps({"status": "done"}))


if __name__ == "__main__":
    main()
