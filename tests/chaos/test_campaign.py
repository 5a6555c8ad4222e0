"""The chaos campaign in CI: a fixed set of seeds that covers every backend and mode and
every kill target passes, and a deliberately broken sink makes the campaign fail and print
the seed that reproduces it (so a passing campaign means something).

The campaign runs as its own process (``python -m tests.chaos``), as ``scripts/chaos`` runs
it. About two minutes on a 2-core machine, most of it the one Spark run and the broker kill.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.ci_seeds import CI_SEEDS
from tests.chaos.scenario import MODES, TARGETS
from tests.harness.processes import REPO
from tests.harness.services import Services

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]


def campaign(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], Any]:
    results = tmp_path / "results.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "tests.chaos", *args, "--json", str(results)]
    proc = subprocess.run(
        [*command, "--workdir", str(tmp_path / "runs")],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=800,
        check=False,
    )
    document = json.loads(results.read_text()) if results.exists() else None
    return proc, document


@pytest.fixture
def own_services(services_cli: Services) -> None:
    """The campaign kills and pauses services: they must be this checkout's (started on
    demand)."""
    services_cli.start("postgres", "mariadb", "kafka", "s3")
    if "not started by this checkout" in services_cli.status():
        pytest.skip(
            "a service on this checkout's ports belongs to another checkout, so the campaign "
            "cannot kill it (set TWOPC_KAFKA_PORT, TWOPC_POSTGRES_PORT, TWOPC_MYSQL_PORT, "
            "TWOPC_S3_PORT)"
        )


@pytest.mark.usefixtures("own_services")
def test_ci_seeds_pass_and_cover_every_backend_mode_and_target(tmp_path: Path) -> None:
    proc, document = campaign(tmp_path, "--seeds", ",".join(map(str, CI_SEEDS)))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    runs = document["results"]
    assert [r["seed"] for r in runs] == list(CI_SEEDS)
    assert all(r["passed"] for r in runs)
    scenarios = [r["scenario"] for r in runs]
    combos = {(s["backend"], s["mode"]) for s in scenarios}
    assert combos == {(b, m) for b, modes in MODES.items() for m in modes} | {
        ("group", "postgres+files"),
        ("group", "delta+postgres"),
    }
    assert {s["target"] for s in scenarios} == set(TARGETS)
    killed = {s["backend"] for s in scenarios if s["target"] == "service"}
    assert killed == {"postgres", "mysql", "kafka", "iceberg"}
    # not vacuous: every crash point fired and the executor JVM was really killed
    for r in runs:
        if r["scenario"]["timing"] == "point" or r["scenario"]["target"] == "executor":
            assert r["injected"], r["description"]
        if r["scenario"]["timing"] == "point":
            assert r["attempts"] >= 1 and r["first_exit"] is not None
    assert f"{len(CI_SEEDS)} runs ({len(CI_SEEDS) - 1} local engine, 1 Spark)" in proc.stdout
    assert not list((tmp_path / "runs").glob("run-*")), "passing runs must clean up"


def test_a_broken_sink_fails_the_campaign_and_prints_the_seed(tmp_path: Path) -> None:
    # commit_copies_again duplicates data when a commit is repeated after a crash
    proc, document = campaign(
        tmp_path,
        "--seeds",
        "16",
        "--backend",
        "files",
        "--sink-factory",
        "tests.kit.broken_sinks:commit_copies_again",
    )
    assert proc.returncode == 1, proc.stdout[-4000:] + proc.stderr[-2000:]
    [run] = document["results"]
    assert not run["passed"]
    assert "after_commit:kill" in run["description"]
    assert any("duplicated ids" in p for p in run["problems"])
    assert "reproduce: scripts/chaos --seed 16 --runs 1 --backend=files" in proc.stdout
    assert "FAILED seed 16: scripts/chaos --seed 16" in proc.stdout
    assert Path(run["kept"], "result.json").exists()  # kept for inspection


@pytest.mark.usefixtures("own_services")
def test_checkpoint_lost_runs_restart_from_the_stored_offsets(tmp_path: Path) -> None:
    """Two ``checkpoint-lost`` runs: a Kafka ``atomic`` run whose commit log is lost with
    the checkpoint (a task killed after its commit in batch 2), and a MariaDB
    ``two_phase`` run killed after a commit of batch 1, its log lost too. Each starts a
    new checkpoint from what its output stores and ends exactly-once."""
    proc, document = campaign(
        tmp_path, "--seeds", "500005,500013", "--checkpoint-lost", "1", "--spark-share", "0"
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    runs = document["results"]
    assert [r["scenario"]["event"] for r in runs] == ["checkpoint-lost"] * 2
    assert [r["scenario"]["variant"] for r in runs] == ["log-inside", "log-inside"]
    assert all(r["passed"] and r["injected"] and r["lost"] == "restarted" for r in runs), runs
    assert "checkpoints lost: 2 of 2 runs started a new checkpoint" in proc.stdout
