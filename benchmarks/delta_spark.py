#!/usr/bin/env python
"""twopc's Delta sink in ``foreachBatch`` against Spark's own Delta writer and against
``deltalake.write_deltalake`` of the same Arrow data, and the sink's memory as a batch
grows.

**Throughput.** Input: ``--batches`` Parquet files of ``--rows`` rows (bigint, timestamp,
a ~20-character string, double), one file per micro-batch (``maxFilesPerTrigger=1``),
``--partitions`` partitions. Each writer fills a table of its own, in the same Spark
session, repetitions alternating:

* ``spark_delta``: ``writeStream.format("delta")``, Spark's Delta sink (the Delta Spark
  package from Maven Central);
* ``spark_delta_foreach``: ``foreachBatch`` with ``df.write.format("delta")`` and
  ``txnAppId`` / ``txnVersion``, Delta's own idempotent writes;
* ``twopc_delta``: ``twopc.foreach_batch`` with the ``delta`` sink (phase 1 in Python
  tasks, one deltalake commit per batch on the driver), and the same with
  ``background_commit=True`` (``twopc_delta_background``; the time includes
  ``writer.close()``, which waits for the last commit);
* ``twopc_delta_spark``: the same sink on its Spark write path (``write_path="spark"``:
  Spark's own Parquet writer runs phase 1, one job per batch); that path writes tables
  that exist, so its table is created empty, with the input's columns, before the clock
  starts;
* ``deltalake``: ``write_deltalake(table, arrow, mode="append")`` per input file, the files
  read into Arrow before the clock starts (no Spark, one process).

A Spark query's time is start to end (``availableNow``). Ratio = the other's time /
twopc's time (above 1: twopc is faster), medians of ``--repeat`` runs. Every table is read
back with Spark's Delta reader after each run and must hold every row once.

**Memory** (``--memory-rows``): for each size, a fresh process runs one batch of that many
rows (generated in the JVM, ``spark.range``, ``--partitions`` tasks) through
``twopc.write_batch`` into a new table and reports the peak resident set (``VmHWM``) of
its Python driver, of every Python worker (the PySpark daemon and its forked workers) and
of the JVM, sampled every 50 ms from ``/proc``.

Needs a PySpark for which Maven Central has the Delta Spark package: its newest,
``delta-spark_2.13`` 4.4.0, is built against Spark 4.2 (see docs/backends/delta.md). E.g.::

    ~/.cache/twopc/tools/bin/uv venv ~/.cache/twopc/venv-delta-spark --python 3.11
    VIRTUAL_ENV=~/.cache/twopc/venv-delta-spark ~/.cache/twopc/tools/bin/uv pip install \\
        -e ".[delta,spark]" "pyspark[connect]==4.2.0"
    V=~/.cache/twopc/venv-delta-spark/bin/python
    PYSPARK_PYTHON=$V $V benchmarks/delta_spark.py --rows 1000000 --batches 3 --repeat 3 \\
        --memory-rows 1000000,5000000,10000000

Writes ``benchmarks/results/delta_spark.json`` (``--output``), with the load average before
the timed runs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_OUTPUT = HERE / "results" / "delta_spark.json"
DELTA = "io.delta:delta-spark_2.13:4.4.0"


def write_input(directory: Path, batches: int, rows: int) -> None:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    directory.mkdir(parents=True)
    base = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    for index in range(batches):
        ids = pa.array(range(index * rows, (index + 1) * rows), pa.int64())
        table = pa.table(
            {
                "id": ids,
                "ts": pa.array([base] * rows, pa.timestamp("us", tz="UTC")),
                "name": pc.binary_join_element_wise("customer-", pc.cast(ids, pa.string()), ""),
                "score": pc.multiply(pc.cast(ids, pa.float64()), 0.5),
            }
        )
        pq.write_table(table, directory / f"part-{index:04d}.parquet")
        time.sleep(0.01)


def session(delta: str | None, partitions: int) -> Any:
    from pyspark.sql import SparkSession

    ivy = os.environ.get("TWOPC_SPARK_IVY", str(Path.home() / ".cache" / "twopc" / "ivy"))
    builder = (
        SparkSession.builder.master(f"local[{partitions}]")
        .appName("twopc-delta-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(partitions))
        .config("spark.sql.session.timeZone", "UTC")
    )
    if delta:
        builder = (
            builder.config("spark.jars.packages", delta)
            .config("spark.jars.ivy", ivy)
            .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
            .config(
                "spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"
            )
        )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def stream(spark: Any, source: Path, partitions: int) -> Any:
    schema = spark.read.parquet(str(source)).schema
    frame = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(source))
    return frame.repartition(partitions)


def run_spark(spark: Any, source: Path, work: Path, table: str, partitions: int) -> float:
    started = time.perf_counter()
    query = (
        stream(spark, source, partitions)
        .writeStream.format("delta")
        .outputMode("append")
        .option("checkpointLocation", str(work / f"chk-{table}"))
        .trigger(availableNow=True)
        .start(str(work / table))
    )
    query.awaitTermination()
    return time.perf_counter() - started


def run_spark_foreach(spark: Any, source: Path, work: Path, table: str, partitions: int) -> float:
    path = str(work / table)

    def write(batch: Any, batch_id: int) -> None:
        (
            batch.write.format("delta")
            .mode("append")
            .option("txnAppId", table)
            .option("txnVersion", batch_id)
            .save(path)
        )

    started = time.perf_counter()
    query = (
        stream(spark, source, partitions)
        .writeStream.option("checkpointLocation", str(work / f"chk-{table}"))
        .foreachBatch(write)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return time.perf_counter() - started


def run_twopc(
    spark: Any,
    source: Path,
    work: Path,
    table: str,
    partitions: int,
    *,
    background: bool = False,
    spark_path: bool = False,
) -> float:
    import twopc

    if spark_path:
        import pyarrow.parquet as pq
        from deltalake import write_deltalake

        schema = pq.read_schema(next(iter(sorted(source.glob("*.parquet")))))
        write_deltalake(str(work / table), schema.empty_table())
        sink = twopc.create_sink("delta", table_uri=str(work / table), write_path="spark")
    else:
        sink = twopc.create_sink(
            "delta", table_uri=str(work / table), create_table=True, write_path="python"
        )
    writer = twopc.foreach_batch(
        sink, sink_id=table.replace("_", "-"), background_commit=background
    )
    started = time.perf_counter()
    query = (
        stream(spark, source, partitions)
        .writeStream.option("checkpointLocation", str(work / f"chk-{table}"))
        .foreachBatch(writer)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    writer.close()  # with background_commit: waits for the last batch's commit (timed)
    return time.perf_counter() - started


def run_deltalake(arrow: list[Any], work: Path, table: str) -> float:
    from deltalake import write_deltalake

    started = time.perf_counter()
    for batch in arrow:
        write_deltalake(str(work / table), batch, mode="append")
    return time.perf_counter() - started


def check(work: Path, table: str, total: int) -> None:
    import pyarrow.compute as pc
    from deltalake import DeltaTable

    ids = DeltaTable(str(work / table)).to_pyarrow_table(columns=["id"]).column("id")
    distinct = len(pc.unique(ids))
    if (len(ids), distinct) != (total, total):
        raise SystemExit(f"{table}: {len(ids)} rows, {distinct} distinct, not {total}")


def check_with_spark(spark: Any, work: Path, table: str, total: int) -> None:
    frame = spark.read.format("delta").load(str(work / table))
    rows, distinct = frame.count(), frame.select("id").distinct().count()
    if (rows, distinct) != (total, total):
        raise SystemExit(f"{table}: {rows} rows, {distinct} distinct, not {total}")


def load_average() -> float:
    return os.getloadavg()[0]


def throughput(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import pyarrow.parquet as pq
    import pyspark

    source = work / "in"
    write_input(source, args.batches, args.rows)
    arrow = [pq.read_table(p) for p in sorted(source.glob("*.parquet"))]
    spark = session(args.delta, args.partitions)

    def one(name: str, table: str) -> float:
        if name == "spark_delta":
            return run_spark(spark, source, work, table, args.partitions)
        if name == "spark_delta_foreach":
            return run_spark_foreach(spark, source, work, table, args.partitions)
        if name == "deltalake":
            return run_deltalake(arrow, work, table)
        return run_twopc(
            spark,
            source,
            work,
            table,
            args.partitions,
            background=name == "twopc_delta_background",
            spark_path=name == "twopc_delta_spark",
        )

    names = ["spark_delta", "spark_delta_foreach", "twopc_delta", "twopc_delta_background"]
    names += ["twopc_delta_spark", "deltalake"]
    for name in names:  # untimed: nobody pays for the JVM's warm-up alone
        one(name, f"warm_{name}")
    load = load_average()
    seconds: dict[str, list[float]] = {name: [] for name in names}
    total = args.rows * args.batches
    for repeat in range(args.repeat):
        order = names if repeat % 2 == 0 else names[::-1]  # alternating
        for name in order:
            seconds[name].append(one(name, f"{name}_{repeat}"))
            check_with_spark(spark, work, f"{name}_{repeat}", total)
        print(
            f"repeat {repeat + 1}: "
            + ", ".join(f"{name} {values[-1]:.2f} s" for name, values in seconds.items()),
            flush=True,
        )
    spark.stop()
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    return {
        "pyspark": pyspark.__version__,
        "delta_package": args.delta,
        "rows_per_batch": args.rows,
        "batches": args.batches,
        "partitions": args.partitions,
        "load_average_1min_before": round(load, 2),
        "load_average_1min_after": round(load_average(), 2),
        "seconds": seconds,
        "median_seconds": medians,
        "ratio_spark_delta_vs_twopc": medians["spark_delta"] / medians["twopc_delta"],
        "ratio_spark_delta_foreach_vs_twopc": (
            medians["spark_delta_foreach"] / medians["twopc_delta"]
        ),
        "ratio_spark_delta_vs_twopc_background": (
            medians["spark_delta"] / medians["twopc_delta_background"]
        ),
        "ratio_deltalake_vs_twopc": medians["deltalake"] / medians["twopc_delta"],
        "ratio_spark_delta_vs_twopc_spark_path": (
            medians["spark_delta"] / medians["twopc_delta_spark"]
        ),
        "ratio_spark_delta_foreach_vs_twopc_spark_path": (
            medians["spark_delta_foreach"] / medians["twopc_delta_spark"]
        ),
    }


# -- memory --------------------------------------------------------------------------------


def _status(pid: int) -> dict[str, int]:
    found = {}
    try:
        with open(f"/proc/{pid}/status") as handle:
            for line in handle:
                if line.startswith(("VmHWM:", "VmRSS:")):
                    found[line.split(":")[0]] = int(line.split()[1])
    except OSError:
        pass
    return found


def _children(pid: int) -> list[int]:
    found = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                found.extend(int(c) for c in handle.read().split())
    except OSError:
        pass
    return found


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class PeakSampler:
    """Peak resident sets (KiB) of this process and its descendants, by kind."""

    def __init__(self) -> None:
        self.peaks: dict[int, int] = {}
        self.kinds: dict[int, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _kind(self, pid: int) -> str:
        if pid == os.getpid():
            return "python_driver"
        line = _cmdline(pid)
        if "java" in line.split(" ")[0]:
            return "jvm"
        if "pyspark" in line or "python" in line:
            return "python_worker"
        return "other"

    def sample(self) -> None:
        pending, seen = [os.getpid()], set()
        while pending:
            pid = pending.pop()
            if pid in seen:
                continue
            seen.add(pid)
            status = _status(pid)
            peak = max(status.values(), default=0)
            if peak:
                self.peaks[pid] = max(self.peaks.get(pid, 0), peak)
                if self.kinds.get(pid, "other") == "other":  # spark-class execs the JVM
                    self.kinds[pid] = self._kind(pid)
            pending.extend(_children(pid))

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.sample()

    def __enter__(self) -> PeakSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.sample()
        self._stop.set()
        self._thread.join()

    def mib(self, kind: str) -> float:
        values = [v for pid, v in self.peaks.items() if self.kinds.get(pid) == kind]
        return round(max(values, default=0) / 1024, 1)

    def count(self, kind: str) -> int:
        return sum(1 for k in self.kinds.values() if k == kind)


def memory_child(rows: int, partitions: int, work: Path) -> dict[str, Any]:
    """One batch of ``rows`` through ``twopc.write_batch``, in this (fresh) process."""
    import twopc

    with PeakSampler() as sampler:
        spark = session(None, partitions)
        frame = spark.range(0, rows, numPartitions=partitions).selectExpr(
            "id",
            "timestamp'2026-01-01 00:00:00' AS ts",
            "concat('customer-', CAST(id AS string)) AS name",
            "id * 0.5 AS score",
        )
        sink = twopc.create_sink("delta", table_uri=str(work / "memory"), create_table=True)
        started = time.perf_counter()
        twopc.write_batch(frame, sink, "memory", write_id="one", commit_log=str(work / "log"))
        seconds = time.perf_counter() - started
        sampler.sample()
        spark.stop()
    return {
        "rows": rows,
        "seconds": round(seconds, 2),
        "python_driver_peak_mib": sampler.mib("python_driver"),
        "python_worker_peak_mib": sampler.mib("python_worker"),
        "python_workers_seen": sampler.count("python_worker"),
        "jvm_peak_mib": sampler.mib("jvm"),
    }


def memory(args: argparse.Namespace, work: Path) -> list[dict[str, Any]]:
    results = []
    for rows in (int(r) for r in args.memory_rows.split(",") if r):
        directory = work / f"memory-{rows}"
        directory.mkdir()
        done = subprocess.run(
            [
                sys.executable,
                __file__,
                "--memory-child",
                str(rows),
                "--partitions",
                str(args.partitions),
                "--work",
                str(directory),
            ],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)},
        )
        if done.returncode != 0:
            raise SystemExit(f"memory run of {rows} rows failed:\n{done.stderr[-4000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        check(directory, "memory", rows)
        shutil.rmtree(directory, ignore_errors=True)
        print(
            f"memory {rows:,} rows: Python driver {result['python_driver_peak_mib']} MiB, "
            f"Python workers {result['python_worker_peak_mib']} MiB (peak of one), "
            f"JVM {result['jvm_peak_mib']} MiB, {result['seconds']} s",
            flush=True,
        )
        results.append(result)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows per micro-batch")
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--delta", default=DELTA, help="the Delta Spark package (Maven)")
    parser.add_argument("--memory-rows", default="1000000,5000000,10000000")
    parser.add_argument("--no-throughput", action="store_true")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--memory-child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if args.memory_child is not None:
        print(json.dumps(memory_child(args.memory_child, args.partitions, args.work)))
        return
    work = Path(tempfile.mkdtemp(prefix="bench-delta-spark-"))
    try:
        result: dict[str, Any] = {
            "measured": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "cpus": os.cpu_count(),
        }
        if not args.no_throughput:
            result.update(throughput(args, work))
        result["memory"] = memory(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if "median_seconds" in result:
        print(
            "Spark's Delta writer / twopc: "
            f"{result['ratio_spark_delta_vs_twopc']:.2f}x (writeStream.format('delta')), "
            f"{result['ratio_spark_delta_foreach_vs_twopc']:.2f}x (foreachBatch + txnAppId), "
            f"{result['ratio_spark_delta_vs_twopc_background']:.2f}x (twopc background "
            f"commit); write_deltalake / twopc: {result['ratio_deltalake_vs_twopc']:.2f}x; "
            "Spark's Delta writer / twopc's Spark write path: "
            f"{result['ratio_spark_delta_vs_twopc_spark_path']:.2f}x (writeStream), "
            f"{result['ratio_spark_delta_foreach_vs_twopc_spark_path']:.2f}x (foreachBatch)"
        )
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
