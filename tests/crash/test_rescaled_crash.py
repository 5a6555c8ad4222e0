"""A query that crashed with 12 partitions, leaving work behind, restarted with 2, on real
Spark: the restart finds and aborts the work of partitions that no longer exist, whatever
their number (the commit log recorded it), and writes the batch exactly once.

The crashed run's driver is SIGKILLed: where the driver commits (files, SQL ``two_phase``)
after all 12 partitions prepared, before the decision; where tasks commit (Kafka), while
all 12 tasks hold an open transaction with their records produced (``local[12]``, each
task sleeping before its commit). SQL ``transaction`` mode has nothing to find: the server
rolls back a dead client's open transaction. Checks read the target: every id once, no
staged file, prepared branch or open Kafka transaction left (the open transactions are
fenced at once, not left to ``transaction.timeout.ms``).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.harness.backend_cases import add_input, new_target, run_query
from tests.harness.exactly_once import assert_target_exactly_once
from tests.harness.processes import REPO
from tests.harness.sink_recipe import SinkRecipe
from tests.harness.targets import KafkaTarget, Target

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]

# CI: Kafka, whose lingering work is found by name from the recorded partition count (the
# driver-commit sinks find theirs by listing, as every crash test shows); --extended: all.
CASES = [
    pytest.param(("kafka", "per_partition"), id="kafka-per_partition"),
    pytest.param(("files", "parquet"), id="files-parquet", marks=pytest.mark.extended),
    pytest.param(("postgres", "two_phase"), id="postgres-two_phase", marks=pytest.mark.extended),
    pytest.param(("mysql", "two_phase"), id="mysql-two_phase", marks=pytest.mark.extended),
    pytest.param(("kafka", "atomic"), id="kafka-atomic", marks=pytest.mark.extended),
]
CRASHED_PARTITIONS = 12


@pytest.fixture(params=CASES)
def case(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Target, SinkRecipe]]:
    target, spec = new_target(request, *request.param, tmp_path, prefix="rc")
    yield target, spec
    target.cleanup(spec)


def _crash_with_work_left(spec: SinkRecipe, target: Target, source: Path, checkpoint: Path) -> None:
    """Run batch 0 with 12 partitions in a driver of its own and SIGKILL it with the work
    of every partition prepared (driver commit) or open (task commit)."""
    in_task = spec.backend == "kafka"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    env["PYSPARK_PYTHON"] = sys.executable
    env["TWOPC_FAULTS"] = (
        "before_task_commit:sleep=600@batch=0" if in_task else "before_decision:kill@batch=0"
    )
    command = [
        sys.executable,
        "-m",
        "tests.harness.recipe_spark_query",
        "--spec",
        spec.dumps(),
        "--checkpoint",
        str(checkpoint),
        "--input",
        str(source),
        "--master",
        f"local[{CRASHED_PARTITIONS}]",
        "--partitions",
        str(CRASHED_PARTITIONS),
    ]
    driver = subprocess.Popen(
        command,
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        if in_task:
            assert isinstance(target, KafkaTarget)
            _wait_for_uncommitted_records(target, spec, driver)
            os.killpg(driver.pid, signal.SIGKILL)
        _, err = driver.communicate(timeout=300)
        assert driver.returncode == -signal.SIGKILL, err.decode(errors="replace")[-3000:]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)  # the JVM and Python workers too


def _wait_for_uncommitted_records(target: KafkaTarget, spec: SinkRecipe, driver: Any) -> None:
    """Until every row sits in an open transaction (a read_uncommitted reader sees them)."""
    from tests.harness.kafka_topics import uncommitted_count

    deadline = time.monotonic() + 240
    while uncommitted_count(spec.address, spec.table) < 40:
        assert driver.poll() is None, "the query ended before its tasks produced"
        assert time.monotonic() < deadline, "the tasks never produced their records"
        time.sleep(2)
    assert target.open_transactions(spec.table)


def test_restart_with_fewer_partitions_aborts_what_the_crashed_run_left(
    spark: Any, tmp_path: Path, case: tuple[Target, SinkRecipe]
) -> None:
    target, spec = case
    source, checkpoint = tmp_path / "in", tmp_path / "chk"
    expected = add_input(source, 0)
    _crash_with_work_left(spec, target, source, checkpoint)
    assert target.leftovers(spec), "the crash left nothing behind: nothing was tested"
    assert target.committed(spec) == {}

    writer = run_query(spark, spec, source, checkpoint, partitions=2)
    assert [m.status for m in writer.metrics] == ["committed"]
    assert writer.metrics[0].recovered_aborted >= 1 or spec.backend == "kafka"
    assert_target_exactly_once(target, spec, expected)  # every id once, nothing left behind
