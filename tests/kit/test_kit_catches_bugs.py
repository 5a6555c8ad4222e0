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
from twopc.testing._base import KIT_ATTEMPT

pytestmark = pytest.mark.e2e

REPO_ROOT = Path(__file__).resolve().parents[2]

_SUITE = """
import pyarrow as pa
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

    def bad_batch(self):
        # a column whose type changes inside one task cannot be written to one file
        return pa.record_batch({{"id": pa.array(["not-a-number"]), "payload": ["x"]}})
"""

# in-task sinks over the in-memory store: the protocol checks run in this process
_MEMORY_SUITE = """
import uuid

import pyarrow as pa

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

    def bad_batch(self):
        return pa.record_batch({{"no_id": [1]}})
"""

_SUITES = {"files": _SUITE, "memory": _MEMORY_SUITE, "memory-driver": _MEMORY_SUITE}
_CONTROLS = {
    "files": "tests.kit.factories:files_sink",
    "memory": "tests.kit.factories:memory_task_sink",
    "memory-driver": "tests.kit.factories:memory_driver_sink",
}


@dataclass(frozen=True)
class Case:
    factory: str
    select: str
    guarantee: str
    evidence: str
    """Part of the failure message that shows the kit failed for the right reason."""
    target: str = "files"
    """How the suite reads the target: Parquet files, or the in-memory store (of a sink
    that commits in the task, ``memory``, or on the driver, ``memory-driver``)."""


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
    # (i) commit reads a payload of any version as its own
    "payload-version-unchecked": Case(
        "payload_version_unchecked",
        "test_commit_refuses_a_payload_version_it_cannot_read",
        "unknown-version-refused",
        "commit accepted a committable of payload version 99 (it returned ['committed'] and "
        "made 40 row(s) visible)",
    ),
    # (j) abort_prepared does nothing; what it leaves is invisible to readers
    "abort-prepared-does-nothing": Case(
        "abort_prepared_does_nothing",
        "test_abort_prepared_leaves_nothing",
        "abort-leaves-nothing",
        "recover() of a new sink object still lists the work after abort_prepared: batch 0 "
        f"partition 0 attempt {KIT_ATTEMPT}",
    ),
    # (k) the attempt in a 32-bit column of the marker: the insert fails
    "attempt-in-int32-column": Case(
        "attempt_in_int32_column",
        "test_attempt_ids_are_longs",
        "attempt-ids",
        f"commit_in_task (batch 0 partition 1 attempt {KIT_ATTEMPT}) raised ArrowInvalid: "
        f"Value {KIT_ATTEMPT} too large to fit in C integer type",
        "memory",
    ),
    # (l) the attempt in a 32-bit column that wraps: recovery would abort decided work
    "attempt-wraps-at-32-bits": Case(
        "attempt_wraps_at_32_bits",
        "test_attempt_ids_are_longs",
        "attempt-ids",
        f"lists the work prepared by attempt {KIT_ATTEMPT} with attempt(s) [7]",
        "memory-driver",
    ),
    # (m) abort_prepared raises on a payload it cannot read
    "abort-reads-the-payload": Case(
        "abort_reads_the_payload",
        "test_abort_prepared_of_a_payload_it_cannot_read",
        "abort-unreadable",
        "abort_prepared of a committable of payload version 99 raised UnsupportedFormatError",
    ),
    # (n) a committable that JSON cannot carry
    "committable-not-json": Case(
        "committable_not_json",
        "test_committables_are_json_serialisable",
        "committables-json",
        "CommittableNotJsonSink (files parquet at ",
    ),
    # ...and a Payload with a field that is not JSON-able: pre_commit raises
    "payload-not-json": Case(
        "payload_not_json",
        "test_committables_are_json_serialisable",
        "committables-json",
        "PayloadNotJsonSink (memory store ",
        "memory-driver",
    ),
    # ...and in the crash runner, where the task cannot report: its cause is quoted
    "committable-not-json-crash": Case(
        "committable_not_json",
        "test_sigkill_at_crash_point_then_restart and before_decision",
        "crash-exactly-once",
        "TypeError: Object of type bytes is not JSON serializable",
    ),
    # (o) only one process can open the target: the preparing process's error comes back
    "holds-its-target": Case(
        "holds_its_target",
        "test_pre_commit_is_durable",
        "durable-pre-commit",
        "preparing in a fresh process (before it ends with os._exit) failed: TransientSinkError: ",
    ),
    # (p) bad records reported as transient
    "bad-records-retried": Case(
        "bad_records_retried",
        "test_bad_records_fail_clearly_and_leave_nothing",
        "bad-records",
        "partition 1 failed on bad_batch(), but not with a PermanentSinkError: raise "
        "twopc.PermanentSinkError for input that can never be written",
    ),
    # (q) good rows that fail in partition 0: the failure names that partition and its cause
    "partial-row-group-fails": Case(
        "partial_row_group_fails",
        "test_bad_records_fail_clearly_and_leave_nothing",
        "bad-records",
        "partition 0, which got only good rows, failed the batch",
        "memory-driver",
    ),
}

