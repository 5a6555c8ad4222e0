"""The e2e tests' configuration: CI's representative subset of the long backend matrices
(:data:`ROTATED`) and the Spark Connect server fixture. The suite's SparkSession
(``spark``) and the real-service fixtures are in ``tests/harness`` (``spark_fixtures``,
``service_fixtures``), loaded by ``tests/conftest.py``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

# ``case`` and ``backend``: every backend and mode, a fresh target per test
from tests.harness.backend_cases import case  # noqa: F401
from tests.harness.backend_runs import backend  # noqa: F401

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
