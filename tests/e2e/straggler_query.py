"""A query whose phase 1 fails while another task of the job still runs: partition 0's
Python worker is killed at ``before_begin`` (``local[2]`` does not retry it, so the job
fails), while partition 1 is 1 s from preparing (less than ``spark.python.task.killTimeout``,
so Spark lets it finish). The session stays up after the query failed, as in a notebook
or a driver that restarts its query, and the staging area is listed 4 s later.

    python -m tests.e2e.straggler_query WORKDIR

Prints ``{"event": "staged", "attempts": [...]}`` with what is staged then."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from tests.e2e.orders_stream import run_orders_stream
from tests.harness.outputs import staged_attempts
from tests.harness.spark_fixtures import write_orders


def main(workdir: Path) -> None:
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    import twopc
    from twopc.faults import FaultPlan

    spark = (
        SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    )
    spark.sparkContext.setLogLevel("OFF")
    write_orders(workdir / "in", 1, 200)
    sink = twopc.create_sink("files", path=str(workdir / "out"), write_path="python")
    plan = FaultPlan.parse(
        "before_begin:kill@batch=0,partition=0;after_invoke:sleep=1@batch=0,partition=1"
    )
    writer = twopc.foreach_batch(sink, sink_id="straggler", faults=plan)
    try:
        run_orders_stream(spark, workdir / "in", workdir / "chk", writer)
        failed = False
    except Exception:
        failed = True
    time.sleep(4)  # the straggler, had it run on, has prepared by now
    staged = [str(p.relative_to(workdir / "out")) for p in staged_attempts(workdir / "out")]
    print(json.dumps({"event": "staged", "failed": failed, "attempts": staged}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
