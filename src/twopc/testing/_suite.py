"""The conformance suite a plugin author subclasses. See :mod:`twopc.testing`."""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import pyarrow as pa
import pytest

from twopc._commit_log import CommitLog, Decision
from twopc._coordinator import Coordinator
from twopc.errors import BatchFailedError, PermanentSinkError, TwoPCError
from twopc.faults import ENV_VAR, CrashPoint
from twopc.local import LocalEngine
from twopc.protocol import Capabilities, CommitOutcome, Committable, Sink, TaskContext
from twopc.testing._runner import batch_ids, load_factory

__all__ = ["GUARANTEES", "SinkConformanceSuite", "guarantee"]

F = TypeVar("F", bound=Callable[..., Any])

GUARANTEES = {
    "invisible-before-commit": "nothing is visible before commit",
    "commit-visible-once": "commit makes every row visible exactly once",
    "abort-leaves-nothing": "abort leaves nothing",
    "commit-idempotent": "commit is idempotent",
    "commit-elsewhere": "a committable commits from a fresh process",
    "durable-pre-commit": "pre_commit is durable",
    "recover-commits-decided": "recovery commits decided work",
    "recover-aborts-undecided": "recovery aborts undecided work",
    "empty-transaction": "empty transactions",
    "large-batch": "large batches",
    "bad-records": "bad records fail clearly and leave nothing",
    "replay-skipped": "a replayed batch writes nothing",
    "spark-query": "a real foreachBatch query is exactly-once",
    "spark-replay": "Spark's replay of a batch id writes nothing",
    "spark-task-retry": "Spark task failure and retry",
    "crash-exactly-once": "SIGKILL at every crash point, restart: exactly-once",
}
"""Every guarantee the kit checks, by id, with the words the summary prints."""


def guarantee(key: str) -> Callable[[F], F]:
    """Tag a kit test with the guarantee it checks (for messages and the summary).

    Any exception the sink raises inside the check fails it under the guarantee's name.
    """

    def tag(function: F) -> F:
        @functools.wraps(function)
        def checked(*args: Any, **kwargs: Any) -> Any:
            try:
                return function(*args, **kwargs)
            except Exception as exc:  # pytest's skip/fail outcomes are BaseExceptions
                _fail(key, f"{type(exc).__name__}: {exc}")

        checked.__twopc_guarantee__ = key  # type: ignore[attr-defined]
        return checked  # type: ignore[return-value]

    return tag


def _fail(key: str, message: str) -> None:
    pytest.fail(f"[{GUARANTEES[key]}] {message}", pytrace=False)


def _expect(condition: bool, key: str, message: str) -> None:
    if not condition:
        _fail(key, message)


_TASK_POINTS = (
    CrashPoint.BEFORE_BEGIN,
    CrashPoint.AFTER_INVOKE,
    CrashPoint.BEFORE_PRE_COMMIT,
    CrashPoint.AFTER_PRE_COMMIT,
)


def crash_points(capabilities: Capabilities) -> list[CrashPoint]:
    """The crash points that apply to a sink with these capabilities."""
    points = list(_TASK_POINTS)
    if capabilities.commit_in_task:
        points += [CrashPoint.BEFORE_TASK_COMMIT, CrashPoint.AFTER_TASK_COMMIT]
    points += [CrashPoint.BEFORE_DECISION, CrashPoint.AFTER_DECISION]
    if capabilities.global_commit:
        points.append(CrashPoint.BETWEEN_COMMITS)
    points.append(CrashPoint.AFTER_COMMIT)
    return points


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


def _in_fresh_process(function: Callable[..., None], *args: Any) -> Any:
    """Run ``function(*args, pipe)`` in a new interpreter; return what it sent."""
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=function, args=(*args, sender))
    process.start()
    sender.close()
    try:
        if not receiver.poll(180):
            raise TimeoutError(f"{function.__name__} sent nothing within 180 s")
        return receiver.recv()
    finally:
        receiver.close()
        process.join(60)


