"""Spark's own Delta package against a table twopc wrote, run as its own process (its JVM
needs the Delta jars at start, and a PySpark for which Maven Central has them).

1. **twopc writes**: a streaming query (Parquet files in, one per micro-batch) writes a
   Delta table through ``twopc.foreach_batch`` and the ``delta`` sink; its driver is
   SIGKILLed after batch 1's decision (``TWOPC_FAULTS``) and restarted from its checkpoint.
   The first run creates the table, so it writes in Python tasks; the restart finds the
   table and writes batch 2 through Spark's own Parquet writer (``write_path="auto"``):
   the table holds files of both paths.
2. **Spark reads**: ``spark.read.format("delta")`` must see every id once, one commit per
   batch in ``DESCRIBE HISTORY``.
3. **Spark's writer skips what twopc committed**: a second query over the same files, on a
   checkpoint of its own, writes each micro-batch with Spark's Delta writer in
   ``foreachBatch`` with ``txnAppId`` = twopc's app id (``twopc-<sink id>-<query id>``) and
   ``txnVersion`` = the batch id: it must commit nothing. A new input file is then written
   by Spark's query (batch 3), and twopc's query, run again over it, finds its batch 3
   committed under its app id and commits nothing either.

Prints one JSON object at the end (``{"pyspark": ..., "delta": ..., ...}``) and exits 0
when every check held, 1 otherwise.

    PYSPARK_PYTHON=VENV/bin/python VENV/bin/python tests/e2e/delta_spark_reader.py \\
        --work DIR [--delta io.delta:delta-spark_2.13:4.4.0]

The Delta jars come from Maven Central through ``spark.jars.packages`` into
``~/.cache/twopc/ivy`` (``TWOPC_SPARK_IVY`` moves it). Maven Central's newest
``delta-spark_2.13`` (4.4.0) is built against Spark 4.2: run this from a virtualenv with
``pyspark==4.2.0`` (see docs/backends/delta.md, "What readers see").
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

DELTA = "io.delta:delta-spark_2.13:4.4.0"
SINK_ID = "events"
ROWS = 500
BATCHES = 3
CRASH = "after_decision:kill@batch=1"


def ivy() -> str:
    return os.environ.get("TWOPC_SPARK_IVY", str(Path.home() / ".cache" / "twopc" / "ivy"))


def session(delta: str | None, app: str) -> Any:
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
    )
    if delta:
        builder = (
            builder.config("spark.jars.packages", delta)
            .config("spark.jars.ivy", ivy())
            .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
            .config(
                "spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"
            )
        )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def write_input(directory: Path, index: int) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    directory.mkdir(parents=True, exist_ok=True)
    ids = pa.array(range(index * 1000, index * 1000 + ROWS), pa.int64())
    table = pa.table({"id": ids, "v": pa.array([f"batch-{index}"] * ROWS)})
    pq.write_table(table, directory / f"part-{index:04d}.parquet")
    time.sleep(0.02)  # distinct modification times: the file source orders by them


def stream(spark: Any, source: Path) -> Any:
    schema = "id bigint, v string"
    return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(source))


def run_twopc(work: Path) -> None:
    """The child process: twopc's query over every input file (``availableNow``)."""
    import twopc

    spark = session(None, "twopc-delta-writer")
    sink = twopc.create_sink("delta", table_uri=str(work / "table"), create_table=True)
    writer = twopc.foreach_batch(sink, sink_id=SINK_ID)
    query = (
        stream(spark, work / "in")
        .repartition(2)
        .writeStream.option("checkpointLocation", str(work / "chk-twopc"))
        .foreachBatch(writer)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    writer.close()
    spark.stop()


def twopc_child(work: Path, faults: str | None) -> int:
    env = {**os.environ, "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)}
    env.pop("TWOPC_FAULTS", None)
    if faults:
        env["TWOPC_FAULTS"] = faults
    done = subprocess.run(
        [sys.executable, __file__, "--work", str(work), "--role", "twopc"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if done.returncode not in (0, -signal.SIGKILL):
        sys.stderr.write(done.stderr[-4000:])
    return done.returncode


def query_id(checkpoint: Path) -> str:
    """Spark's query id, from the checkpoint's ``metadata`` file: twopc's query id."""
    return str(json.loads((checkpoint / "metadata").read_text().splitlines()[0])["id"])


def spark_txn_query(spark: Any, work: Path, app_id: str) -> None:
    """Spark's own idempotent Delta writes: ``txnAppId`` / ``txnVersion`` in foreachBatch."""
    table = str(work / "table")

    def write(batch: Any, batch_id: int) -> None:
        (
            batch.write.format("delta")
            .mode("append")
            .option("txnAppId", app_id)
            .option("txnVersion", batch_id)
            .save(table)
        )

    query = (
        stream(spark, work / "in")
        .writeStream.option("checkpointLocation", str(work / "chk-spark"))
        .foreachBatch(write)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


def read(spark: Any, table: str) -> dict[str, Any]:
    frame = spark.read.format("delta").load(table)
    ids = [int(r["id"]) for r in frame.select("id").collect()]
    history = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").collect()
    return {
        "rows": len(ids),
        "distinct": len(set(ids)),
        "ids": set(ids),
        "version": max(int(h["version"]) for h in history),
        "operations": [str(h["operation"]) for h in sorted(history, key=lambda h: h["version"])],
    }


def expected(batches: int) -> set[int]:
    return {b * 1000 + i for b in range(batches) for i in range(ROWS)}


def every_id_once(seen: dict[str, Any], batches: int) -> bool:
    return seen["ids"] == expected(batches) and seen["rows"] == len(expected(batches))


def file_writers(table: Path, batch: int) -> list[str]:
    """The ``created_by`` of each data file of ``batch`` (pyarrow's for Python tasks,
    parquet-mr's for Spark's writer)."""
    import pyarrow.parquet as pq

    files = sorted((table / "twopc-data" / SINK_ID).glob(f"*/{batch}/*/*.parquet"))
    return [str(pq.read_metadata(f).created_by) for f in files]


def unreferenced(table: Path) -> list[str]:
    """twopc's data files that no version of the log references."""
    from urllib.parse import unquote

    known = set()
    for entry in sorted((table / "_delta_log").glob("*.json")):
        for line in entry.read_text().splitlines():
            action = json.loads(line)
            for kind in ("add", "remove"):
                if kind in action:
                    known.add(unquote(action[kind]["path"]))
    data = table / "twopc-data"
    files = [str(p.relative_to(table)) for p in data.rglob("*.parquet")] if data.exists() else []
    return sorted(f for f in files if f not in known)


def demo(work: Path, delta: str) -> dict[str, Any]:
    import pyspark

    checks: dict[str, bool] = {}
    for index in range(BATCHES):
        write_input(work / "in", index)
    crashed = twopc_child(work, CRASH)
    checks["driver SIGKILLed after batch 1's decision"] = crashed == -signal.SIGKILL
    checks["restarted query finished"] = twopc_child(work, None) == 0
    spark = session(delta, "twopc-delta-reader")
    table = str(work / "table")
    seen = read(spark, table)
    checks["Spark's Delta reader sees every id once"] = every_id_once(seen, BATCHES)
    checks["one commit per batch"] = seen["version"] == BATCHES - 1
    writers = file_writers(work / "table", BATCHES - 1)
    checks["the restart wrote batch 2 with Spark's Parquet writer"] = bool(writers) and all(
        "parquet-mr" in w for w in writers
    )
    from twopc_delta import DeltaSink

    app_id = DeltaSink.app_id(SINK_ID, query_id(work / "chk-twopc"))
    before = seen["version"]
    spark_txn_query(spark, work, app_id)
    skipped = read(spark, table)
    checks["Spark's txnAppId writer skips batches 0-2"] = skipped[
        "version"
    ] == before and every_id_once(skipped, BATCHES)
    write_input(work / "in", BATCHES)
    spark_txn_query(spark, work, app_id)
    handed = read(spark, table)
    checks["Spark's writer commits batch 3 once"] = handed[
        "version"
    ] == before + 1 and every_id_once(handed, BATCHES + 1)
    checks["twopc's query, run again, skips the batch 3 Spark committed"] = (
        twopc_child(work, None) == 0
    )
    after = read(spark, table)
    checks["table unchanged by twopc's replay of batch 3"] = (
        after["version"] == handed["version"] and after["rows"] == handed["rows"]
    )
    # twopc's files of the batch Spark committed: no version references them, and twopc
    # cannot tell them from another attempt's without its own commitInfo, so it keeps
    # them for VACUUM (docs/backends/delta.md); every other file is in the log
    left = unreferenced(work / "table")
    checks["no twopc data file outside the log but batch 3's"] = all(
        f.split("/")[3] == str(BATCHES) for f in left
    )
    vectors = deletion_vectors(spark, work / "table")
    spark.stop()
    return {
        "pyspark": pyspark.__version__,
        "delta": delta,
        "app_id": app_id,
        "rows_read": after["rows"],
        "history": after["operations"],
        "unreferenced": left,
        "batch_2_written_by": sorted(set(writers)),
        "deletion_vectors": vectors,
        "checks": checks,
    }


def deletion_vectors(spark: Any, table: Path) -> dict[str, Any]:
    """What twopc does with the table once Spark's Delta turned deletion vectors on and
    deleted a row of one of twopc's files (a deletion vector on it): an append, then an
    upsert (which must refuse to rewrite a file that has a deletion vector)."""
    import twopc

    spark.sql(
        f"ALTER TABLE delta.`{table}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = true)"
    )
    spark.sql(f"DELETE FROM delta.`{table}` WHERE id = 0")
    found: dict[str, Any] = {"version_after_delete": read(spark, str(table))["version"]}
    # the append adds new ids; the upsert's keys are batch 0's, one of whose files has the
    # deletion vector
    for mode, keys, start in (("append", (), 5000), ("upsert", ("id",), 0)):
        rows = spark.range(start, start + ROWS).selectExpr("id", "'dv' AS v")
        options: dict[str, Any] = {"mode": mode, **({"key_columns": keys} if keys else {})}
        sink = twopc.create_sink("delta", table_uri=str(table), **options)
        before = read(spark, str(table))
        try:
            log = str(table.parent / f"log-dv-{mode}")
            twopc.write_batch(rows, sink, f"dv-{mode}", write_id="one", commit_log=log)
            found[mode] = "committed"
        except Exception as exc:
            found[mode] = f"{type(exc).__name__}: {exc}"[:2000]
        after = read(spark, str(table))
        found[f"{mode}_versions"] = [before["version"], after["version"]]
        found[f"{mode}_rows"] = [before["rows"], after["rows"]]
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--delta", default=DELTA, help="the Delta Spark package (Maven)")
    parser.add_argument("--role", choices=["demo", "twopc"], default="demo")
    args = parser.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if args.role == "twopc":
        run_twopc(args.work)
        return
    args.work.mkdir(parents=True, exist_ok=True)
    result = demo(args.work, args.delta)
    print(json.dumps(result, indent=2))
    sys.exit(0 if all(result["checks"].values()) else 1)


if __name__ == "__main__":
    main()
