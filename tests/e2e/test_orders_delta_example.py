"""The Delta outbox example (``examples/orders_delta_outbox.py``) on real Spark: order
events upserted into a Delta table and published to an outbox topic in one group, the
driver SIGKILLed after the outbox's transaction of batch 1 committed (the group's
decision) and before the Delta commit, the rerun finishing it. Checked: the table read
with deltalake (every order once, with its last status) and the topic read with a
``read_committed`` consumer (every event once), through the example's own verdict."""

from __future__ import annotations

import signal
import uuid
from pathlib import Path

import pytest

from tests.harness.processes import run_process

pytest.importorskip("deltalake")

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]


def test_the_example_survives_its_driver_killed_after_the_outbox_committed(
    tmp_path: Path, kafka_bootstrap: str, capsys: pytest.CaptureFixture[str]
) -> None:
    import examples.orders_delta_outbox as example

    args = ["examples/orders_delta_outbox.py", "--input", str(tmp_path / "in")]
    args += ["--table", str(tmp_path / "orders"), "--checkpoint", str(tmp_path / "chk")]
    args += ["--outbox", f"orders-delta-{uuid.uuid4().hex[:8]}", "--bootstrap", kafka_bootstrap]
    produced = run_process([*args, "--produce", "1500"])
    assert produced.returncode == 0, produced.stderr[-3000:]
    crashed = run_process(args, faults="after_last_resource:kill@batch=1")
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    options = example.parse_args(args[1:])
    _, events = example.expected(tmp_path / "in")
    # the outbox holds batches 0 and 1 (its transaction decided batch 1), the table batch 0
    assert sum(example.outbox_events(options.bootstrap, options.outbox).values()) == 500
    assert len(example.table_rows(options.table)) == 84
    finished = run_process(args)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert example.verdict(options) == 0
    assert (
        "exactly-once: OK (orders=500 rows=500 duplicates=0 missing=0 stale=0 events=1500 "
        "outbox_off=0)"
    ) in capsys.readouterr().out
    assert example.outbox_events(options.bootstrap, options.outbox) == events
