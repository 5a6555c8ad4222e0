"""The conformance kit catches broken sinks, and names the guarantee each one breaks.

Every case runs the kit in a pytester session against one sink of ``tests/kit/broken_sinks.py``
(a test module that subclasses ``SinkConformanceSuite``, exactly as a plugin author writes
it), selects only the kit tests that matter with ``-k`` (no Spark), and checks three things:
the run fails, the failure message carries the guarantee's words in brackets, and the
summary of ``twopc.testing.plugin`` prints ``FAILED   <words>``. The real files sink runs the
same selection as a control and must pass it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from twopc.testing import GUARANTEES

pytestmark = pytest.mark.e2e

REPO_ROOT = Path(__file__).resolve().parents[2]

_SUITE = """
import pyarrow.dataset as ds

from twopc.testing import SinkConformanceSuite


class TestUnderTest(SinkConformanceSuite):
    sink_factory = {factory!r}
    large_rows = 20_000

    def read_committed(self, target):
        try:
            dataset = ds.dataset(target, format="parquet")
        except FileNotFoundError:
            return []
        if not dataset.files:
            return []
        return dataset.to_table(columns=["id"])["id"].to_pylist()
"""

# in-task sinks over the in-memory store: the protocol checks run in this process
_MEMORY_SUITE = """
import uuid

from twopc.testing import SinkConformanceSuite, forget_store, memory_store


class TestUnderTest(SinkConformanceSuite):
    sink_factory = {factory!r}
    large_rows = 20_000

    def new_target(self, tmp_path):
        return f"kit-{{uuid.uuid4().hex}}"

    def drop_target(self, target):
        forget_store(target)

    def read_committed(self, target):
        return list(memory_store(target).visible)
"""

_SUITES = {"files": _SUITE, "memory": _MEMORY_SUITE}


@dataclass(frozen=True)
class Case:
    factory: str
    select: str
    guarantee: str
    evidence: str
    """Part of the failure message that shows the kit failed for the right reason."""
    target: str = "files"
    """How the suite reads the target: Parquet files, or the in-memory store."""


CASES = {
    # (a) commit is not idempotent: reports the right outcomes, duplicates the rows
    "commit-copies-again": Case(
        "commit_copies_again",
        "test_commit_is_idempotent",
        "commit-idempotent",
        "after two commits: expected 50 ids exactly once, found duplicates [0, 1",
    ),
    # ...and a crash between the commits of two partitions makes recovery commit again
    "commit-copies-again-crash": Case(
        "commit_copies_again",
        "test_sigkill_at_crash_point_then_restart and between_commits",
        "crash-exactly-once",
        "after a SIGKILL at between_commits and a restart: expected 120 ids exactly once, "
        "found duplicates [0, 1",
    ),
    # (b) data visible before commit
    "visible-before-commit": Case(
        "visible_before_commit",
        "test_nothing_is_visible_before_commit",
        "invisible-before-commit",
        "100 row(s) visible after pre_commit",
    ),
    # (c) abort leaves data
    "abort-promotes": Case(
        "abort_promotes",
        "test_abort_of_an_open_transaction_leaves_nothing",
        "abort-leaves-nothing",
        "100 row(s) visible after abort",
    ),
    "abort-prepared-commits": Case(
        "abort_prepared_commits",
        "test_abort_prepared_leaves_nothing",
        "abort-leaves-nothing",
        "100 row(s) visible after abort_prepared",
    ),
    # (d) recovery drops work
    "recover-deletes-staging": Case(
        "recover_deletes_staging",
        "test_recovery_aborts_undecided_work",
        "recover-aborts-undecided",
        "recover() does not list prepared work",
    ),
    "commit-trusts-memory": Case(
        "commit_trusts_memory",
        "test_recovery_commits_decided_work",
        "recover-commits-decided",
        "after recovery: expected 60 ids exactly once, found duplicates [], missing [0, 1",
    ),
    "commit-trusts-memory-crash": Case(
        "commit_trusts_memory",
        "test_sigkill_at_crash_point_then_restart and after_decision",
        "crash-exactly-once",
        "after a SIGKILL at after_decision and a restart: expected 120 ids exactly once, "
        "found duplicates [], missing [0, 1",
    ),
    # (e) pre_commit is not durable
    "pre-commit-in-memory": Case(
        "pre_commit_in_memory",
        "test_pre_commit_is_durable",
        "durable-pre-commit",
        "committing after the preparing process died failed: no buffered rows",
    ),
    # (f) an in-task sink that does not read its marker: a replayed task writes again
    "marker-ignored": Case(
        "marker_ignored",
        "test_a_task_whose_marker_exists_writes_nothing",
        "marker-skips-replay",
        "the replayed task's commit returned CommitOutcome.COMMITTED",
        "memory",
    ),
    # (g) an in-task sink that commits in pre_commit: visible before the task commits
    "in-task-visible-early": Case(
        "in_task_visible_early",
        "test_nothing_is_visible_before_the_task_commits",
        "invisible-before-commit",
        "100 row(s) visible after pre_commit",
        "memory",
    ),
    # (h) markers that do not say which partitions committed
    "markers-blind": Case(
        "markers_blind",
        "test_markers_show_the_committed_partitions",
        "markers-readable",
        "committed_partitions(batch 5) = set(), expected {0}",
        "memory",
    ),
}


@pytest.fixture
def kit_session(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester directory wired like a plugin's tests: the kit's summary plugin on, and
    the repository importable here and in the kit's subprocesses (spawned committers, the
    crash runner, which also puts its working directory on ``PYTHONPATH``)."""
    pytester.syspathinsert(REPO_ROOT)
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    monkeypatch.delenv("TWOPC_FAULTS", raising=False)
    pytester.makeconftest('pytest_plugins = ["twopc.testing.plugin"]\n')
    return pytester


