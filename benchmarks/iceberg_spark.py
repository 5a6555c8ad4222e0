#!/usr/bin/env python
"""twopc's Iceberg sink in ``foreachBatch`` against Spark's own Iceberg writer
(``writeStream.format("iceberg")``), the same micro-batches into tables of one catalog.

Needs a PySpark for which Maven Central has an Iceberg Spark runtime: PySpark 4.0 with
``iceberg-spark-runtime-4.0_2.13`` (there is none for 4.2 or 4.3, the PySpark of this
repository's virtualenv). Run it from a virtualenv with ``pyspark==4.0.*`` and twopc with
its ``iceberg`` extra, e.g.::

    uv venv /tmp/v40 --python 3.11
    VIRTUAL_ENV=/tmp/v40 uv pip install -e ".[iceberg,spark]" "pyspark[connect]==4.0.0"
    PYSPARK_PYTHON=/tmp/v40/bin/python /tmp/v40/bin/python benchmarks/iceberg_spark.py

Both write into one catalog: the tables of pyiceberg's SQL catalog on a SQLite file, which
Spark reaches as Iceberg's JDBC catalog (the same tables; ``org.xerial:sqlite-jdbc``); the
runtime and the driver come from Maven Central through ``spark.jars.packages``. Input:
``--batches`` Parquet files of ``--rows`` rows (bigint, timestamp, a ~20-character string,
double), one file per micro-batch (``maxFilesPerTrigger=1``), ``--partitions`` partitions.
Each query runs over all of them (``availableNow``); the time is the query's, start to
end; repetitions alternate. Each table is created by Spark's catalog before its query.
twopc runs three times: on its Spark write path (``write_path="spark"``, what ``auto``
chooses for such a table), the same with ``background_commit=True`` (the commit in a
thread while Spark goes on; the time includes ``writer.close()``, which waits for the last
commit), and in Python tasks (``write_path="python"``). Ratio = Spark's time /
twopc's time (above 1: twopc is faster).
The tables are read back after each run and must each hold every row once.
``parquet_job`` is the floor of all of them: the same micro-batches through Spark's Parquet
job into a plain directory in ``foreachBatch``, no table and no commit.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_OUTPUT = HERE / "results" / "iceberg_spark.json"
RUNTIME = "org.apache.iceberg:iceberg-spark-runtime-{spark}_2.13:{iceberg}"
SQLITE_JDBC = "org.xerial:sqlite-jdbc:3.50.3.0"
CATALOG = "lake"


def write_input(directory: Path, batches: int, rows: int) -> None:
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    directory.mkdir(parents=True)
    base = dt.datetime(2026, 1, 1)
    for index in range(batches):
        ids = pa.array(range(index * rows, (index + 1) * rows), pa.int64())
        table = pa.table(
            {
                "id": ids,
                "ts": pa.array([base] * rows, pa.timestamp("us")),
                "name": pc.binary_join_element_wise("customer-", pc.cast(ids, pa.string()), ""),
                "score": pc.multiply(pc.cast(ids, pa.float64()), 0.5),
            }
        )
        pq.write_table(table, directory / f"part-{index:04d}.parquet")
        time.sleep(0.01)


def session(warehouse: Path, iceberg: str) -> Any:
    import pyspark
    from pyspark.sql import SparkSession

    spark_version = ".".join(pyspark.__version__.split(".")[:2])
    packages = f"{RUNTIME.format(spark=spark_version, iceberg=iceberg)},{SQLITE_JDBC}"
    return (
        SparkSession.builder.master("local[2]")
        .appName("twopc-iceberg-bench")
        .config("spark.jars.packages", packages)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config(
            "spark.sql.extensions",
            "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions",
        )
        .config(f"spark.sql.catalog.{CATALOG}", "org.apache.iceberg.spark.SparkCatalog")
        .config(f"spark.sql.catalog.{CATALOG}.type", "jdbc")
        .config(f"spark.sql.catalog.{CATALOG}.uri", f"jdbc:sqlite:{warehouse}/twopc-catalog.db")
        .config(f"spark.sql.catalog.{CATALOG}.warehouse", f"file://{warehouse}")
        # twopc commits through pyiceberg: Spark must not read a table from its own cache
        .config(f"spark.sql.catalog.{CATALOG}.cache-enabled", "false")
        .getOrCreate()
    )


def stream(spark: Any, source: Path, partitions: int) -> Any:
    schema = spark.read.parquet(str(source)).schema
    frame = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(source))
    return frame.repartition(partitions)


def create_table(spark: Any, table: str) -> None:
    """The table, created by Spark's Iceberg catalog: the same for both writers."""
    spark.sql(
        f"CREATE TABLE IF NOT EXISTS {CATALOG}.bench.{table} "
        "(id bigint, ts timestamp_ntz, name string, score double) USING iceberg"
    )


def run_spark(spark: Any, source: Path, work: Path, table: str, partitions: int) -> float:
    create_table(spark, table)
    started = time.perf_counter()
    query = (
        stream(spark, source, partitions)
        .writeStream.format("iceberg")
        .outputMode("append")
        .option("checkpointLocation", str(work / f"chk-{table}"))
        .trigger(availableNow=True)
        .toTable(f"{CATALOG}.bench.{table}")
    )
    query.awaitTermination()
    return time.perf_counter() - started


