#!/usr/bin/env python
"""twopc's Iceberg sink against pyiceberg's own ``append`` of the same Arrow data, and the
sink's memory as a batch grows.

**Throughput.** Both write the same rows into a fresh table of the same embedded catalog
(pyiceberg's SQL catalog on SQLite, a local warehouse), one snapshot per batch:

* ``pyiceberg_append``: ``table.append(arrow_table)`` per batch, the whole batch in memory;
* ``twopc_iceberg``: the sink driven through the protocol the way one Spark task and its
  driver drive it (``begin_transaction``, ``invoke`` per Arrow batch of ``--batch-rows``,
  ``pre_commit``, then ``commit``), records and marker included. The coordinator's own work
  (commit log, decision) is not in it: ``benchmarks/coordination.py`` measures that.

Ratio = pyiceberg's time / twopc's time (above 1: twopc is faster), median of ``--repeat``
runs, in the same process and run, alternating.

**Memory.** Each size runs in a process of its own and reports its peak resident set
(``ru_maxrss``): the sink fed batches of ``--batch-rows`` generated on the fly (files rolled
at the target size, so the peak should not grow with the batch), and pyiceberg's ``append``
of the same rows as one Arrow table (what its API takes). The peak is the process's
``VmHWM``.

    .venv/bin/python benchmarks/iceberg_writes.py --rows 1000000 --batches 3 --repeat 3 \\
        --memory-rows 1000000,10000000

Results are printed and written as JSON (``--output``). Spark's own Iceberg writer is not
compared: Maven Central has no Iceberg runtime for the PySpark here (4.3; the newest runtime
is for Spark 4.1). See docs/benchmarks-history.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DEFAULT_OUTPUT = HERE / "results" / "iceberg_writes.json"
SINK_ID = "bench-iceberg"


def batches(rows: int, batch_rows: int, start: int = 0) -> Iterator[Any]:
    """(bigint id, timestamptz ts, ~20-char string, double) in record batches."""
    import pyarrow as pa
    import pyarrow.compute as pc

    base = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    for offset in range(start, start + rows, batch_rows):
        count = min(batch_rows, start + rows - offset)
        ids = pa.array(range(offset, offset + count), pa.int64())
        yield pa.record_batch(
            {
                "id": ids,
                "ts": pa.array([base] * count, pa.timestamp("us", tz="UTC")),
                "name": pc.binary_join_element_wise("customer-", pc.cast(ids, pa.string()), ""),
                "score": pc.multiply(pc.cast(ids, pa.float64()), 0.5),
            }
        )


def _sink(warehouse: Path, table: str) -> Any:
    from twopc_iceberg import IcebergSink

    return IcebergSink(table, warehouse=str(warehouse), create_table=True)


def run_twopc(
    warehouse: Path, table: str, batch_id: int, rows: int, batch_rows: int, *, stream: bool = False
) -> float:
    """One batch through the sink as a task and the driver run it; seconds. The input is
    built before the clock starts, as for pyiceberg, unless ``stream`` (the memory run:
    batches made on the fly, so that only the sink's own memory shows)."""
    import twopc

    sink = _sink(warehouse, table)
    source = batches(rows, batch_rows, batch_id * rows)
    data = source if stream else list(source)
    started = time.perf_counter()
    ctx = twopc.TaskContext(SINK_ID, "bench-query", batch_id, 0, batch_id)
    txn = sink.begin_transaction(ctx)
    for batch in data:
        sink.invoke(txn, batch)
    committable = sink.pre_commit(txn)
    sink.commit([committable])
    return time.perf_counter() - started


def run_pyiceberg(warehouse: Path, table: str, batch_id: int, rows: int, batch_rows: int) -> float:
    """One batch as pyiceberg's ``append`` of an Arrow table; seconds (building the table
    from the batches is not timed)."""
    import pyarrow as pa

    data = pa.Table.from_batches(list(batches(rows, batch_rows, batch_id * rows)))
    catalog = _sink(warehouse, table).access.catalog_object()
    started = time.perf_counter()
    if batch_id == 0:
        catalog.create_namespace_if_not_exists(table.split(".", maxsplit=1)[0])
        target = catalog.create_table(table, schema=data.schema)
    else:
        target = catalog.load_table(table)
    target.append(data)
    return time.perf_counter() - started


def throughput(args: argparse.Namespace) -> dict[str, Any]:
    writers: dict[str, Callable[[Path, str, int, int, int], float]] = {
        "pyiceberg_append": run_pyiceberg,
        "twopc_iceberg": run_twopc,
    }
    seconds: dict[str, list[float]] = {name: [] for name in writers}
    for repeat in range(args.repeat):
        for name, write in writers.items():
            root = Path(tempfile.mkdtemp(prefix="bench-iceberg-"))
            try:
                total = 0.0
                for batch_id in range(args.batches):
                    total += write(
                        root, f"bench.{name}_{repeat}", batch_id, args.rows, args.batch_rows
                    )
                seconds[name].append(total)
            finally:
                shutil.rmtree(root, ignore_errors=True)
        print(
            f"repeat {repeat + 1}: " + ", ".join(f"{n} {s[-1]:.2f} s" for n, s in seconds.items())
        )
    rows = args.rows * args.batches
    medians = {name: statistics.median(values) for name, values in seconds.items()}
    return {
        "rows_per_batch": args.rows,
        "batches": args.batches,
        "seconds": seconds,
        "median_seconds": medians,
        "rows_per_second": {name: rows / m for name, m in medians.items()},
        "ratio_twopc_vs_pyiceberg": medians["pyiceberg_append"] / medians["twopc_iceberg"],
    }


def _peak_child(writer: str, rows: int, batch_rows: int) -> dict[str, Any]:
    """Run one writer over ``rows`` in a fresh process; its peak RSS and time."""
    root = Path(tempfile.mkdtemp(prefix="bench-iceberg-mem-"))
    try:
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                writer,
                "--rows",
                str(rows),
                "--batch-rows",
                str(batch_rows),
                "--warehouse",
                str(root),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        return json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        shutil.rmtree(root, ignore_errors=True)


def memory(args: argparse.Namespace) -> list[dict[str, Any]]:
    found = []
    for rows in (int(r) for r in args.memory_rows.split(",")):
        for writer in ("twopc_iceberg", "pyiceberg_append"):
            result = _peak_child(writer, rows, args.batch_rows)
            print(
                f"memory {writer} {rows:,} rows: peak {result['peak_mib']:.0f} MiB, "
                f"{result['seconds']:.1f} s"
            )
            found.append(result)
    return found


def _high_water_kib() -> int:
    """This process's peak resident set (``VmHWM``). Not ``ru_maxrss``: that keeps the
    parent's peak across ``fork`` and ``exec``, which would hide a smaller child."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def child(args: argparse.Namespace) -> None:
    warehouse = Path(args.warehouse)
    if args.child == "twopc_iceberg":
        seconds = run_twopc(warehouse, "bench.memory", 0, args.rows, args.batch_rows, stream=True)
    else:
        seconds = run_pyiceberg(warehouse, "bench.memory", 0, args.rows, args.batch_rows)
    peak_kib = _high_water_kib()
    print(
        json.dumps(
            {
                "writer": args.child,
                "rows": args.rows,
                "seconds": seconds,
                "peak_mib": peak_kib / 1024,
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows per batch")
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--batch-rows", type=int, default=65_536, help="rows per Arrow batch")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--memory-rows", default="1000000,10000000")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--warehouse", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    import pyiceberg

    result = {
        "measured": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {"python": platform.python_version(), "cpus": __import__("os").cpu_count()},
        "pyiceberg": pyiceberg.__version__,
        "throughput": throughput(args),
        "memory": memory(args) if args.memory_rows else [],
    }
    ratio = result["throughput"]["ratio_twopc_vs_pyiceberg"]
    print(f"twopc / pyiceberg throughput: {ratio:.2f}x")
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
