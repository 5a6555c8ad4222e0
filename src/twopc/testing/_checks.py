"""The checks of the commit roles: :class:`DriverCommitChecks` for sinks that commit on
the driver (:class:`~twopc.CommitsOnDriver`), :class:`TaskCommitChecks` for sinks that
commit in the task (:class:`~twopc.CommitsInTask`). The task side every sink has is checked
by :class:`~twopc.testing._task_side_checks.TaskSideChecks`. None of them needs Spark.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import uuid
from pathlib import Path
from typing import Any

from twopc._coordination.commit_log import CommitLog
from twopc._coordination.records import Decision
from twopc.errors import ConfigurationError, TwoPCError
from twopc.protocol import (
    CommitOutcome,
    CommitsInTask,
    CommitsOnDriver,
    Committable,
    Footprint,
    RecoveryScope,
    TaskContext,
)
from twopc.testing._base import (
    KIT_ATTEMPT,
    SinkChecks,
    expect,
    fail,
    guarantee,
    in_fresh_process,
    json_problem,
    sink_call,
)
from twopc.testing._causes import describe, frames_of, plugin_code
from twopc.testing._runner import batch_ids, load_factory

__all__ = ["DriverCommitChecks", "TaskCommitChecks"]

UNKNOWN_VERSION = 99
"""The payload version of the kit's committables that no sink reads (a newer version of
the sink wrote it): ``commit`` must refuse it, ``abort_prepared`` must still work on it."""


def _commit_elsewhere(factory: str, target: str, committable: str, pipe: Any) -> None:
    sink = None
    try:
        sink = load_factory(factory)(target)
        outcomes = sink.commit([Committable.loads(committable)])
        pipe.send(("ok", [o.value for o in outcomes]))
    except BaseException as exc:  # report everything to the parent
        pipe.send(
            ("error", describe(exc, plugin_code(factory, [type(sink)] if sink is not None else [])))
        )


def _prepare_then_die(factory: str, maker: str, target: str, query: str, pipe: Any) -> None:
    sink = None
    try:
        sink = load_factory(factory)(target)
        txn = sink.begin_transaction(TaskContext("kit", query, 0, 0, KIT_ATTEMPT))
        sink.invoke(txn, load_factory(maker)(batch_ids(0, 0, 50)))
        committable = sink.pre_commit(txn)
        problem = json_problem(committable, sink)
        message = ("json", problem) if problem else ("ok", committable.dumps())
    except BaseException as exc:  # report everything to the parent
        message = (
            "error",
            describe(exc, plugin_code(factory, [type(sink)] if sink is not None else [])),
        )
    pipe.send(message)
    os._exit(0)  # no clean-up, no atexit: only what pre_commit made durable survives


def _unreadable(committable: Committable) -> Committable:
    """``committable`` as a version of the sink this one cannot read would have written
    it: same task, same payload, payload version :data:`UNKNOWN_VERSION`."""
    return dataclasses.replace(committable, version=max(UNKNOWN_VERSION, committable.version + 1))


class DriverCommitChecks(SinkChecks):
    """The :class:`~twopc.CommitsOnDriver` role: prepared work that any process commits,
    idempotently, and that recovery finds."""

    @guarantee("invisible-before-commit")
    def test_nothing_is_visible_before_commit(self, target: str) -> None:
        sink = self.make_sink(target)
        self.require_role(sink, CommitsOnDriver)
        assert isinstance(sink, CommitsOnDriver)
        _, committable = self.open_task(sink, range(100), query=uuid.uuid4().hex)
        seen = self.visible(target)
        expect(not seen, "invisible-before-commit", f"{len(seen)} row(s) visible after pre_commit")
        with sink_call("commit"):
            sink.commit([committable])
        self.exactly(self.visible(target), range(100), "commit-visible-once", "after commit")

    @guarantee("abort-leaves-nothing")
    def test_abort_prepared_leaves_nothing(self, target: str) -> None:
        """``abort_prepared`` twice, and once more from a new sink object; then a new sink
        object's ``recover()`` must not list the work, and the target must hold nothing of
        it (what readers see cannot tell: prepared work is invisible anyway)."""
        sink = self.make_sink(target)
        self.require_role(sink, CommitsOnDriver)
        assert isinstance(sink, CommitsOnDriver)
        _, committable = self.open_task(sink, range(100, 200), query=uuid.uuid4().hex)
        with sink_call("abort_prepared"):
            sink.abort_prepared([committable])
        with sink_call("abort_prepared, again (it must be idempotent)"):
            sink.abort_prepared([committable])
        other = self.make_sink(target)
        assert isinstance(other, CommitsOnDriver)
        with sink_call("abort_prepared, again from a new sink object"):
            other.abort_prepared([committable])
        seen = self.visible(target)
        expect(not seen, "abort-leaves-nothing", f"{len(seen)} row(s) visible after abort_prepared")
        self._aborted(target, committable, "abort-leaves-nothing", "abort_prepared")

    @guarantee("abort-unreadable")
    def test_abort_prepared_of_a_payload_it_cannot_read(self, target: str) -> None:
        """Recovery aborts prepared work that no decision names, also work a newer version
        of the sink prepared (after a downgrade): ``abort_prepared`` of a committable whose
        payload version the sink cannot read must roll the work back."""
        sink = self.make_sink(target)
        self.require_role(sink, CommitsOnDriver)
        assert isinstance(sink, CommitsOnDriver)
        _, committable = self.open_task(sink, range(600, 650), query=uuid.uuid4().hex)
        unreadable = _unreadable(committable)
        try:
            sink.abort_prepared([unreadable])
        except Exception as exc:
            fail(
                "abort-unreadable",
                f"abort_prepared of a committable of payload version {unreadable.version} "
                f"raised {describe(exc, self.plugin_code())}\nIt must work on a payload this "
                "version cannot read (recovery aborts the prepared work no decision names, "
                "whichever version prepared it): derive what to roll back from the "
                "committable's ids (sink_id, query_id, batch_id, partition, attempt), or look "
                "the work up by them when Payload.of refuses the payload",
            )
        self._aborted(
            target,
            committable,
            "abort-unreadable",
            f"abort_prepared of its committable with payload version {unreadable.version}",
        )

    def _aborted(self, target: str, committable: Committable, key: str, what: str) -> None:
        """After ``what``, the work of ``committable`` is gone: a new sink object's
        ``recover()`` does not list it, readers see nothing, and committing it afterwards
        makes nothing visible (whether the commit raises or not)."""
        fresh = self.make_sink(target)
        assert isinstance(fresh, CommitsOnDriver)
        with sink_call(f"recover, after {what}"):
            left = [c for c in fresh.recover("kit") if c.query_id == committable.query_id]
        listed = ", ".join(
            f"batch {c.batch_id} partition {c.partition} attempt {c.attempt}" for c in left
        )
        expect(
            not left,
            key,
            f"recover() of a new sink object still lists the work after {what}: {listed}. "
            "abort_prepared must roll prepared work back, not leave it to recovery",
        )
        seen = self.visible(target)
        expect(not seen, key, f"{len(seen)} row(s) visible after {what}")
        with contextlib.suppress(Exception):  # the work is gone: raising is right
            fresh.commit([committable])
        seen = self.visible(target)
        expect(
            not seen,
            key,
            f"the target still held the work after {what}: committing its committable "
            f"afterwards made {len(seen)} row(s) visible. abort_prepared must roll it back",
        )

    @guarantee("unknown-version-refused")
    def test_commit_refuses_a_payload_version_it_cannot_read(self, target: str) -> None:
        """A committable whose payload a version of the sink this one cannot read wrote
        (a decision of a newer version, committed after a downgrade) must be refused, not
        read as if it were this version's: ``MyPayload.of(committable)`` raises
        :class:`~twopc.UnsupportedFormatError` for it."""
        sink = self.make_sink(target)
        self.require_role(sink, CommitsOnDriver)
        assert isinstance(sink, CommitsOnDriver)
        _, committable = self.open_task(sink, range(300, 340), query=uuid.uuid4().hex)
        unreadable = _unreadable(committable)
        version = unreadable.version
        try:
            outcomes = sink.commit([unreadable])
        except ConfigurationError:
            pass  # refused: UnsupportedFormatError is a ConfigurationError
        except Exception as exc:
            fail(
                "unknown-version-refused",
                f"commit of a committable of payload version {version} raised "
                f"{describe(exc, self.plugin_code())}\nnot UnsupportedFormatError: read the "
                "payload with MyPayload.of(committable), which refuses the versions the class "
                "cannot read with that error",
            )
        else:
            seen = self.visible(target)
            fail(
                "unknown-version-refused",
                f"commit accepted a committable of payload version {version} (it returned "
                f"{[o.value for o in outcomes]} and made {len(seen)} row(s) visible): a "
                "payload written by a version of the sink that this one cannot read was read "
                "as its own. Read it with MyPayload.of(committable), which refuses the "
                "versions the class does not list in `reads` (UnsupportedFormatError)",
            )
        seen = self.visible(target)
        expect(
            not seen,
            "unknown-version-refused",
            f"{len(seen)} row(s) visible after commit refused payload version {version}",
        )
        # the refusal leaves the prepared work as it was: the committable it can read commits
        with sink_call("commit of the same work with the payload version it writes"):
            sink.commit([committable])
        self.exactly(
            self.visible(target),
            range(300, 340),
            "unknown-version-refused",
            f"after refusing payload version {version}, committing the version it writes",
        )

    @guarantee("commit-idempotent")
    def test_commit_is_idempotent(self, target: str) -> None:
        sink = self.make_sink(target)
        self.require_role(sink, CommitsOnDriver)
        assert isinstance(sink, CommitsOnDriver)
        _, committable = self.open_task(sink, range(50), query=uuid.uuid4().hex)
        first = sink.commit([committable])
        second = sink.commit([committable])
        expect(
            first in ([CommitOutcome.COMMITTED], [CommitOutcome.ALREADY_COMMITTED]),
            "commit-idempotent",
            f"first commit returned {first}",
        )
        expect(
            second == [CommitOutcome.ALREADY_COMMITTED],
            "commit-idempotent",
            f"committing again returned {second}, expected [ALREADY_COMMITTED]",
        )
        self.exactly(self.visible(target), range(50), "commit-idempotent", "after two commits")

    @guarantee("commit-elsewhere")
    def test_commit_from_a_fresh_process(self, target: str) -> None:
        sink = self.make_sink(target)
        self.require_role(sink, CommitsOnDriver)
        _, committable = self.open_task(sink, range(60), query=uuid.uuid4().hex)
        kind, detail = in_fresh_process(
            _commit_elsewhere, self.sink_factory, target, committable.dumps()
        )
        expect(kind == "ok", "commit-elsewhere", f"commit in a fresh process failed: {detail}")
        self.exactly(self.visible(target), range(60), "commit-elsewhere", "after the commit")

    @guarantee("durable-pre-commit")
    def test_pre_commit_is_durable(self, target: str) -> None:
        sink = self.make_sink(target)
        self.require_role(sink, CommitsOnDriver)
        assert isinstance(sink, CommitsOnDriver)
        kind, detail = in_fresh_process(
            _prepare_then_die, self.sink_factory, self.batch_maker, target, uuid.uuid4().hex
        )
        if kind == "json":
            fail("committables-json", detail)
        expect(
            kind == "ok",
            "durable-pre-commit",
            f"preparing in a fresh process (before it ends with os._exit) failed: {detail}",
        )
        committable = Committable.loads(detail)
        try:
            sink.commit([committable])
        except TwoPCError as exc:
            fail(
                "durable-pre-commit",
                "committing after the preparing process died failed: "
                f"{exc}{frames_of(exc, self.plugin_code())}",
            )
        self.exactly(
            self.visible(target),
            batch_ids(0, 0, 50),
            "durable-pre-commit",
            "after the preparing process died and the driver committed",
        )

    @guarantee("recover-commits-decided")
    def test_recovery_commits_decided_work(self, target: str, tmp_path: Path) -> None:
        sink = self.make_sink(target)
        self.require_role(sink, CommitsOnDriver)
        query = uuid.uuid4().hex
        committables = tuple(
            self.open_task(sink, batch_ids(0, p, 30), query=query, partition=p)[1] for p in range(2)
        )
        log = tmp_path / "log"
        CommitLog(str(log)).record_decision(Decision("kit", query, 0, committables))
        self.coordinator(self.make_sink(target), log).recover()
        expected = batch_ids(0, 0, 30) + batch_ids(0, 1, 30)
        self.exactly(self.visible(target), expected, "recover-commits-decided", "after recovery")
        fresh = self.make_sink(target)
        assert isinstance(fresh, CommitsOnDriver)
        expect(
            not [c for c in fresh.recover("kit") if c.query_id == query],
            "recover-commits-decided",
            "recover() still lists the committed work",
        )

    @guarantee("recover-aborts-undecided")
    def test_recovery_aborts_undecided_work(self, target: str, tmp_path: Path) -> None:
        sink = self.make_sink(target)
        self.require_role(sink, CommitsOnDriver)
        query = uuid.uuid4().hex
        self.open_task(sink, range(40), query=query)
        fresh = self.make_sink(target)
        assert isinstance(fresh, CommitsOnDriver)
        found = [c for c in fresh.recover("kit") if c.query_id == query]
        expect(bool(found), "recover-aborts-undecided", "recover() does not list prepared work")
        self.coordinator(self.make_sink(target), tmp_path / "log").recover()
        seen = self.visible(target)
        expect(not seen, "recover-aborts-undecided", f"{len(seen)} undecided row(s) visible")
        left = [c for c in fresh.recover("kit") if c.query_id == query]
        expect(not left, "recover-aborts-undecided", f"still prepared after recovery: {left}")


class TaskCommitChecks(SinkChecks):
    """The :class:`~twopc.CommitsInTask` role: the task's own commit, and the marker that
    makes a replayed task write nothing."""

    @guarantee("invisible-before-commit")
    def test_nothing_is_visible_before_the_task_commits(self, target: str) -> None:
        sink = self.make_sink(target)
        self.require_role(sink, CommitsInTask)
        assert isinstance(sink, CommitsInTask)
        txn, _ = self.open_task(sink, range(100), query=uuid.uuid4().hex)
        seen = self.visible(target)
        expect(not seen, "invisible-before-commit", f"{len(seen)} row(s) visible after pre_commit")
        outcome = sink.commit_in_task(txn)
        expect(
            outcome is CommitOutcome.COMMITTED,
            "commit-visible-once",
            f"commit_in_task returned {outcome}, expected COMMITTED",
        )
        self.exactly(self.visible(target), range(100), "commit-visible-once", "after commit")

    @guarantee("abort-leaves-nothing")
    def test_abort_after_pre_commit_leaves_nothing(self, target: str) -> None:
        sink = self.make_sink(target)
        self.require_role(sink, CommitsInTask)
        txn, _ = self.open_task(sink, range(100), query=uuid.uuid4().hex)
        sink.abort(txn)
        sink.abort(txn)  # idempotent
        seen = self.visible(target)
        expect(not seen, "abort-leaves-nothing", f"{len(seen)} row(s) visible after abort")

    @guarantee("marker-skips-replay")
    def test_a_task_whose_marker_exists_writes_nothing(self, target: str) -> None:
        sink = self.make_sink(target)
        self.require_role(sink, CommitsInTask)
        query = uuid.uuid4().hex
        self.write(sink, range(40), query=query, batch=3, partition=1)
        # the same partition of the same batch again: a replay, or a retry after the commit
        replay = self.make_sink(target)
        outcome = self.write(
            replay, range(40), query=query, batch=3, partition=1, attempt=KIT_ATTEMPT + 1
        )
        expect(
            outcome is CommitOutcome.ALREADY_COMMITTED,
            "marker-skips-replay",
            f"the replayed task's commit returned {outcome}, expected ALREADY_COMMITTED",
        )
        self.exactly(self.visible(target), range(40), "marker-skips-replay", "after the replays")

    @guarantee("markers-readable")
    def test_markers_show_the_committed_partitions(self, target: str) -> None:
        sink = self.make_sink(target)
        self.require_role(sink, CommitsInTask)
        assert isinstance(sink, CommitsInTask)
        query = uuid.uuid4().hex
        self.write(sink, range(10), query=query, batch=5, partition=0)
        self.write(sink, range(10, 20), query=query, batch=4, partition=2)
        scope = RecoveryScope("kit", query)
        footprint = Footprint(sink.naming(), 3)
        at_five = sink.committed_partitions(scope, 5, footprint)
        expect(
            at_five == {0},
            "markers-readable",
            f"committed_partitions(batch 5) = {at_five}, expected {{0}}",
        )
        at_four = sink.committed_partitions(scope, 4, footprint)
        expect(
            at_four == {0, 2},
            "markers-readable",
            f"committed_partitions(batch 4) = {at_four}, expected {{0, 2}}",
        )
        other = sink.committed_partitions(RecoveryScope("kit", uuid.uuid4().hex), 0, footprint)
        expect(
            not other,
            "markers-readable",
            f"another query's markers show partitions {other}",
        )
