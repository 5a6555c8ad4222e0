"""``query.stop()`` while a batch is in phase 1 and while it commits, then a restart: every
row exactly once and nothing prepared, staged or open, on every backend and mode."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.harness.backend_cases import add_input, run_query, start_query
from tests.harness.exactly_once import assert_target_exactly_once
from tests.harness.group_recipe import build
from tests.harness.sink_recipe import SinkRecipe
from tests.harness.targets import Target

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

# Where batch 1 stalls while the test stops the query: a task in phase 1, or the driver
# between the decision and the commit (sinks that commit in the task have committed then).
STALLS = {
    "phase1": "after_invoke:sleep=6@batch=1,partition=1",
    "commit": "after_decision:sleep=4@batch=1",
}


def _stall(where: str, spec: SinkRecipe) -> str:
    """The fault of ``where``; a sink that writes a batch in one task (Kafka ``atomic``)
    has partition 0 only, so its phase-1 stall is there."""
    fault = STALLS[where]
    if where == "phase1" and build(spec).single_task:
        fault = fault.replace("partition=1", "partition=0")
    return fault


def _stop_during_batch_1(query: Any, writer: Any, stall_seconds: float) -> float:
    """Stop the query once batch 0 is done and batch 1 has been stalled for a while;
    returns how long ``stop()`` took."""
    deadline = time.monotonic() + 120
    while not any(m.batch_id == 0 and m.status != "failed" for m in writer.metrics):
        assert time.monotonic() < deadline, "batch 0 never finished"
        assert query.isActive, f"the query ended early: {query.exception()}"
        time.sleep(0.2)
    time.sleep(min(2.0, stall_seconds / 2))
    assert not any(m.batch_id == 1 for m in writer.metrics), "batch 1 ended before the stop"
    stopper = threading.Thread(target=query.stop)
    started = time.monotonic()
    stopper.start()
    stopper.join(timeout=120)
    assert not stopper.is_alive(), "query.stop() did not return"
    return time.monotonic() - started


@pytest.mark.parametrize("where", list(STALLS))
def test_stop_during_a_batch_then_restart(
    spark: Any, tmp_path: Path, case: tuple[Target, SinkRecipe], where: str
) -> None:
    target, spec = case
    expected = add_input(tmp_path / "in", 0) | add_input(tmp_path / "in", 1)
    query, writer = start_query(
        spark,
        spec,
        tmp_path / "in",
        tmp_path / "chk",
        partitions=2,
        faults=_stall(where, spec),
        trigger={"processingTime": "100 milliseconds"},
    )
    try:
        stop_took = _stop_during_batch_1(query, writer, 6.0)
    finally:
        writer.close()
    seen = target.committed(spec)
    assert max(seen.values(), default=1) == 1  # whatever is visible is there once
    batch_1 = [m.status for m in writer.metrics if m.batch_id == 1]
    if where == "phase1":
        # stopped inside phase 1: the batch never got to its decision
        assert "committed" not in batch_1, batch_1
    else:
        # stop() waited for the foreachBatch call, stalled after its decision, to commit
        assert batch_1 == ["committed"], batch_1
        assert stop_took > 0.5, stop_took

    expected |= add_input(tmp_path / "in", 2)
    run_query(spark, spec, tmp_path / "in", tmp_path / "chk", partitions=2)
    assert_target_exactly_once(target, spec, expected)
