"""The path of one batch through the core's rooms (docs/design/architecture.md, "One batch
through the rooms"): every part of the flow is entered at most twice per batch, from every
entry point, so a batch id is followed by reading each part once, not by going back and
forth. Leaf modules (the commit log's storage, records and values, the contract's
helpers) are called as often as the batch needs them and are not counted."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pyarrow as pa
import pytest

import twopc
import twopc.local
from twopc._contract.paths import CommitPath
from twopc._coordination.commit_log import CommitLog
from twopc._coordination.coordinator import Coordinator
from twopc._coordination.phase1 import Phase1Task
from twopc._coordination.reported import ReportedBatches
from twopc.testing._memory import MemoryDriverSink, MemoryTaskSink, forget_store

pytestmark = pytest.mark.unit

FLOW = {
    "twopc._engines.writer",
    "twopc._coordination.coordinator",
    "twopc._coordination.reported",
    "twopc._coordination.admission",
    "twopc._coordination.recovery",
    "twopc._coordination.deciding",
    "twopc._coordination.completeness",
    "twopc._coordination.replay_guard",
    "twopc._coordination.publishing",
}
"""The parts a batch's control passes through (not the leaves they call)."""

ENTRIES = {"twopc.local", "twopc._engines.spark", "twopc._engines.datasource"}


def entries(action: Callable[[], Any]) -> Counter[str]:
    """How often ``action`` enters each part of the flow from another part (or from the
    entry point). Not counted: a part's objects being made (``__init__``), and callbacks
    from a leaf (the retry helper calling the commit it retries), which are the same visit."""
    counts: Counter[str] = Counter()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or frame.f_code.co_name == "__init__":
            return
        module = frame.f_globals.get("__name__", "")
        caller = frame.f_back.f_globals.get("__name__", "") if frame.f_back else ""
        from_flow = caller in FLOW or not caller.startswith("twopc.") or caller in ENTRIES
        if module in FLOW and module != caller and from_flow:
            counts[module] += 1

    sys.setprofile(profile)
    try:
        action()
    finally:
        sys.setprofile(None)
    return counts


@pytest.fixture(params=["driver", "task"])
def sink(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[twopc.Sink[Any]]:
    name = f"path-{request.param}-{tmp_path.name}"
    yield MemoryDriverSink(name) if request.param == "driver" else MemoryTaskSink(name)
    forget_store(name)


PARTS = [pa.table({"id": [1, 2]}), pa.table({"id": [3]})]


def test_a_batch_of_foreach_batch_enters_each_part_at_most_twice(
    sink: twopc.Sink[Any], tmp_path: Path
) -> None:
    writer = twopc.local.foreach_batch(
        sink, "orders", commit_log=str(tmp_path / "log"), processes=False
    )
    writer.write("q", 0, PARTS)  # the first batch also recovers
    counted = entries(lambda: writer.write("q", 1, PARTS))
    assert counted["twopc._coordination.deciding"] >= 1  # the trace sees the flow
    assert {m: n for m, n in counted.items() if n > 2} == {}, counted
    replay = entries(lambda: writer.write("q", 1, PARTS))
    assert {m: n for m, n in replay.items() if n > 2} == {}, replay


def test_a_batch_of_format_twopc_enters_each_part_at_most_twice(
    sink: twopc.Sink[Any], tmp_path: Path
) -> None:
    """As Spark runs it: a fresh coordinator where the tasks are planned, the tasks, and a
    fresh coordinator for the commit."""
    log = str(tmp_path / "log")

    def batches() -> ReportedBatches:
        return ReportedBatches(Coordinator(sink, "orders", CommitLog(log)))

    task = Phase1Task(sink, "orders", "q", 0, CommitPath.of(sink))
    planned = entries(lambda: batches().plan("q", 0))
    reports = [task.run(p, 0, iter(t.to_batches())) for p, t in enumerate(PARTS)]
    committed = entries(lambda: batches().commit("q", 0, reports))
    assert committed["twopc._coordination.deciding"] >= 1
    for counted in (planned, committed):
        assert {m: n for m, n in counted.items() if n > 2} == {}, counted
