"""The writer's background commit (``background_commit=True``) without Spark: a batch
returns once its decision is durable, its phase 2 runs in a thread, the next batch waits
for it, and a failed commit is finished by the next batch's recovery or raised by
``close()``. Driven through the local engine's writer, whose ``start``,
``finish_in_background`` and ``wait_for_commit`` are what the Spark adapter calls."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import twopc
import twopc.local
from twopc import CommitOutcome, Committable
from twopc.testing._memory import MemoryDriverSink, MemoryStore, forget_store

pytestmark = pytest.mark.unit

PARTS = [pa.table({"id": [1, 2]}), pa.table({"id": [3]})]


class GatedSink(MemoryDriverSink):
    """Commits only once the test opens the gate; says when a commit started."""

    def __init__(self, store: str) -> None:
        super().__init__(store)
        self.gate = threading.Event()
        self.committing = threading.Event()

    def commit(self, committables: Sequence[Committable]) -> list[CommitOutcome]:
        self.committing.set()
        assert self.gate.wait(10), "the test never opened the gate"
        return super().commit(committables)

    def __getstate__(self) -> dict[str, Any]:  # the local engine pickles the sink for tasks
        state = dict(self.__dict__)
        state.pop("gate", None)
        state.pop("committing", None)
        return state


@pytest.fixture
def store_name(tmp_path: Path) -> Iterator[str]:
    name = f"bg-{tmp_path.name}"
    yield name
    forget_store(name)


def _batch(writer: Any, batch_id: int, parts: list[pa.Table] = PARTS) -> None:
    """One batch as the Spark adapter runs it with ``background_commit=True``."""
    writer.wait_for_commit()  # the previous batch's commit
    engine = writer._engine(writer.sink, parts)
    writer.finish_in_background(writer.start("q", batch_id, engine, lambda: None))


def _writer(sink: twopc.Sink[Any], tmp_path: Path, faults: str = "") -> Any:
    plan = twopc.FaultPlan.parse(faults) if faults else twopc.FaultPlan()
    return twopc.local.foreach_batch(
        sink, "orders", commit_log=str(tmp_path / "log"), processes=False, faults=plan
    )


def test_a_batch_returns_once_decided_and_commits_in_a_thread(
    store_name: str, tmp_path: Path
) -> None:
    sink = GatedSink(store_name)
    writer = _writer(sink, tmp_path)
    _batch(writer, 0)  # returns while the commit waits at the gate
    assert sink.committing.wait(10)
    assert sink.store.visible == []  # decided, not yet committed
    assert list(writer.metrics) == []  # the batch's metrics come with its commit
    sink.gate.set()
    writer.close()  # waits for the commit
    assert Counter(sink.store.visible) == Counter([1, 2, 3])
    assert [m.status for m in writer.metrics] == ["committed"]


def test_the_next_batch_waits_for_the_previous_commit(store_name: str, tmp_path: Path) -> None:
    sink = GatedSink(store_name)
    writer = _writer(sink, tmp_path)
    _batch(writer, 0)
    assert sink.committing.wait(10)
    threading.Timer(0.2, sink.gate.set).start()
    _batch(writer, 1, [pa.table({"id": [4]})])  # starts once batch 0 committed
    assert sorted(sink.store.visible)[:3] == [1, 2, 3]
    writer.close()
    assert Counter(sink.store.visible) == Counter([1, 2, 3, 4])
    assert [(m.batch_id, m.status) for m in writer.metrics] == [(0, "committed"), (1, "committed")]


def test_a_failed_commit_is_finished_by_the_next_batch(store_name: str, tmp_path: Path) -> None:
    sink = MemoryDriverSink(store_name)
    writer = _writer(sink, tmp_path, "after_decision:raise@batch=0")
    _batch(writer, 0)
    _batch(writer, 1, [pa.table({"id": [4]})])
    writer.close()
    store: MemoryStore = sink.store
    assert Counter(store.visible) == Counter([1, 2, 3, 4])
    statuses = [(m.batch_id, m.status) for m in writer.metrics]
    assert statuses == [(0, "failed"), (1, "committed")]
    assert writer.metrics[-1].recovered_committed == 2  # batch 0's two partitions


def test_close_raises_the_last_commit_s_error(store_name: str, tmp_path: Path) -> None:
    sink = MemoryDriverSink(store_name)
    writer = _writer(sink, tmp_path, "after_decision:raise@batch=0")
    _batch(writer, 0)
    with pytest.raises(twopc.TwoPCError, match="injected fault at after_decision") as raised:
        writer.close()
    assert raised.value.batch_id == 0 and raised.value.sink_id == "orders"
    assert sink.store.visible == []  # decided: recovery (twopc recover) finishes it
    writer.close()  # nothing left to wait for: quiet


def test_an_unexpected_error_in_the_thread_becomes_a_commit_error() -> None:
    from twopc._engines.background import BackgroundCommit

    def broken() -> None:
        raise RuntimeError("disk gone")

    commit = BackgroundCommit("orders", 7, broken)
    error = commit.wait()
    assert isinstance(error, twopc.CommitError)
    assert error.batch_id == 7 and "disk gone" in str(error)
    assert isinstance(error.__cause__, RuntimeError)
