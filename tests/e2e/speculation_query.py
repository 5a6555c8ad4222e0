"""Queries with ``spark.speculation=true`` on a standalone cluster, one application for all
cases (a Spark start costs more than a case).

``python tests/e2e/speculation_query.py MASTER CASES_JSON``: each case is an object with a
chaos ``spec`` (JSON), the ``faults`` that make one task slow, an ``input`` directory and a
``checkpoint``; or, for the files sink's Spark write path (no Python task to slow down),
``slow_ms``: every row of partition 1 is delayed that long in the JVM. One JSON line per
case on stdout: the attempts each partition's report came from, the batch status, or the
error.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> int:
    master, cases_json = sys.argv[1:3]
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    import twopc
    from tests.harness.recipe_spark_query import SPECULATION_CONF
    from tests.harness.sink_recipe import SinkRecipe, build_sink

    builder = (
        SparkSession.builder.master(master)
        .appName("twopc-speculation")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "512m")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.task.maxFailures", "4")
    )
    for key, value in SPECULATION_CONF.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    for case in json.loads(cases_json):
        spec = SinkRecipe.loads(case["spec"])
        frame = (
            spark.readStream.schema("id long, payload string")
            .json(case["input"])
            .repartition(2, "id")
        )
        if spec.backend == "kafka":
            frame = frame.withColumn("key", F.col("id").cast("string"))
        if case.get("slow_ms"):
            # written, so that the optimizer keeps it; per row, so that it is not folded
            sleep = (
                f"reflect('java.lang.Thread', 'sleep', cast({case['slow_ms']} + id * 0 as bigint))"
            )
            slow = F.when(F.spark_partition_id() == 1, F.expr(sleep))
            frame = frame.withColumn("slowed", slow)
        writer = twopc.foreach_batch(
            build_sink(spec),
            sink_id=spec.sink_id,
            commit_log=spec.commit_log(case["checkpoint"]),
            faults=twopc.FaultPlan.parse(case.get("faults", "")),
        )
        query = (
            frame.writeStream.option("checkpointLocation", case["checkpoint"])
            .foreachBatch(writer)
            .trigger(availableNow=True)
            .start()
        )
        result: dict[str, object] = {"sink_id": spec.sink_id}
        try:
            query.awaitTermination()
            last = writer.last_metrics
            result["status"] = last.status if last else "none"
            result["attempts"] = {t.partition: t.attempt for t in last.tasks} if last else {}
        except Exception as exc:
            # the cause comes first; the plan Spark appends after it says nothing
            result["error"] = str(exc)[:4000]
        finally:
            writer.close()
        print(json.dumps(result), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
