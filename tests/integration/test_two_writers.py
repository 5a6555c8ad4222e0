"""Two queries (two checkpoints) writing one sink id at once are refused (issue 28).

The files sink keeps its commit log next to its data, so two checkpoints of one sink id share
it, and the second query finds the first one's liveness record there: it refuses to write,
naming the first, and nothing of its batch becomes visible. Once the first query is gone,
the second may run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers import REPO, local_query, read_ids, run_process
from twopc import CommitLog

pytestmark = pytest.mark.integration

SINK_ID = "local-orders"  # fixed by tests/e2e/local_query.py
ROWS = 10


def _batch_ids(batch: int) -> Counter[int]:
    return Counter(batch * 1000 + p * ROWS + i for p in range(2) for i in range(ROWS))


def _start_stalled_writer(output: Path, checkpoint: Path) -> subprocess.Popen[bytes]:
    """Query A: commits batch 0, then stalls in batch 1 before its decision."""
    env = {
        **os.environ,
        "TWOPC_FAULTS": "before_decision:sleep=60@batch=1",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    args = local_query("local_query", checkpoint=checkpoint, output=output, batches=3, rows=ROWS)
    return subprocess.Popen(
        [sys.executable, *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def _wait_for_batch(log: CommitLog, batch_id: int, timeout: float = 60) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        records = [h for h in log.heartbeats() if h.batch_id == batch_id]
        if records:
            return records[0].query_id
        time.sleep(0.1)
    raise AssertionError(f"query A never reached batch {batch_id}")


def test_a_second_query_on_the_same_sink_id_is_refused(tmp_path: Path) -> None:
    output = tmp_path / "out"
    first = _start_stalled_writer(output, tmp_path / "chk-a")
    try:
        first_query = _wait_for_batch(CommitLog(f"{output}/_twopc/{SINK_ID}"), 1)
        assert read_ids(output) == _batch_ids(0)

        second = local_query(
            "local_query", checkpoint=tmp_path / "chk-b", output=output, batches=3, rows=ROWS
        )
        refused = run_process(second, timeout=120)
        assert refused.returncode != 0
        assert (
            f"another query writes sink id {SINK_ID!r} right now: query {first_query}"
            in refused.stderr
        )
        assert "stop the other query, or give this one its own sink_id" in refused.stderr
        assert read_ids(output) == _batch_ids(0), "the refused query wrote something"
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()

    # the first query is gone (its record is stale): the second one runs
    ran = run_process(second, timeout=120)
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert read_ids(output) == _batch_ids(0) + sum((_batch_ids(b) for b in range(3)), Counter())
