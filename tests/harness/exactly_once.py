"""The suite's one exactly-once check: every expected id (or Kafka key) seen exactly once,
none missing, nothing else; and, read from a target, nothing left behind by a crash."""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from tests.harness.sink_recipe import SinkRecipe
    from tests.harness.targets import Target

K = TypeVar("K", bound=Hashable)


def _sample(keys: set[K] | list[K]) -> list[K]:
    try:
        return sorted(keys)[:10]  # type: ignore[type-var]
    except TypeError:
        return list(keys)[:10]


def assert_exactly_once(seen: Counter[K], expected: set[K]) -> None:
    """Every id of ``expected`` seen exactly once, and nothing else seen."""
    duplicates = {k: n for k, n in seen.items() if n > 1}
    missing = expected - set(seen)
    unexpected = set(seen) - expected
    assert not duplicates, f"duplicates: {_sample(list(duplicates.items()))}"
    assert not missing, f"missing {len(missing)} ids, e.g. {_sample(missing)}"
    assert not unexpected, f"unexpected ids: {_sample(unexpected)}"


def assert_target_exactly_once(target: Target, spec: SinkRecipe, expected: set[int]) -> None:
    """:func:`assert_exactly_once` on what a reader of the target sees, and nothing a crash
    may leave (staged files, prepared transactions, open Kafka transactions) left."""
    assert_exactly_once(target.committed(spec), expected)
    assert target.leftovers(spec) == []
