"""Shared by the entry-point examples: order files to read, a Spark session (classic, or a
Spark Connect client with ``--remote``), and a read-back of what the output holds."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

SCHEMA = "id long, customer string, amount double"


def arguments(description: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("workdir", help="input, output and checkpoint go under this directory")
    parser.add_argument("--remote", help="a Spark Connect URL, e.g. sc://localhost:15002")
    parser.add_argument("--files", type=int, default=3, help="order files (one per batch)")
    parser.add_argument("--rows", type=int, default=1000, help="orders per file")
    return parser.parse_args()


def write_orders(directory: Path, files: int, rows: int) -> int:
    """``files`` JSON files of ``rows`` orders each (ids 0..files*rows-1); the count."""
    directory.mkdir(parents=True, exist_ok=True)
    for index in range(files):
        path = directory / f"orders-{index:04d}.json"
        if path.exists():
            continue
        first = index * rows
        lines = (
            json.dumps({"id": i, "customer": f"c{i % 17}", "amount": round(i * 0.25, 2)})
            for i in range(first, first + rows)
        )
        path.write_text("\n".join(lines) + "\n")
    return files * rows


def session(remote: str | None) -> Any:
    from pyspark.sql import SparkSession

    if remote:
        return SparkSession.builder.remote(remote).getOrCreate()
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("twopc-example")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def report(output: Path, expected: int) -> int:
    """Print what a pyarrow reader sees in ``output``; 0 when every order is there once."""
    import pyarrow.dataset as ds

    ids = Counter(ds.dataset(str(output), format="parquet").to_table(["id"])["id"].to_pylist())
    duplicates = sum(1 for n in ids.values() if n > 1)
    missing = expected - len(ids)
    print(json.dumps({"rows": sum(ids.values()), "duplicates": duplicates, "missing": missing}))
    return 0 if (duplicates, missing) == (0, 0) else 1
