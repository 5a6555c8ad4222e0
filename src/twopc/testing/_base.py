"""What every conformance check class shares: the author's hooks, the ``target`` fixture,
the guarantees' names, and helpers that write through whichever commit role a sink has."""

from __future__ import annotations

import functools
import json
import multiprocessing
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, NoReturn, TypeVar

import pyarrow as pa
import pytest

from twopc._contract.paths import CommitPath
from twopc._coordination.commit_log import CommitLog
from twopc._coordination.coordinator import Coordinator
from twopc.errors import UnsupportedFormatError
from twopc.progress import SourceOffsets
from twopc.protocol import (
    CommitOutcome,
    CommitsInTask,
    CommitsOnDriver,
    Committable,
    Sink,
    TaskContext,
)
from twopc.testing._causes import PluginCode, describe, frames_of, plugin_code
from twopc.testing._runner import load_factory

__all__ = ["GUARANTEES", "SinkChecks", "guarantee"]

_WHERE = {CommitPath.DRIVER: "on the driver", CommitPath.TASK: "in the task"}

F = TypeVar("F", bound=Callable[..., Any])

KIT_ATTEMPT = 2**40 + 7
"""The attempt id of the kit's tasks. Spark's task attempt ids are longs, unique in the
application, and pass 2**31 in a long-running one: a sink that keeps them in a 32-bit
column fails where the kit uses this. A second attempt of a task is ``KIT_ATTEMPT + 1``."""

NOT_APPLICABLE = "not applicable to this role: "
"""How the reason of a check skipped for the sink's commit role starts: the summary counts
such cases apart, not as missing coverage."""

GUARANTEES = {
    "invisible-before-commit": "nothing is visible before commit",
    "commit-visible-once": "commit makes every row visible exactly once",
    "abort-leaves-nothing": "abort leaves nothing",
    "abort-unreadable": "abort_prepared works on a payload it cannot read",
    "unknown-version-refused": "commit refuses a payload version it cannot read",
    "commit-idempotent": "commit is idempotent",
    "commit-elsewhere": "a committable commits from a fresh process",
    "durable-pre-commit": "pre_commit is durable",
    "committables-json": "committables must be JSON-serialisable",
    "attempt-ids": "attempt ids are Spark's task attempt ids (longs)",
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
    "group-member": "a group with the reference sink commits all or none, crashes included",
    "offsets-kept": "the target keeps each batch's source offsets with its output",
}
"""Every guarantee the kit checks, by id, with the words the summary prints."""


def guarantee(key: str) -> Callable[[F], F]:
    """Tag a kit test with the guarantee it checks (for messages and the summary).

    Any exception the sink raises inside the check fails it under the guarantee's name,
    quoting the exception and the frames of the plugin's code it passed through.
    """

    def tag(function: F) -> F:
        @functools.wraps(function)
        def checked(*args: Any, **kwargs: Any) -> Any:
            try:
                return function(*args, **kwargs)
            except Exception as exc:  # pytest's skip/fail outcomes are BaseExceptions
                checks = args[0] if args and isinstance(args[0], SinkChecks) else None
                code = checks.plugin_code() if checks is not None else PluginCode()
                if isinstance(exc, SinkCallError):
                    fail(key, exc.explained(code))
                fail(key, describe(exc, code))

        checked.__twopc_guarantee__ = key  # type: ignore[attr-defined]
        return checked  # type: ignore[return-value]

    return tag


def fail(key: str, message: str) -> NoReturn:
    """Fail the check under the guarantee ``key``: the message alone, without the
    exceptions that were being handled (the message quotes what matters of them)."""
    raise pytest.fail.Exception(f"[{GUARANTEES[key]}] {message}", pytrace=False) from None


def expect(condition: bool, key: str, message: str) -> None:
    if not condition:
        fail(key, message)


class SinkCallError(Exception):
    """A call of the kit into the sink raised: the message names the call (method, batch,
    partition, attempt) and the exception; the sink's exception is the cause. ``hint``
    says what the cause may be, in the plugin author's terms, where the kit can tell."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.hint = hint

    def explained(self, code: PluginCode) -> str:
        """The message, the plugin's frames, then the hint."""
        return f"{self}{frames_of(self, code)}" + (f"\n{self.hint}" if self.hint else "")


@contextmanager
def sink_call(what: str) -> Iterator[None]:
    """Name the sink's method the kit was calling when it raised (``what``): the check's
    failure then says where, and quotes the exception and the plugin's frames."""
    try:
        yield
    except SinkCallError:
        raise
    except Exception as exc:  # pytest's outcomes are BaseExceptions and pass through
        hint = ""
        if str(KIT_ATTEMPT) in what and _OUT_OF_RANGE.search(_chain_text(exc)):
            hint = (
                f"The task's attempt id is {KIT_ATTEMPT}: Spark's task attempt ids are longs, "
                "above 2**31 in a long-running application. Is it kept in a 32-bit column? "
                f"(See [{GUARANTEES['attempt-ids']}].)"
            )
        raise SinkCallError(f"{what} raised {type(exc).__name__}: {exc}", hint) from exc


_OUT_OF_RANGE = re.compile(r"out of range|overflow|too large|too big|does not fit", re.I)


def _chain_text(exc: BaseException) -> str:
    texts: list[str] = []
    link: BaseException | None = exc
    while link is not None and len(texts) < 10:
        texts.append(f"{type(link).__name__}: {link}")
        link = link.__cause__ or link.__context__
    return "\n".join(texts)


