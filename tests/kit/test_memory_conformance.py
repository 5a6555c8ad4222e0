"""The in-memory reference sinks of ``twopc.testing`` pass the protocol checks of their
role: they are what a plugin author reads first, so they must be right. (They keep their
target in one process, so the Spark and crash checks, and the driver checks that commit in
a fresh process, do not apply.)"""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from twopc import PermanentSinkError, TaskContext
from twopc.testing import (
    GUARANTEES,
    DriverCommitChecks,
    GroupMemberChecks,
    MemoryDriverSink,
    SourceOffsetChecks,
    TaskCommitChecks,
    TaskSideChecks,
    forget_store,
    memory_store,
)
from twopc.testing._memory import MemoryTransaction

pytestmark = pytest.mark.unit


class _InMemory:
    def new_target(self, tmp_path: Path) -> str:
        return f"kit-{uuid.uuid4().hex}"

    def drop_target(self, target: str) -> None:
        forget_store(target)

    def read_committed(self, target: str) -> list[int]:
        return list(memory_store(target).visible)

    def bad_batch(self) -> pa.RecordBatch:
        return pa.record_batch({"no_id": [1]})


class TestMemoryDriverSink(_InMemory, TaskSideChecks, DriverCommitChecks):
    sink_factory = "twopc.testing:MemoryDriverSink"
    large_rows = 20_000

    def test_commit_from_a_fresh_process(self, target: str) -> None:
        pytest.skip("in-memory: another process sees another store")

    def test_pre_commit_is_durable(self, target: str) -> None:
        pytest.skip("in-memory: nothing survives the preparing process")


class TestMemoryTaskSink(_InMemory, TaskSideChecks, TaskCommitChecks, SourceOffsetChecks):
    sink_factory = "twopc.testing:MemoryTaskSink"
    large_rows = 20_000


class TestMemoryDriverSinkAsGroupMember(_InMemory, GroupMemberChecks):
    sink_factory = "twopc.testing:MemoryDriverSink"


class TestMemoryLastResourceAsGroupMember(_InMemory, GroupMemberChecks):
    sink_factory = "twopc.testing:MemoryLastResource"


class _TaskSinkAsMember(_InMemory, GroupMemberChecks):
    sink_factory = "twopc.testing:MemoryTaskSink"


def _group_check_failure(checks: GroupMemberChecks, tmp_path: Path) -> str:
    """The group check's failure message (it must fail, under its guarantee)."""
    target = checks.new_target(tmp_path)
    with pytest.raises(pytest.fail.Exception) as failed:
        checks.test_a_group_with_the_reference_sink_is_all_or_none(target, tmp_path)
    message = str(failed.value)
    assert message.startswith(f"[{GUARANTEES['group-member']}]")
    return message


def test_a_sink_that_commits_in_its_tasks_fails_the_group_check(tmp_path: Path) -> None:
    """The group check fails a sink that cannot hold prepared work past its task, and its
    message says why and what to do."""
    message = _group_check_failure(_TaskSinkAsMember(), tmp_path)
    assert "cannot hold prepared work past its task" in message
    assert "twopc.CommitsOnDriver" in message
    assert "twopc.LastResource" in message


class DotlessDriverSink(MemoryDriverSink):
    """Broken for groups: it takes the sink id for a name that may not hold a dot, as a
    plugin that builds table names from it might, and a group member's sink id has one."""

    def begin_transaction(self, ctx: TaskContext) -> MemoryTransaction:
        if "." in ctx.sink_id:
            raise PermanentSinkError(f"sink id {ctx.sink_id!r} is not a valid name")
        return super().begin_transaction(ctx)


class _DotlessMember(_InMemory, GroupMemberChecks):
    sink_factory = "tests.kit.test_memory_conformance:DotlessDriverSink"


def test_the_group_check_catches_a_sink_that_refuses_a_members_sink_id(tmp_path: Path) -> None:
    message = _group_check_failure(_DotlessMember(), tmp_path)
    assert "'kit-group.subject' is not a valid name" in message
