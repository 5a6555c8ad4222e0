"""Crashes while recovery runs: a first crash leaves a batch decided-but-unfinished (or
prepared-but-undecided), then the restarts die a second and a third time inside recovery,
at its crash points, before a clean restart. The targets must then hold every row exactly
once with nothing prepared or staged: recovery is idempotent and converges.

The query is the chaos campaign's local-engine query (no JVM), on the real services, and
for files and SQL ``two_phase`` also its real-Spark query (a PySpark driver SIGKILLed each
time, its restarts recovering in a new driver). The recovery crash points apply to sinks
that commit on the driver (files, SQL ``two_phase``); for sinks that commit in the task,
recovery only marks the commit log, so a crash there leaves the state the first crash
left.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.harness.backend_cases import new_target
from tests.harness.processes import run_process
from tests.harness.sink_recipe import SinkRecipe
from tests.harness.targets import Target

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

BATCHES, PARTITIONS, ROWS = 3, 3, 10
EXPECTED = {
    b * 1000 + p * ROWS + i for b in range(BATCHES) for p in range(PARTITIONS) for i in range(ROWS)
}
CASES = [
    ("files", "parquet"),
    ("s3", "parquet"),  # the files sink on the S3 API, committing by completing uploads
    ("postgres", "two_phase"),
    ("mysql", "two_phase"),
]
SEQUENCES = {
    "commit": ["after_decision", "recovery_between_commits", "recovery_before_commit"],
    "abort": ["before_decision", "recovery_between_aborts", "recovery_before_abort"],
}


@pytest.fixture(params=CASES, ids=[f"{b}-{m}" for b, m in CASES])
def case(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Target, SinkRecipe]]:
    target, spec = new_target(request, *request.param, tmp_path, prefix="rc")
    yield target, spec
    target.cleanup(spec)


@pytest.mark.parametrize("sequence", list(SEQUENCES))
def test_two_crashes_inside_recovery_then_exactly_once(
    tmp_path: Path, case: tuple[Target, SinkRecipe], sequence: str
) -> None:
    target, spec = case
    args = ["-m", "tests.harness.recipe_local_query", spec.dumps(), str(tmp_path / "chk")]
    args += [str(BATCHES), str(PARTITIONS), str(ROWS), "1"]
    _crash_in_recovery_then_finish(
        args, target, spec, points=SEQUENCES[sequence], expected=EXPECTED, timeout=180
    )


def _crash_in_recovery_then_finish(
    args: list[str],
    target: Target,
    spec: SinkRecipe,
    *,
    points: list[str],
    expected: set[int],
    timeout: float,
) -> None:
    """Run the query once per point, SIGKILLed there each time (at batch 1), then once to
    the end: nothing is ever visible twice, and at the end every id is there once with
    nothing left prepared or staged."""
    for point in points:
        crashed = run_process(args, faults=f"{point}:kill@batch=1", timeout=timeout)
        assert crashed.returncode == -signal.SIGKILL, (point, crashed.stderr[-2000:])
        seen = target.committed(spec)
        assert max(seen.values(), default=1) == 1, f"duplicates after the crash at {point}"
    finished = run_process(args, timeout=timeout)
    assert finished.returncode == 0, finished.stderr[-3000:]
    seen = target.committed(spec)
    assert sorted(i for i, n in seen.items() if n > 1) == []
    assert set(seen) == expected
    assert target.leftovers(spec) == []


SPARK_CASES = [
    # about 1.5 min each: --extended (the local-engine cases above run every point in CI)
    pytest.param(
        ("files", "parquet"), "commit", id="files-parquet-commit", marks=pytest.mark.extended
    ),
    pytest.param(
        ("postgres", "two_phase"),
        "commit",
        id="postgres-two_phase-commit",
        marks=pytest.mark.extended,
    ),
    pytest.param(
        ("files", "parquet"), "abort", id="files-parquet-abort", marks=pytest.mark.extended
    ),
    pytest.param(
        ("mysql", "two_phase"), "abort", id="mysql-two_phase-abort", marks=pytest.mark.extended
    ),
]


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "sequence"), SPARK_CASES)
def test_two_crashes_inside_recovery_on_spark(
    request: pytest.FixtureRequest, tmp_path: Path, backend: tuple[str, str], sequence: str
) -> None:
    """The same three crashes with real Spark: the driver of each run SIGKILLed at the
    point (two micro-batches, the second crashed), then a clean restart."""
    from tests.harness.backend_cases import add_input

    target, spec = new_target(request, *backend, tmp_path, prefix="rs")
    try:
        source = tmp_path / "in"
        expected = add_input(source, 0) | add_input(source, 1)
        args = ["-m", "tests.harness.recipe_spark_query", "--spec", spec.dumps()]
        args += ["--checkpoint", str(tmp_path / "chk"), "--input", str(source)]
        args += ["--partitions", "3"]
        _crash_in_recovery_then_finish(
            args, target, spec, points=SEQUENCES[sequence], expected=expected, timeout=300
        )
    finally:
        target.cleanup(spec)
