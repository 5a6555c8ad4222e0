"""Fixtures of the unit tests: the in-memory reference sinks' stores, fresh per test and
forgotten afterwards (``twopc.testing.forget_store``), so the process keeps none."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from twopc.testing import MemoryStore, forget_store, memory_store


@pytest.fixture
def store_name(request: pytest.FixtureRequest) -> Iterator[str]:
    """A store name no other test uses, forgotten after the test."""
    name = f"{request.node.name[:40]}-{uuid.uuid4().hex[:8]}"
    yield name
    forget_store(name)


@pytest.fixture
def store(store_name: str) -> MemoryStore:
    """The store called :func:`store_name`."""
    return memory_store(store_name)


@pytest.fixture(autouse=True)
def _no_store_outlives_its_test() -> Iterator[None]:
    """Every memory store a test makes is forgotten by the end of the test."""
    from twopc.testing import _memory

    before = set(_memory._STORES)
    yield
    left = set(_memory._STORES) - before
    assert not left, f"memory stores left behind (forget_store them): {sorted(left)}"
