"""Phase 2 with bounded parallelism (issue 46): a sink that commits concurrently
(``CommitsOnDriver.commits_concurrently``) gets its first unit committed alone, then the
rest in at most ``commit_parallelism`` calls side by side; other sinks keep one call per
unit, in order. Crash points keep their meaning, and recovery commits the same way."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pytest

import twopc
from twopc import CommitLog, Committable, SinkGroup
from twopc._coordination.coordinator import Coordinator
from twopc.errors import CommitError, ConfigurationError, TransientSinkError
from twopc.faults import FaultPlan
from twopc.local import LocalEngine
from twopc.testing import MemoryDriverSink, MemoryStore

pytestmark = pytest.mark.unit

QUERY = "query-1"


class SideBySideSink(MemoryDriverSink):
    """Records each commit call (its partitions, thread and overlap with other calls)."""

    def __init__(self, store: str, *, concurrent: bool = True, fail: int | None = None) -> None:
        super().__init__(store)
        self.concurrent = concurrent
        self.fail = fail
        self.calls: list[tuple[list[int], str]] = []
        self.running = 0
        self.most_at_once = 0
        self._lock = threading.Lock()

    def commits_concurrently(self) -> bool:
        return self.concurrent

    def commit(self, committables: Sequence[Committable]) -> list[twopc.CommitOutcome]:
        with self._lock:
            self.calls.append(
                ([c.partition for c in committables], threading.current_thread().name)
            )
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        try:
            time.sleep(0.02)  # long enough for the other calls to start meanwhile
            if self.fail is not None and self.fail in [c.partition for c in committables]:
                raise TransientSinkError("the server went away")
            with self._lock:
                return super().commit(committables)
        finally:
            with self._lock:
                self.running -= 1


def _parts(count: int) -> list[pa.Table]:
    return [pa.table({"id": pa.array([p], pa.int64())}) for p in range(count)]


def _coordinator(sink: twopc.Sink[object], log: Path, **options: object) -> Coordinator:
    return Coordinator(
        sink,
        "orders",
        CommitLog(str(log)),
        retry=twopc.RetryPolicy(max_attempts=2, initial_backoff_seconds=0),
        **options,  # type: ignore[arg-type]
    )


def test_the_first_unit_commits_alone_then_the_rest_side_by_side(
    tmp_path: Path, store_name: str, store: MemoryStore
) -> None:
    sink = SideBySideSink(store_name)
    coordinator = _coordinator(sink, tmp_path / "log", commit_parallelism=4)
    outcome = coordinator.run_batch(QUERY, 0, LocalEngine(_parts(13), processes=False))
    assert outcome.status == "committed"
    assert sink.calls[0][0] == [0]
    rest = [partitions for partitions, _ in sink.calls[1:]]
    assert len(rest) == 4  # 12 units in 4 contiguous shares of 3
    assert sorted(p for share in rest for p in share) == list(range(1, 13))
    assert all(share == sorted(share) and len(share) == 3 for share in rest)
    assert sink.most_at_once > 1
    assert {name for _, name in sink.calls[1:]} != {threading.current_thread().name}
    assert Counter(store.visible) == Counter(range(13))


def test_a_sink_that_does_not_commit_concurrently_gets_one_call_per_unit_in_order(
    tmp_path: Path, store_name: str, store: MemoryStore
) -> None:
    sink = SideBySideSink(store_name, concurrent=False)
    coordinator = _coordinator(sink, tmp_path / "log", commit_parallelism=8)
    coordinator.run_batch(QUERY, 0, LocalEngine(_parts(6), processes=False))
    assert [partitions for partitions, _ in sink.calls] == [[p] for p in range(6)]
    assert sink.most_at_once == 1
    assert {name for _, name in sink.calls} == {threading.current_thread().name}


def test_parallelism_one_commits_one_unit_after_another(tmp_path: Path, store_name: str) -> None:
    sink = SideBySideSink(store_name)
    coordinator = _coordinator(sink, tmp_path / "log", commit_parallelism=1)
    coordinator.run_batch(QUERY, 0, LocalEngine(_parts(5), processes=False))
    assert [partitions for partitions, _ in sink.calls] == [[p] for p in range(5)]
    assert sink.most_at_once == 1


def test_a_failing_share_lets_the_others_finish_and_names_its_partition(
    tmp_path: Path, store_name: str, store: MemoryStore
) -> None:
    sink = SideBySideSink(store_name, fail=7)
    coordinator = _coordinator(sink, tmp_path / "log", commit_parallelism=3)
    with pytest.raises(CommitError) as caught:
        coordinator.run_batch(QUERY, 0, LocalEngine(_parts(10), processes=False))
    assert "the server went away" in str(caught.value)
    assert sink.running == 0  # no commit still runs once phase 2 has failed
    # every share but the failing one committed; the decided batch is finished by recovery
    assert 7 not in store.visible and len(store.visible) == 7
    sink.fail = None
    coordinator.recover()
    assert Counter(store.visible) == Counter(range(10))


def test_between_commits_falls_after_exactly_one_commit(
    tmp_path: Path, store_name: str, store: MemoryStore
) -> None:
    sink = SideBySideSink(store_name)
    plan = FaultPlan.parse("between_commits:raise")
    coordinator = _coordinator(sink, tmp_path / "log", commit_parallelism=4, faults=plan)
    with pytest.raises(Exception, match="between_commits"):
        coordinator.run_batch(QUERY, 0, LocalEngine(_parts(8), processes=False))
    assert store.visible == [0]
    coordinator.faults = FaultPlan.parse("recovery_between_commits:raise")
    with pytest.raises(Exception, match="recovery_between_commits"):
        coordinator.recover()
    coordinator.faults = None
    coordinator.recover()
    assert Counter(store.visible) == Counter(range(8))
    assert sink.most_at_once > 1  # recovery committed side by side too


def test_a_groups_members_commit_one_after_another(tmp_path: Path, store_name: str) -> None:
    first = SideBySideSink(store_name)
    second = SideBySideSink(store_name)
    group = SinkGroup({"first": first, "second": second})
    assert group.commits_concurrently()

    def writer(plan: FaultPlan | None) -> twopc.local.LocalBatchWriter:
        return twopc.local.foreach_batch(
            group,
            "orders",
            commit_log=str(tmp_path / "log"),
            processes=False,
            faults=plan,
            commit_parallelism=4,
        )

    with pytest.raises(Exception, match="between_members"):
        writer(FaultPlan.parse("between_members:raise")).write(QUERY, 0, _parts(9))
    assert len(first.calls) == 1 + 4 and second.calls == []  # the whole first member, then stop
    writer(None).write(QUERY, 0, _parts(9))  # the replay finishes the decided batch
    assert sorted(p for partitions, _ in second.calls for p in partitions) == list(range(9))
    assert second.most_at_once > 1
    assert not SinkGroup(
        {"first": first, "second": SideBySideSink(store_name, concurrent=False)}
    ).commits_concurrently()


@pytest.mark.parametrize("value", [0, -1, 257, 2.5, True, "8"])
def test_commit_parallelism_is_checked(tmp_path: Path, store_name: str, value: object) -> None:
    with pytest.raises(ConfigurationError, match="commit_parallelism"):
        _coordinator(MemoryDriverSink(store_name), tmp_path / "log", commit_parallelism=value)
    with pytest.raises(ConfigurationError, match="commit_parallelism"):
        twopc.local.foreach_batch(
            MemoryDriverSink(store_name),
            "orders",
            commit_parallelism=value,  # type: ignore[arg-type]
        )
