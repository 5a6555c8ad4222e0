"""``format("twopc")``'s commit and abort on the driver, without Spark: phase 1 runs inline
(as the executors would), and every ``commit``/``abort`` gets a fresh writer and
coordinator, as Spark's fresh Python process per batch does. The in-memory reference sinks
stand in for the backends.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import twopc
from twopc import CommitLog
from twopc._coordination.records import Decision

try:
    from twopc._engines.datasource import TwopcMessage, _Setup, _StreamWriter
except ImportError as exc:  # PySpark 4.0 (scripts/lowest-versions): no Arrow stream writers
    pytest.skip(f'format("twopc") needs PySpark 4.1 or newer: {exc}', allow_module_level=True)
from twopc._contract.paths import CommitPath
from twopc._coordination.phase1 import Phase1Task
from twopc._coordination.reports import TaskReport
from twopc.testing import MemoryDriverSink, MemoryStore

pytestmark = pytest.mark.unit

QUERY = "8f14e45f-ceea-467f-a0e6-1f2a3b4c5d6e"


def setup_for(sink: twopc.Sink[Any], commit_log: str) -> _Setup:
    return _Setup(sink, "mem", commit_log, None, None, QUERY, None, None)


def messages(
    sink: twopc.Sink[Any], batch_id: int, partitions: int = 2, run: int = 0
) -> list[TwopcMessage | None]:
    """What the batch's tasks send the driver: phase 1 of each partition, run inline
    (``run`` tells the attempt ids of two runs apart, as the writer's run token does)."""
    task = Phase1Task(sink, "mem", QUERY, batch_id, CommitPath.of(sink))
    sent: list[TwopcMessage | None] = []
    for partition in range(partitions):
        ids = pa.array([batch_id * 100 + partition], pa.int64())
        batches = iter([pa.record_batch({"id": ids})])
        report = task.run(partition, 0, batches, attempt_id=run << 15 | partition)
        sent.append(TwopcMessage(report.dumps()))
    return sent


def commit(setup: _Setup, batch_id: int, sent: list[TwopcMessage | None]) -> None:
    """``commit`` as Spark calls it: a writer of its own, in a fresh process."""
    _StreamWriter(setup).commit(list(sent), batch_id)


def test_batches_commit_once_and_a_replayed_commit_is_skipped(
    tmp_path: Path, store_name: str, store: MemoryStore
) -> None:
    sink = MemoryDriverSink(store_name)
    setup = setup_for(sink, str(tmp_path / "log"))
    for batch_id in range(2):
        commit(setup, batch_id, messages(sink, batch_id))
    commit(setup, 1, messages(sink, 1))  # Spark could not record batch 1: a replay
    assert sorted(store.visible) == [0, 1, 100, 101]
    assert store.prepared == {}


def test_a_commit_log_that_cannot_be_written_fails_as_a_twopc_error(
    tmp_path: Path, store_name: str, store: MemoryStore
) -> None:
    sink = MemoryDriverSink(store_name)
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    with pytest.raises(twopc.TwoPCError) as failed:
        commit(setup_for(sink, str(blocker)), 3, messages(sink, 3))
    assert (failed.value.sink_id, failed.value.batch_id) == ("mem", 3)
    assert isinstance(failed.value.__cause__, OSError)
    assert store.visible == []


@pytest.mark.parametrize(
    "report",
    ["not json", "[1]", '{"format": 2}', '{"format": 2, "partition": 0, "attempt": 0}'],
)
def test_a_malformed_report_fails_as_an_unsupported_format(
    tmp_path: Path, store_name: str, store: MemoryStore, report: str
) -> None:
    sink = MemoryDriverSink(store_name)
    sent = [*messages(sink, 0, partitions=1), TwopcMessage(report)]
    with pytest.raises(twopc.UnsupportedFormatError) as refused:
        commit(setup_for(sink, str(tmp_path / "log")), 0, sent)
    assert (refused.value.sink_id, refused.value.batch_id) == ("mem", 0)
    assert store.visible == []


def test_an_abort_that_fails_is_logged_not_raised(
    tmp_path: Path, store_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    sink = MemoryDriverSink(store_name)
    sent = [*messages(sink, 0, partitions=1), TwopcMessage("not json")]
    _StreamWriter(setup_for(sink, str(tmp_path / "log"))).abort(sent, 0)
    (record,) = [r for r in caplog.records if "aborting failed" in r.getMessage()]
    assert record.exc_info is not None
    error = record.exc_info[1]
    assert isinstance(error, twopc.UnsupportedFormatError)
    assert (error.sink_id, error.batch_id) == ("mem", 0)


def test_a_commit_lists_the_log_once(
    tmp_path: Path, store_name: str, store: MemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    sink = MemoryDriverSink(store_name)
    setup = setup_for(sink, str(tmp_path / "log"))
    log = CommitLog(setup.commit_log)
    for query_id in ("earlier-a", "earlier-b"):  # old checkpoints' queries
        log.record_decision(Decision("mem", query_id, 0, ()))
        log.mark_done(query_id, 0)
    for batch_id in range(2):
        commit(setup, batch_id, messages(sink, batch_id))
    sent = messages(sink, 2)
    calls: Counter[str] = Counter()
    for name in ("query_ids", "_batch_files", "runs", "decided_batches", "is_done"):
        monkeypatch.setattr(CommitLog, name, _counted(calls, name, getattr(CommitLog, name)))
    commit(setup, 2, sent)
    # the root once, each query's directory once; a driver-commit sink reads no runs
    assert calls == Counter({"query_ids": 1, "_batch_files": 3})
    assert sorted(store.visible) == [0, 1, 100, 101, 200, 201]


def test_an_abort_after_the_decision_keeps_the_decided_work(
    tmp_path: Path, store_name: str, store: MemoryStore
) -> None:
    sink = MemoryDriverSink(store_name)
    setup = setup_for(sink, str(tmp_path / "log"))
    decided = messages(sink, 0)
    reports = [TaskReport.loads(m.report) for m in decided if m is not None]
    committables = [r.committable for r in reports if r.committable is not None]
    CommitLog(setup.commit_log).record_decision(Decision("mem", QUERY, 0, tuple(committables)))
    replay = messages(sink, 0, run=1)  # the work of a run Spark gave up on
    _StreamWriter(setup).abort([*decided, *replay], 0)
    assert sorted(c.partition for c, _ in store.prepared.values()) == [0, 1]  # decided stays
    assert {c.attempt >> 15 for c, _ in store.prepared.values()} == {0}
    assert store.visible == []


def _counted(calls: Counter[str], name: str, method: Any) -> Any:
    def counting(self: CommitLog, *args: Any, **kwargs: Any) -> Any:
        calls[name] += 1
        return method(self, *args, **kwargs)

    return counting