def _run_kit(
    pytester: pytest.Pytester, factory: str, select: str, target: str = "files"
) -> pytest.RunResult:
    pytester.makepyfile(test_under_test=_SUITES[target].format(factory=factory))
    return pytester.runpytest("-p", "no:cacheprovider", "-k", select)


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_kit_reports_the_broken_guarantee(kit_session: pytest.Pytester, case: Case) -> None:
    factory = f"tests.kit.broken_sinks:{case.factory}"
    result = _run_kit(kit_session, factory, case.select, case.target)
    output = result.stdout.str()
    outcomes = result.parseoutcomes()
    words = GUARANTEES[case.guarantee]
    assert outcomes.get("failed", 0) >= 1, output
    assert result.ret == pytest.ExitCode.TESTS_FAILED, output
    assert f"[{words}]" in output, output
    assert case.evidence in output, output
    assert "twopc conformance: TestUnderTest" in output, output
    assert f"FAILED   {words}" in output, output


@pytest.mark.parametrize(
    ("target", "factory"),
    [
        ("files", "tests.kit.factories:files_sink"),
        ("memory", "tests.kit.factories:memory_task_sink"),
    ],
    ids=["files", "memory-in-task"],
)
def test_a_correct_sink_passes_the_same_selection(
    kit_session: pytest.Pytester, target: str, factory: str
) -> None:
    """The control: a correct sink of each role passes every check the broken sinks of
    that role fail."""
    cases = [case for case in CASES.values() if case.target == target]
    select = " or ".join(f"({case.select})" for case in cases)
    result = _run_kit(kit_session, factory, select, target)
    output = result.stdout.str()
    assert result.ret == pytest.ExitCode.OK, output
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 0 and outcomes.get("passed", 0) >= 3, output
    assert "FAILED" not in output, output
    for key in {case.guarantee for case in cases}:
        assert f"passed   {GUARANTEES[key]}" in output, output


_OVERRIDES = """
import pytest

from twopc.testing import guarantee


class TestOverrides(TestUnderTest):
    @guarantee("large-batch")
    @pytest.mark.xfail(reason="known bug 12", strict=True)
    def test_large_batch(self, tmp_path):
        raise AssertionError("too large")

    def bad_batch(self):
        return None
"""


def test_summary_reports_skips_and_known_failures(kit_session: pytest.Pytester) -> None:
    """Skipped checks give their reason; an overridden, xfail-marked check is a known
    failure, not a pass or a skip; deselected guarantees are left out."""
    kit_session.makepyfile(
        test_under_test=_SUITE.format(factory="tests.kit.factories:files_sink") + _OVERRIDES
    )
    result = kit_session.runpytest(
        "-p", "no:cacheprovider", "-k", "TestOverrides and (large or bad_records or empty)"
    )
    output = result.stdout.str()
    assert result.ret == pytest.ExitCode.OK, output
    assert "twopc conformance: TestOverrides" in output, output
    assert "passed   empty transactions" in output, output
    assert "xfailed  large batches (known bug 12)" in output, output
    assert (
        "skipped  bad records fail clearly and leave nothing (bad_batch() not provided"
    ) in output, output
    assert "commit is idempotent" not in output, output


