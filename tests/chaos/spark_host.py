"""A long-lived Spark driver that runs the campaign's Spark query attempts one after another.

A Spark attempt in its own process pays a JVM start, a SparkSession and Python workers that
import twopc again: most of a Spark run's 30 to 50 s. Every attempt whose driver is not the
kill target can run in one SparkSession instead, as a new streaming query from the run's
checkpoint: the executors, the Python workers, the sinks and the target are as real as
before, and a killed Python worker or executor JVM is replaced by Spark as it would be in
production. (Attempts that kill the driver still run in their own process.)

Requests are JSON lines on stdin: ``{"id", "spec", "checkpoint", "input", "partitions",
"faults", "stop_after"}``. All output, the query's and its Python workers', goes to stdout;
each attempt ends with the line ``{"event": "attempt-exit", "id": ID, "code": N}`` (``N`` as
``tests.harness.recipe_spark_query`` exits).

    python -m tests.chaos.spark_host --master local[2] [--speculation]
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback

from tests.harness.group_recipe import recipe_of
from tests.harness.recipe_spark_query import emit, run_query, session

EXIT_EVENT = "attempt-exit"


def serve(master: str, speculation: bool = False) -> int:
    spark = session(master, speculation=speculation)
    emit("host-ready", master=master)
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        emit("attempt-begin", id=request["id"])
        try:
            code = run_query(
                spark,
                recipe_of(request["spec"]),
                request["checkpoint"],
                request["input"],
                int(request["partitions"]),
                stop_after=request.get("stop_after"),
                faults=request.get("faults"),
            )
        except Exception:
            traceback.print_exc()
            code = 1
        for query in spark.streams.active:  # nothing of an attempt outlives it
            query.stop()
        sys.stderr.flush()
        emit(EXIT_EVENT, id=request["id"], code=code)
    spark.stop()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos.spark_host")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--speculation", action="store_true", help="SPECULATION_CONF on")
    args = parser.parse_args()
    return serve(args.master, args.speculation)


if __name__ == "__main__":
    sys.exit(main())
