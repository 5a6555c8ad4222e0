"""The Iceberg sink with its catalog on PostgreSQL (pyiceberg's SQL catalog, the database of
``scripts/services``): the catalog's database SIGKILLed while a decided batch waits for its
commit, with and without the driver; the driver killed at the points around the decision.
After the restart a pyiceberg scan shows every id once and nothing is left unreferenced."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.harness.backend_cases import new_target
from tests.harness.processes import run_process
from tests.harness.service_fixtures import ServiceControl
from tests.harness.sink_recipe import SinkRecipe
from tests.harness.targets import Target
from twopc import CommitLog
from twopc.faults import CrashPoint

pytest.importorskip("pyiceberg")

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

BATCHES, PARTITIONS, ROWS, CRASH_BATCH = 3, 2, 10, 1
EXPECTED = {
    b * 1000 + p * ROWS + i for b in range(BATCHES) for p in range(PARTITIONS) for i in range(ROWS)
}

Case = tuple[Target, SinkRecipe]


@pytest.fixture
def iceberg_pg(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Case]:
    target, spec = new_target(request, "iceberg", "postgres", tmp_path / "target", prefix="icp")
    yield target, spec
    target.cleanup(spec)


def _args(spec: SinkRecipe, checkpoint: str) -> list[str]:
    args = ["-m", "tests.harness.recipe_local_query", spec.dumps(), checkpoint]
    return [*args, str(BATCHES), str(PARTITIONS), str(ROWS), "1"]


def _decided(spec: SinkRecipe, checkpoint: str) -> bool:
    log = CommitLog(str(spec.commit_log(checkpoint)))
    return any(log.decision(q, CRASH_BATCH) is not None for q in log.query_ids())


def _exactly_once(case: Case) -> None:
    target, spec = case
    seen = target.committed(spec)
    assert sorted(i for i, n in seen.items() if n > 1) == []
    assert set(seen) == EXPECTED
    assert target.leftovers(spec) == []


@pytest.mark.parametrize(
    "point",
    [CrashPoint.AFTER_PRE_COMMIT, CrashPoint.BEFORE_DECISION, CrashPoint.AFTER_DECISION],
    ids=lambda p: p.value,
)
def test_driver_killed_with_the_catalog_on_postgres(
    iceberg_pg: Case, point: CrashPoint, tmp_path: Path
) -> None:
    _, spec = iceberg_pg
    checkpoint = str(tmp_path / "chk")
    where = "" if point.on_driver else ",partition=1"
    crashed = run_process(
        _args(spec, checkpoint), faults=f"{point.value}:kill@batch={CRASH_BATCH}{where}"
    )
    assert crashed.returncode == (-signal.SIGKILL if point.on_driver else 1), crashed.stderr[-3000:]
    finished = run_process(_args(spec, checkpoint), timeout=180)
    assert finished.returncode == 0, finished.stderr[-3000:]
    _exactly_once(iceberg_pg)


def test_the_catalog_database_killed_while_a_decided_batch_waits(
    iceberg_pg: Case, tmp_path: Path, services: ServiceControl
) -> None:
    """The database dies after the decision, before the commit reaches it; the driver keeps
    running and its commit fails until the database is back (retried, or the batch fails
    and a restart finishes it)."""
    _, spec = iceberg_pg
    checkpoint = str(tmp_path / "chk")
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(
            run_process,
            _args(spec, checkpoint),
            faults=f"after_decision:sleep=4@batch={CRASH_BATCH}",
            timeout=180,
        )
        deadline = time.monotonic() + 120
        while not _decided(spec, checkpoint):
            assert time.monotonic() < deadline, "batch 1 was never decided"
            assert not running.done(), running.result().stderr[-3000:]
            time.sleep(0.1)
        services.kill("postgres")
        time.sleep(6)  # the driver wakes and its commit meets a dead database
        services.start("postgres")
        first = running.result()
    if first.returncode != 0:  # the commit's retries ran out: the decision stands
        assert "a restart will finish it" in first.stderr, first.stderr[-3000:]
        finished = run_process(_args(spec, checkpoint), timeout=180)
        assert finished.returncode == 0, finished.stderr[-3000:]
    _exactly_once(iceberg_pg)


def test_the_catalog_database_and_the_driver_killed_after_the_decision(
    iceberg_pg: Case, tmp_path: Path, services: ServiceControl
) -> None:
    _, spec = iceberg_pg
    checkpoint = str(tmp_path / "chk")
    crashed = run_process(
        _args(spec, checkpoint), faults=f"after_decision:kill@batch={CRASH_BATCH}"
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    services.kill("postgres")
    services.start("postgres")
    finished = run_process(_args(spec, checkpoint), timeout=180)
    assert finished.returncode == 0, finished.stderr[-3000:]
    _exactly_once(iceberg_pg)
