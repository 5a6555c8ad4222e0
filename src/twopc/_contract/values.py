"""The values passed through the sink contract: what a task knows (:class:`TaskContext`),
what it prepared (:class:`Committable` with its :class:`Payload`), what a target holds
(:class:`Inspection`, :class:`PendingWork`) and what a batch's run looks like
(:class:`Footprint`). Users and plugins import them from :mod:`twopc.protocol`, which
shows them as its own."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum, StrEnum
from typing import Any, ClassVar, TypeVar, cast

from twopc.errors import UnsupportedFormatError
from twopc.progress import ProgressInTask, SourceOffsets

__all__ = [
    "COMMITTABLE_FORMAT_VERSION",
    "CommitOutcome",
    "Committable",
    "Footprint",
    "Inspection",
    "Payload",
    "PendingWork",
    "RecoveryScope",
    "StoredBatch",
    "TargetMarker",
    "TaskContext",
    "WorkKind",
    "WorkLimit",
    "WorkTimeout",
]

COMMITTABLE_FORMAT_VERSION = 1
"""Version of the committable envelope written to commit logs and task reports."""

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
    source_offsets: SourceOffsets | None = None
    """The source offsets the whole batch ends at (a Kafka source's, read from the
    checkpoint), the same in every task of the batch; ``None`` when the query's source is
    not Kafka or the engine cannot read them. A sink that keeps them with its output
    (:class:`~twopc.protocol.KeepsSourceOffsets`) stores them atomically with the
    partition's data."""
    partitions: int = 0
    """How many partitions the batch runs with, as the engine planned it; 0 when it cannot
    tell before phase 1. Stored with per-partition source offsets, so that
    :func:`twopc.starting_offsets` can tell a whole batch from a partly committed one."""

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
    source_offsets: SourceOffsets | None = None
    """The source offsets the batch ends at (:attr:`TaskContext.source_offsets`), for a
    driver-commit sink that stores them with what it commits
    (:class:`~twopc.protocol.KeepsSourceOffsets`). The coordinator sets them from its
    decision before :meth:`~twopc.protocol.CommitsOnDriver.commit`, also when recovery
    finishes a decided batch."""

    @classmethod
    def for_task(cls, ctx: TaskContext, payload: Payload) -> Committable:
        """The committable of the task ``ctx`` describes, carrying the sink's payload and
        the batch's source offsets."""
        return cls(
            sink_id=ctx.sink_id,
            query_id=ctx.query_id,
            batch_id=ctx.batch_id,
            partition=ctx.partition,
            attempt=ctx.attempt,
            # as JSON makes it: the same committable whether read back or not
            payload=json.loads(json.dumps(payload.to_json())),
            version=payload.version,
            source_offsets=ctx.source_offsets,
        )

    def with_source_offsets(self, offsets: SourceOffsets | None) -> Committable:
        """This committable carrying ``offsets`` (itself when it already does)."""
        if offsets == self.source_offsets:
            return self
        return dataclasses.replace(self, source_offsets=offsets)

    def to_json(self) -> dict[str, Any]:
        """The committable as a JSON-able dict (the commit log's format); the source
        offsets only when it carries some (a reader of an older version ignores them)."""
        body: dict[str, Any] = {
            "format": COMMITTABLE_FORMAT_VERSION,
            "sink_id": self.sink_id,
            "query_id": self.query_id,
            "batch_id": self.batch_id,
            "partition": self.partition,
            "attempt": self.attempt,
            "version": self.version,
            "payload": dict(self.payload),
        }
        if self.source_offsets is not None:
            body["source_offsets"] = self.source_offsets.to_json()
        return body

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
                source_offsets=SourceOffsets.from_json(data["source_offsets"])
                if data.get("source_offsets")
                else None,
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
class StoredBatch:
    """What a target holds of one committed batch of one query, for
    :meth:`~twopc.protocol.KeepsSourceOffsets.stored_offsets`.

    ``partitions`` are the partitions whose **newest** commit in the target is this batch
    (a sink that commits a batch as a whole lists all of them); ``partition_count`` is how
    many partitions the batch ran with (:attr:`TaskContext.partitions`; 0 when unknown).
    ``source_offsets`` are the offsets stored with it (``None``: none were stored, the
    query's source was not Kafka or an older twopc wrote it); ``committed_at`` is when it
    committed, in seconds since the epoch (``None`` when the target does not say), which
    orders the queries of one sink id."""

    query_id: str
    batch_id: int
    partitions: frozenset[int]
    partition_count: int
    source_offsets: SourceOffsets | None
    committed_at: float | None = None

    @property
    def whole(self) -> bool:
        """Whether every partition of the batch holds it as its newest commit."""
        return self.partition_count > 0 and self.partitions >= set(range(self.partition_count))


@dataclass(frozen=True)
class TargetMarker:
    """The newest batch the target system itself records as committed for one partition of
    one query (a SQL marker row, a Kafka marker offset)."""

    query_id: str
    partition: int
    batch_id: int


@dataclass(frozen=True)
class WorkLimit:
    """A limit of the target on the work a batch holds at once (:meth:`Sink.work_limits`):
    the driver checks a batch's planned partitions against it before phase 1, and refuses
    a batch that cannot fit instead of failing it part-way.

    ``each_partition``: every partition of the batch holds one of ``holds`` until the batch
    commits (a prepared transaction); otherwise only each task running at once does (a
    connection). ``allowed``: how many the target allows (its setting ``setting``, for
    every user); ``free``: how many it has left right now, where the sink could read it (a
    batch that needs more than that but no more than ``allowed`` is written, with a
    warning). ``fix``: how to raise the limit, in the target's terms.
    """

    holds: str
    """What the batch holds, singular, with its article: ``"a prepared transaction"``."""
    setting: str
    """The target's setting that sets the limit: ``"max_prepared_transactions"``."""
    allowed: int
    each_partition: bool
    free: int | None = None
    fix: str = ""


@dataclass(frozen=True)
class WorkTimeout:
    """The age at which the target aborts a transaction a task left open
    (:meth:`Sink.work_timeout`): Kafka's ``transaction.timeout.ms``. The core warns, in the
    log and in :class:`~twopc.BatchMetrics`, when a batch's work passes 80 % of it before
    its commit: a wider or slower batch is about to lose its transactions."""

    setting: str
    """The setting that sets it, as its users know it: ``"transaction.timeout.ms"``."""
    seconds: float


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
