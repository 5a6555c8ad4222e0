"""The sink contract: what a backend implements to be driven by twopc.

Every sink implements the **task side**, :class:`Sink`, which runs on the executors once per
partition of a micro-batch: :meth:`~Sink.begin_transaction`, :meth:`~Sink.invoke` for each
Arrow record batch, :meth:`~Sink.pre_commit` (make the data durable, return a small
:class:`Committable`) and :meth:`~Sink.abort`. Then it takes **one commit role**:

* :class:`CommitsOnDriver`: what ``pre_commit`` prepared can be committed by any process
  (staged files, a PostgreSQL prepared transaction, an XA branch). The driver records the
  batch's decision once every partition prepared, then calls :meth:`~CommitsOnDriver.commit`;
  recovery lists prepared work with :meth:`~CommitsOnDriver.recover` and commits what a
  decision names, aborting the rest. Readers see nothing of a batch before the decision.
* :class:`CommitsInTask`: the transaction cannot leave the task that opened it (a plain
  database transaction, a Kafka producer's). The task commits it right after
  ``pre_commit`` with :meth:`~CommitsInTask.commit_in_task`, together with a marker (a
  marker row, a Kafka group offset) that records "partition p of batch b is committed"
  atomically with the data; a replayed task finds its marker and writes nothing.
  Partitions of a failed batch that had committed stay committed.

The coordinator picks its path from the role, once: nothing else declares how a sink
commits. Flink's names map one to one: ``SinkWriter.prepareCommit`` → ``pre_commit``,
``Committer.commit`` → :meth:`CommitsOnDriver.commit`. A minimal driver-commit sink::

    class ListSink(Sink[list[pa.RecordBatch]], CommitsOnDriver):
        def begin_transaction(self, ctx): return []
        def invoke(self, txn, batch): txn.append(batch)
        def pre_commit(self, txn): ...     # stage txn durably, return a Committable
        def abort(self, txn): txn.clear()
        def commit(self, committables): ...
        def abort_prepared(self, committables): ...
        def recover(self, sink_id): ...

A driver-commit sink whose output Spark can write itself (files in a format Spark's own
writer produces) may also take the optional role :class:`WritesWithSpark`: the Spark adapter
then runs phase 1 as one Spark write job into a location the sink names, and the sink turns
what the job wrote into prepared work, instead of running ``begin_transaction`` /
``invoke`` / ``pre_commit`` in Python tasks.

See ``docs/plugins.md`` for a complete plugin of each role.
"""

from __future__ import annotations

import dataclasses
import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any, ClassVar, Generic, TypeVar, cast

import pyarrow as pa

from twopc.errors import UnsupportedFormatError
from twopc.progress import ProgressInTask

__all__ = [
    "COMMITTABLE_FORMAT_VERSION",
    "CommitOutcome",
    "CommitsInTask",
    "CommitsOnDriver",
    "Committable",
    "Footprint",
    "Inspection",
    "KeepsMarkers",
    "Payload",
    "PendingWork",
    "RecoveryScope",
    "Sink",
    "SparkOutput",
    "SparkWrite",
    "TargetMarker",
    "TaskContext",
    "TracksWriters",
    "WorkKind",
    "WriterRecord",
    "WritesWithSpark",
]

COMMITTABLE_FORMAT_VERSION = 1
"""Version of the committable envelope written to commit logs and task reports."""

TxnT = TypeVar("TxnT")
P = TypeVar("P", bound="Payload")


# -- values passed through the contract ----------------------------------------------------


@dataclass(frozen=True)
class RecoveryScope:
    """Everything a sink instance owns: the sink id and the query it serves.

    ``query_id`` is the streaming query's id, which lives in the checkpoint; a new checkpoint
    means a new id, so batch ids that restart at 0 never collide with earlier output.
    """

    sink_id: str
    query_id: str


