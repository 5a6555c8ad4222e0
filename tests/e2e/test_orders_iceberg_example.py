"""The Iceberg example (``examples/orders_iceberg.py``) on real Spark: order events upserted
into an Iceberg table of the embedded catalog, the driver SIGKILLed after batch 1's
decision, the rerun finishing it. What is checked is a pyiceberg scan of the table (every
order once, with its last status), and the example's own verdict agrees."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from tests.harness.processes import run_process

pytest.importorskip("pyiceberg")

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_the_example_survives_its_driver_killed_after_a_decision(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import examples.orders_iceberg as example

    args = ["examples/orders_iceberg.py", "--input", str(tmp_path / "in")]
    args += ["--warehouse", str(tmp_path / "wh"), "--checkpoint", str(tmp_path / "chk")]
    produced = run_process([*args, "--produce", "1500"])
    assert produced.returncode == 0, produced.stderr[-3000:]
    crashed = run_process(args, faults="after_decision:kill@batch=1")
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    finished = run_process(args)
    assert finished.returncode == 0, finished.stderr[-3000:]
    options = example.parse_args(args[1:])
    assert example.verdict(options) == 0
    assert "exactly-once: OK (orders=500 rows=500 duplicates=0 missing=0 stale=0)" in (
        capsys.readouterr().out
    )
    rows = example.sink(options).load_table().scan().to_arrow().to_pylist()
    last = example.expected(tmp_path / "in")
    assert sorted(r["order_id"] for r in rows) == sorted(last)
    assert all(last[r["order_id"]] == r["status"] for r in rows)