class SinkConformanceSuite:
    """Subclass this in a test module named ``test_*.py`` with a class named ``Test*``.

    Provide:

    * ``sink_factory``: ``"package.module:function"``; ``function(target) -> Sink``. It
      must be importable in a fresh Python process (crash tests run the sink there).
    * :meth:`read_committed`: the ``id`` values a reader of the target sees now, one
      per visible row (duplicates included).
    * :meth:`new_target` (optional): a fresh, empty target for one test (a directory, a
      table name, a topic); the default is a new directory under ``tmp_path``.
    * :meth:`bad_batch` (optional): a record batch the sink must reject when it follows a
      good batch in the same task.
    * ``batch_maker`` (optional): ``"module:function"`` turning a list of ids into a
      record batch the sink accepts; default: columns ``id`` (int64) and ``payload``.

    The capabilities come from the sink itself (``sink.capabilities``); tests that need
    a capability it does not declare are skipped with that reason.
    """

    sink_factory: ClassVar[str] = ""
    batch_maker: ClassVar[str] = "twopc.testing._runner:default_batch"
    large_rows: ClassVar[int] = 200_000
    spark_master: ClassVar[str] = "local[2,3]"

    # -- what the plugin author provides --------------------------------------------------

    def new_target(self, tmp_path: Path) -> str:
        return str(tmp_path / "target")

    def read_committed(self, target: str) -> list[int]:
        raise NotImplementedError("read_committed(target) must return the visible ids")

    def bad_batch(self) -> pa.RecordBatch | None:
        return None

    # -- helpers --------------------------------------------------------------------------

    def _sink(self, target: str) -> Sink[Any]:
        if not self.sink_factory:
            raise TypeError(f"{type(self).__name__}.sink_factory is not set")
        sink: Sink[Any] = load_factory(self.sink_factory)(target)
        return sink

    def _batch(self, ids: Sequence[int]) -> pa.RecordBatch:
        batch: pa.RecordBatch = load_factory(self.batch_maker)(list(ids))
        return batch

    def _visible(self, target: str) -> Counter[int]:
        return Counter(int(i) for i in self.read_committed(target))

    def _require(self, sink: Sink[Any], **flags: bool) -> None:
        for name, wanted in flags.items():
            if getattr(sink.capabilities, name) != wanted:
                state = "declared" if not wanted else "not declared"
                pytest.skip(f"capability {name} {state} by {type(sink).__name__}")

    def _prepare(
        self,
        sink: Sink[Any],
        ids: Sequence[int],
        *,
        query: str,
        batch: int = 0,
        partition: int = 0,
        attempt: int = 0,
    ) -> Committable:
        txn = sink.begin_transaction(TaskContext("kit", query, batch, partition, attempt))
        if ids:
            sink.invoke(txn, self._batch(ids))
        return sink.pre_commit(txn)

    def _coordinator(self, sink: Sink[Any], log: Path, **options: Any) -> Coordinator:
        return Coordinator(sink, "kit", CommitLog(str(log)), sleep=lambda _: None, **options)

    @staticmethod
    def _exactly(seen: Counter[int], expected: Iterable[int], key: str, when: str) -> None:
        wanted = set(expected)
        duplicates = sorted(i for i, n in seen.items() if n > 1)
        missing = sorted(wanted - set(seen))
        extra = sorted(set(seen) - wanted)
        if duplicates or missing or extra:
            _fail(
                key,
                f"{when}: expected {len(wanted)} ids exactly once, found duplicates "
                f"{duplicates[:5]}, missing {missing[:5]} ({len(missing)}), unexpected "
                f"{extra[:5]} ({len(extra)})",
            )

    # -- protocol level -------------------------------------------------------------------

    @guarantee("invisible-before-commit")
    def test_nothing_is_visible_before_commit(self, tmp_path: Path) -> None:
        target = self.new_target(tmp_path)
        sink = self._sink(target)
        committable = self._prepare(sink, range(100), query=uuid.uuid4().hex)
        seen = self._visible(target)
        _expect(not seen, "invisible-before-commit", f"{len(seen)} row(s) visible after pre_commit")
        sink.commit([committable])
        self._exactly(self._visible(target), range(100), "commit-visible-once", "after commit")

    @guarantee("abort-leaves-nothing")
    def test_abort_leaves_nothing(self, tmp_path: Path) -> None:
        target = self.new_target(tmp_path)
        sink = self._sink(target)
        txn = sink.begin_transaction(TaskContext("kit", uuid.uuid4().hex, 0, 0))
        sink.invoke(txn, self._batch(range(100)))
        sink.abort(txn)
        seen = self._visible(target)
        _expect(not seen, "abort-leaves-nothing", f"{len(seen)} row(s) visible after abort")
        if sink.capabilities.global_commit:
            committable = self._prepare(sink, range(100, 200), query=uuid.uuid4().hex)
            sink.abort_prepared([committable])
            sink.abort_prepared([committable])  # idempotent
            seen = self._visible(target)
            _expect(
                not seen, "abort-leaves-nothing", f"{len(seen)} row(s) visible after abort_prepared"
            )

    @guarantee("commit-idempotent")
    def test_commit_is_idempotent(self, tmp_path: Path) -> None:
        target = self.new_target(tmp_path)
        sink = self._sink(target)
        committable = self._prepare(sink, range(50), query=uuid.uuid4().hex)
        first = sink.commit([committable])
        second = sink.commit([committable])
        _expect(
            first in ([CommitOutcome.COMMITTED], [CommitOutcome.ALREADY_COMMITTED]),
            "commit-idempotent",
            f"first commit returned {first}",
        )
        _expect(
            second == [CommitOutcome.ALREADY_COMMITTED],
            "commit-idempotent",
            f"committing again returned {second}, expected [ALREADY_COMMITTED]",
        )
        self._exactly(self._visible(target), range(50), "commit-idempotent", "after two commits")

    @guarantee("commit-elsewhere")
    def test_commit_from_a_fresh_process(self, tmp_path: Path) -> None:
        target = self.new_target(tmp_path)
        sink = self._sink(target)
        self._require(sink, global_commit=True)
        committable = self._prepare(sink, range(60), query=uuid.uuid4().hex)
        kind, detail = _in_fresh_process(
            _commit_elsewhere, self.sink_factory, target, committable.dumps()
        )
        _expect(kind == "ok", "commit-elsewhere", f"commit in a fresh process failed: {detail}")
        self._exactly(self._visible(target), range(60), "commit-elsewhere", "after the commit")

    @guarantee("durable-pre-commit")
    def test_pre_commit_is_durable(self, tmp_path: Path) -> None:
        target = self.new_target(tmp_path)
        sink = self._sink(target)
        self._require(sink, global_commit=True)
        committable = Committable.loads(
            _in_fresh_process(
                _prepare_then_die, self.sink_factory, self.batch_maker, target, uuid.uuid4().hex
            )
        )
        try:
            sink.commit([committable])
        except TwoPCError as exc:
            _fail(
                "durable-pre-commit", f"committing after the preparing process died failed: {exc}"
            )
        self._exactly(
            self._visible(target),
            batch_ids(0, 0, 50),
            "durable-pre-commit",
            "after the preparing process died and the driver committed",
        )

    @guarantee("recover-commits-decided")
    def test_recovery_commits_decided_work(self, tmp_path: Path) -> None:
        target = self.new_target(tmp_path)
        sink = self._sink(target)
        self._require(sink, global_commit=True, recover=True)
        query = uuid.uuid4().hex
        committables = tuple(
            self._prepare(sink, batch_ids(0, p, 30), query=query, partition=p) for p in range(2)
        )
        log = tmp_path / "log"
        CommitLog(str(log)).record_decision(Decision("kit", query, 0, committables))
        self._coordinator(self._sink(target), log).recover()
        expected = batch_ids(0, 0, 30) + batch_ids(0, 1, 30)
        self._exactly(self._visible(target), expected, "recover-commits-decided", "after recovery")
        _expect(
            not [c for c in self._sink(target).recover("kit") if c.query_id == query],
            "recover-commits-decided",
            "recover() still lists the committed work",
        )

    @guarantee("recover-aborts-undecided")
    def test_recovery_aborts_undecided_work(self, tmp_path: Path) -> None:
        target = self.new_target(tmp_path)
        sink = self._sink(target)
        self._require(sink, recover=True)
        query = uuid.uuid4().hex
        self._prepare(sink, range(40), query=query)
        found = [c for c in self._sink(target).recover("kit") if c.query_id == query]
        _expect(bool(found), "recover-aborts-undecided", "recover() does not list prepared work")
        self._coordinator(self._sink(target), tmp_path / "log").recover()
        seen = self._visible(target)
        _expect(not seen, "recover-aborts-undecided", f"{len(seen)} undecided row(s) visible")
        left = [c for c in self._sink(target).recover("kit") if c.query_id == query]
        _expect(not left, "recover-aborts-undecided", f"still prepared after recovery: {left}")

    @guarantee("empty-transaction")
    def test_empty_transaction(self, tmp_path: Path) -> None:
        target = self.new_target(tmp_path)
        sink = self._sink(target)
        committable = self._prepare(sink, [], query=uuid.uuid4().hex)
        sink.commit([committable])
        seen = self._visible(target)
        _expect(not seen, "empty-transaction", f"{len(seen)} row(s) after an empty commit")

    @guarantee("large-batch")
    def test_large_batch(self, tmp_path: Path) -> None:
        target = self.new_target(tmp_path)
        sink = self._sink(target)
        txn = sink.begin_transaction(TaskContext("kit", uuid.uuid4().hex, 0, 0))
        step = 10_000
        for start in range(0, self.large_rows, step):
            sink.invoke(txn, self._batch(range(start, min(start + step, self.large_rows))))
        committable = sink.pre_commit(txn)
        sink.commit([committable])
        self._exactly(self._visible(target), range(self.large_rows), "large-batch", "after commit")

    @guarantee("bad-records")
    def test_bad_records_fail_clearly_and_leave_nothing(self, tmp_path: Path) -> None:
        bad = self.bad_batch()
        if bad is None:
            pytest.skip("bad_batch() not provided by the suite")
        target = self.new_target(tmp_path)
        sink = self._sink(target)
        good = pa.Table.from_batches([self._batch(range(20))])
        engine = LocalEngine([good, [self._batch(range(20, 40)), bad]], processes=False)
        try:
            self._coordinator(sink, tmp_path / "log").run_batch(uuid.uuid4().hex, 7, engine)
        except BatchFailedError as exc:
            text = str(exc)
            _expect(
                "sink 'kit'" in text and "batch 7" in text and "partition 1" in text,
                "bad-records",
                f"the error does not name sink, batch and partition: {text}",
            )
        except PermanentSinkError as exc:
            _fail("bad-records", f"PermanentSinkError escaped the coordinator: {exc}")
        else:
            _fail("bad-records", "a batch with bad records was committed")
        if not sink.capabilities.commit_in_task:
            seen = self._visible(target)
            _expect(not seen, "bad-records", f"{len(seen)} row(s) of the failed batch visible")

    @guarantee("replay-skipped")
    def test_replayed_batch_writes_nothing(self, tmp_path: Path) -> None:
        target = self.new_target(tmp_path)
        query = uuid.uuid4().hex
        tables = [pa.Table.from_batches([self._batch(batch_ids(0, p, 25))]) for p in range(2)]
        for _ in range(2):
            coordinator = self._coordinator(self._sink(target), tmp_path / "log")
            coordinator.run_batch(query, 0, LocalEngine(tables, processes=False))
        self._exactly(
            self._visible(target),
            batch_ids(0, 0, 25) + batch_ids(0, 1, 25),
            "replay-skipped",
            "after running batch 0 twice",
        )

    # -- Spark level ----------------------------------------------------------------------

    def _spark_query(self, tmp_path: Path, target: str, writer: Any, files: int) -> None:
        spark = _spark_session(self.spark_master)
        source = tmp_path / "spark-input"
        source.mkdir(exist_ok=True)
        for index in range(files):
            path = source / f"part-{index:04d}.json"
            if not path.exists():
                rows = [{"id": i, "payload": f"row-{i}"} for i in batch_ids(index, 0, 40)]
                path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
        stream = (
            spark.readStream.schema("id long, payload string")
            .option("maxFilesPerTrigger", 1)
            .json(str(source))
            .repartition(2, "id")
        )
        query = (
            stream.writeStream.option("checkpointLocation", str(tmp_path / "spark-checkpoint"))
            .foreachBatch(writer)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()

    @guarantee("spark-query")
    def test_spark_foreach_batch_query(self, tmp_path: Path) -> None:
        target = self.new_target(tmp_path)
        import twopc

        writer = twopc.foreach_batch(self._sink(target), sink_id=f"kit-{uuid.uuid4().hex[:8]}")
        self._spark_query(tmp_path, target, writer, files=3)
        expected = [i for b in range(3) for i in batch_ids(b, 0, 40)]
        self._exactly(self._visible(target), expected, "spark-query", "after the query")

    @guarantee("spark-replay")
    def test_spark_replays_a_batch_id_without_writing(self, tmp_path: Path) -> None:
        target = self.new_target(tmp_path)
        import twopc

        sink_id = f"kit-{uuid.uuid4().hex[:8]}"
        self._spark_query(tmp_path, target, twopc.foreach_batch(self._sink(target), sink_id), 2)
        commits = tmp_path / "spark-checkpoint" / "commits"
        (commits / "1").unlink()
        (commits / ".1.crc").unlink(missing_ok=True)
        replay = twopc.foreach_batch(self._sink(target), sink_id)
        self._spark_query(tmp_path, target, replay, 2)
        statuses = [(m.batch_id, m.status) for m in replay.metrics]
        _expect(statuses == [(1, "skipped")], "spark-replay", f"replay ran as {statuses}")
        expected = [i for b in range(2) for i in batch_ids(b, 0, 40)]
        self._exactly(self._visible(target), expected, "spark-replay", "after the replay")

    @guarantee("spark-task-retry")
    def test_spark_task_failure_and_retry(self, tmp_path: Path) -> None:
        target = self.new_target(tmp_path)
        import twopc

        faults = twopc.FaultPlan.parse("after_invoke:raise@batch=1,partition=1,attempt=0")
        writer = twopc.foreach_batch(
            self._sink(target), f"kit-{uuid.uuid4().hex[:8]}", faults=faults
        )
        self._spark_query(tmp_path, target, writer, files=2)
        attempts = {t.partition: t.attempt for t in writer.metrics[-1].tasks}
        expected = [i for b in range(2) for i in batch_ids(b, 0, 40)]
        self._exactly(self._visible(target), expected, "spark-task-retry", "after the retry")
        _expect(
            attempts.get(1, 0) >= 1 or len(attempts) == 1,
            "spark-task-retry",
            f"the failed task was not retried: attempts {attempts}",
        )

    # -- crash level ----------------------------------------------------------------------

    @guarantee("crash-exactly-once")
    @pytest.mark.parametrize(
        "point", [p for p in CrashPoint if not p.in_recovery], ids=lambda p: p.value
    )
    def test_sigkill_at_crash_point_then_restart(self, tmp_path: Path, point: CrashPoint) -> None:
        target = self.new_target(tmp_path)
        sink = self._sink(target)
        if point not in crash_points(sink.capabilities):
            pytest.skip(f"crash point {point.value} does not apply to {type(sink).__name__}")
        batches, partitions, rows = 3, 2, 20
        args = [
            sys.executable,
            "-m",
            "twopc.testing._runner",
            "--factory",
            self.sink_factory,
            "--batch-maker",
            self.batch_maker,
            "--target",
            target,
            "--checkpoint",
            str(tmp_path / "checkpoint"),
            "--batches",
            str(batches),
            "--partitions",
            str(partitions),
            "--rows",
            str(rows),
        ]
        single = sink.capabilities.single_transaction
        where = "" if point.on_driver or single else ",partition=1"
        filters = ",rows=10" if point is CrashPoint.AFTER_INVOKE else ""
        first = _run(args, f"{point.value}:kill@batch=1{where}{filters}")
        expected_code = -signal.SIGKILL if point.on_driver else 1
        _expect(
            first.returncode == expected_code,
            "crash-exactly-once",
            f"the first run should end by the crash (exit {expected_code}), got "
            f"{first.returncode}: {first.stderr[-1500:]}",
        )
        second = _run(args, None)
        _expect(
            second.returncode == 0,
            "crash-exactly-once",
            f"the restart failed ({second.returncode}): {second.stderr[-1500:]}",
        )
        expected = [
            i for b in range(batches) for p in range(partitions) for i in batch_ids(b, p, rows)
        ]
        self._exactly(
            self._visible(target),
            expected,
            "crash-exactly-once",
            f"after a SIGKILL at {point.value} and a restart",
        )


_SESSIONS: dict[str, Any] = {}


def _spark_session(master: str) -> Any:
    """A SparkSession for the kit's Spark tests (the active one if there is one)."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        pytest.skip("pyspark is not installed (pip install 'twopc[spark]')")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    if master not in _SESSIONS:
        session = (
            SparkSession.builder.master(master)
            .appName("twopc-conformance")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .getOrCreate()
        )
        session.sparkContext.setLogLevel("ERROR")
        _SESSIONS[master] = session
    return _SESSIONS[master]


def _run(args: list[str], faults: str | None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop(ENV_VAR, None)
    if faults:
        env[ENV_VAR] = faults
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")]))
    return subprocess.run(
        args,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
        start_new_session=True,
    )
