"""``writeStream.format("twopc")`` on classic Spark, each run in its own process: a query
that runs again over more input, a batch whose tasks fail, the driver SIGKILLed between the
decision and the commit, and the commit's own Python process dying after the decision
(Spark then calls ``commit`` again for that batch). Checked on what the target shows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.harness.backend_cases import add_input, new_target
from tests.harness.entry_runs import command, kill_when_decided, run
from tests.harness.exactly_once import assert_target_exactly_once

CASES = [
    ("files", "parquet"),
    ("postgres", "two_phase"),
    ("postgres", "transaction"),
    ("mysql", "two_phase"),
    ("kafka", "per_partition"),
]
CRASH_CASES = [("files", "parquet"), ("postgres", "two_phase"), ("kafka", "per_partition")]
EXTENDED = {("postgres", "transaction"), ("mysql", "two_phase")}
"""Beyond CI's representative subset (``--extended`` runs them)."""


def _params(cases: list[tuple[str, str]], ci: set[tuple[str, str]] | None = None) -> list[Any]:
    return [
        pytest.param(
            case,
            id=f"{case[0]}-{case[1]}",
            marks=[pytest.mark.extended]
            if case in EXTENDED or (ci is not None and case not in ci)
            else [],
        )
        for case in cases
    ]


pytestmark = [pytest.mark.e2e, pytest.mark.slow]


@pytest.fixture
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    backend, mode = request.param
    target, spec = new_target(request, backend, mode, tmp_path, prefix="ds")
    yield target, spec
    target.cleanup(spec)


# CI: the kit's EntryPointChecks and the Connect tests run format queries on every backend
@pytest.mark.parametrize("target", _params(CASES, ci=set()), indirect=True)
def test_a_format_query_runs_again_over_more_input(target: Any, tmp_path: Path) -> None:
    target, spec = target
    source, checkpoint = tmp_path / "in", tmp_path / "chk"
    expected = add_input(source, 0) | add_input(source, 1)
    first = run(command("format", spec, source, checkpoint))
    assert first.returncode == 0, first.stderr[-3000:]
    assert_target_exactly_once(target, spec, expected)
    expected |= add_input(source, 2)
    second = run(command("format", spec, source, checkpoint))
    assert second.returncode == 0, second.stderr[-3000:]
    assert_target_exactly_once(target, spec, expected)


@pytest.mark.parametrize(
    "target", _params(CRASH_CASES, ci={("postgres", "two_phase")}), indirect=True
)
def test_a_failing_task_commits_nothing_of_its_batch(target: Any, tmp_path: Path) -> None:
    target, spec = target
    source, checkpoint = tmp_path / "in", tmp_path / "chk"
    first, second = add_input(source, 0), add_input(source, 1)
    expected = first | second
    failed = run(
        command("format", spec, source, checkpoint, faults="after_invoke:raise@batch=1,partition=1")
    )
    assert failed.returncode != 0
    assert "InjectedFault" in failed.stderr or "injected" in failed.stderr.lower()
    seen = target.committed(spec)
    assert all(n == 1 for n in seen.values())
    if spec.backend != "kafka":
        # batch 0 (one of the two files: Spark orders files of one timestamp its own way)
        # committed, nothing of batch 1
        assert_target_exactly_once(target, spec, first if set(seen) <= first else second)
    # else per_partition commits in the task: partition 0 of batch 1 may be committed;
    # the replay skips it by its marker
    rerun = run(command("format", spec, source, checkpoint))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert_target_exactly_once(target, spec, expected)


@pytest.mark.parametrize(
    "target", _params(CRASH_CASES, ci={("postgres", "two_phase")}), indirect=True
)
def test_the_driver_sigkilled_between_decision_and_commit(target: Any, tmp_path: Path) -> None:
    target, spec = target
    expected = _killed_after_deciding_batch_1(spec, tmp_path)
    rerun = run(command("format", spec, tmp_path / "in", tmp_path / "chk"))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert_target_exactly_once(target, spec, expected)


