"""twopc's own driver time per micro-batch on real Spark, apart from the Spark job it runs.

The overhead benchmark's coordination figure (``twopc_null`` - ``python_job``) is the
difference of two medians of whole batches, each mostly one Spark job whose time varies by
tens of milliseconds from job to job on a busy machine; a goal of a few milliseconds
drowns in that. This script runs the same two ``foreachBatch`` functions (a sink that
writes nothing, and one ``mapInArrow`` job that counts rows) alternately on the same
cached 1,000-row frame, and times twopc's Spark action apart (through ``twopc._internal``,
the benchmarks' door), so it reports both:

* ``outside``: per batch, twopc's time minus its own Spark action (``mapInArrow`` +
  ``collect``): the driver's coordination (admission, the records, the decision, the
  status tracker's calls, the liveness record);
* ``difference``: the median of twopc's batches minus the median of the counting job's,
  the overhead benchmark's figure, measured side by side.

    .venv/bin/python -m benchmarks.spark_writers.coordination_split --batches 60

It writes ``results/coordination-spark.json`` (``--output``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from benchmarks.spark_writers.config import BenchConfig
from benchmarks.spark_writers.data import generate
from benchmarks.spark_writers.overhead import NullSink
from benchmarks.spark_writers.runner import call
from benchmarks.spark_writers.session import start_session

import twopc
from twopc._internal import SparkEngine


def _count_rows(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    rows = sum(batch.num_rows for batch in batches)
    yield pa.RecordBatch.from_pydict({"rows": pa.array([rows], pa.int64())})


class _ActionClock:
    """Times each Spark action the engine runs for phase 1."""

    def __init__(self) -> None:
        self.seconds: list[float] = []
        self._original = SparkEngine._tracked

    def __enter__(self) -> _ActionClock:
        original, seconds = self._original, self.seconds

        def tracked(engine: Any, action: Callable[[], Any], *args: Any) -> Any:
            def timed() -> Any:
                started = time.perf_counter()
                try:
                    return action()
                finally:
                    seconds.append(time.perf_counter() - started)

            return original(engine, timed, *args)

        SparkEngine._tracked = tracked  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        SparkEngine._tracked = self._original  # type: ignore[method-assign]


def measure(batches: int, warmup: int = 5) -> dict[str, Any]:
    config = BenchConfig()
    spark, _ = start_session(config)
    try:
        spark.conf.set("spark.sql.shuffle.partitions", str(config.partitions))
        df = generate(spark, config.overhead_rows, config.partitions)
        log = tempfile.mkdtemp(prefix="twopc-coordination-split-")
        writer = twopc.foreach_batch(NullSink(), sink_id="split-null", commit_log=f"{log}/log")
        query_id = str(uuid.uuid4())

        def python_job(frame: Any, batch_id: int) -> None:
            frame.mapInArrow(_count_rows, "rows bigint").collect()

        for batch_id in range(warmup):
            call(spark, writer, df, batch_id, query_id)
            call(spark, python_job, df, batch_id, query_id)
        twopc_times: list[float] = []
        job_times: list[float] = []
        with _ActionClock() as clock:
            for batch_id in range(warmup, warmup + batches):
                first_twopc = batch_id % 2 == 0
                for name in ("twopc", "job") if first_twopc else ("job", "twopc"):
                    if name == "twopc":
                        twopc_times.append(call(spark, writer, df, batch_id, query_id))
                    else:
                        job_times.append(call(spark, python_job, df, batch_id, query_id))
        outside = [t - a for t, a in zip(twopc_times, clock.seconds, strict=True)]
    finally:
        spark.stop()
    ms = 1000.0
    return {
        "batches": batches,
        "twopc_median_ms": round(statistics.median(twopc_times) * ms, 1),
        "python_job_median_ms": round(statistics.median(job_times) * ms, 1),
        "difference_ms": round(
            (statistics.median(twopc_times) - statistics.median(job_times)) * ms, 1
        ),
        "outside_median_ms": round(statistics.median(outside) * ms, 1),
        "outside_p90_ms": round(sorted(outside)[int(len(outside) * 0.9)] * ms, 1),
        "action_median_ms": round(statistics.median(clock.seconds) * ms, 1),
        "twopc": twopc.__version__,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.spark_writers.coordination_split")
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--runs", type=int, default=1, help="whole runs, each its own session")
    parser.add_argument(
        "--output",
        type=Path,
        default=Path(__file__).parents[1] / "results" / "coordination-spark.json",
    )
    args = parser.parse_args(argv)
    runs = []
    for run in range(args.runs):
        result = measure(args.batches)
        runs.append(result)
        print(f"run {run + 1}: {json.dumps(result)}", flush=True)
    outside = [r["outside_median_ms"] for r in runs]
    difference = [r["difference_ms"] for r in runs]
    document = {
        "runs": runs,
        "outside_median_of_runs_ms": statistics.median(outside),
        "outside_spread_ms": [min(outside), max(outside)],
        "difference_median_of_runs_ms": statistics.median(difference),
        "difference_spread_ms": [min(difference), max(difference)],
    }
    print(json.dumps({k: v for k, v in document.items() if k != "runs"}))
    args.output.write_text(json.dumps(document, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
