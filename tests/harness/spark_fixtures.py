"""The suite's one in-process SparkSession (``spark``, session-scoped; loaded for the whole
suite by ``tests/conftest.py``) and the JSON order files its queries read."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2,3]")  # 2 cores, tasks retried up to 3 times
        .appName("twopc-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def write_orders(directory: Path, batches: int, rows_per_batch: int, start: int = 0) -> set[int]:
    """JSON input files, one per micro-batch (read with maxFilesPerTrigger=1)."""
    directory.mkdir(parents=True, exist_ok=True)
    ids: set[int] = set()
    for b in range(batches):
        first = start + b * rows_per_batch
        lines = [
            json.dumps({"id": i, "customer": f"c{i % 7}", "amount": i * 0.5})
            for i in range(first, first + rows_per_batch)
        ]
        ids.update(range(first, first + rows_per_batch))
        (directory / f"orders-{start + b:06d}.json").write_text("\n".join(lines) + "\n")
    return ids
