"""A driver-commit sink chooses how a decided batch is split into commit calls
(``CommitsOnDriver.commit_units``): one per committable by default, one for the whole batch
for a target that makes a batch visible in one step (Iceberg's one snapshot per batch)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pytest

import twopc
from twopc import CommitLog, Committable, SinkGroup
from twopc._coordination.coordinator import Coordinator
from twopc.faults import CrashPoint
from twopc.local import LocalEngine
from twopc.testing import MemoryDriverSink, MemoryStore, crash_points

pytestmark = pytest.mark.unit

QUERY = "query-1"
IDS = [list(range(10)), list(range(10, 20))]


class CallsSink(MemoryDriverSink):
    """Records the partitions of each commit call."""

    def __init__(self, store: str, *, whole_batch: bool) -> None:
        super().__init__(store)
        self.whole_batch = whole_batch
        self.calls: list[list[int]] = []

    def commit_units(self, committables: Sequence[Committable]) -> list[list[Committable]]:
        if self.whole_batch:
            return [list(committables)]
        return super().commit_units(committables)

    def commit(self, committables: Sequence[Committable]) -> list[twopc.CommitOutcome]:
        self.calls.append([c.partition for c in committables])
        return super().commit(committables)


@pytest.mark.parametrize(
    ("whole_batch", "calls"), [(False, [[0], [1]]), (True, [[0, 1]])], ids=["default", "whole"]
)
def test_a_batch_is_committed_in_the_sinks_units(
    tmp_path: Path, store_name: str, store: MemoryStore, whole_batch: bool, calls: list[list[int]]
) -> None:
    sink = CallsSink(store_name, whole_batch=whole_batch)
    coordinator = Coordinator(sink, "orders", CommitLog(str(tmp_path / "log")))
    engine = LocalEngine([pa.table({"id": pa.array(i, pa.int64())}) for i in IDS], processes=False)
    outcome = coordinator.run_batch(QUERY, 0, engine)
    assert outcome.status == "committed"
    assert sink.calls == calls
    assert Counter(store.visible) == Counter(range(20))


def test_between_commits_applies_only_to_sinks_that_commit_in_steps(store_name: str) -> None:
    assert CrashPoint.BETWEEN_COMMITS in crash_points(CallsSink(store_name, whole_batch=False))
    assert CrashPoint.BETWEEN_COMMITS not in crash_points(CallsSink(store_name, whole_batch=True))


def test_a_group_splits_each_member_its_own_way(store_name: str) -> None:
    whole = CallsSink(store_name, whole_batch=True)
    steps = CallsSink(store_name, whole_batch=False)
    group = SinkGroup({"whole": whole, "steps": steps})
    ids = group.member_ids("g")
    work = [
        Committable(ids[name], QUERY, 0, partition, 0)
        for name in ("whole", "steps")
        for partition in (0, 1)
    ]
    stray = Committable("gone", QUERY, 0, 0, 0)
    units = group.commit_units([*work, stray])
    assert [[(c.sink_id, c.partition) for c in unit] for unit in units] == [
        [("gone", 0)],  # names no member: alone and first, so the commit refuses it
        [(ids["whole"], 0), (ids["whole"], 1)],
        [(ids["steps"], 0)],
        [(ids["steps"], 1)],
    ]