@dataclass(frozen=True)
class TaskContext:
    """Where a phase-1 task runs: handed to :meth:`Sink.begin_transaction`.

    Name what the task stages after ``sink_id``, ``query_id``, ``batch_id``, ``partition``
    and ``attempt``: recovery finds the work by them, and the committable carries them
    (:meth:`Committable.for_task`)."""

    sink_id: str
    """The id the user gave the writer (``foreach_batch(sink, sink_id)``): what a sink
    stages under one sink id is that writer's, and ``recover(sink_id)`` lists it."""
    query_id: str
    """The streaming query's id, kept in its checkpoint (for a batch write, an id derived
    from the sink id and its ``write_id``). A new checkpoint has a new id, so batch ids
    that start from 0 again never collide with earlier output."""
    batch_id: int
    """The micro-batch (Spark's ``batchId``)."""
    partition: int
    """The partition of the batch this task writes, ``0..n-1``."""
    attempt: int = 0
    """This run of the task: Spark's task attempt id, unique among every run of the
    partition in the application, also across a stage that Spark runs again after losing
    an executor (whose attempt *numbers* start from 0 again). A long: it passes 2**31 in a
    long-running application, so keep it in a 64-bit integer (a ``BIGINT`` column), never
    a 32-bit one. Not the attempt number (0, 1, ...), which fault filters (``attempt=``)
    and :class:`~twopc.TaskMetrics` keep."""
    run_id: str = ""
    """The engine's id of this run of the query where it has one (Spark: the streaming
    query's run id, new at each start), else ``""``: for logs, never for naming prepared
    work, which a restarted query must find again."""
    progress: ProgressInTask | None = None
    """The batch's source offsets, for a sink whose transaction commits them
    (:class:`~twopc.progress.CommitsProgressInTask`); ``None`` otherwise."""
    concurrent_attempts: bool = False
    """Whether another attempt of this partition may run at the same time (Spark with
    ``spark.speculation`` on, or an engine that cannot tell). Then an attempt that finds an
    earlier attempt's prepared work must leave it alone, even when that attempt has ended:
    it may have reported, and the driver may be about to commit it. When ``False``, an
    ended attempt's prepared work is a failed attempt's, which nothing will commit."""

    @property
    def scope(self) -> RecoveryScope:
        return RecoveryScope(self.sink_id, self.query_id)


class Payload:
    """Base class of a sink's committable payload: subclass it as a frozen dataclass of
    JSON-able fields (str, int, float, bool, None, and lists and dicts of them), and bump
    :attr:`version` when the fields change.

    A payload travels inside a :class:`Committable` from the task to the driver and into
    the commit log, where another version of the sink may read it. :meth:`of` reads it
    back and refuses versions the class cannot read (:attr:`reads`), so an old log is read
    or refused with a clear error, never misread. Override :meth:`from_json` to upgrade
    older versions you still list in :attr:`reads`.
    """

    version: ClassVar[int] = 1
    """The version this class writes."""
    reads: ClassVar[tuple[int, ...]] = ()
    """Versions this class can read; empty means only :attr:`version`."""

    def to_json(self) -> dict[str, Any]:
        """The fields as a JSON-able dict (a dataclass's fields by default)."""
        if not hasattr(self, "__dataclass_fields__"):
            raise TypeError(f"{type(self).__name__} must be a dataclass or override to_json")
        return dataclasses.asdict(cast(Any, self))

    @classmethod
    def from_json(cls: type[P], data: Mapping[str, Any], version: int) -> P:
        """Build the payload from what :meth:`to_json` wrote with ``version``."""
        return cls(**dict(data))

    @classmethod
    def of(cls: type[P], committable: Committable) -> P:
        """The payload of ``committable``, with its version checked.

        Raises :class:`~twopc.UnsupportedFormatError` (a :class:`~twopc.ConfigurationError`)
        when the committable's payload version is not one this class reads (:attr:`reads`;
        by default only :attr:`version`): another version of the sink wrote it, and reading
        it as this version's could misread it. Also when the payload does not make the
        class: the default :meth:`from_json` passes the payload's keys as the dataclass's
        fields, so an unknown key or a missing field is refused. A payload a contract-v1
        sink wrote (a plain dict, version 1) is read by a class of version 1 whose fields
        are that dict's keys; otherwise list 1 in :attr:`reads` and convert it in
        :meth:`from_json`.

        In :meth:`CommitsOnDriver.commit`, let the error propagate: the commit is refused
        instead of misreading the payload, and the decision stays in the commit log for a
        version that reads it. :meth:`CommitsOnDriver.abort_prepared` must not depend on
        it: catch the error and find the work by the committable's ids.
        """
        readable = cls.reads or (cls.version,)
        if committable.version not in readable:
            package = cls.__module__.partition(".")[0]
            raise UnsupportedFormatError(
                f"{cls.__name__} version {committable.version} cannot be read by this version "
                f"of {package}, which reads version(s) {', '.join(map(str, readable))}: "
                f"another version of {package} wrote it. Finish the batch with the version of "
                f"{package} that wrote it, or a newer one that reads it",
                sink_id=committable.sink_id,
                batch_id=committable.batch_id,
                partition=committable.partition,
            )
        try:
            return cls.from_json(committable.payload, committable.version)
        except (TypeError, KeyError, ValueError) as exc:
            raise UnsupportedFormatError(
                f"the payload is not a {cls.__name__} of version {committable.version} ({exc})",
                sink_id=committable.sink_id,
                batch_id=committable.batch_id,
                partition=committable.partition,
            ) from exc


