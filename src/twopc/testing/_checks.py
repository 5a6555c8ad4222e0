"""The protocol-level checks, one class per part of the contract.

:class:`TaskSideChecks` applies to every sink; :class:`DriverCommitChecks` to sinks that
commit on the driver (:class:`~twopc.CommitsOnDriver`); :class:`TaskCommitChecks` to sinks
that commit in the task (:class:`~twopc.CommitsInTask`). None of them needs Spark.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa

from twopc._commit_log import CommitLog, Decision
from twopc.errors import BatchFailedError, PermanentSinkError, TwoPCError
from twopc.local import LocalEngine
from twopc.protocol import (
    CommitOutcome,
    CommitsInTask,
    CommitsOnDriver,
    Committable,
    Footprint,
    RecoveryScope,
    TaskContext,
)
from twopc.testing._base import SinkChecks, expect, fail, guarantee, in_fresh_process
from twopc.testing._runner import batch_ids, load_factory

__all__ = ["DriverCommitChecks", "TaskCommitChecks", "TaskSideChecks"]


def _commit_elsewhere(factory: str, target: str, committable: str, pipe: Any) -> None:
    try:
        sink = load_factory(factory)(target)
        outcomes = sink.commit([Committable.loads(committable)])
        pipe.send(("ok", [o.value for o in outcomes]))
    except BaseException as exc:  # report everything to the parent
        pipe.send(("error", f"{type(exc).__name__}: {exc}"))


def _prepare_then_die(factory: str, maker: str, target: str, query: str, pipe: Any) -> None:
    sink = load_factory(factory)(target)
    txn = sink.begin_transaction(TaskContext("kit", query, 0, 0))
    sink.invoke(txn, load_factory(maker)(batch_ids(0, 0, 50)))
    pipe.send(sink.pre_commit(txn).dumps())
    os._exit(0)  # no clean-up, no atexit: only what pre_commit made durable survives


class TaskSideChecks(SinkChecks):
    """What every sink must do, whichever role commits its work."""

    @guarantee("abort-leaves-nothing")
    def test_abort_of_an_open_transaction_leaves_nothing(self, target: str) -> None:
        sink = self.make_sink(target)
        txn = sink.begin_transaction(TaskContext("kit", uuid.uuid4().hex, 0, 0))
        sink.invoke(txn, self.make_batch(range(100)))
        sink.abort(txn)
        seen = self.visible(target)
        expect(not seen, "abort-leaves-nothing", f"{len(seen)} row(s) visible after abort")

    @guarantee("empty-transaction")
    def test_empty_transaction(self, target: str) -> None:
        self.write(self.make_sink(target), [], query=uuid.uuid4().hex)
        seen = self.visible(target)
        expect(not seen, "empty-transaction", f"{len(seen)} row(s) after an empty commit")

    @guarantee("large-batch")
    def test_large_batch(self, target: str) -> None:
        sink = self.make_sink(target)
        txn = sink.begin_transaction(TaskContext("kit", uuid.uuid4().hex, 0, 0))
        step = 10_000
        for start in range(0, self.large_rows, step):
            sink.invoke(txn, self.make_batch(range(start, min(start + step, self.large_rows))))
        committable = sink.pre_commit(txn)
        if isinstance(sink, CommitsInTask):
            sink.commit_in_task(txn)
        else:
            assert isinstance(sink, CommitsOnDriver)
            sink.commit([committable])
        self.exactly(self.visible(target), range(self.large_rows), "large-batch", "after commit")

    @guarantee("bad-records")
    def test_bad_records_fail_clearly_and_leave_nothing(self, target: str, tmp_path: Path) -> None:
        bad = self.bad_batch()
        if bad is None:
            import pytest

            pytest.skip("bad_batch() not provided by the suite")
        sink = self.make_sink(target)
        good = pa.Table.from_batches([self.make_batch(range(20))])
        engine = LocalEngine([good, [self.make_batch(range(20, 40)), bad]], processes=False)
        try:
            self.coordinator(sink, tmp_path / "log").run_batch(uuid.uuid4().hex, 7, engine)
        except BatchFailedError as exc:
            where = (exc.sink_id, exc.batch_id, exc.partition)
            expect(
                where == ("kit", 7, 1),
                "bad-records",
                f"the error names sink, batch and partition {where}, not ('kit', 7, 1): {exc}",
            )
            expect(
                isinstance(exc.__cause__, PermanentSinkError),
                "bad-records",
                f"the error's cause is {exc.__cause__!r}, not the sink's PermanentSinkError",
            )
        except PermanentSinkError as exc:
            fail("bad-records", f"PermanentSinkError escaped the coordinator: {exc}")
        else:
            fail("bad-records", "a batch with bad records was committed")
        seen = self.visible(target)
        if isinstance(sink, CommitsInTask):
            # partition 0 committed in its task before partition 1 failed; partition 1's
            # good rows must not be there
            expect(
                not set(seen) & set(range(20, 40)),
                "bad-records",
                "rows of the rejected partition are visible",
            )
        else:
            expect(not seen, "bad-records", f"{len(seen)} row(s) of the failed batch visible")

    @guarantee("replay-skipped")
    def test_replayed_batch_writes_nothing(self, target: str, tmp_path: Path) -> None:
        query = uuid.uuid4().hex
        tables = [pa.Table.from_batches([self.make_batch(batch_ids(0, p, 25))]) for p in range(2)]
        for _ in range(2):
            coordinator = self.coordinator(self.make_sink(target), tmp_path / "log")
            coordinator.run_batch(query, 0, LocalEngine(tables, processes=False))
        self.exactly(
            self.visible(target),
            batch_ids(0, 0, 25) + batch_ids(0, 1, 25),
            "replay-skipped",
            "after running batch 0 twice",
        )


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
        sink.commit([committable])
        self.exactly(self.visible(target), range(100), "commit-visible-once", "after commit")

    @guarantee("abort-leaves-nothing")
    def test_abort_prepared_leaves_nothing(self, target: str) -> None:
        sink = self.make_sink(target)
        self.require_role(sink, CommitsOnDriver)
        assert isinstance(sink, CommitsOnDriver)
        _, committable = self.open_task(sink, range(100, 200), query=uuid.uuid4().hex)
        sink.abort_prepared([committable])
        sink.abort_prepared([committable])  # idempotent
        seen = self.visible(target)
        expect(not seen, "abort-leaves-nothing", f"{len(seen)} row(s) visible after abort_prepared")

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
        committable = Committable.loads(
            in_fresh_process(
                _prepare_then_die, self.sink_factory, self.batch_maker, target, uuid.uuid4().hex
            )
        )
        try:
            sink.commit([committable])
        except TwoPCError as exc:
            fail("durable-pre-commit", f"committing after the preparing process died failed: {exc}")
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
        outcome = self.write(replay, range(40), query=query, batch=3, partition=1, attempt=1)
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
