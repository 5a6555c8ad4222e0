"""Spark fixtures: one in-process SparkSession for the suite's in-process queries."""

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


# ``case`` and ``backend``: every backend and mode, a fresh target per test; the real-service
# fixtures (Postgres, MariaDB, Kafka, the schema registry) live with the integration tests.
from tests.e2e.backend_cases import case  # noqa: E402, F401
from tests.e2e.backend_queries import backend  # noqa: E402, F401
from tests.integration.conftest import (  # noqa: E402, F401
    kafka_bootstrap,
    mysql_dsn,
    mysql_params,
    postgres_dsn,
    s3_store,
    schema_registry_url,
    services,
    services_cli,
)

# -- CI's representative subset of the long backend matrices ---------------------------------

ROTATED: dict[str, tuple[str, int]] = {
    "test_reshaped_queries": ("case", 1),
    "test_stopped_query": ("case", 1),
    "test_edge_batches": ("backend", 1),
}
"""module name -> (the matrix parameter, how many of its values each slot keeps in CI).
A slot is a test function with its other parameters fixed; slot number ``n`` of the module
keeps the values ``n*keep .. n*keep+keep-1`` (modulo their count), so consecutive slots
cover different backends (every backend, where the module has as many slots); the other
combinations are marked ``extended`` (``--extended`` runs them)."""


def _slot(item: pytest.Item) -> tuple[str, str, tuple[str, ...]] | None:
    """(module, function, the other parameters' values) of an item of a rotated matrix."""
    module = getattr(item, "module", None)
    spec = getattr(item, "callspec", None)
    if module is None or spec is None:
        return None
    rule = ROTATED.get(module.__name__.rsplit(".", 1)[-1])
    if rule is None or rule[0] not in spec.params:
        return None
    # (pytest's callspec indices are not per value when a fixture's params and a
    # parametrize combine, so the values themselves identify the slot)
    others = tuple(f"{k}={v!r}" for k, v in sorted(spec.params.items()) if k != rule[0])
    return module.__name__, getattr(item, "originalname", item.name), others


def _value(item: pytest.Item, slot: tuple[str, str, tuple[str, ...]]) -> str:
    param = ROTATED[slot[0].rsplit(".", 1)[-1]][0]
    return repr(item.callspec.params[param])  # type: ignore[attr-defined]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    values: dict[tuple[str, str, tuple[str, ...]], list[str]] = {}
    order: dict[str, list[tuple[str, str, tuple[str, ...]]]] = {}
    for item in items:
        slot = _slot(item)
        if slot is None:
            continue
        if slot not in values:
            order.setdefault(slot[0], []).append(slot)
        seen = values.setdefault(slot, [])
        if _value(item, slot) not in seen:
            seen.append(_value(item, slot))
    for item in items:
        slot = _slot(item)
        if slot is None:
            continue
        keep = ROTATED[slot[0].rsplit(".", 1)[-1]][1]
        count = len(values[slot])
        first = order[slot[0]].index(slot) * keep
        kept = {(first + j) % count for j in range(min(keep, count))}
        if values[slot].index(_value(item, slot)) not in kept:
            item.add_marker(pytest.mark.extended)


@pytest.fixture(scope="session")
def connect(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One real Spark Connect server for the session's Connect tests (restarted by the
    tests that SIGKILL it)."""
    from tests.e2e.connect_server import ConnectServer

    server = ConnectServer(tmp_path_factory.mktemp("connect-server"))
    server.start()
    yield server
    server.kill()
