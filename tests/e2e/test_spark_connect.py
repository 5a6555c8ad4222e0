"""twopc from a Spark Connect client (``SparkSession.builder.remote(...)``), against a real
Connect server started from the pyspark package: ``foreach_batch`` and
``writeStream.format("twopc")`` queries that run again over more input, and the Connect
server SIGKILLed between a batch's decision and its commit, then restarted. The client runs
in its own process; the checks read the target."""

from __future__ import annotations

import time
import uuid
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
    ("foreach", "iceberg", "sqlite"),
    ("format", "iceberg", "sqlite"),
]
EXTENDED = {
    ("foreach", "iceberg", "sqlite"),
    ("format", "iceberg", "sqlite"),
    ("foreach", "files", "parquet"),
    ("foreach", "kafka", "atomic"),
    ("format", "postgres", "two_phase"),
    ("foreach", "kafka", "per_partition"),
}
KILL_CASES = [
    ("foreach", "postgres", "two_phase"),
    ("format", "files", "parquet"),
    ("foreach", "kafka", "per_partition"),
    ("foreach", "iceberg", "sqlite"),
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


@pytest.fixture
def kafka_group(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    """PostgreSQL ``two_phase`` + Kafka ``atomic`` (the last resource), as one target."""
    from tests.harness.targets import GroupTarget

    env = {
        "POSTGRES_DSN": request.getfixturevalue("postgres_dsn"),
        "KAFKA_BOOTSTRAP_SERVERS": request.getfixturevalue("kafka_bootstrap"),
    }
    target = GroupTarget(env, "postgres+kafka")
    recipe = target.prepare(f"scg-{uuid.uuid4().hex[:8]}", "postgres+kafka", tmp_path, 2)
    yield target, recipe
    target.cleanup(recipe)


@pytest.mark.extended
def test_a_group_with_a_last_resource_from_a_connect_client_survives_the_server_killed(
    kafka_group: Any, connect: Any, tmp_path: Path
) -> None:
    """A SinkGroup over Spark Connect: the server SIGKILLed after batch 1's Kafka decision
    (the table not yet committed), restarted; the rerun finishes the table from the Kafka
    marker, and both targets hold every id once."""
    import subprocess

    from tests.harness.entry_runs import _env

    target, recipe = kafka_group
    source, checkpoint = tmp_path / "in", tmp_path / "chk"
    batches = [add_input(source, i) for i in range(3)]
    expected = set().union(*batches)
    client = subprocess.Popen(
        command(
            "foreach",
            recipe,
            source,
            checkpoint,
            remote=connect.url,
            faults="after_last_resource:sleep=300@batch=1",
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=_env(),
    )
    try:
        wait_for_decided([tmp_path], 1)  # the conditional decision; Kafka then commits
        kafka = target.targets[1][1]
        deadline = time.monotonic() + 60
        while not batches[1] & set(kafka.committed(recipe.members[1].sink)):
            assert time.monotonic() < deadline, "Kafka never committed batch 1"
            time.sleep(0.5)
        connect.restart()
    finally:
        client.kill()
        client.wait()
    table = target.targets[0][1]
    assert not batches[1] & set(table.committed(recipe.members[0].sink))
    rerun = run(command("foreach", recipe, source, checkpoint, remote=connect.url))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert_target_exactly_once(target, recipe, expected)
