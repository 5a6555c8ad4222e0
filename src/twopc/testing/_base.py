"""What every conformance check class shares: the author's hooks, the ``target`` fixture,
the guarantees' names, and helpers that write through whichever commit role a sink has."""

from __future__ import annotations

import functools
import multiprocessing
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar, NoReturn, TypeVar

import pyarrow as pa
import pytest

from twopc._commit_log import CommitLog
from twopc._coordinator import Coordinator
from twopc._paths import CommitPath
from twopc.protocol import (
    CommitOutcome,
    CommitsInTask,
    CommitsOnDriver,
    Committable,
    Sink,
    TaskContext,
)
from twopc.testing._runner import load_factory

__all__ = ["GUARANTEES", "SinkChecks", "guarantee"]

_WHERE = {CommitPath.DRIVER: "on the driver", CommitPath.TASK: "in the task"}

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
    "marker-skips-replay": "a task whose marker shows its batch writes nothing",
    "markers-readable": "the target's markers show the committed partitions",
    "empty-transaction": "empty transactions",
    "large-batch": "large batches",
    "bad-records": "bad records fail clearly and leave nothing",
    "replay-skipped": "a replayed batch writes nothing",
    "spark-query": "a real foreachBatch query is exactly-once",
    "spark-replay": "Spark's replay of a batch id writes nothing",
    "spark-task-retry": "Spark task failure and retry",
    "crash-exactly-once": "SIGKILL at every crash point, restart: exactly-once",
    "batch-write": "a batch write is all or nothing, once per write_id",
    "format-options": 'format("twopc") options build the sink of sink_factory',
    "format-batch": 'df.write.format("twopc") writes once per write_id',
    "format-stream": 'writeStream.format("twopc") is exactly-once, replays included',
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
                fail(key, f"{type(exc).__name__}: {exc}")

        checked.__twopc_guarantee__ = key  # type: ignore[attr-defined]
        return checked  # type: ignore[return-value]

    return tag


def fail(key: str, message: str) -> NoReturn:
    pytest.fail(f"[{GUARANTEES[key]}] {message}", pytrace=False)


def expect(condition: bool, key: str, message: str) -> None:
    if not condition:
        fail(key, message)


def in_fresh_process(function: Callable[..., None], *args: Any) -> Any:
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


class SinkChecks:
    """The base of every check class: what the plugin author provides, and helpers.

    Provide:

    * ``sink_factory``: ``"package.module:function"``; ``function(target) -> Sink``. It
      must be importable in a fresh Python process (crash tests run the sink there).
    * :meth:`read_committed`: the ``id`` values a reader of the target sees now, one
      per visible row (duplicates included).
    * :meth:`new_target` (optional): a fresh, empty target for one test (a directory, a
      table name, a topic); the default is a new directory under ``tmp_path``.
      :meth:`drop_target` (optional) removes it after the test.
    * :meth:`bad_batch` (optional): a record batch the sink must reject when it follows a
      good batch in the same task.
    * ``batch_maker`` (optional): ``"module:function"`` turning a list of ids into a
      record batch the sink accepts; default: columns ``id`` (int64) and ``payload``.

    Checks that need the other commit role than the sink's are skipped with that reason.
    """

    sink_factory: ClassVar[str] = ""
    batch_maker: ClassVar[str] = "twopc.testing._runner:default_batch"
    large_rows: ClassVar[int] = 200_000
    spark_master: ClassVar[str] = "local[2,3]"

    # -- what the plugin author provides --------------------------------------------------

    def new_target(self, tmp_path: Path) -> str:
        return str(tmp_path / "target")

    def drop_target(self, target: str) -> None:
        """Remove what :meth:`new_target` created (tables, topics); called after each test."""

    def read_committed(self, target: str) -> list[int]:
        raise NotImplementedError("read_committed(target) must return the visible ids")

    def bad_batch(self) -> pa.RecordBatch | None:
        return None

    # -- fixtures -------------------------------------------------------------------------

    @pytest.fixture
    def target(self, tmp_path: Path) -> Iterator[str]:
        """A fresh target for one test, dropped afterwards."""
        created = self.new_target(tmp_path)
        try:
            yield created
        finally:
            self.drop_target(created)

    # -- helpers --------------------------------------------------------------------------

    def make_sink(self, target: str) -> Sink[Any]:
        if not self.sink_factory:
            raise TypeError(f"{type(self).__name__}.sink_factory is not set")
        sink: Sink[Any] = load_factory(self.sink_factory)(target)
        return sink

    def make_batch(self, ids: Sequence[int]) -> pa.RecordBatch:
        batch: pa.RecordBatch = load_factory(self.batch_maker)(list(ids))
        return batch

    def visible(self, target: str) -> Counter[int]:
        return Counter(int(i) for i in self.read_committed(target))

    @staticmethod
    def require_role(sink: Sink[Any], role: type) -> None:
        """Skip unless ``sink`` commits the way ``role`` does. A sink that commits in the
        task counts as that even when it can also finish driver-path work of an earlier
        run (the SQL sinks in ``transaction`` mode)."""
        path = CommitPath.of(sink)
        wanted = CommitPath.TASK if role is CommitsInTask else CommitPath.DRIVER
        if path is not wanted:
            pytest.skip(f"{type(sink).__name__} commits {_WHERE[path]}, not {_WHERE[wanted]}")

    def open_task(
        self,
        sink: Sink[Any],
        ids: Sequence[int],
        *,
        query: str,
        batch: int = 0,
        partition: int = 0,
        attempt: int = 0,
    ) -> tuple[Any, Committable]:
        """Begin, invoke (when there are ids) and pre-commit one task: (txn, committable)."""
        txn = sink.begin_transaction(TaskContext("kit", query, batch, partition, attempt))
        if ids:
            sink.invoke(txn, self.make_batch(ids))
        return txn, sink.pre_commit(txn)

    def write(
        self,
        sink: Sink[Any],
        ids: Sequence[int],
        *,
        query: str,
        batch: int = 0,
        partition: int = 0,
        attempt: int = 0,
    ) -> CommitOutcome:
        """One task written and committed, the way the sink's role commits."""
        txn, committable = self.open_task(
            sink, ids, query=query, batch=batch, partition=partition, attempt=attempt
        )
        if isinstance(sink, CommitsInTask):
            return sink.commit_in_task(txn)
        assert isinstance(sink, CommitsOnDriver)
        [outcome] = sink.commit([committable])
        return outcome

    def coordinator(self, sink: Sink[Any], log: Path, **options: Any) -> Coordinator:
        return Coordinator(sink, "kit", CommitLog(str(log)), sleep=lambda _: None, **options)

    @staticmethod
    def exactly(seen: Counter[int], expected: Iterable[int], key: str, when: str) -> None:
        wanted = set(expected)
        duplicates = sorted(i for i, n in seen.items() if n > 1)
        missing = sorted(wanted - set(seen))
        extra = sorted(set(seen) - wanted)
        if duplicates or missing or extra:
            fail(
                key,
                f"{when}: expected {len(wanted)} ids exactly once, found duplicates "
                f"{duplicates[:5]}, missing {missing[:5]} ({len(missing)}), unexpected "
                f"{extra[:5]} ({len(extra)})",
            )
