"""Speculative task attempts on real Spark (``spark.speculation=true``, a standalone cluster
with executors on two hosts): one slow task gets a speculative copy, exactly one attempt of
each partition is committed, and whatever the losing attempt prepared is gone when the batch
ends, both when attempt 0 loses and when the speculative copy loses."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.harness import entry_runs
from tests.harness.backend_cases import add_input
from tests.harness.processes import run_process
from tests.harness.sink_recipe import SinkRecipe
from tests.harness.standalone import standalone_cluster
from tests.harness.targets import Target, make_target

pytestmark = [pytest.mark.e2e, pytest.mark.integration, pytest.mark.slow]

# Every backend and mode meets every way of losing with ``--extended``; CI runs a driver-
# commit and an in-task backend the way that matters most for each, and SQL two_phase's
# prepared attempt 0 that its copy must not roll back (every backend's losing attempt is
# also drawn by the chaos campaign's speculation runs).
BACKENDS = [
    ("files", "parquet"),
    ("kafka", "per_partition"),
    ("postgres", "two_phase"),
    ("mysql", "two_phase"),
    ("postgres", "transaction"),
    ("mysql", "transaction"),
]
REPRESENTATIVE = [
    ("files", "parquet", "attempt0-loses"),
    ("kafka", "per_partition", "copy-loses"),
    ("postgres", "two_phase", "attempt0-prepared-then-slow"),
]
# Partition 1 is slow. "attempt 0 loses": it stalls long before preparing, and its copy
# finishes first. "the copy loses": attempt 0 stalls briefly, the copy prepares and then
# stalls for long, so attempt 0 reports first and the copy is killed holding prepared work.
# "attempt 0 prepared, then slow": attempt 0 stalls right after preparing, so its copy
# starts while attempt 0's work is prepared; the copy must not roll it back (Spark then
# keeps attempt 0, whose commit would find its work gone): it waits, and attempt 0 wins.
LOSERS = {
    "attempt0-loses": "after_invoke:sleep=25@batch=0,partition=1,attempt=0",
    "copy-loses": (
        "after_invoke:sleep=4@batch=0,partition=1,attempt=0;"
        "after_pre_commit:sleep=25@batch=0,partition=1,attempt=1"
    ),
    "attempt0-prepared-then-slow": "after_pre_commit:sleep=6@batch=0,partition=1,attempt=0",
}
OTHERS = [
    (backend, mode, loser)
    for backend, mode in BACKENDS
    for loser in LOSERS
    if (backend, mode, loser) not in REPRESENTATIVE
]
CASE_SETS = [
    pytest.param(REPRESENTATIVE, id="representative"),
    pytest.param(OTHERS, id="others", marks=[pytest.mark.extended, pytest.mark.timeout(2400)]),
]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with standalone_cluster(tmp_path_factory.mktemp("standalone")) as url:
        yield url


def _env(request: pytest.FixtureRequest, backend: str) -> dict[str, str]:
    if backend == "postgres":
        return {"POSTGRES_DSN": request.getfixturevalue("postgres_dsn")}
    if backend == "mysql":
        return {"MYSQL_DSN": request.getfixturevalue("mysql_dsn")}
    if backend == "kafka":
        return {"KAFKA_BOOTSTRAP_SERVERS": request.getfixturevalue("kafka_bootstrap")}
    return {}


@pytest.mark.parametrize("cases", CASE_SETS)
def test_speculative_copies_commit_exactly_one_attempt(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    cluster: str,
    cases: list[tuple[str, str, str]],
) -> None:
    runs: list[tuple[Target, SinkRecipe, set[int], str]] = []
    payload: list[dict[str, Any]] = []
    for backend, mode, loser in cases:
        target = make_target(backend, _env(request, backend))
        name = f"sp-{uuid.uuid4().hex[:10]}"
        spec = target.prepare(name, mode, tmp_path / name, kafka_partitions=2)
        expected = add_input(tmp_path / name / "in", 0)
        runs.append((target, spec, expected, f"{backend}-{mode}-{loser}"))
        payload.append(
            {
                "spec": spec.dumps(),
                "faults": LOSERS[loser],
                "input": str(tmp_path / name / "in"),
                "checkpoint": str(tmp_path / name / "chk"),
            }
        )
    try:
        result = run_process(
            ["tests/e2e/speculation_query.py", cluster, json.dumps(payload)],
            timeout=300 + 60 * len(payload),
        )
        assert result.returncode == 0, result.stderr[-3000:]
        reports = {e["sink_id"]: e for e in result.events}
        for target, spec, expected, label in runs:
            report = reports[spec.sink_id]
            if "error" in report:  # the whole cause: pytest would cut an assertion's repr
                pytest.fail(f"{label}: the query failed: {report['error']}", pytrace=False)
            seen = target.committed(spec)
            assert (label, sorted(i for i, n in seen.items() if n > 1)) == (label, [])
            assert (label, set(seen)) == (label, expected)
            # cleaned up in the same batch: this query ran no other batch
            assert (label, target.leftovers(spec)) == (label, [])
            if "attempt0-loses" in label:  # the copy really ran, and won
                assert (label, report["attempts"]["1"]) != (label, 0)
            if "attempt0-prepared" in label and "two_phase" in label:
                # a SQL copy gives way to the prepared attempt 0 (files and Kafka copies do
                # not wait on it: either may win)
                assert (label, report["attempts"]["1"]) == (label, 0)
    finally:
        for target, spec, _, _ in runs:
            target.cleanup(spec)


@pytest.mark.extended
def test_speculative_copy_on_the_spark_write_path(tmp_path: Path, cluster: str) -> None:
    """The files sink's Spark write path: partition 1's rows are slow in the JVM, Spark
    starts a copy of its write task on the other host, and its own output committer keeps
    one attempt's files (attempt 0's, which started first, in practice). The copy, killed
    while it writes, leaves nothing: every row is committed once, under twopc's names, and
    nothing stays staged once the batch ends."""
    target = make_target("files", {})
    name = f"sp-{uuid.uuid4().hex[:10]}"
    spec = target.prepare(name, "parquet", tmp_path / name, kafka_partitions=2)
    spec = replace(spec, options=json.dumps({"write_path": "spark"}))
    expected = add_input(tmp_path / name / "in", 0)
    case = {
        "spec": spec.dumps(),
        "slow_ms": 1000,
        "input": str(tmp_path / name / "in"),
        "checkpoint": str(tmp_path / name / "chk"),
    }
    args = ["tests/e2e/speculation_query.py", cluster, json.dumps([case])]
    # the task attempts of partition 1 that wrote into Spark's committer's directories
    attempt = re.compile(r"attempt_\w+_m_000001_\d+")
    out = Path(spec.address)
    seen: set[str] = set()
    everything: set[str] = set()
    log, events = tmp_path / "query.log", tmp_path / "events.jsonl"
    with log.open("w") as output, events.open("w") as stdout:
        query = subprocess.Popen(
            [sys.executable, *args],
            stdout=stdout,
            stderr=output,
            env=entry_runs._env(),
            cwd=entry_runs.REPO,
        )
    try:
        deadline = time.monotonic() + 400
        while query.poll() is None:
            assert time.monotonic() < deadline, "the query did not end"
            for path in out.glob("_twopc_staging/*/*/*/spark-*/_temporary/**/*"):
                everything.add(str(path.relative_to(out)))
                if attempt.fullmatch(path.name):
                    seen.add(path.name)
            time.sleep(0.05)
    finally:
        if query.poll() is None:
            query.kill()
            query.wait()
    assert query.returncode == 0, log.read_text()[-3000:]
    report = json.loads(events.read_text().strip().splitlines()[-1])
    assert "error" not in report, report
    assert len(seen) >= 2, f"Spark ran no copy of partition 1's write task: {sorted(everything)}"
    committed = target.committed(spec)
    assert sorted(i for i, n in committed.items() if n > 1) == []
    assert set(committed) == expected
    assert target.leftovers(spec) == []
