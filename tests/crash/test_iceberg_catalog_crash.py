"""The Iceberg sink with a catalog behind a service of ``scripts/services``: pyiceberg's SQL
catalog on PostgreSQL (mode ``postgres``) and the Iceberg REST catalog (mode ``rest``,
service ``iceberg-rest``: iceberg-core's handlers, pyiceberg's REST client). The catalog's
service SIGKILLed while a decided batch waits for its commit, with and without the driver;
the driver killed at the points around the decision (PostgreSQL); through the REST catalog,
queries run twice and two queries race for one table (a commit that loses the server's
compare-and-swap gets HTTP 409 and is tried again, never twice). After each, a pyiceberg
scan through the same catalog shows every id once and nothing is left unreferenced."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
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
SERVICE = {"postgres": "postgres", "rest": "iceberg-rest"}
"""The service each catalog mode runs on."""

Case = tuple[Target, SinkRecipe]


def _case(request: pytest.FixtureRequest, tmp_path: Path, mode: str) -> Iterator[Case]:
    target, spec = new_target(request, "iceberg", mode, tmp_path / "target", prefix="icc")
    yield target, spec
    target.cleanup(spec)


@pytest.fixture
def iceberg_pg(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Case]:
    yield from _case(request, tmp_path, "postgres")


@pytest.fixture
def iceberg_rest(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Case]:
    yield from _case(request, tmp_path, "rest")


@pytest.fixture(params=sorted(SERVICE))
def iceberg_service(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Case]:
    """Either catalog on its service."""
    yield from _case(request, tmp_path, request.param)


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


def _service(case: Case) -> str:
    return SERVICE[case[1].mode]


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


def test_the_catalog_killed_while_a_decided_batch_waits(
    iceberg_service: Case, tmp_path: Path, services: ServiceControl
) -> None:
    """The catalog's service dies after the decision, before the commit reaches it; the
    driver keeps running, and its commit fails until the service is back (retried, or the
    batch fails and a restart finishes it)."""
    _, spec = iceberg_service
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
        services.kill(_service(iceberg_service))
        time.sleep(6)  # the driver wakes and its commit meets a dead service
        services.start(_service(iceberg_service))
        first = running.result()
    if first.returncode != 0:  # the commit's retries ran out: the decision stands
        assert "a restart will finish it" in first.stderr, first.stderr[-3000:]
        finished = run_process(_args(spec, checkpoint), timeout=180)
        assert finished.returncode == 0, finished.stderr[-3000:]
    _exactly_once(iceberg_service)


def test_the_catalog_and_the_driver_killed_after_the_decision(
    iceberg_service: Case, tmp_path: Path, services: ServiceControl
) -> None:
    _, spec = iceberg_service
    checkpoint = str(tmp_path / "chk")
    crashed = run_process(
        _args(spec, checkpoint), faults=f"after_decision:kill@batch={CRASH_BATCH}"
    )
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr[-3000:]
    services.kill(_service(iceberg_service))
    services.start(_service(iceberg_service))
    finished = run_process(_args(spec, checkpoint), timeout=180)
    assert finished.returncode == 0, finished.stderr[-3000:]
    _exactly_once(iceberg_service)


def test_a_query_through_the_rest_catalog_writes_once_and_a_rerun_nothing(
    iceberg_rest: Case, tmp_path: Path
) -> None:
    target, spec = iceberg_rest
    checkpoint = str(tmp_path / "chk")
    for _ in range(2):  # the second run finds every batch committed
        finished = run_process(_args(spec, checkpoint), timeout=180)
        assert finished.returncode == 0, finished.stderr[-3000:]
        _exactly_once(iceberg_rest)
    table = target._sink(spec).load_table()  # type: ignore[attr-defined]
    assert table.location().startswith("file://"), table.location()  # the server's warehouse
    assert len(table.snapshots()) == BATCHES  # one snapshot per batch


def test_two_queries_racing_for_one_table_through_the_rest_catalog(
    iceberg_rest: Case, tmp_path: Path
) -> None:
    """Two queries (two sink ids) append the same ids to one table at once: each commit
    that loses the server's compare-and-swap is tried again on the new head; both land
    once."""
    target, spec = iceberg_rest
    other = replace(spec, sink_id=f"{spec.sink_id}-b")
    with ThreadPoolExecutor(2) as pool:
        runs = [
            pool.submit(run_process, _args(s, str(tmp_path / f"chk-{i}")), timeout=240)
            for i, s in enumerate((spec, other))
        ]
        results = [r.result() for r in runs]
    for result in results:
        assert result.returncode == 0, result.stderr[-3000:]
    seen = target.committed(spec)
    assert set(seen.values()) == {2}, "each id once per query"
    assert set(seen) == EXPECTED
    assert target.leftovers(spec) == []
