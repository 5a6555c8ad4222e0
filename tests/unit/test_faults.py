"""Fault injection: parsing TWOPC_FAULTS, filters, and the raise / exit / kill actions."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import warnings
from typing import Any

import pytest

from twopc import ConfigurationError, CrashPoint, FaultPlan, InjectedFault
from twopc.faults import ENV_VAR, EXIT_CODE, Fault, FaultAction

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("point", list(CrashPoint))
@pytest.mark.parametrize("action", list(FaultAction))
def test_parse_every_point_and_action(point: CrashPoint, action: FaultAction) -> None:
    plan = FaultPlan.parse(f"{point.value}:{action.value}")
    assert plan.faults == (Fault(point, action),)
    assert FaultPlan.parse(plan.render()) == plan


def test_action_defaults_to_raise() -> None:
    assert FaultPlan.parse("after_decision").faults == (Fault(CrashPoint.AFTER_DECISION),)
    assert FaultPlan.parse("after_decision:").faults == (Fault(CrashPoint.AFTER_DECISION),)


def test_parse_filters_and_several_rules() -> None:
    plan = FaultPlan.parse(
        " after_invoke:raise@batch=1,partition=0,rows=500 ; between_commits:kill@batch=2 ;"
        "before_begin:exit@attempt=1;"
    )
    assert plan.faults == (
        Fault(CrashPoint.AFTER_INVOKE, FaultAction.RAISE, batch_id=1, partition=0, rows=500),
        Fault(CrashPoint.BETWEEN_COMMITS, FaultAction.KILL, batch_id=2),
        Fault(CrashPoint.BEFORE_BEGIN, FaultAction.EXIT, attempt=1),
    )
    assert FaultPlan.parse(plan.render()) == plan
    assert plan.render() == (
        "after_invoke:raise@batch=1,partition=0,rows=500;between_commits:kill@batch=2;"
        "before_begin:exit@attempt=1"
    )


def test_empty_plans_are_falsy() -> None:
    assert not FaultPlan()
    assert not FaultPlan.parse("")
    assert not FaultPlan.parse(" ; ")
    assert FaultPlan.parse("after_commit")


@pytest.mark.parametrize(
    ("spec", "bad_part"),
    [
        ("after_everything:raise", "'after_everything'"),
        ("after_commit:explode", "'explode'"),
        ("after_commit:raise@batchid=1", "'batchid=1'"),
        ("after_commit:raise@batch=one", "'batch=one'"),
        ("after_commit:raise@batch=", "'batch='"),
        ("after_commit:raise@partition", "'partition'"),
        ("after_commit:raise@rows=1.5", "'rows=1.5'"),
        ("after_commit;before_decision:nope", "'nope'"),
    ],
)
def test_bad_specs_name_the_bad_part(spec: str, bad_part: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        FaultPlan.parse(spec)
    assert bad_part in str(info.value)
    assert ENV_VAR in str(info.value)


def test_from_env_is_off_when_unset_or_blank(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert FaultPlan.from_env() is None
    monkeypatch.setenv(ENV_VAR, "   ")
    assert FaultPlan.from_env() is None
    assert FaultPlan.from_env({}) is None


def test_from_env_reads_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, "after_decision:exit@batch=3")
    assert FaultPlan.from_env() == FaultPlan(
        (Fault(CrashPoint.AFTER_DECISION, FaultAction.EXIT, 3),)
    )
    assert FaultPlan.from_env({ENV_VAR: "after_commit"}) == FaultPlan(
        (Fault(CrashPoint.AFTER_COMMIT),)
    )
    monkeypatch.setenv(ENV_VAR, "bogus")
    with pytest.raises(ConfigurationError, match="bogus"):
        FaultPlan.from_env()


def test_fire_raise_carries_where_it_happened() -> None:
    plan = FaultPlan.parse("before_pre_commit:raise@batch=4")
    with pytest.raises(InjectedFault) as info:
        plan.fire(
            CrashPoint.BEFORE_PRE_COMMIT, sink_id="orders", batch_id=4, partition=2, attempt=0
        )
    error = info.value
    assert (error.sink_id, error.batch_id, error.partition) == ("orders", 4, 2)
    assert "before_pre_commit" in str(error)
    assert "sink 'orders'" in str(error)
    assert "partition 2" in str(error)
    assert not error.retryable


def test_fire_does_nothing_without_a_match() -> None:
    plan = FaultPlan.parse("after_invoke:raise@batch=1,partition=0,attempt=0,rows=100")
    # wrong point, batch, partition, attempt, or too few rows
    plan.fire(CrashPoint.BEFORE_BEGIN, sink_id="s", batch_id=1, partition=0, attempt=0, rows=100)
    plan.fire(CrashPoint.AFTER_INVOKE, sink_id="s", batch_id=2, partition=0, attempt=0, rows=100)
    plan.fire(CrashPoint.AFTER_INVOKE, sink_id="s", batch_id=1, partition=1, attempt=0, rows=100)
    plan.fire(CrashPoint.AFTER_INVOKE, sink_id="s", batch_id=1, partition=0, attempt=1, rows=100)
    plan.fire(CrashPoint.AFTER_INVOKE, sink_id="s", batch_id=1, partition=0, attempt=0, rows=99)
    plan.fire(CrashPoint.AFTER_INVOKE, sink_id="s", batch_id=1, partition=0, attempt=0)
    with pytest.raises(InjectedFault):
        plan.fire(
            CrashPoint.AFTER_INVOKE, sink_id="s", batch_id=1, partition=0, attempt=0, rows=100
        )
    with pytest.raises(InjectedFault):
        plan.fire(
            CrashPoint.AFTER_INVOKE, sink_id="s", batch_id=1, partition=0, attempt=0, rows=5000
        )


@pytest.mark.parametrize(
    ("rule", "kwargs", "fires"),
    [
        (Fault(CrashPoint.BETWEEN_COMMITS), {"batch_id": 9}, True),
        (Fault(CrashPoint.BETWEEN_COMMITS, batch_id=2), {"batch_id": 9}, False),
        (Fault(CrashPoint.BETWEEN_COMMITS, batch_id=2), {"batch_id": 2}, True),
        # a partition filter does not stop driver points, which have no partition
        (Fault(CrashPoint.BETWEEN_COMMITS, partition=1), {"batch_id": 2}, True),
        (Fault(CrashPoint.AFTER_INVOKE, partition=1), {"batch_id": 0, "partition": 0}, False),
        (Fault(CrashPoint.AFTER_INVOKE, partition=1), {"batch_id": 0, "partition": 1}, True),
        (Fault(CrashPoint.BEFORE_BEGIN, attempt=1), {"batch_id": 0, "attempt": 0}, False),
        (Fault(CrashPoint.BEFORE_BEGIN, attempt=1), {"batch_id": 0, "attempt": 1}, True),
    ],
)
def test_filters(rule: Fault, kwargs: dict[str, Any], fires: bool) -> None:
    plan = FaultPlan((rule,))
    if fires:
        with pytest.raises(InjectedFault):
            plan.fire(rule.point, sink_id="s", **kwargs)
    else:
        plan.fire(rule.point, sink_id="s", **kwargs)


def test_first_matching_rule_wins() -> None:
    plan = FaultPlan.parse("after_commit:raise@batch=1;after_commit:kill")
    with pytest.raises(InjectedFault):  # not killed: the raise rule comes first
        plan.fire(CrashPoint.AFTER_COMMIT, sink_id="s", batch_id=1)


def test_driver_points() -> None:
    driver = {p for p in CrashPoint if p.on_driver}
    assert driver == {
        CrashPoint.BEFORE_DECISION,
        CrashPoint.AFTER_DECISION,
        CrashPoint.BEFORE_LAST_RESOURCE,
        CrashPoint.AFTER_LAST_RESOURCE,
        CrashPoint.BETWEEN_COMMITS,
        CrashPoint.BETWEEN_MEMBERS,
        CrashPoint.AFTER_COMMIT,
        CrashPoint.RECOVERY_BEFORE_COMMIT,
        CrashPoint.RECOVERY_BETWEEN_COMMITS,
        CrashPoint.RECOVERY_BEFORE_ABORT,
        CrashPoint.RECOVERY_BETWEEN_ABORTS,
    }
    assert {p for p in CrashPoint if p.in_recovery} < driver


def test_plans_pickle() -> None:
    plan = FaultPlan.parse("after_invoke:kill@batch=1,rows=10;after_commit")
    assert pickle.loads(pickle.dumps(plan)) == plan


# -- exit and kill, in a child process ------------------------------------------------------


def _fire_in_child(spec: str, from_env: bool) -> None:
    plan = FaultPlan.from_env() if from_env else FaultPlan.parse(spec)
    assert plan is not None
    plan.fire(CrashPoint.AFTER_DECISION, sink_id="s", batch_id=3)
    os._exit(0)  # reached only when nothing fired


def _run_child(spec: str, *, from_env: bool = False) -> int | None:
    context = multiprocessing.get_context("fork")
    process = context.Process(target=_fire_in_child, args=(spec, from_env))
    with warnings.catch_warnings():
        # Python 3.12+ warns when forking a multi-threaded process.
        warnings.simplefilter("ignore", DeprecationWarning)
        process.start()
    process.join(30)
    return process.exitcode


def test_exit_action_exits_with_the_fault_exit_code() -> None:
    assert _run_child("after_decision:exit@batch=3") == EXIT_CODE


def test_kill_action_sigkills_the_process() -> None:
    assert _run_child("after_decision:kill") == -signal.SIGKILL


def test_unmatched_exit_rule_lets_the_process_live() -> None:
    assert _run_child("after_decision:exit@batch=4") == 0


def test_plan_from_the_environment_in_a_child(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, "after_decision:kill@batch=3")
    assert _run_child("", from_env=True) == -signal.SIGKILL
