"""The in-memory reference sinks' stores: named, per process, and forgotten on request."""

from __future__ import annotations

import pytest

from twopc.testing import _memory, forget_store, memory_store

pytestmark = pytest.mark.unit


def test_a_forgotten_store_is_gone_and_starts_empty_again(store_name: str) -> None:
    memory_store(store_name).visible.append(1)
    assert memory_store(store_name).visible == [1]  # the same store by name
    forget_store(store_name)
    assert store_name not in _memory._STORES
    assert memory_store(store_name).visible == []
    forget_store(store_name)
    forget_store(store_name)  # forgetting what is not there is fine
    assert store_name not in _memory._STORES
