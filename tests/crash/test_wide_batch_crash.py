"""Cluster-shaped batches under a driver SIGKILL (issue 46): a real-Spark ``foreachBatch``
query writes batches of 200 partitions (1,000 under ``--extended`` for one backend); its
driver is SIGKILLed at a driver crash point of batch 1, the query restarted from its
checkpoint, and the target read back: every id once, nothing prepared or staged.

CI runs MariaDB ``two_phase`` killed between its commits (200 XA branches, the first
committed, the others committed side by side by the restart's recovery); ``--extended``
runs every backend and mode, in-task sinks hashed into 8 tasks by ``max_tasks`` (their
replays must see the same rows in each partition), PostgreSQL ``two_phase`` with
``max_tasks=60`` (the test
server's ``max_prepared_transactions`` is 64: without it the batch is refused before any
task runs, which the first case here shows through Spark).
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.backend_cases import new_target
from tests.harness.exactly_once import assert_target_exactly_once
from tests.harness.group_recipe import GroupRecipe
from tests.harness.processes import run_process
from tests.harness.sink_recipe import SinkRecipe
from tests.harness.standalone import standalone_cluster
from tests.harness.targets import Target
from twopc.faults import CrashPoint

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]

BATCHES, ROWS_PER_BATCH, CRASH_BATCH = 3, 1_000, 1


def _input(directory: Path) -> set[int]:
    """One JSON file per batch, a second apart (Spark takes them in that order)."""
    directory.mkdir(parents=True, exist_ok=True)
    for index in range(BATCHES):
        ids = range(index * ROWS_PER_BATCH, (index + 1) * ROWS_PER_BATCH)
        path = directory / f"in-{index:04d}.json"
        path.write_text("\n".join(json.dumps({"id": i, "payload": f"p{i}"}) for i in ids) + "\n")
        stamp = time.time() + index
        os.utime(path, (stamp, stamp))
    return set(range(BATCHES * ROWS_PER_BATCH))


def _case(
    backend: str,
    mode: str,
    point: CrashPoint,
    *,
    partitions: int = 200,
    max_tasks: int | None = None,
    ci: bool = False,
) -> object:
    label = f"{backend}-{mode}-{partitions}-{point.value}"
    label += f"-max{max_tasks}" if max_tasks else ""
    marks = [] if ci else [pytest.mark.extended]
    return pytest.param((backend, mode), point, partitions, max_tasks, id=label, marks=marks)


CASES = [
    _case("mysql", "two_phase", CrashPoint.BETWEEN_COMMITS, ci=True),
    _case("mysql", "two_phase", CrashPoint.AFTER_DECISION, partitions=1_000),
    _case("mysql", "transaction", CrashPoint.BEFORE_DECISION),
    _case("postgres", "two_phase", CrashPoint.BETWEEN_COMMITS, max_tasks=60),
    _case("postgres", "transaction", CrashPoint.BEFORE_DECISION),
    _case("files", "parquet", CrashPoint.BETWEEN_COMMITS),
    _case("kafka", "per_partition", CrashPoint.BEFORE_DECISION),
    _case("kafka", "per_partition", CrashPoint.BEFORE_DECISION, max_tasks=8),
    _case("postgres", "transaction", CrashPoint.BEFORE_DECISION, max_tasks=8),
    _case("kafka", "atomic", CrashPoint.AFTER_DECISION),
    _case("iceberg", "sqlite", CrashPoint.AFTER_DECISION),
]


@pytest.fixture
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Target, SinkRecipe]]:
    backend, mode = request.param
    found, spec = new_target(request, backend, mode, tmp_path / "target", prefix="wide")
    yield found, spec
    found.cleanup(spec)


def _command(spec: SinkRecipe, tmp_path: Path, partitions: int, max_tasks: int | None) -> list[str]:
    args = ["-m", "tests.harness.recipe_spark_query", "--spec", spec.dumps()]
    args += ["--checkpoint", str(tmp_path / "chk"), "--input", str(tmp_path / "in")]
    args += ["--partitions", str(partitions)]
    return args + (["--max-tasks", str(max_tasks)] if max_tasks else [])


@pytest.mark.parametrize(("target", "point", "partitions", "max_tasks"), CASES, indirect=["target"])
def test_a_wide_batch_survives_its_driver_killed(
    target: tuple[Target, SinkRecipe],
    point: CrashPoint,
    partitions: int,
    max_tasks: int | None,
    tmp_path: Path,
) -> None:
    found, spec = target
    expected = _input(tmp_path / "in")
    args = _command(spec, tmp_path, partitions, max_tasks)
    crashed = run_process(args, faults=f"{point.value}:kill@batch={CRASH_BATCH}", timeout=600)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    seen = found.committed(spec)
    assert max(seen.values(), default=1) == 1, f"duplicates after the kill at {point}"
    finished = run_process(args, timeout=600)
    assert finished.returncode == 0, finished.stderr[-3000:]
    tasks = 1 if spec.mode == "atomic" else max_tasks or partitions  # Kafka atomic: one task
    widths = {e["partitions"] for e in finished.events if e.get("event") == "batch-done"}
    assert widths <= {tasks, 0}, widths  # 0: a replay skipped

    assert_target_exactly_once(found, spec, expected)


@pytest.mark.parametrize("target", [("postgres", "two_phase")], indirect=True)
def test_a_two_phase_batch_wider_than_the_server_allows_fails_before_any_task(
    target: tuple[Target, SinkRecipe], postgres_dsn: str, tmp_path: Path
) -> None:
    """Through Spark: the query fails on its first batch with the limit's message, and the
    server shows nothing of it (no marker table even: no task began)."""
    found, spec = target
    _input(tmp_path / "in")
    failed = run_process(_command(spec, tmp_path, 100, None), timeout=600)
    assert failed.returncode == 1, failed.stderr[-3000:]
    errors = [e["error"] for e in failed.events if e.get("event") == "query-failed"]
    assert errors and "TargetLimitError" in errors[0], errors
    assert "the batch has 100 partitions" in failed.stderr
    assert "max_prepared_transactions allows only 64" in failed.stderr
    assert found.committed(spec) == {} and found.leftovers(spec) == []


@pytest.mark.extended
def test_a_wide_batch_of_a_group_survives_its_driver_killed_between_members(
    request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Files + PostgreSQL ``two_phase`` under one decision, 200 partitions in 60 tasks
    (the test server allows 64 prepared transactions), killed after the files member
    committed: both targets hold every id once after the restart."""
    members, targets = [], []
    for name, backend, mode, columns in (
        ("audit", "files", "parquet", ("id",)),
        ("orders", "postgres", "two_phase", ("id", "payload")),
    ):
        found, spec = new_target(request, backend, mode, tmp_path / name, prefix=f"w{name[0]}")
        members.append((name, spec, columns))
        targets.append(found)
    recipe = GroupRecipe.of(f"wgrp-{uuid.uuid4().hex[:8]}", *members)
    try:
        expected = _input(tmp_path / "in")
        args = ["-m", "tests.harness.recipe_spark_query", "--spec", recipe.dumps()]
        args += ["--checkpoint", str(tmp_path / "chk"), "--input", str(tmp_path / "in")]
        args += ["--partitions", "200", "--max-tasks", "60"]
        crashed = run_process(args, faults=f"between_members:kill@batch={CRASH_BATCH}", timeout=600)
        assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
        finished = run_process(args, timeout=600)
        assert finished.returncode == 0, finished.stderr[-3000:]
        for found, member in zip(targets, recipe.members, strict=True):
            assert_target_exactly_once(found, member.sink, expected)
    finally:
        for found, member in zip(targets, recipe.members, strict=True):
            found.cleanup(member.sink)


FOUR_HOSTS = ("127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5")


@pytest.mark.extended
@pytest.mark.parametrize("target", [("mysql", "two_phase")], indirect=True)
def test_a_wide_batch_on_four_executors_survives_its_driver_killed(
    target: tuple[Target, SinkRecipe], tmp_path: Path
) -> None:
    """The same crash on a standalone cluster of four one-core executors (four worker
    JVMs, each on a loopback address of its own): 200 partitions spread over them, the
    driver killed between the commits, every id once after the restart."""
    found, spec = target
    expected = _input(tmp_path / "in")
    with standalone_cluster(tmp_path / "cluster", hosts=FOUR_HOSTS) as url:
        args = [*_command(spec, tmp_path, 200, None), "--master", url]
        crashed = run_process(args, faults=f"between_commits:kill@batch={CRASH_BATCH}", timeout=600)
        assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
        finished = run_process(args, timeout=600)
    assert finished.returncode == 0, finished.stderr[-3000:]
    assert_target_exactly_once(found, spec, expected)