# -- format("twopc") options: required, or opted out of; and the same sink as sink_factory --

_FORMAT_OPTIONS = """

class TestWithFormatOptions(TestUnderTest):
    def format_options(self, target):
        return {options}
"""

_FORMAT_OPT_OUT = """

class TestOptedOut(TestUnderTest):
    format_opt_out = "the sink takes a connection object"
"""

_FORMAT_OPTIONS_WORDS = GUARANTEES["format-options"]


def _run_format_options_check(
    pytester: pytest.Pytester, factory: str, extra: str
) -> tuple[pytest.RunResult, str]:
    """The kit's format-options check (no Spark) of the files suite plus ``extra``."""
    pytester.makepyfile(test_under_test=_SUITE.format(factory=factory) + extra)
    result = pytester.runpytest("-p", "no:cacheprovider", "-k", "format_options_build")
    return result, result.stdout.str()


def test_a_suite_without_format_options_fails_and_says_what_to_do(
    kit_session: pytest.Pytester,
) -> None:
    """A class that composes the format checks but gives no ``format_options`` fails
    them, and the message names both ways out."""
    result, output = _run_format_options_check(kit_session, "tests.kit.factories:files_sink", "")
    assert result.ret == pytest.ExitCode.TESTS_FAILED, output
    assert f"[{_FORMAT_OPTIONS_WORDS}]" in output, output
    assert "does not implement format_options(target)" in output, output
    assert "format_opt_out" in output, output
    assert f"FAILED   {_FORMAT_OPTIONS_WORDS}" in output, output


def test_a_suite_may_opt_out_of_the_format_checks_with_a_reason(
    kit_session: pytest.Pytester,
) -> None:
    """``format_opt_out`` skips the format checks, and the summary gives its reason."""
    result, output = _run_format_options_check(
        kit_session, "tests.kit.factories:files_sink", _FORMAT_OPT_OUT
    )
    assert result.parseoutcomes().get("failed", 0) == 1, output  # TestUnderTest's own
    assert (
        f"skipped  {_FORMAT_OPTIONS_WORDS} (format_opt_out: the sink takes a connection object)"
    ) in output, output


@pytest.mark.parametrize(
    ("factory", "options", "evidence"),
    [
        (  # the plugin's factory makes a subclass; the options build the registered class
            "tests.kit.broken_sinks:commit_copies_again",
            '{"sink": "files", "path": target, "format": "parquet"}',
            "but sink_factory builds tests.kit.broken_sinks.CommitCopiesAgainSink",
        ),
        (  # the options name another target
            "tests.kit.factories:files_sink",
            '{"sink": "files", "path": target + "-elsewhere", "format": "parquet"}',
            "-elsewhere'",
        ),
    ],
    ids=["another-class", "another-target"],
)
def test_format_options_that_build_another_sink_fail(
    kit_session: pytest.Pytester, factory: str, options: str, evidence: str
) -> None:
    result, output = _run_format_options_check(
        kit_session, factory, _FORMAT_OPTIONS.format(options=options)
    )
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) == 2, output  # TestUnderTest (no options), the subclass
    assert "the format checks would test another sink" in output, output
    assert evidence in output, output


def test_format_options_that_build_the_same_sink_pass(kit_session: pytest.Pytester) -> None:
    """The control: the files backend's options pass the same check."""
    options = '{"sink": "files", "path": target, "format": "parquet"}'
    result, output = _run_format_options_check(
        kit_session, "tests.kit.factories:files_sink", _FORMAT_OPTIONS.format(options=options)
    )
    assert result.parseoutcomes().get("passed", 0) == 1, output
    assert "twopc conformance: TestWithFormatOptions" in output, output
    summary = output.split("twopc conformance: TestWithFormatOptions")[1]
    assert f"passed   {_FORMAT_OPTIONS_WORDS}" in summary.split("twopc conformance")[0], output