def in_fresh_process(function: Callable[..., None], *args: Any) -> Any:
    """Run ``function(*args, pipe)`` in a new interpreter; return what it sent.

    A process that exits without sending anything raises :class:`RuntimeError` with its
    exit status (the functions the kit runs there send their own errors back)."""
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=function, args=(*args, sender))
    process.start()
    sender.close()
    try:
        if not receiver.poll(180):
            raise TimeoutError(f"{function.__name__} sent nothing within 180 s")
        return receiver.recv()
    except EOFError:
        process.join(60)
        raise RuntimeError(
            f"the fresh process ({function.__name__}) exited with status {process.exitcode} "
            "without sending its result or its error (see the test's captured stderr)"
        ) from None
    finally:
        receiver.close()
        process.join(60)


def json_problem(committable: object, sink: Sink[Any] | None = None) -> str | None:
    """Why ``committable`` (what ``pre_commit`` returned) cannot be written as JSON, the
    commit log's and the task report's format, naming the sink, the batch and the
    committable; ``None`` if it can."""
    if not isinstance(committable, Committable):
        return (
            f"{_sink_name(sink)}pre_commit returned {type(committable).__name__} "
            f"{_short(committable)}, not a twopc.Committable"
        )
    try:
        Committable.loads(json.dumps(committable.to_json()))
    except (TypeError, ValueError, UnsupportedFormatError) as exc:
        return (
            f"{_sink_name(sink)}the committable of batch {committable.batch_id} partition "
            f"{committable.partition} attempt {committable.attempt} cannot be written as JSON "
            f"({type(exc).__name__}: {exc}): {_short(committable)}. The driver writes "
            "committables into its commit log as JSON: build them with "
            "Committable.for_task(ctx, MyPayload(...)), a payload whose fields are JSON-able "
            "(str, int, float, bool, None, lists and dicts of them)"
        )
    return None


def _sink_name(sink: Sink[Any] | None) -> str:
    return "" if sink is None else f"{type(sink).__name__} ({sink.describe()}): "


def _short(value: Any, limit: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


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
        made: set[type] = self.__dict__.setdefault("_sink_types", set())
        made.add(type(sink))
        return sink

    def make_batch(self, ids: Sequence[int]) -> pa.RecordBatch:
        batch: pa.RecordBatch = load_factory(self.batch_maker)(list(ids))
        return batch

    def visible(self, target: str) -> Counter[int]:
        return Counter(int(i) for i in self.read_committed(target))

    def plugin_code(self) -> PluginCode:
        """Where the plugin's code is, for the frames a failure quotes: the module of
        ``sink_factory`` and of the classes of the sinks it made in this test."""
        return plugin_code(self.sink_factory, getattr(self, "_sink_types", ()))

    @staticmethod
    def require_role(sink: Sink[Any], role: type) -> None:
        """Skip, as not applicable to this role, unless ``sink`` commits the way ``role``
        does. A sink that commits in the task counts as that even when it can also finish
        driver-path work of an earlier run (the SQL sinks in ``transaction`` mode)."""
        path = CommitPath.of(sink)
        wanted = CommitPath.TASK if role is CommitsInTask else CommitPath.DRIVER
        if path is not wanted:
            pytest.skip(
                f"{NOT_APPLICABLE}{type(sink).__name__} commits {_WHERE[path]}, not "
                f"{_WHERE[wanted]}"
            )

    def open_task(
        self,
        sink: Sink[Any],
        ids: Sequence[int],
        *,
        query: str,
        batch: int = 0,
        partition: int = 0,
        attempt: int = KIT_ATTEMPT,
        source: tuple[SourceOffsets, int] | None = None,
    ) -> tuple[Any, Committable]:
        """Begin, invoke (when there are ids) and pre-commit one task: (txn, committable).
        ``source``: the batch's source offsets and partition count, as the task gets them.

        The committable must be JSON-serialisable (else the check fails under that
        guarantee); a method of the sink that raises is named in the failure."""
        where = f"batch {batch} partition {partition} attempt {attempt}"
        offsets, partitions = source if source is not None else (None, 0)
        ctx = TaskContext(
            "kit",
            query,
            batch,
            partition,
            attempt,
            source_offsets=offsets,
            partitions=partitions,
        )
        with sink_call(f"begin_transaction ({where})"):
            txn = sink.begin_transaction(ctx)
        if ids:
            with sink_call(f"invoke ({where})"):
                sink.invoke(txn, self.make_batch(ids))
        try:
            with sink_call(f"pre_commit ({where})"):
                committable = sink.pre_commit(txn)
        except SinkCallError as exc:
            if "JSON serializable" in str(exc.__cause__):
                fail(
                    "committables-json",
                    f"{_sink_name(sink)}pre_commit of {where} could not build its "
                    f"committable: {describe(exc.__cause__ or exc, self.plugin_code())}\n"
                    "A payload's fields must be JSON-able (str, int, float, bool, None, lists "
                    "and dicts of them)",
                )
            raise
        problem = json_problem(committable, sink)
        if problem is not None:
            fail("committables-json", problem)
        return txn, committable

    def write(
        self,
        sink: Sink[Any],
        ids: Sequence[int],
        *,
        query: str,
        batch: int = 0,
        partition: int = 0,
        attempt: int = KIT_ATTEMPT,
    ) -> CommitOutcome:
        """One task written and committed, the way the sink's role commits."""
        txn, committable = self.open_task(
            sink, ids, query=query, batch=batch, partition=partition, attempt=attempt
        )
        where = f"batch {batch} partition {partition} attempt {attempt}"
        if isinstance(sink, CommitsInTask):
            with sink_call(f"commit_in_task ({where})"):
                return sink.commit_in_task(txn)
        assert isinstance(sink, CommitsOnDriver)
        with sink_call(f"commit ({where})"):
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
