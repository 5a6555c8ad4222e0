"""The checks of the task side, which apply to every sink: open transactions abort
cleanly, empty and large batches, committables the log can keep, long attempt ids, bad
records refused with a clear error, replays that write nothing. None of them needs Spark."""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from twopc._contract.paths import CommitPath
from twopc._coordination.commit_log import CommitLog
from twopc._coordination.records import Decision
from twopc.errors import BatchFailedError, PermanentSinkError, TwoPCError
from twopc.local import LocalEngine
from twopc.protocol import (
    CommitOutcome,
    CommitsInTask,
    CommitsOnDriver,
    Committable,
    TaskContext,
)
from twopc.testing._base import (
    KIT_ATTEMPT,
    SinkCallError,
    SinkChecks,
    expect,
    fail,
    guarantee,
    sink_call,
)
from twopc.testing._causes import frames_of
from twopc.testing._runner import batch_ids

__all__ = ["TaskSideChecks"]


class TaskSideChecks(SinkChecks):
    """What every sink must do, whichever role commits its work."""

    @guarantee("abort-leaves-nothing")
    def test_abort_of_an_open_transaction_leaves_nothing(self, target: str) -> None:
        sink = self.make_sink(target)
        where = f"batch 0 partition 0 attempt {KIT_ATTEMPT}"
        with sink_call(f"begin_transaction ({where})"):
            txn = sink.begin_transaction(TaskContext("kit", uuid.uuid4().hex, 0, 0, KIT_ATTEMPT))
        with sink_call(f"invoke ({where})"):
            sink.invoke(txn, self.make_batch(range(100)))
        with sink_call(f"abort ({where})"):
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
        where = f"batch 0 partition 0 attempt {KIT_ATTEMPT}"
        with sink_call(f"begin_transaction ({where})"):
            txn = sink.begin_transaction(TaskContext("kit", uuid.uuid4().hex, 0, 0, KIT_ATTEMPT))
        step = 10_000
        for start in range(0, self.large_rows, step):
            with sink_call(f"invoke ({where}, rows {start} and on)"):
                sink.invoke(txn, self.make_batch(range(start, min(start + step, self.large_rows))))
        with sink_call(f"pre_commit ({where})"):
            committable = sink.pre_commit(txn)
        if isinstance(sink, CommitsInTask):
            with sink_call(f"commit_in_task ({where})"):
                sink.commit_in_task(txn)
        else:
            assert isinstance(sink, CommitsOnDriver)
            with sink_call(f"commit ({where})"):
                sink.commit([committable])
        self.exactly(self.visible(target), range(self.large_rows), "large-batch", "after commit")

    @guarantee("committables-json")
    def test_committables_are_json_serialisable(self, target: str) -> None:
        """The driver writes every committable into its commit log, and a task sends its
        own in its report, both as JSON: a prepared task's committable must survive that."""
        sink = self.make_sink(target)
        txn, committable = self.open_task(sink, range(500, 520), query=uuid.uuid4().hex)
        read_back = Committable.loads(committable.dumps())
        identity = ("sink_id", "query_id", "batch_id", "partition", "attempt", "version")
        changed = [f for f in identity if getattr(read_back, f) != getattr(committable, f)]
        expect(
            not changed,
            "committables-json",
            f"the committable of {type(sink).__name__} read back from JSON differs in "
            f"{', '.join(changed)}: {committable!r}",
        )
        if isinstance(sink, CommitsInTask):
            with sink_call("abort (after pre_commit)"):
                sink.abort(txn)
        elif isinstance(sink, CommitsOnDriver):
            with sink_call("abort_prepared"):
                sink.abort_prepared([committable])

    @guarantee("attempt-ids")
    def test_attempt_ids_are_longs(self, target: str, tmp_path: Path) -> None:
        """Spark names a task's attempt by its task attempt id, a long that passes 2**31 in
        a long-running application: a task with attempt id :data:`KIT_ATTEMPT` prepares,
        commits and is found again under that id."""
        try:
            if CommitPath.of(self.make_sink(target)) is CommitPath.TASK:
                self._long_attempt_in_task(target)
            else:
                self._long_attempt_on_driver(target, tmp_path)
        except SinkCallError as exc:
            exc.hint = (
                f"Spark's task attempt ids are longs (the kit's is {KIT_ATTEMPT}, above 2**31): "
                "keep them in 64-bit integers (a BIGINT column), never a 32-bit one"
            )
            fail("attempt-ids", exc.explained(self.plugin_code()))

    def _long_attempt_in_task(self, target: str) -> None:
        query, ids = uuid.uuid4().hex, batch_ids(0, 1, 30)
        outcome = self.write(self.make_sink(target), ids, query=query, partition=1)
        expect(
            outcome is CommitOutcome.COMMITTED,
            "attempt-ids",
            f"commit_in_task of attempt {KIT_ATTEMPT} returned {outcome}, expected COMMITTED",
        )
        again = self.write(
            self.make_sink(target), ids, query=query, partition=1, attempt=KIT_ATTEMPT + 1
        )
        expect(
            again is CommitOutcome.ALREADY_COMMITTED,
            "attempt-ids",
            f"attempt {KIT_ATTEMPT + 1} of the task that attempt {KIT_ATTEMPT} committed "
            f"returned {again}, expected ALREADY_COMMITTED",
        )
        self.exactly(self.visible(target), ids, "attempt-ids", "after two attempts of a task")

    def _long_attempt_on_driver(self, target: str, tmp_path: Path) -> None:
        sink = self.make_sink(target)
        query, ids = uuid.uuid4().hex, batch_ids(0, 1, 30)
        _, committable = self.open_task(sink, ids, query=query, partition=1)
        expect(
            committable.attempt == KIT_ATTEMPT,
            "attempt-ids",
            f"pre_commit's committable names attempt {committable.attempt}, not the task's "
            f"attempt id {KIT_ATTEMPT}: build it with Committable.for_task(ctx, payload)",
        )
        fresh = self.make_sink(target)
        assert isinstance(fresh, CommitsOnDriver)
        with sink_call("recover"):
            listed = [c for c in fresh.recover("kit") if c.query_id == query]
        attempts = sorted(c.attempt for c in listed)
        expect(
            attempts == [KIT_ATTEMPT],
            "attempt-ids",
            f"recover() of a new sink object lists the work prepared by attempt "
            f"{KIT_ATTEMPT} with attempt(s) {attempts}: recovery commits only the attempt a "
            "decision names, so it would abort decided work. Keep attempt ids in 64-bit "
            "integers (a BIGINT column), never a 32-bit one",
        )
        log = tmp_path / "attempt-log"
        CommitLog(str(log)).record_decision(Decision("kit", query, 0, (committable,)))
        self.coordinator(self.make_sink(target), log).recover()
        self.exactly(
            self.visible(target),
            ids,
            "attempt-ids",
            f"after recovery committed the decided attempt {KIT_ATTEMPT}",
        )

    @guarantee("bad-records")
    def test_bad_records_fail_clearly_and_leave_nothing(self, target: str, tmp_path: Path) -> None:
        bad = self.bad_batch()
        if bad is None:
            pytest.skip("bad_batch() not provided by the suite")
        sink = self.make_sink(target)
        good = pa.Table.from_batches([self.make_batch(range(20))])
        engine = LocalEngine([good, [self.make_batch(range(20, 40)), bad]], processes=False)
        try:
            self.coordinator(sink, tmp_path / "log").run_batch(uuid.uuid4().hex, 7, engine)
        except BatchFailedError as exc:
            self._failed_for_the_bad_records(exc)
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

    def _failed_for_the_bad_records(self, exc: BatchFailedError) -> None:
        """The batch must fail because partition 1 rejected bad_batch() with a
        PermanentSinkError, and say so: sink, batch and partition 1."""
        cause = exc.__cause__
        failed = exc.partition
        if failed is None and isinstance(cause, TwoPCError):
            failed = cause.partition  # a task that failed rather than reported a rejection
        frames = frames_of(exc, self.plugin_code())
        if failed is None:
            fail("bad-records", f"the batch failed without naming a partition: {exc}{frames}")
        if failed != 1:
            fail(
                "bad-records",
                f"partition {failed}, which got only good rows, failed the batch (partition 1 "
                f"got bad_batch()), for another reason than bad records: {exc}{frames}",
            )
        expect(
            isinstance(cause, PermanentSinkError),
            "bad-records",
            "partition 1 failed on bad_batch(), but not with a PermanentSinkError: raise "
            "twopc.PermanentSinkError for input that can never be written (the task reports "
            f"it, and nothing retries it). The batch failed with: {exc}{frames}",
        )
        where = (exc.sink_id, exc.batch_id, exc.partition)
        expect(
            where == ("kit", 7, 1),
            "bad-records",
            f"the error names sink, batch and partition {where}, not ('kit', 7, 1): {exc}",
        )

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
