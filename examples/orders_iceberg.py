"""Orders from JSON files into an Iceberg table, one row per order, exactly once.

Every order event (``{"order_id": 17, "status": "paid", "amount": 12.5, "ts": ...}``) is
upserted by ``order_id`` into the Iceberg table ``shop.orders``, partitioned by
``day(ts)``: the table keeps each order's latest event. Each micro-batch becomes one
snapshot whose summary names the batch; a batch replayed after a crash finds its marker
and writes nothing. The catalog is the embedded one (pyiceberg's SQL catalog on a SQLite
file in ``--warehouse``), so nothing but Spark and this process is needed::

    python examples/orders_iceberg.py --produce 2000   # write 2000 order events as files
    python examples/orders_iceberg.py                  # run until caught up, print the verdict
    python examples/orders_iceberg.py --verify         # the verdict alone

The verdict reads the table with a pyiceberg scan: every order of the input once, with the
status of its last event. It ends with ``exactly-once: OK`` or ``exactly-once: FAILED
(...)`` (exit code 1). To watch a crash, kill the driver right after batch 1's decision and
run it again::

    TWOPC_FAULTS="after_decision:kill@batch=1" python examples/orders_iceberg.py
    python examples/orders_iceberg.py               # recovery commits batch 1: OK

Keep ``--checkpoint`` and ``--sink-id`` across restarts.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import twopc

STATUSES = ("placed", "paid", "shipped")
SCHEMA = "order_id long, status string, amount double, ts timestamp"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", default="/tmp/twopc-orders-iceberg/in")
    parser.add_argument("--warehouse", default="/tmp/twopc-orders-iceberg/warehouse")
    parser.add_argument("--checkpoint", default="/tmp/twopc-orders-iceberg/checkpoint")
    parser.add_argument("--table", default="shop.orders")
    parser.add_argument("--sink-id", default="orders-iceberg")
    parser.add_argument("--files-per-batch", type=int, default=1)
    parser.add_argument("--produce", type=int, default=0, help="write this many events, exit")
    parser.add_argument("--verify", action="store_true", help="print the verdict, exit")
    return parser.parse_args(argv)


def produce(directory: Path, events: int, per_file: int = 250) -> None:
    """``events`` order events in files of ``per_file``: each order gets up to three
    events (placed, paid, shipped), spread over the files, so that batches update orders
    earlier batches wrote."""
    directory.mkdir(parents=True, exist_ok=True)
    start = datetime(2026, 11, 1, tzinfo=UTC)
    rows = [
        {
            "order_id": n // len(STATUSES),
            "status": STATUSES[n % len(STATUSES)],
            "amount": round(10 + (n // len(STATUSES)) * 0.5, 2),
            "ts": (start + timedelta(minutes=n)).isoformat(),
        }
        for n in range(events)
    ]
    existing = len(list(directory.glob("events-*.json")))
    for index in range(0, len(rows), per_file):
        path = directory / f"events-{existing + index // per_file:05d}.json"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows[index : index + per_file]))
        time.sleep(0.01)  # Spark's file source orders files by modification time


def expected(directory: Path) -> dict[int, str]:
    """Each order's last status, from the input files in order."""
    last: dict[int, str] = {}
    for path in sorted(directory.glob("events-*.json")):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            last[int(event["order_id"])] = str(event["status"])
    return last


def sink(args: argparse.Namespace) -> Any:
    return twopc.create_sink(
        "iceberg",
        table=args.table,
        warehouse=args.warehouse,
        mode="upsert",
        key_columns=["order_id"],
        create_table=True,
        partition_by=["day(ts)"],
    )


def verdict(args: argparse.Namespace) -> int:
    want = expected(Path(args.input))
    table = sink(args).load_table()
    rows = table.scan().to_arrow().to_pylist() if table is not None else []
    seen: dict[int, list[str]] = {}
    for row in rows:
        seen.setdefault(int(row["order_id"]), []).append(str(row["status"]))
    duplicates = sum(1 for statuses in seen.values() if len(statuses) > 1)
    missing = len(set(want) - set(seen))
    stale = sum(1 for order, status in want.items() if seen.get(order, [status])[-1] != status)
    summary = (
        f"orders={len(want)} rows={len(rows)} duplicates={duplicates} missing={missing} "
        f"stale={stale}"
    )
    if duplicates or missing or stale or len(seen) != len(want):
        print(f"exactly-once: FAILED ({summary})")
        return 1
    print(f"exactly-once: OK ({summary})")
    return 0


def run(spark: Any, args: argparse.Namespace) -> int:
    """The query over every file of ``--input``, until it has nothing left; then the verdict."""
    events = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", args.files_per_batch)
        .json(args.input)
    )
    writer = twopc.foreach_batch(sink(args), sink_id=args.sink_id)
    query = (
        events.writeStream.option("checkpointLocation", args.checkpoint)
        .foreachBatch(writer)
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination()
    finally:
        writer.close()
    return verdict(args)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.produce:
        produce(Path(args.input), args.produce)
        return 0
    if args.verify:
        return verdict(args)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("orders-iceberg")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    try:
        return run(spark, args)
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