@dataclass(frozen=True)
class Committable:
    """The small, serializable result of ``pre_commit``: enough to commit from any process.

    ``payload`` holds the sink's :class:`Payload` as JSON and ``version`` its version; read
    it back with ``MyPayload.of(committable)``.
    """

    sink_id: str
    query_id: str
    batch_id: int
    partition: int
    attempt: int
    payload: Mapping[str, Any] = field(default_factory=dict)
    version: int = 1

    @classmethod
    def for_task(cls, ctx: TaskContext, payload: Payload) -> Committable:
        """The committable of the task ``ctx`` describes, carrying the sink's payload."""
        return cls(
            sink_id=ctx.sink_id,
            query_id=ctx.query_id,
            batch_id=ctx.batch_id,
            partition=ctx.partition,
            attempt=ctx.attempt,
            # as JSON makes it: the same committable whether read back or not
            payload=json.loads(json.dumps(payload.to_json())),
            version=payload.version,
        )

    def to_json(self) -> dict[str, Any]:
        """The committable as a JSON-able dict (the commit log's format)."""
        return {
            "format": COMMITTABLE_FORMAT_VERSION,
            "sink_id": self.sink_id,
            "query_id": self.query_id,
            "batch_id": self.batch_id,
            "partition": self.partition,
            "attempt": self.attempt,
            "version": self.version,
            "payload": dict(self.payload),
        }

    def dumps(self) -> str:
        """The committable as compact JSON text (:meth:`to_json`, keys sorted), the same
        for equal committables. A driver-commit sink stores it next to the work it
        prepared, so that :meth:`CommitsOnDriver.recover` can return it (read back with
        :meth:`loads`). Raises :class:`TypeError` for a payload that is not JSON-able."""
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Committable:
        """Rebuild a committable written by :meth:`to_json`; refuses other formats and
        anything that is not one (:class:`~twopc.UnsupportedFormatError`)."""
        if not isinstance(data, Mapping):
            raise UnsupportedFormatError(
                f"a committable must be a JSON object, not {type(data).__name__}"
            )
        fmt = data.get("format")
        if fmt != COMMITTABLE_FORMAT_VERSION:
            raise UnsupportedFormatError(
                f"committable format {fmt!r} is not the format {COMMITTABLE_FORMAT_VERSION} "
                "this twopc reads; run the twopc version that wrote it"
            )
        try:
            return cls(
                sink_id=str(data["sink_id"]),
                query_id=str(data["query_id"]),
                batch_id=int(data["batch_id"]),
                partition=int(data["partition"]),
                attempt=int(data["attempt"]),
                payload=dict(data.get("payload") or {}),
                version=int(data.get("version", 1)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise UnsupportedFormatError(f"a committable is incomplete ({exc!r})") from exc

    @classmethod
    def loads(cls, text: str) -> Committable:
        """The committable :meth:`dumps` wrote; refuses text that is not one, or an
        envelope of another format, with :class:`~twopc.UnsupportedFormatError`. The
        payload's own version is checked when it is read (:meth:`Payload.of`), not here."""
        try:
            return cls.from_json(json.loads(text))
        except json.JSONDecodeError as exc:
            raise UnsupportedFormatError(f"a committable is not JSON ({exc})") from exc

    @property
    def scope(self) -> RecoveryScope:
        return RecoveryScope(self.sink_id, self.query_id)


class CommitOutcome(Enum):
    """What a commit did for one committable (or, in the task, for the task)."""

    COMMITTED = "committed"
    ALREADY_COMMITTED = "already_committed"
    """Nothing written: it was committed before (idempotence, or a replay's marker)."""


@dataclass(frozen=True)
class Footprint:
    """Where one run of a sink may have left open work: the naming it used and how many
    partitions it ran with.

    The coordinator records the footprint of every batch in its commit log before phase 1,
    so a restart with another partition count or other naming options (e.g. the prefix of
    Kafka's ``transactional.id``) still finds what an earlier run left, with no probe limit.
    ``naming`` is what :meth:`Sink.naming` returned for that run.
    """

    naming: Mapping[str, Any]
    partitions: int

    def to_json(self) -> dict[str, Any]:
        return {"naming": dict(self.naming), "partitions": self.partitions}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Footprint:
        return cls(dict(data.get("naming") or {}), int(data["partitions"]))


@dataclass(frozen=True)
class TargetMarker:
    """The newest batch the target system itself records as committed for one partition of
    one query (a SQL marker row, a Kafka marker offset)."""

    query_id: str
    partition: int
    batch_id: int


class WorkKind(StrEnum):
    """What a piece of work a crash left is (:class:`PendingWork`); a string enum, so it
    prints and serializes as its value."""

    PREPARED = "prepared"
    """Prepared and resolvable: a decision commits it, else recovery aborts it."""
    UNPREPARED = "unprepared"
    """Left by an attempt that never prepared (staged files, a staging table): swept."""
    OPEN = "open"
    """Open in the target but not attributable to a task (a transaction the target shows
    only as data held back from readers, e.g. an open Kafka transaction): aborted by fencing
    or the target's own timeout."""


@dataclass(frozen=True)
class PendingWork:
    """One thing a crash left that recovery would resolve, seen without touching it.

    ``detail`` says in the sink's words what it is ("staging table of an attempt that did
    not finish"). Whether recovery commits or aborts prepared work is decided against the
    commit log by :func:`twopc.sink_status`, not by the sink.
    """

    kind: WorkKind
    ident: str
    committable: Committable | None = None
    query_id: str | None = None
    batch_id: int | None = None
    partition: int | None = None
    attempt: int | None = None
    age_seconds: float | None = None
    detail: str = ""

    @classmethod
    def prepared(
        cls, committable: Committable, ident: str, age_seconds: float | None = None
    ) -> PendingWork:
        """Prepared work described by its committable."""
        return cls(
            kind=WorkKind.PREPARED,
            ident=ident,
            committable=committable,
            query_id=committable.query_id,
            batch_id=committable.batch_id,
            partition=committable.partition,
            attempt=committable.attempt,
            age_seconds=age_seconds,
        )


@dataclass(frozen=True)
class Inspection:
    """What :meth:`Sink.inspect` saw: pending work, the target's markers, and its limits.

    ``markers`` is ``None`` when the sink keeps no markers of its own (the commit log is then
    the only record of committed batches). ``notes`` say what the sink cannot see.
    """

    pending: tuple[PendingWork, ...] = ()
    markers: tuple[TargetMarker, ...] | None = None
    notes: tuple[str, ...] = ()


# -- the task side: every sink ---------------------------------------------------------------


class Sink(ABC, Generic[TxnT]):
    """The task side every sink implements; combine it with one commit role,
    :class:`CommitsOnDriver` or :class:`CommitsInTask`.

    A sink object is created on the driver, pickled and sent to executors, so it must be
    picklable and must open connections lazily (in :meth:`begin_transaction`, not
    ``__init__``). Methods run in different processes: never rely on state set by another
    method except through the transaction object (same task) or the committable (any
    process).

    Raise :class:`~twopc.PermanentSinkError` for bad input (the batch fails, nothing is
    retried) and :class:`~twopc.TransientSinkError` where a retry may help; the core fills
    in the sink id, batch and partition where an error leaves the sink.
    """

    backend_name: ClassVar[str] = "custom"
    """The name the backend is registered under (for messages and metrics)."""

    single_task: bool = False
    """Write each micro-batch in one task (the engine merges the batch into one partition
    first), e.g. for one transaction per batch. Set per instance where an option decides."""

    @abstractmethod
    def begin_transaction(self, ctx: TaskContext) -> TxnT:
        """Open a transaction for one task: connections, producers, staging files."""

    @abstractmethod
    def invoke(self, txn: TxnT, batch: pa.RecordBatch) -> None:
        """Write one Arrow record batch into the open transaction."""

    @abstractmethod
    def pre_commit(self, txn: TxnT) -> Committable:
        """Make the transaction's data durable and ready to commit; return its committable.

        Driver-commit sinks: after this returns, :meth:`CommitsOnDriver.commit` of the
        committable must succeed from any process. In-task sinks: the task commits the same
        ``txn`` next, with :meth:`CommitsInTask.commit_in_task`.
        """

    @abstractmethod
    def abort(self, txn: TxnT) -> None:
        """Roll back a transaction that did not commit. Idempotent."""

    # -- optional hooks, with defaults -------------------------------------------------------

    def partition_columns(self) -> tuple[str, ...]:
        """Columns whose equal values must reach the same task (e.g. upsert keys).

        The engine hash-partitions the batch by them before phase 1; hash partitioning is
        deterministic, so a replay splits the batch the same way.
        """
        return ()

    def naming(self) -> dict[str, Any]:
        """The options that decide the names of this sink's transactions (JSON-able).

        Recorded in the commit log with every batch (see :class:`Footprint`), so that a
        restart with other options can still clean up after an earlier run. The default,
        ``{}``, suits sinks whose recovery finds everything whatever the options were
        (listings rather than derived names).
        """
        return {}

    def sweep(self, sink_id: str, keep: Sequence[Committable] = ()) -> int:
        """Remove lingering work of ``sink_id`` that never prepared (failed or speculative
        attempts), leaving ``keep`` alone. Returns how many items were removed."""
        return 0

    def inspect(self, sink_id: str) -> Inspection:
        """What recovery would handle for ``sink_id``, read without side effects (``twopc
        status``, ``twopc recover --dry-run``): it must not commit, abort, fence or delete.
        """
        return Inspection(notes=(f"the {self.backend_name} sink shows no pending work",))

    def default_commit_log(self, sink_id: str) -> str | None:
        """Where the commit log lives when the user does not say (an fsspec URL), or None.

        The files sink keeps it next to the data, so the manifest is the decision.
        """
        return None

    def default_commit_log_options(self) -> dict[str, Any]:
        """fsspec options (credentials) for :meth:`default_commit_log`'s location."""
        return {}

    def describe(self) -> str:
        """A short, credential-free description for logs and ``repr``."""
        return self.backend_name


# -- the commit roles ------------------------------------------------------------------------


class CommitsOnDriver(ABC):
    """Commit role: prepared work is committed on the driver, after the batch's decision.

    ``pre_commit`` leaves work that survives the task's process (staged files, a prepared
    transaction), and its committable is enough for any process to commit or abort it.
    Readers see nothing of a batch before the decision, and a crash anywhere is resolved by
    recovery: commit what the commit log's decision names, abort the rest.
    """

    @abstractmethod
    def commit(self, committables: Sequence[Committable]) -> list[CommitOutcome]:
        """Make the data of these committables visible; one outcome per committable.

        Idempotent: committing a committable again reports ``ALREADY_COMMITTED`` and writes
        nothing. Raise :class:`~twopc.TransientSinkError` when a retry may help, and
        :class:`~twopc.CommitError` when the prepared work is gone. Read each payload with
        ``MyPayload.of(committable)``, and let the
        :class:`~twopc.UnsupportedFormatError` it raises for a payload version this version
        cannot read (a :class:`~twopc.ConfigurationError`) refuse the commit.
        """

    @abstractmethod
    def abort_prepared(self, committables: Sequence[Committable]) -> None:
        """Roll back prepared but uncommitted work, so that :meth:`recover` no longer lists
        it. Idempotent; unknown work is ignored.

        It must also work on a committable whose payload this version cannot read
        (:meth:`Payload.of` refuses it: a newer version prepared the work, and recovery
        aborts what no decision names whichever version prepared it). Derive what to roll
        back from the committable's ids (``sink_id``, ``query_id``, ``batch_id``,
        ``partition``, ``attempt``), or find the work by them.
        """

    @abstractmethod
    def recover(self, sink_id: str) -> list[Committable]:
        """Prepared work of ``sink_id`` that is neither committed nor aborted, for every
        query id (earlier checkpoints too). The coordinator commits what a decision names
        and aborts the rest. Must be read-only: ``twopc status`` calls it too.
        """

    def batch_committed(self, committables: Sequence[Committable]) -> None:  # noqa: B027
        """Optional: called once every committable of a batch is committed, before the
        batch is marked done (so again after a crash in between: make it idempotent). The
        files sink writes its batch log for readers here. Default: nothing."""


class KeepsMarkers(ABC):
    """Role: the target records, atomically with each partition's data, the batch that
    partition committed (a marker row, a Kafka group offset).

    Every :class:`CommitsInTask` sink keeps markers; a :class:`CommitsOnDriver` sink may
    (the SQL sinks in ``two_phase`` mode do). With markers the coordinator can tell that a
    restored, older checkpoint is behind the target, and which partitions of a partly
    committed batch a reshaped replay would write twice.

    A driver-commit sink with markers of its own implements it when its markers say, per
    sink id, query id and partition, which batch committed (so that
    :meth:`committed_partitions` can answer); the coordinator then also refuses a restored
    older checkpoint whose batches the target already holds. Markers that only make
    :meth:`CommitsOnDriver.commit` idempotent (one per committable) do not: leave the role
    out, and the commit log is the record. ``twopc status`` shows markers through
    :meth:`Sink.inspect` either way.
    """

    @abstractmethod
    def committed_partitions(
        self, scope: RecoveryScope, batch_id: int, footprint: Footprint
    ) -> set[int] | None:
        """Which partitions the target's markers show as committed at ``batch_id`` or a
        later batch, by a run with ``footprint``; ``None`` when the sink cannot tell."""

    def markers_expire_after(self) -> float | None:
        """Optional: seconds after which the target may drop a marker it keeps (Kafka
        deletes a consumer group's offsets ``offsets.retention.minutes`` after their last
        commit); ``None`` (the default) when markers stay until the sink removes them.

        The coordinator then refuses to replay a partly committed batch whose first run is
        older than that and whose markers it cannot all find: it could no longer tell which
        partitions committed."""
        return None


class CommitsInTask(KeepsMarkers, Generic[TxnT]):
    """Commit role: the task commits its own transaction right after ``pre_commit``.

    For transactions that cannot leave the process that opened them. The transaction must
    also write a **marker** that says "partition p of batch b of this query is committed",
    atomically with the data; :meth:`Sink.begin_transaction` reads it and, when the batch
    is there already, writes nothing (a replay after a crash between the task's commit and
    the driver's decision). Partitions of a failed batch that committed stay committed; a
    rerun skips them by their markers.

    A sink with this role may also implement :class:`CommitsOnDriver`, to finish work that
    an earlier run prepared in a driver-commit mode (the SQL sinks do, for a restart from
    ``two_phase`` to ``transaction`` mode); its new batches still commit in the task.
    """

    @abstractmethod
    def commit_in_task(self, txn: TxnT) -> CommitOutcome:
        """Commit the task's transaction (data and marker) after :meth:`Sink.pre_commit`.

        Return ``ALREADY_COMMITTED`` when the task found its marker and wrote nothing.
        Raise :class:`~twopc.TransientSinkError` when calling it again may help; any other
        error fails the task, which then aborts ``txn``.
        """

    def sweep_lingering(self, sink_id: str, footprint: Footprint) -> int:
        """Abort work that a run with ``footprint`` may have left open, for ``sink_id``.

        Called at recovery once per coordinator, for the footprint of each query's newest
        batch, including runs with other naming or more partitions than this one. Sinks
        whose transactions are found by name rather than by listing (e.g. Kafka's
        transactional ids) implement it; it must not touch committed work. Returns how many
        it aborted, if known (else 0).
        """
        return 0


# -- optional: phase 1 as Spark's own write job --------------------------------------------


@dataclass(frozen=True)
class SparkWrite:
    """One run of a batch written by Spark's own writer: what the engine runs is
    ``df.write.format(format).options(**options).partitionBy(*partition_by)
    .mode("overwrite").save(path)``.

    ``path`` is a URI Spark's (Hadoop's) filesystems resolve (``file:///...``,
    ``hdfs://...``): a location of this run alone, hidden from readers, that the sink's
    :meth:`~Sink.sweep` removes when no prepared work came of it.
    """

    format: str
    path: str
    options: Mapping[str, str] = field(default_factory=dict)
    partition_by: tuple[str, ...] = ()


@dataclass(frozen=True)
class SparkOutput:
    """One unit of prepared work a sink made of a Spark write job's output: its committable,
    and the rows and bytes it holds, for metrics (0 where the sink cannot tell cheaply)."""

    committable: Committable
    rows: int = 0
    bytes: int = 0


class WritesWithSpark(ABC):
    """Optional role of a :class:`CommitsOnDriver` sink: Spark can write a batch itself.

    The Spark adapter (``twopc.foreach_batch``, ``twopc.write_batch``) asks
    :meth:`spark_write_refusal` once per writer. When it returns ``None``, phase 1 of every
    batch is one Spark job and no Python worker touches the rows:

    1. on the driver, :meth:`plan_spark_write` names a location of this run of the batch
       (``ctx.attempt`` names the run) and how Spark writes there;
    2. Spark's writer runs it, with its own output committer: failed, retried and
       speculative task attempts are resolved inside that location;
    3. on the driver again, :meth:`spark_written` turns the job's output into prepared work,
       durable and found by :meth:`CommitsOnDriver.recover` from then on, one committable
       per partition ``0..n-1`` of the batch.

    The coordinator then decides and commits exactly as for work prepared by tasks. A job
    that fails, or a driver that dies during it, leaves only the run's location, which no
    committable names: :meth:`Sink.sweep` must remove it. The task side of the contract
    still serves every other entry point (``format("twopc")``, whose writer runs in Python
    tasks, the local engine) and the sinks' own tests.

    Usage::

        class MyFilesSink(Sink[Txn], CommitsOnDriver, WritesWithSpark):
            def spark_write_refusal(self):
                return None if self.format in ("parquet", "orc") else "format arrow"

            def plan_spark_write(self, ctx, columns):
                return SparkWrite(self.format, f"file://{self.root}/_staging/{ctx.attempt}")

            def spark_written(self, ctx, write):
                ...  # list write.path, stage the files per partition, return SparkOutputs
    """

    @abstractmethod
    def spark_write_refusal(self) -> str | None:
        """Why Spark's writer cannot write this sink's batches (the adapter then runs phase
        1 in Python tasks and logs the reason), or ``None`` when it can. Raise
        :class:`~twopc.ConfigurationError` when the sink's options insist on Spark's writer
        and it cannot."""

    def spark_write_required(self) -> bool:
        """Whether the options insist on Spark's writer: entry points whose phase 1 always
        runs in Python tasks (``format("twopc")``) refuse such a sink. Default ``False``."""
        return False

    @abstractmethod
    def plan_spark_write(self, ctx: TaskContext, columns: Sequence[str]) -> SparkWrite:
        """Where and how Spark writes this run of the batch, on the driver, before the job.

        ``ctx`` names the run: ``partition`` is 0 and ``attempt`` is unique among the
        batch's runs. ``columns`` are the batch's columns. Prepare the location (remove
        what an earlier run with the same name left); raise
        :class:`~twopc.PermanentSinkError` for data the sink can never write (a partition
        column that is missing)."""

    @abstractmethod
    def spark_written(self, ctx: TaskContext, write: SparkWrite) -> list[SparkOutput]:
        """After the job succeeded, on the driver: make its output prepared work.

        Return one :class:`SparkOutput` per partition ``0..n-1`` of the batch (an empty
        committable where a partition wrote nothing), each committable named by its
        partition and ``ctx.attempt``. When this returns, committing them must succeed
        from any process (:meth:`Sink.pre_commit`'s promise); if the driver dies before,
        what is left must be found by ``recover`` (prepared, then aborted) or ``sweep``."""


@dataclass(frozen=True)
class WriterRecord:
    """A query that writes a sink id, as the target keeps it (:class:`TracksWriters`): its
    host and process (with the process's start time, so a reused pid is not taken for it)
    and when it last wrote a batch (seconds since the epoch)."""

    sink_id: str
    query_id: str
    host: str
    pid: int
    updated_at: float
    process_start: str | None = None


class TracksWriters(ABC):
    """Optional role: the target keeps a record of the queries writing each sink id.

    Two queries (two checkpoints) must not write one sink id at once. Where both use one
    commit log (the files sink keeps it next to its data), the writers' liveness records
    there tell; where each query keeps its log under its own checkpoint (the SQL sinks by
    default), only the target can. The driver calls :meth:`record_writer` at a query's
    first batch and then at most once a minute (before a batch), and at a query's first
    batch reads :meth:`writers`: a record of another query
    of the sink id that still runs (its process alive on this host, or updated within
    ``stale_after`` seconds from another host) makes the new query refuse to write,
    naming the other. :meth:`remove_writer` is called when a writer closes cleanly.

    All three run on the driver, outside any batch's transaction; they must be cheap (one
    statement each) and must not raise for a missing registry (create it, or return no
    records)."""

    @abstractmethod
    def record_writer(self, record: WriterRecord) -> None:
        """Insert or replace the record of ``(record.sink_id, record.query_id)``."""

    @abstractmethod
    def writers(self, sink_id: str) -> list[WriterRecord]:
        """Every record of ``sink_id``."""

    @abstractmethod
    def remove_writer(self, sink_id: str, query_id: str) -> None:
        """Forget the record of ``(sink_id, query_id)`` (a clean stop)."""