def run_foreach_batch(
    spark: Any, source: Path, work: Path, name: str, partitions: int, *, write: Any
) -> None:
    """The micro-batches through ``write`` in ``foreachBatch``, until the input is read."""
    query = (
        stream(spark, source, partitions)
        .writeStream.option("checkpointLocation", str(work / f"chk-{name}"))
        .foreachBatch(write)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


def run_twopc(
    spark: Any,
    source: Path,
    work: Path,
    table: str,
    partitions: int,
    *,
    warehouse: Path,
    write_path: str,
    background_commit: bool = False,
) -> float:
    import twopc

    create_table(spark, table)
    sink = twopc.create_sink(
        "iceberg",
        table=f"bench.{table}",
        warehouse=str(warehouse),
        catalog=CATALOG,
        write_path=write_path,
    )
    writer = twopc.foreach_batch(
        sink, sink_id=table.replace("_", "-"), background_commit=background_commit
    )
    started = time.perf_counter()
    run_foreach_batch(spark, source, work, table, partitions, write=writer)
    writer.close()  # with background_commit: waits for the last batch's commit (timed)
    return time.perf_counter() - started


def run_parquet_job(spark: Any, source: Path, work: Path, name: str, partitions: int) -> float:
    """The floor of both writers: the same micro-batches through Spark's Parquet job into a
    plain directory, in ``foreachBatch``, with no table and no commit."""
    target = str(work / f"parquet-{name}")

    def write(df: Any, _batch_id: int) -> None:
        df.write.mode("append").parquet(target)

    started = time.perf_counter()
    run_foreach_batch(spark, source, work, name, partitions, write=write)
    return time.perf_counter() - started


def count(spark: Any, table: str) -> tuple[int, int]:
    frame = spark.table(f"{CATALOG}.bench.{table}")
    return frame.count(), frame.select("id").distinct().count()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows per micro-batch")
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--iceberg", default="1.10.0", help="the Iceberg Spark runtime")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-iceberg-spark-"))
    warehouse = work / "warehouse"
    warehouse.mkdir()
    try:
        write_input(work / "in", args.batches, args.rows)
        spark = session(warehouse, args.iceberg)
        spark.sparkContext.setLogLevel("ERROR")
        import pyspark

        # a first, untimed run of each, so that neither pays for the JVM's warm-up alone
        run_spark(spark, work / "in", work, "warm_spark", args.partitions)
        variants = {
            "twopc_iceberg": ("spark", False),
            "twopc_iceberg_background": ("spark", True),
            "twopc_iceberg_python": ("python", False),
        }
        for name, (path, background) in variants.items():
            run_twopc(
                spark,
                work / "in",
                work,
                f"warm_{name}",
                args.partitions,
                warehouse=warehouse,
                write_path=path,
                background_commit=background,
            )
        run_parquet_job(spark, work / "in", work, "warm", args.partitions)
        seconds: dict[str, list[float]] = {"spark_iceberg": []}
        seconds.update({name: [] for name in variants})
        seconds["parquet_job"] = []
        total = args.rows * args.batches
        for repeat in range(args.repeat):
            seconds["spark_iceberg"].append(
                run_spark(spark, work / "in", work, f"spark_{repeat}", args.partitions)
            )
            for name, (path, background) in variants.items():
                seconds[name].append(
                    run_twopc(
                        spark,
                        work / "in",
                        work,
                        f"{name}_{repeat}",
                        args.partitions,
                        warehouse=warehouse,
                        write_path=path,
                        background_commit=background,
                    )
                )
            seconds["parquet_job"].append(
                run_parquet_job(spark, work / "in", work, str(repeat), args.partitions)
            )
            written = spark.read.parquet(str(work / f"parquet-{repeat}")).count()
            if written != total:
                raise SystemExit(f"parquet_job {repeat}: {written} rows, not {total}")
            for name in (f"spark_{repeat}", *(f"{v}_{repeat}" for v in variants)):
                rows, distinct = count(spark, name)
                if (rows, distinct) != (total, total):
                    raise SystemExit(f"{name}: {rows} rows, {distinct} distinct, not {total}")
            print(
                f"repeat {repeat + 1}: "
                + ", ".join(f"{name} {values[-1]:.2f} s" for name, values in seconds.items())
            )
        medians = {name: statistics.median(values) for name, values in seconds.items()}
        result = {
            "measured": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "pyspark": pyspark.__version__,
            "iceberg_runtime": args.iceberg,
            "rows_per_batch": args.rows,
            "batches": args.batches,
            "partitions": args.partitions,
            "seconds": seconds,
            "median_seconds": medians,
            "ratio_twopc_vs_spark": medians["spark_iceberg"] / medians["twopc_iceberg"],
            "ratio_twopc_background_commit_vs_spark": (
                medians["spark_iceberg"] / medians["twopc_iceberg_background"]
            ),
            "ratio_twopc_python_path_vs_spark": (
                medians["spark_iceberg"] / medians["twopc_iceberg_python"]
            ),
            # the most any writer of these tables could reach: no table, no commit
            "ratio_parquet_job_vs_spark": medians["spark_iceberg"] / medians["parquet_job"],
        }
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(
        "twopc / Spark's Iceberg writer, throughput: "
        f"{result['ratio_twopc_vs_spark']:.2f}x (Spark write path), "
        f"{result['ratio_twopc_background_commit_vs_spark']:.2f}x (Spark write path, "
        "background commit), "
        f"{result['ratio_twopc_python_path_vs_spark']:.2f}x (Python tasks); "
        f"the Parquet job alone: {result['ratio_parquet_job_vs_spark']:.2f}x"
    )
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
