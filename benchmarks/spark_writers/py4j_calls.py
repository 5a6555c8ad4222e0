"""py4j round trips per micro-batch of twopc on the driver, as the Spark application ages.

Every py4j call is a round trip to the JVM (0.1-1 ms here, more on a busy machine), and a
count, unlike a time, does not depend on the machine's load. This runs ``--batches``
micro-batches of 1,000 rows (2 partitions, ``local[2]``, no services) through the overhead
benchmark's ``twopc_null`` writer, each after one ``python_job`` (other jobs of the
application, as a running query has), and counts the driver's py4j calls during each
``twopc_null`` batch. A count that climbs batch after batch is work that grows with the
query's age (issue 18: the job group listing, see docs/benchmarks-history.md).

    .venv/bin/python -m benchmarks.spark_writers.py4j_calls --batches 40
    PYTHONPATH=<old checkout>/src .venv/bin/python -m benchmarks.spark_writers.py4j_calls \\
        --output benchmarks/results/py4j_calls-before.json

``--profile FILE`` also writes cProfile's statistics of the twopc batches (the driver's
side: where twopc's time outside the Spark job goes).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from benchmarks.spark_writers.config import RESULTS, BenchConfig


@contextlib.contextmanager
def counting_py4j() -> Iterator[list[int]]:
    """Count the driver's py4j commands (``count[0]``) while inside."""
    from py4j import clientserver

    count = [0]
    original = clientserver.ClientServerConnection.send_command

    def counted(self: Any, command: str) -> Any:
        count[0] += 1
        return original(self, command)

    clientserver.ClientServerConnection.send_command = counted  # type: ignore[method-assign]
    try:
        yield count
    finally:
        clientserver.ClientServerConnection.send_command = original  # type: ignore[method-assign]


def _write_profile(profiler: cProfile.Profile, path: Path, batches: int) -> None:
    text = io.StringIO()
    text.write(f"{batches} twopc_null batches profiled on the driver (cProfile)\n")
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("cumulative").print_stats(70)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text.getvalue().replace(str(Path.cwd()) + "/", ""))


def measure(batches: int, work_dir: Path, profile: Path | None = None) -> dict[str, Any]:
    from benchmarks.spark_writers.data import generate
    from benchmarks.spark_writers.overhead import writers_of
    from benchmarks.spark_writers.runner import call
    from pyspark.sql import SparkSession

    import twopc

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        df = generate(spark, 1_000, 2)
        writers = writers_of(BenchConfig(work_dir=work_dir))
        query_id = str(uuid.uuid4())
        calls: list[int] = []
        milliseconds: list[float] = []
        profiler = cProfile.Profile()
        with counting_py4j() as count:
            for batch_id in range(batches):
                call(spark, writers["python_job"], df, batch_id, query_id)
                count[0] = 0
                if profile is not None and batch_id > 0:
                    profiler.enable()
                milliseconds.append(
                    call(spark, writers["twopc_null"], df, batch_id, query_id) * 1000
                )
                profiler.disable()
                calls.append(count[0])
        if profile is not None:
            _write_profile(profiler, profile, batches - 1)
    finally:
        spark.stop()
    tenth = max(1, batches // 10)
    return {
        "twopc": twopc.__file__,
        "batches": batches,
        "py4j_calls_per_batch": calls,
        # py4j also sends a command for each Python-side Java object that is garbage
        # collected, which only adds to some batches: the least of the first and the last
        # tenth show the trend, the medians are for reference
        "first_tenth_min": min(calls[1 : 1 + tenth]),
        "last_tenth_min": min(calls[-tenth:]),
        "first_tenth_median": statistics.median(calls[1 : 1 + tenth]),
        "last_tenth_median": statistics.median(calls[-tenth:]),
        "ms_per_batch": [round(ms, 1) for ms in milliseconds],
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.spark_writers.py4j_calls")
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--work-dir", type=Path, default=Path("/tmp/twopc-bench-py4j"))
    parser.add_argument("--output", type=Path, default=RESULTS / "py4j_calls.json")
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        help="cProfile the twopc batches after the first; the statistics go to this file",
    )
    args = parser.parse_args(argv)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    load = [round(x, 2) for x in os.getloadavg()]
    result = measure(args.batches, args.work_dir, args.profile)
    result["load_before"] = load
    result["load_after"] = [round(x, 2) for x in os.getloadavg()]
    print(
        f"py4j calls per twopc batch, least of the first tenth {result['first_tenth_min']}, "
        f"of the last tenth {result['last_tenth_min']} ({args.batches} batches)"
    )
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
