"""twopc from a Spark Connect client (``SparkSession.builder.remote(...)``), against a real
Connect server started from the pyspark package: ``foreach_batch`` and
``writeStream.format("twopc")`` queries that run again over more input, and the Connect
server SIGKILLed between a batch's decision and its commit, then restarted. The client runs
in its own process; the checks read the target."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.harness.backend_cases import add_input, new_target
from tests.harness.entry_runs import command, run, wait_for_decided
from tests.harness.exactly_once import assert_target_exactly_once

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CASES = [
    ("foreach", "files", "parquet"),
    ("foreach", "postgres", "two_phase"),
    ("foreach", "kafka", "per_partition"),
    ("foreach", "kafka", "atomic"),
    ("format", "files", "parquet"),
    ("format", "postgres", "two_phase"),
    ("format", "kafka", "per_partition"),
]
EXTENDED = {
    ("foreach", "files", "parquet"),
    ("foreach", "kafka", "atomic"),
    ("format", "postgres", "two_phase"),
    ("foreach", "kafka", "per_partition"),
}
KILL_CASES = [
    ("foreach", "postgres", "two_phase"),
    ("format", "files", "parquet"),
    ("foreach", "kafka", "per_partition"),
]


def _params(cases: list[tuple[str, str, str]]) -> list[Any]:
    return [
        pytest.param(
            case,
            id="-".join(case),
            marks=[pytest.mark.extended] if case in EXTENDED else [],
        )
        for case in cases
    ]


@pytest.fixture
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    entry, backend, mode = request.param
    target, spec = new_target(request, backend, mode, tmp_path, prefix="sc")
    yield entry, target, spec
    target.cleanup(spec)


@pytest.mark.parametrize("target", _params(CASES), indirect=True)
def test_a_query_from_a_connect_client_runs_again_over_more_input(
    target: Any, connect: Any, tmp_path: Path
) -> None:
    entry, target, spec = target
    source, checkpoint = tmp_path / "in", tmp_path / "chk"
    expected = add_input(source, 0) | add_input(source, 1)
    first = run(command(entry, spec, source, checkpoint, remote=connect.url))
    assert first.returncode == 0, first.stderr[-3000:]
    assert_target_exactly_once(target, spec, expected)
    expected |= add_input(source, 2)
    second = run(command(entry, spec, source, checkpoint, remote=connect.url))
    assert second.returncode == 0, second.stderr[-3000:]
    assert_target_exactly_once(target, spec, expected)


@pytest.mark.parametrize("target", _params(KILL_CASES), indirect=True)
def test_the_connect_server_sigkilled_between_decision_and_commit(
    target: Any, connect: Any, tmp_path: Path
) -> None:
    entry, target, spec = target
    source, checkpoint = tmp_path / "in", tmp_path / "chk"
    expected = set().union(*(add_input(source, i) for i in range(3)))
    import subprocess

    from tests.harness.entry_runs import _env

    client = subprocess.Popen(
        command(
            entry,
            spec,
            source,
            checkpoint,
            remote=connect.url,
            faults="after_decision:sleep=300@batch=1",
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=_env(),
    )
    try:
        wait_for_decided([tmp_path], 1)
        connect.restart()  # SIGKILL: the server, its foreachBatch / commit Python workers
    finally:
        client.kill()
        client.wait()
    assert len(target.committed(spec)) < len(expected)  # batch 1 decided, not all visible
    rerun = run(command(entry, spec, source, checkpoint, remote=connect.url))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert_target_exactly_once(target, spec, expected)


@pytest.mark.parametrize(
    "target", [pytest.param(("foreach", "files", "parquet"), id="foreach-files")], indirect=True
)
def test_a_checkpoint_location_of_another_query_is_refused(
    target: Any, connect: Any, tmp_path: Path
) -> None:
    """Over Connect the query's identity comes from ``checkpoint_location``: pointed at
    another query's checkpoint, whose batch 0 is committed, the writer would take this
    query's batch 0 for a replay and skip it. It refuses instead, and writes nothing."""
    entry, target, spec = target
    source = tmp_path / "in"
    expected = add_input(source, 0)
    first = run(command(entry, spec, source, tmp_path / "chk-a", remote=connect.url))
    assert first.returncode == 0, first.stderr[-3000:]
    before = target.committed(spec)
    args = command(entry, spec, source, tmp_path / "chk-b", remote=connect.url)
    second = run([*args, "--checkpoint-location", str(tmp_path / "chk-a")])
    assert second.returncode != 0
    assert "is not the checkpoint of the query" in second.stderr, second.stderr[-3000:]
    assert target.committed(spec) == before
    assert_target_exactly_once(target, spec, expected)
