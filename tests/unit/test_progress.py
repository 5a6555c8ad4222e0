"""Source progress without a broker: reading a batch's Kafka offsets from Spark's offset log,
and when the coordinator publishes them (after the commit, again for a replay of a decided
batch, never when the batch failed). The broker side is in
tests/integration/test_progress_group.py and tests/e2e/test_kafka_progress.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import twopc
from twopc import CommitLog, GroupProgress, ProgressReporter, SourceOffsets
from twopc._coordination.coordinator import Coordinator
from twopc.local import LocalEngine
from twopc.progress import kafka_offsets_of
from twopc.testing import MemoryDriverSink, MemoryTaskSink, memory_store

pytestmark = pytest.mark.unit

QUERY = "query-1"
META = '{"batchWatermarkMs":0,"batchTimestampMs":1700000000000,"conf":{}}'


def _offsets_file(root: Path, batch_id: int, *sources: str) -> str:
    (root / "offsets").mkdir(parents=True, exist_ok=True)
    (root / "offsets" / str(batch_id)).write_text("\n".join(["v1", META, *sources]))
    return str(root)


def test_a_kafka_source_line_gives_the_batch_end_offsets(tmp_path: Path) -> None:
    root = _offsets_file(tmp_path, 3, '{"access-log":{"1":40,"0":52}}')
    offsets = kafka_offsets_of(root, 3)
    assert offsets == SourceOffsets(3, {"access-log": {0: 52, 1: 40}})
    assert offsets.positions() == [("access-log", 0, 52), ("access-log", 1, 40)]
    assert SourceOffsets.from_json(json.loads(json.dumps(offsets.to_json()))) == offsets


def test_other_sources_are_ignored_and_a_partition_read_twice_keeps_the_smaller(
    tmp_path: Path,
) -> None:
    root = _offsets_file(
        tmp_path,
        0,
        '{"logOffset":3}',  # a file source
        "-",  # a source with no offsets yet
        "17",  # a rate source
        '{"a":{"0":10},"b":{"0":5}}',
        '{"a":{"0":7,"1":2}}',  # a self-join reads topic a twice
    )
    assert kafka_offsets_of(root, 0) == SourceOffsets(0, {"a": {0: 7, 1: 2}, "b": {0: 5}})


def test_no_kafka_source_or_no_offsets_file_is_none(tmp_path: Path) -> None:
    root = _offsets_file(tmp_path, 0, '{"logOffset":3}')
    assert kafka_offsets_of(root, 0) is None
    assert kafka_offsets_of(root, 1) is None
    assert kafka_offsets_of(str(tmp_path / "missing"), 0) is None


class RecordingGroup(ProgressReporter):
    """A reporter that keeps what it was told (the broker-backed one is tested against a
    real broker); ``fail`` makes publishing raise."""

    def __init__(self, foreign: bool = False) -> None:
        self.group_id = "progress"
        self.published: list[tuple[int, dict[str, Any]]] = []
        self.fail = False
        self.foreign = foreign

    def check(self, sink_id: str) -> None:
        if self.foreign:
            raise twopc.ConfigurationError("the group belongs to another application")

    def publish(self, offsets: SourceOffsets, sink_id: str, query_id: str) -> None:
        if self.fail:
            raise twopc.TransientSinkError("broker unreachable")
        self.published.append((offsets.batch_id, offsets.to_json()["topics"]))

    def progress(self, offsets: SourceOffsets) -> GroupProgress:
        committed = {(t, p): o for t, p, o in offsets.positions()}
        return GroupProgress(self.group_id, committed, {k: v + 1 for k, v in committed.items()})

    def describe(self) -> dict[str, Any]:
        return {"kind": "recording", "group": self.group_id}


def _engine(batch_id: int) -> LocalEngine:
    return LocalEngine(
        [pa.table({"id": pa.array([batch_id * 10 + i for i in range(3)], pa.int64())})],
        processes=False,
    )


def _offsets(batch_id: int) -> SourceOffsets:
    return SourceOffsets(batch_id, {"in": {0: 100 * (batch_id + 1)}})


@pytest.mark.parametrize("role", [MemoryDriverSink, MemoryTaskSink], ids=["driver", "task"])
def test_offsets_are_published_after_the_commit_and_again_for_a_replay(
    tmp_path: Path, store_name: str, role: type[twopc.Sink[Any]]
) -> None:
    group = RecordingGroup()
    log = CommitLog(str(tmp_path / "log"))
    coord = Coordinator(role(store_name), "orders", log, progress=group)  # type: ignore[call-arg]
    first = coord.run_batch(QUERY, 0, _engine(0), source_offsets=_offsets(0))
    assert first.status == "committed"
    assert (first.source_offsets, first.source_lag) == ({"in": {"0": 100}}, 1)
    assert group.published == [(0, {"in": {"0": 100}})]
    decision = log.decision(QUERY, 0)
    assert decision is not None and decision.progress is not None
    assert (decision.progress.offsets, decision.progress.in_task) == (_offsets(0), False)

    again = Coordinator(role(store_name), "orders", log, progress=group)  # type: ignore[call-arg]
    replay = again.run_batch(QUERY, 0, _engine(0), source_offsets=_offsets(0))
    assert replay.status == "skipped"
    assert group.published == [(0, {"in": {"0": 100}})] * 2


def test_a_failed_publish_leaves_the_batch_committed_and_says_why(
    tmp_path: Path, store_name: str
) -> None:
    group = RecordingGroup()
    group.fail = True
    coord = Coordinator(
        MemoryDriverSink(store_name), "orders", CommitLog(str(tmp_path / "log")), progress=group
    )
    metrics = coord.run_batch(QUERY, 0, _engine(0), source_offsets=_offsets(0))
    assert metrics.status == "committed" and metrics.rows == 3
    assert metrics.progress_error is not None and "broker unreachable" in metrics.progress_error
    group.fail = False
    coord.run_batch(QUERY, 1, _engine(1), source_offsets=_offsets(1))
    assert group.published == [(1, {"in": {"0": 200}})]


def test_a_group_of_another_application_fails_before_anything_is_written(
    tmp_path: Path, store_name: str
) -> None:
    coord = Coordinator(
        MemoryDriverSink(store_name),
        "orders",
        CommitLog(str(tmp_path / "log")),
        progress=RecordingGroup(foreign=True),
    )
    with pytest.raises(twopc.ConfigurationError, match="another application"):
        coord.run_batch(QUERY, 0, _engine(0), source_offsets=_offsets(0))
    assert memory_store(store_name).visible == []


def test_without_a_reporter_nothing_is_recorded(tmp_path: Path, store_name: str) -> None:
    log = CommitLog(str(tmp_path / "log"))
    metrics = Coordinator(MemoryDriverSink(store_name), "orders", log).run_batch(
        QUERY, 0, _engine(0), source_offsets=_offsets(0)
    )
    assert metrics.source_offsets is None
    decision = log.decision(QUERY, 0)
    assert decision is not None and decision.progress is None
