"""examples/metrics_listener.py in real Spark: twopc's per-batch figures joined with Spark's
progress, across a driver SIGKILL after a decision (the restart's metrics show the
recovered commit and the skipped replay)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.harness.exactly_once import assert_exactly_once
from tests.harness.outputs import read_ids
from tests.harness.processes import run_process

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ROWS = 40  # per input file; the example writes three files


def test_listener_joins_progress_and_twopc_metrics_across_a_crash(tmp_path: Path) -> None:
    args = [
        "examples/metrics_listener.py",
        "--input",
        str(tmp_path / "in"),
        "--output",
        str(tmp_path / "out"),
        "--checkpoint",
        str(tmp_path / "chk"),
        "--demo-rows",
        str(ROWS),
    ]
    first = run_process(args, faults="after_decision:kill@batch=1", timeout=300)
    assert first.returncode == -signal.SIGKILL, first.stderr[-3000:]
    (batch0,) = first.of("batch_metrics")
    assert batch0["batch_id"] == 0
    assert batch0["spark_input_rows"] == ROWS == batch0["twopc"]["rows"]
    assert batch0["twopc"]["status"] == "committed"
    assert batch0["twopc"]["bytes"] > 0
    phases = ("recover", "write", "decide", "commit")
    assert all(batch0["twopc"][f"{p}_seconds"] >= 0 for p in phases)
    assert batch0["twopc"]["total_seconds"] >= batch0["twopc"]["write_seconds"]

    second = run_process(args[:-2], timeout=300)  # same input, no new files
    assert second.returncode == 0, second.stderr[-3000:]
    events = {e["batch_id"]: e for e in second.of("batch_metrics")}
    assert sorted(events) == [1, 2]
    replay = events[1]
    assert replay["twopc"]["status"] == "skipped"  # committed by the restart's recovery
    assert replay["twopc"]["recovered_committed"] == 1
    assert replay["spark_input_rows"] == ROWS
    assert events[2]["twopc"]["status"] == "committed"
    assert events[2]["twopc"]["rows"] == ROWS == events[2]["spark_input_rows"]
    assert_exactly_once(read_ids(tmp_path / "out"), set(range(3 * ROWS)))