def _killed_after_deciding_batch_1(spec: Any, tmp_path: Path) -> set[int]:
    """Three input files; the query's driver SIGKILLed once batch 1 is decided and before
    it commits. Returns every id of the input."""
    source, checkpoint = tmp_path / "in", tmp_path / "chk"
    expected = set().union(*(add_input(source, i) for i in range(3)))
    stalled = command("format", spec, source, checkpoint, faults="after_decision:sleep=300@batch=1")
    kill_when_decided(stalled, [tmp_path], 1)
    return expected


@pytest.mark.parametrize(
    "target",
    # CI: test_kafka_progress's format query, whose commit process dies the same way
    _params([("files", "parquet"), ("postgres", "two_phase")], ci=set()),
    indirect=True,
)
def test_spark_calls_commit_again_after_the_commit_process_died(
    target: Any, tmp_path: Path
) -> None:
    """The commit's Python process exits right after the decision: Spark fails the batch
    and, on restart, runs it again and calls ``commit`` for it a second time."""
    target, spec = target
    source, checkpoint = tmp_path / "in", tmp_path / "chk"
    expected = set().union(*(add_input(source, i) for i in range(3)))
    died = run(command("format", spec, source, checkpoint, faults="after_decision:exit@batch=1"))
    assert died.returncode != 0
    rerun = run(command("format", spec, source, checkpoint))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert_target_exactly_once(target, spec, expected)


@pytest.mark.parametrize(
    "target",
    _params(
        [("kafka", "per_partition"), ("postgres", "transaction")], ci={("kafka", "per_partition")}
    ),
    indirect=True,
)
def test_a_decided_batch_replays_without_writing_when_its_markers_are_gone(
    target: Any, tmp_path: Path
) -> None:
    """Tasks that commit themselves committed batch 1 and the driver decided it, then died
    before Spark recorded the batch; while the query is down the target loses its markers
    (Kafka groups expire after offsets.retention.minutes, an operator cleans the table).
    Spark runs batch 1 again: where it is planned, the writer finds it decided and its
    tasks write nothing, rather than trusting markers that are gone."""
    target, spec = target
    expected = _killed_after_deciding_batch_1(spec, tmp_path)
    assert target.forget_markers(spec) > 0
    rerun = run(command("format", spec, tmp_path / "in", tmp_path / "chk"))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert_target_exactly_once(target, spec, expected)


@pytest.mark.parametrize(
    "target",
    _params(
        [("kafka", "per_partition"), ("postgres", "transaction")], ci={("kafka", "per_partition")}
    ),
    indirect=True,
)
def test_a_checkpoint_put_back_one_batch_behind_is_refused(target: Any, tmp_path: Path) -> None:
    """The checkpoint (with the commit log inside it) copied after batch 0 is put back after
    batch 1 committed; more input has arrived, so Spark plans batch 1 anew over two files.
    The target's markers show batch 1, which the log put back has never heard of: the
    writer refuses where the batch is planned, before any task writes."""
    import shutil

    target, spec = target
    source, checkpoint = tmp_path / "in", tmp_path / "chk"
    expected = add_input(source, 0)
    first = run(command("format", spec, source, checkpoint))
    assert first.returncode == 0, first.stderr[-3000:]
    shutil.copytree(checkpoint, tmp_path / "chk-after-0")
    expected |= add_input(source, 1)
    second = run(command("format", spec, source, checkpoint))
    assert second.returncode == 0, second.stderr[-3000:]
    shutil.rmtree(checkpoint)
    shutil.copytree(tmp_path / "chk-after-0", checkpoint)
    add_input(source, 2)
    before = target.committed(spec)
    refused = run(command("format", spec, source, checkpoint, files_per_trigger=2))
    assert refused.returncode != 0
    assert "batch 1 or a later one" in refused.stderr, refused.stderr[-3000:]
    assert target.committed(spec) == before
    assert_target_exactly_once(target, spec, expected)
