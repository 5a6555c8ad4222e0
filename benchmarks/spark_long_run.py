"""twopc's cost over a long query on real Spark: one streaming query, many micro-batches.

:mod:`benchmarks.long_run` measures 10,000 batches without Spark (the local engine, phase
1 inline), where they take minutes. This runs the same measurement through Spark: a
streaming query from the rate source (``--partitions`` partitions per batch) written by
``twopc.foreach_batch`` into the files sink (Spark write path) or the PostgreSQL sink
(``transaction`` mode), until ``--batches`` micro-batches have committed. Per batch it
records the writer call's time and, of it, the time outside phase 1 (the coordination:
recovery checks, the decision, phase 2, the log's upkeep); at the marks, their medians
over the batches before the mark, the commit log's files and bytes and the marker rows,
with the same flat/not-flat rules as the local long run.

    .venv/bin/python -m benchmarks.spark_long_run --sink files --batches 1000
    .venv/bin/python -m benchmarks.spark_long_run --sink postgres --batches 1000 \\
        --output benchmarks/results/spark_long_run-postgres.json

About 0.3 to 0.5 s per batch of 8 partitions on this machine.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import twopc
from benchmarks.long_run import RESULTS, _reset_sql, _sink, _window, log_size, target_rows, verdicts

_log = logging.getLogger("bench")


def measure(
    *,
    sink_name: str,
    batches: int,
    marks: Sequence[int],
    partitions: int,
    rows_per_second: int,
    window: int,
    work_dir: Path | None = None,
) -> dict[str, Any]:
    """Run one streaming query until ``batches`` micro-batches committed; the medians at
    ``marks`` and the verdicts."""
    from pyspark.sql import DataFrame, SparkSession

    marks = sorted(m for m in marks if 0 < m <= batches)
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("twopc-spark-long-run")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(partitions))
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    with tempfile.TemporaryDirectory(prefix="twopc-spark-long-run-", dir=work_dir) as scratch:
        work = Path(scratch)
        sink = _sink(sink_name, work)
        writer = twopc.foreach_batch(
            sink, "spark-long-run", commit_log=None if sink_name == "files" else str(work / "log")
        )
        checkpoint = str(work / "checkpoint")
        total: list[float] = []
        coordination: list[float] = []
        at_marks: list[dict[str, Any]] = []
        done = threading.Event()
        failure: list[BaseException] = []
        started = time.perf_counter()

        def write(df: DataFrame, batch_id: int) -> None:
            if done.is_set():
                return
            before = time.perf_counter()
            writer(df.select("value"), batch_id)
            wall = time.perf_counter() - before
            metrics = writer.last_metrics
            assert metrics is not None
            total.append(wall * 1000)
            coordination.append((wall - metrics.write_seconds) * 1000)
            number = len(total)
            if number in marks:
                log_dir = Path(writer.coordinator(lambda: checkpoint).commit_log.url)
                at_marks.append(_mark(number, total, coordination, window, log_dir, sink_name))
                at_marks[-1]["elapsed_seconds"] = round(time.perf_counter() - started, 1)
                _log.info("batch %d: %s", number, at_marks[-1])
            if number >= batches:
                done.set()

        stream = (
            spark.readStream.format("rate")
            .option("rowsPerSecond", rows_per_second)
            .option("numPartitions", partitions)
            .load()
        )
        query = (
            stream.writeStream.foreachBatch(write)
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime="0 seconds")
            .start()
        )
        try:
            while not done.wait(5):
                if not query.isActive:
                    failure.append(RuntimeError(f"the query stopped: {query.exception()}"))
                    break
        finally:
            query.stop()
            writer.close()
        elapsed = time.perf_counter() - started
        if sink_name in ("postgres", "mysql"):
            _reset_sql(sink_name)
    spark.stop()
    if failure:
        raise failure[0]
    return {
        "sink": sink_name,
        "entry": "twopc.foreach_batch on a streaming query (rate source), local[2]",
        "batches": len(total),
        "partitions": partitions,
        "rows_per_second": rows_per_second,
        "window": window,
        "marks": at_marks,
        "first_batch_ms": round(total[0], 3),
        "wall_seconds": round(elapsed, 1),
        **verdicts(at_marks),
        **_total_verdict(at_marks),
    }


def _mark(  # noqa: PLR0917
    number: int,
    total: list[float],
    coordination: list[float],
    window: int,
    log_dir: Path,
    sink_name: str,
) -> dict[str, Any]:
    batch = number - 1
    recent = _window(coordination, batch, window)
    whole = _window(total, batch, window)
    return {
        "batch": number,
        "median_ms": round(statistics.median(recent), 3),
        "p95_ms": round(sorted(recent)[int(0.95 * (len(recent) - 1))], 3),
        "batch_median_ms": round(statistics.median(whole), 3),
        # the local long run's rules read these; on Spark no fsync clock is installed
        "without_fsync_median_ms": round(statistics.median(recent), 3),
        "fsyncs_per_batch": 0,
        "window": len(recent),
        "log": log_size(log_dir),
        **target_rows(sink_name),
    }


def _total_verdict(marks: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The whole batch (the Spark job included) by the same rule as the coordination."""
    limit = 1.5 * marks[0]["batch_median_ms"] + 1.0
    return {"batch_limit_ms": round(limit, 3), "batch_flat": marks[-1]["batch_median_ms"] <= limit}


def describe(result: dict[str, Any]) -> str:
    lines = [
        f"{result['sink']} on Spark: {result['batches']:,} batches of {result['partitions']} "
        f"partitions in {result['wall_seconds']:.0f} s"
    ]
    for m in result["marks"]:
        lines.append(
            f"  batch {m['batch']:>5,}: batch median {m['batch_median_ms']:8.1f} ms, of it "
            f"outside phase 1 {m['median_ms']:7.1f} ms (p95 {m['p95_ms']:.1f}), commit log "
            f"{m['log']['files']} files, {m['log']['bytes']:,} bytes"
            + (f", marker rows {m['marker_rows']:,}" if "marker_rows" in m else "")
        )
    lines.append(
        f"  batch time flat: {result['batch_flat']} (limit {result['batch_limit_ms']} ms); "
        f"outside phase 1 flat: {result['time_flat']} (limit {result['time_limit_ms']} ms); "
        f"log flat: {result['log_flat']} (compared at {result['log_compared']})"
    )
    return "\n".join(lines)


def _ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.spark_long_run", description=__doc__
    )
    parser.add_argument("--sink", choices=["files", "postgres"], default="files")
    parser.add_argument("--batches", type=int, default=1_000)
    parser.add_argument("--at", type=_ints, default=(10, 200, 500, 1_000), help="marks")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--rows-per-second", type=int, default=2_000)
    parser.add_argument("--window", type=int, default=100, help="batches per median")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    result = measure(
        sink_name=args.sink,
        batches=args.batches,
        marks=args.at,
        partitions=args.partitions,
        rows_per_second=args.rows_per_second,
        window=args.window,
    )
    result["run_id"] = str(uuid.uuid4())
    output = args.output or RESULTS / f"spark_long_run-{args.sink}.json"
    output.write_text(json.dumps(result, indent=2) + "\n")
    print(describe(result))
    print(f"written to {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
