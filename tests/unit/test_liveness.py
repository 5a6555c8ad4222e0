"""The writer's liveness record: how it is judged, where it lives, who writes and removes it
(over the in-memory reference sink: the record is the writer's, whatever the backend)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest

import twopc
from twopc import CommitLog
from twopc._coordination.liveness import Heartbeat, HeartbeatState, process_start
from twopc._coordination.records import Decision
from twopc.faults import FaultPlan
from twopc.local import LocalStream, foreach_batch
from twopc.testing import MemoryDriverSink

pytestmark = pytest.mark.unit

HOST = "host-a"


def heartbeat(host: str = HOST, pid: int = 1234, age: float = 0.0, query: str = "q1") -> Heartbeat:
    now = time.time()
    return Heartbeat("orders", query, host, pid, now - 100, now - age, 3, HeartbeatState.IDLE)


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_same_host_live_process_runs_however_old_the_record() -> None:
    liveness = heartbeat(pid=os.getpid(), age=10_000).assess(60, host=HOST)
    assert liveness.running
    assert "alive" in liveness.reason


def test_same_host_dead_process_is_stopped_however_fresh_the_record() -> None:
    liveness = heartbeat(pid=dead_pid(), age=0).assess(60, host=HOST)
    assert not liveness.running
    assert "exited" in liveness.reason


def test_other_host_is_judged_by_the_age_of_the_record() -> None:
    assert heartbeat(age=10).assess(60, host="host-b").running
    stale = heartbeat(age=120).assess(60, host="host-b")
    assert not stale.running
    assert "presumed stopped" in stale.reason


def test_heartbeat_round_trip_and_format_check() -> None:
    record = heartbeat()
    assert Heartbeat.from_bytes(record.to_bytes()) == record
    with pytest.raises(ValueError, match="format"):
        Heartbeat.from_bytes(b'{"format": 99}')


def test_a_state_of_another_version_is_read_not_refused() -> None:
    """The record must still say a writer runs; its state is for people only."""
    raw = heartbeat().to_bytes().replace(b'"idle"', b'"compacting"')
    assert Heartbeat.from_bytes(raw).state is HeartbeatState.UNKNOWN


def test_the_commit_log_never_reads_the_record_as_a_batch(tmp_path: Path) -> None:
    log = CommitLog(str(tmp_path / "log"))
    record = heartbeat(query="q1")
    log.write_heartbeat(record)
    assert log.query_ids() == ["q1"]
    assert log.decided_batches("q1") == []
    assert log.done_batches("q1") == []
    assert log.pending() == []
    log.record_decision(Decision("orders", "q1", 0, ()))
    log.mark_done("q1", 0)
    assert log.decided_batches("q1") == [0]
    assert log.done_batches("q1") == [0]
    assert log.heartbeats() == [record]
    assert (tmp_path / "log" / "q1" / ".heartbeat.json").exists()
    log.remove_heartbeat("q1")
    assert log.heartbeats() == []


def _stream(tmp_path: Path) -> LocalStream:
    table = pa.table({"id": pa.array([1, 2, 3], pa.int64())})
    return LocalStream(str(tmp_path / "chk"), [[table], [table]])


def test_a_clean_run_leaves_no_record_and_a_failed_one_leaves_it(
    tmp_path: Path, store_name: str
) -> None:
    sink = MemoryDriverSink(store_name)
    url = str(tmp_path / "log")
    log = CommitLog(url)
    stream = _stream(tmp_path)
    failing = foreach_batch(
        sink,
        "orders",
        commit_log=url,
        processes=False,
        faults=FaultPlan.parse("before_decision:raise@batch=1"),
    )
    with pytest.raises(twopc.TwoPCError):
        stream.run(failing)
    (record,) = log.heartbeats()
    assert (record.query_id, record.batch_id, record.state) == (
        stream.query_id,
        1,
        HeartbeatState.FAILED,
    )
    assert (record.host, record.pid) == (socket.gethostname(), os.getpid())
    assert record.process_start == process_start(os.getpid())  # survives pid reuse

    stream.run(foreach_batch(sink, "orders", commit_log=url, processes=False))
    assert log.heartbeats() == []


def test_a_reused_pid_is_not_taken_for_the_writer() -> None:
    """The record keeps the writer process's start time: a later process that got the same
    pid (here: this test's own, with another start time recorded) counts as stopped."""
    pid = os.getpid()
    started = process_start(pid)
    assert started is not None and started.startswith("linux:")
    base = heartbeat(host=socket.gethostname(), pid=pid)
    same = replace(base, process_start=started)
    assert same.assess().running
    reused = replace(base, process_start="linux:1")
    liveness = reused.assess()
    assert not liveness.running
    assert "that pid now belongs to a process started later" in liveness.reason
    # an older record without the start time still counts by pid alone
    assert base.assess().running
    assert Heartbeat.from_bytes(same.to_bytes()) == same
