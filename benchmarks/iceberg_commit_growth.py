#!/usr/bin/env python
"""What one Iceberg commit costs as the table's history grows, twopc's against pyiceberg's
own ``append``, without Spark.

A streaming query adds a snapshot per batch, and every commit rewrites the table's
metadata, which lists every snapshot the table keeps: a commit's cost grows with the
table's age until snapshots are expired. This writes ``--snapshots`` tiny batches
(``--rows`` rows in each of 2 partitions) into two tables of one embedded catalog
(pyiceberg's SQL catalog on SQLite, a local warehouse), alternating:

* ``twopc_iceberg``: the batch prepared as two tasks would prepare it (not timed), then
  the sink's ``commit`` of both (timed: the table loaded fresh, the marker checked, the
  snapshot and the marker committed);
* ``pyiceberg_append``: ``catalog.load_table`` and ``table.append`` of the same rows as
  one Arrow table (timed).

At every ``--every`` snapshots it records each writer's median commit time over the
``--window`` commits before the mark. Ratio = pyiceberg's time / twopc's time.

    .venv/bin/python benchmarks/iceberg_commit_growth.py --snapshots 600 --every 100

It writes ``results/iceberg_commit_growth.json`` (``--output``). See docs/benchmarks-history.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_OUTPUT = HERE / "results" / "iceberg_commit_growth.json"
SINK_ID = "bench-growth"


def _rows(batch_id: int, partition: int, rows: int) -> Any:
    import pyarrow as pa

    start = (batch_id * 2 + partition) * rows
    ids = pa.array(range(start, start + rows), pa.int64())
    return pa.table({"id": ids, "name": pa.array([f"customer-{i}" for i in ids.to_pylist()])})


def _twopc_commit(sink: Any, batch_id: int, rows: int) -> float:
    """One batch prepared by two tasks (not timed), then committed; milliseconds."""
    import twopc

    committables = []
    for partition in range(2):
        ctx = twopc.TaskContext(SINK_ID, "growth-query", batch_id, partition, 0)
        txn = sink.begin_transaction(ctx)
        for batch in _rows(batch_id, partition, rows).to_batches():
            sink.invoke(txn, batch)
        committables.append(sink.pre_commit(txn))
    started = time.perf_counter()
    sink.commit(committables)
    return (time.perf_counter() - started) * 1000


def _pyiceberg_append(catalog: Any, table: str, batch_id: int, rows: int) -> float:
    """The same rows appended by pyiceberg; milliseconds."""
    import pyarrow as pa

    data = pa.concat_tables([_rows(batch_id, partition, rows) for partition in range(2)])
    started = time.perf_counter()
    catalog.load_table(table).append(data)
    return (time.perf_counter() - started) * 1000


def measure(args: argparse.Namespace, warehouse: Path) -> list[dict[str, Any]]:
    import pyarrow as pa

    from twopc_iceberg import IcebergSink

    sink = IcebergSink("bench.twopc", warehouse=str(warehouse), create_table=True)
    catalog = sink.access.catalog_object()
    catalog.create_namespace_if_not_exists("bench")
    schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
    catalog.create_table("bench.twopc", schema=schema)
    catalog.create_table("bench.pyiceberg", schema=schema)
    times: dict[str, list[float]] = {"twopc_iceberg": [], "pyiceberg_append": []}
    marks = []
    for batch_id in range(1, args.snapshots + 1):
        times["twopc_iceberg"].append(_twopc_commit(sink, batch_id, args.rows))
        times["pyiceberg_append"].append(
            _pyiceberg_append(catalog, "bench.pyiceberg", batch_id, args.rows)
        )
        if batch_id % args.every == 0:
            medians = {
                name: statistics.median(values[-args.window :]) for name, values in times.items()
            }
            mark = {
                "snapshots": batch_id,
                "median_ms": medians,
                "ratio_twopc_vs_pyiceberg": medians["pyiceberg_append"] / medians["twopc_iceberg"],
            }
            marks.append(mark)
            print(
                f"{batch_id} snapshots: twopc commit {medians['twopc_iceberg']:.1f} ms, "
                f"pyiceberg append {medians['pyiceberg_append']:.1f} ms "
                f"({mark['ratio_twopc_vs_pyiceberg']:.2f}x)",
                flush=True,
            )
    for name in ("bench.twopc", "bench.pyiceberg"):
        table = catalog.load_table(name)
        rows = table.scan().to_arrow().num_rows
        if rows != args.snapshots * 2 * args.rows or len(table.metadata.snapshots) < args.snapshots:
            raise SystemExit(f"{name}: {rows} rows, {len(table.metadata.snapshots)} snapshots")
    return marks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--snapshots", type=int, default=600, help="batches per table")
    parser.add_argument("--every", type=int, default=100, help="snapshots between marks")
    parser.add_argument("--window", type=int, default=20, help="commits per median")
    parser.add_argument("--rows", type=int, default=5, help="rows per partition and batch")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    args = parser.parse_args()
    import pyiceberg

    warehouse = Path(tempfile.mkdtemp(prefix="bench-iceberg-growth-"))
    try:
        marks = measure(args, warehouse)
    finally:
        shutil.rmtree(warehouse, ignore_errors=True)
    result = {
        "measured": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "pyiceberg": pyiceberg.__version__,
        "rows_per_partition": args.rows,
        "window": args.window,
        "marks": marks,
    }
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