EXTRA_EVIDENCE = {
    # the cause in the plugin author's terms, and where in their code
    "attempt-in-int32-column": ["keep them in 64-bit integers (a BIGINT column)"],
    "holds-its-target": ["is held open by another process", "tests/kit/broken_sinks.py:"],
    "committable-not-json": ["cannot be written as JSON (TypeError: Object of type bytes"],
    "payload-not-json": [
        "could not build its committable: TypeError: Object of type bytes is not JSON",
        "tests/kit/broken_sinks.py:",
    ],
    "committable-not-json-crash": [
        "the first run should end by the crash at before_decision (exit -9), but it exited 1",
        "without reporting",
    ],
    "partial-row-group-fails": ["ValueError: a row group holds 32 rows"],
    "payload-version-unchecked": ["MyPayload.of(committable)"],
    "abort-reads-the-payload": ["tests/kit/broken_sinks.py:"],
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


@pytest.mark.parametrize("case_id", CASES)
def test_kit_reports_the_broken_guarantee(kit_session: pytest.Pytester, case_id: str) -> None:
    case = CASES[case_id]
    factory = f"tests.kit.broken_sinks:{case.factory}"
    result = _run_kit(kit_session, factory, case.select, case.target)
    output = result.stdout.str()
    outcomes = result.parseoutcomes()
    words = GUARANTEES[case.guarantee]
    assert outcomes.get("failed", 0) >= 1, output
    assert result.ret == pytest.ExitCode.TESTS_FAILED, output
    assert f"[{words}]" in output, output
    assert case.evidence in output, output
    for evidence in EXTRA_EVIDENCE.get(case_id, []):
        assert evidence in output, output
    assert "twopc conformance: TestUnderTest" in output, output
    assert f"FAILED   {words}" in output, output


@pytest.mark.parametrize("target", list(_CONTROLS))
def test_a_correct_sink_passes_the_same_selection(
    kit_session: pytest.Pytester, target: str
) -> None:
    """The control: a correct sink of each role passes every check the broken sinks of
    that role fail."""
    cases = [case for case in CASES.values() if case.target == target]
    select = " or ".join(f"({case.select})" for case in cases)
    result = _run_kit(kit_session, _CONTROLS[target], select, target)
    output = result.stdout.str()
    assert result.ret == pytest.ExitCode.OK, output
    outcomes = result.parseoutcomes()
    selections = {case.select for case in cases}
    assert outcomes.get("failed", 0) == 0, output
    assert outcomes.get("passed", 0) >= len(selections), output
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


def test_summary_counts_the_other_roles_checks_apart(kit_session: pytest.Pytester) -> None:
    """A driver-commit sink whose class composes the in-task checks too: a guarantee it
    passes reads as passed with the other role's case not applicable, not as partial
    coverage ("1 of 2 cases"); one that only the other role has is skipped as such."""
    kit_session.makepyfile(test_under_test=_SUITE.format(factory=_CONTROLS["files"]))
    result = kit_session.runpytest(
        "-p", "no:cacheprovider", "-k", "nothing_is_visible or marker_exists or abort"
    )
    output = result.stdout.str()
    assert result.ret == pytest.ExitCode.OK, output
    assert (
        "passed   nothing is visible before commit (1 case not applicable to this role)"
    ) in output, output
    assert (
        "passed   abort leaves nothing (2 of 2 cases; 1 case not applicable to this role)"
    ) in output, output
    assert (
        "skipped  a task whose marker shows its batch writes nothing (not applicable to this "
        "role: FilesSink commits on the driver, not in the task)"
    ) in output, output
    assert "1 of 2 cases" not in output, output


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
