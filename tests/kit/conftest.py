"""CI's subset of the conformance kit's slowest checks; ``--extended`` runs them all. The kit
itself (``twopc.testing``) is unchanged: plugin authors run every check.

- The Kafka crash tests (a transactional producer per attempt): each Kafka mode keeps every
  other crash point, the two modes offset, so every point runs in one mode.
- The failed ``format("twopc")`` writes (a Spark job whose task fails on every attempt,
  then the write again): CI runs them on files (a sink that commits on the driver) and on
  PostgreSQL ``transaction`` mode (one that commits in the task); the example plugin's
  suite runs them on both of its sinks too.
"""

from __future__ import annotations

import pytest

from twopc.faults import CrashPoint

_KIT_POINTS = [p for p in CrashPoint if not p.in_recovery and not p.in_group_only]
_KEEP_PARITY = {"TestKafkaPerPartitionConformance": 1, "TestKafkaAtomicConformance": 0}


_FAILED_FORMAT_CHECKS = {
    "test_a_failed_format_batch_write_leaves_nothing",
    "test_a_failed_task_of_a_format_stream_query_then_a_rerun",
}
_FAILED_FORMAT_IN_CI = {"TestFilesConformance", "TestPostgresTransactionConformance"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        cls = getattr(item, "cls", None)
        name = getattr(item, "originalname", item.name)
        if name in _FAILED_FORMAT_CHECKS and getattr(cls, "__name__", "") not in (
            _FAILED_FORMAT_IN_CI
        ):
            item.add_marker(pytest.mark.extended)
            continue
        parity = _KEEP_PARITY.get(cls.__name__) if cls is not None else None
        spec = getattr(item, "callspec", None)
        if parity is None or spec is None or "point" not in spec.params:
            continue
        if _KIT_POINTS.index(spec.params["point"]) % 2 != parity:
            item.add_marker(pytest.mark.extended)
