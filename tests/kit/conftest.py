"""CI's subset of the conformance kit's Kafka crash tests (the slowest of the kit: a
transactional producer per attempt). Each Kafka mode keeps every other crash point, the two
modes offset, so every point runs in one mode; ``--extended`` runs them all. The kit itself
(``twopc.testing``) is unchanged: plugin authors run every point."""

from __future__ import annotations

import pytest

from twopc.faults import CrashPoint

_KIT_POINTS = [p for p in CrashPoint if not p.in_recovery]
_KEEP_PARITY = {"TestKafkaPerPartitionConformance": 1, "TestKafkaAtomicConformance": 0}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        cls = getattr(item, "cls", None)
        parity = _KEEP_PARITY.get(cls.__name__) if cls is not None else None
        spec = getattr(item, "callspec", None)
        if parity is None or spec is None or "point" not in spec.params:
            continue
        if _KIT_POINTS.index(spec.params["point"]) % 2 != parity:
            item.add_marker(pytest.mark.extended)
