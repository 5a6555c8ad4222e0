"""The sink contract: what a backend implements to be driven by the twopc coordinator.

This module knows nothing of Spark. A sink is driven in two phases for every micro-batch:

* **Phase 1, on executors, once per partition (task):** :meth:`Sink.begin_transaction`,
  :meth:`Sink.invoke` for each Arrow record batch, then :meth:`Sink.pre_commit`, which makes
  the data durable and returns a small, serializable :class:`Committable`.
* **Decision, on the driver:** when every partition pre-committed, the coordinator records
  the committables durably in its commit log.
* **Phase 2, on the driver** (or in the task, for sinks whose transactions cannot leave the
  process, see :attr:`Capabilities.commit_in_task`): :meth:`Sink.commit`, idempotent.

After a crash the coordinator calls :meth:`Sink.recover` and commits what was decided, and
aborts (:meth:`Sink.abort_prepared`) what was not. Flink's names map one to one:
``beginTransaction`` → ``begin_transaction``, ``preCommit`` → ``pre_commit``,
``recoverAndCommit`` / ``recoverAndAbort`` → ``recover`` followed by ``commit`` or
``abort_prepared``.

A minimal sink::

    class ListSink(Sink[list[pa.RecordBatch]]):
        capabilities = Capabilities(global_commit=True)

        def begin_transaction(self, ctx):
            return []

        def invoke(self, txn, batch):
            txn.append(batch)

        def pre_commit(self, txn):
            ...  # write txn somewhere durable, return Committable(...)

        ...
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, ClassVar, Generic, TypeVar

import pyarrow as pa

__all__ = [
    "COMMITTABLE_FORMAT_VERSION",
    "Capabilities",
    "CommitOutcome",
    "Committable",
    "Footprint",
    "Inspection",
    "PendingWork",
    "RecoveryScope",
    "Sink",
    "TargetMarker",
    "TaskContext",
]

COMMITTABLE_FORMAT_VERSION = 1
"""Version of the committable envelope written to commit logs. Bumped on layout changes."""

TxnT = TypeVar("TxnT")


@dataclass(frozen=True)
class Capabilities:
    """What a sink can do, declared as data. The coordinator and the conformance kit read it.

    Attributes:
        global_commit: committables can be committed by another process (the driver) after
            the task that prepared them ended. Files and SQL prepared transactions can; Kafka
            transactions cannot.
        commit_in_task: the task commits its own transaction right after ``pre_commit``
            (Kafka, SQL ``transaction`` mode). Replays are then skipped per partition by the
            sink's own markers.
        atomic_batch_visibility: readers never see part of a micro-batch.
        single_transaction: each micro-batch is written by one task in one transaction
            (the engine merges the batch into a single partition first).
        recover: :meth:`Sink.recover` finds prepared work left by a crashed run.
        modes: write modes the sink supports, e.g. ``("append",)`` or ``("append", "upsert")``.
    """

    global_commit: bool = True
    commit_in_task: bool = False
    atomic_batch_visibility: bool = False
    single_transaction: bool = False
    recover: bool = True
    modes: tuple[str, ...] = ("append",)

    def __post_init__(self) -> None:
        if self.global_commit and self.commit_in_task:
            raise ValueError("a sink commits either on the driver (global_commit) or in the task")


@dataclass(frozen=True)
class RecoveryScope:
    """Identifies everything a sink instance owns: the sink id and the query it serves.

    ``query_id`` is the streaming query's id, which lives in the checkpoint; a new checkpoint
    means a new id, so batch ids that restart at 0 never collide with earlier output.
    """

    sink_id: str
    query_id: str


@dataclass(frozen=True)
class TaskContext:
    """Where a phase-1 task runs: handed to :meth:`Sink.begin_transaction`."""

    sink_id: str
    query_id: str
    batch_id: int
    partition: int
    attempt: int = 0
    run_id: str = ""

    @property
    def scope(self) -> RecoveryScope:
        return RecoveryScope(self.sink_id, self.query_id)


@dataclass(frozen=True)
class Committable:
    """The small, serializable result of ``pre_commit``; enough to commit from any process.

    ``payload`` is the sink's own JSON-able data (file lists, transaction ids). ``version`` is
    the sink's payload version so that a newer sink can still commit an older decision.
    """

    sink_id: str
    query_id: str
    batch_id: int
    partition: int
    attempt: int
    payload: Mapping[str, Any] = field(default_factory=dict)
    version: int = 1

    @classmethod
    def for_task(
        cls, ctx: TaskContext, payload: Mapping[str, Any], version: int = 1
    ) -> Committable:
        """The committable of the task ``ctx`` describes, with the sink's own payload."""
        return cls(
            sink_id=ctx.sink_id,
            query_id=ctx.query_id,
            batch_id=ctx.batch_id,
            partition=ctx.partition,
            attempt=ctx.attempt,
            payload=payload,
            version=version,
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
        return json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Committable:
        """Rebuild a committable written by :meth:`to_json`; rejects unknown formats."""
        fmt = data.get("format")
        if fmt != COMMITTABLE_FORMAT_VERSION:
            raise ValueError(f"unsupported committable format {fmt!r}")
        return cls(
            sink_id=str(data["sink_id"]),
            query_id=str(data["query_id"]),
            batch_id=int(data["batch_id"]),
            partition=int(data["partition"]),
            attempt=int(data["attempt"]),
            payload=dict(data.get("payload") or {}),
            version=int(data.get("version", 1)),
        )

    @classmethod
    def loads(cls, text: str) -> Committable:
        return cls.from_json(json.loads(text))

    @property
    def scope(self) -> RecoveryScope:
        return RecoveryScope(self.sink_id, self.query_id)


@dataclass(frozen=True)
class PendingWork:
    """One thing a crash left for a sink that recovery would resolve, seen without touching it.

    ``kind`` says what it is: ``prepared`` (work that can still be committed or aborted; it
    carries its ``committable``), ``unprepared`` (a failed attempt's leftovers that were never
    prepared), ``staging_table``, or ``open_transaction`` (a transaction the target shows as
    open but cannot attribute). Whether recovery commits or aborts prepared work is decided
    against the commit log by :func:`twopc.sink_status`, not by the sink.
    """

    kind: str
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
            kind="prepared",
            ident=ident,
            committable=committable,
            query_id=committable.query_id,
            batch_id=committable.batch_id,
            partition=committable.partition,
            attempt=committable.attempt,
            age_seconds=age_seconds,
        )


@dataclass(frozen=True)
class TargetMarker:
    """The newest batch the target system itself records as committed for one partition of
    one query (a SQL marker row, a Kafka marker offset)."""

    query_id: str
    partition: int
    batch_id: int


@dataclass(frozen=True)
class Inspection:
    """What :meth:`Sink.inspect` saw: pending work, the target's markers, and its limits.

    ``markers`` is ``None`` when the sink keeps no markers of its own (the commit log is then
    the only record of committed batches). ``notes`` say what the sink cannot see.
    """

    pending: tuple[PendingWork, ...] = ()
    markers: tuple[TargetMarker, ...] | None = None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Footprint:
    """Where one run of a sink may have left open work: the naming it used and how many
    partitions it ran with.

    The coordinator records the footprint of every batch in its commit log before phase 1,
    so a restart with another partition count or other naming options (a Kafka
    ``transactional.id`` prefix) still finds what an earlier run left, with no probe limit.
    ``naming`` is what :meth:`Sink.naming` returned for that run.
    """

    naming: Mapping[str, Any]
    partitions: int

    def to_json(self) -> dict[str, Any]:
        return {"naming": dict(self.naming), "partitions": self.partitions}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Footprint:
        return cls(dict(data.get("naming") or {}), int(data["partitions"]))


class CommitOutcome(Enum):
    """What :meth:`Sink.commit` did for a committable."""

    COMMITTED = "committed"
    ALREADY_COMMITTED = "already_committed"


class Sink(ABC, Generic[TxnT]):
    """The contract a backend implements. Subclass it, declare :attr:`capabilities`.

    A sink object is created on the driver, pickled and sent to executors, so it must be
    picklable and must open connections lazily (in :meth:`begin_transaction`, not
    ``__init__``). Methods run in different processes: never rely on state set by another
    method except through the transaction object (same task) or the committable (any process).
    """

    capabilities: Capabilities = Capabilities()
    """The sink's declared capabilities; override in subclasses (or per instance, when
    they depend on options such as a transaction mode)."""

    backend_name: ClassVar[str] = "custom"
    """The name the backend is registered under (for messages and metrics)."""

    # -- phase 1 (executor) -------------------------------------------------------------

    @abstractmethod
    def begin_transaction(self, ctx: TaskContext) -> TxnT:
        """Open a transaction for one task: connections, producers, staging files."""

    @abstractmethod
    def invoke(self, txn: TxnT, batch: pa.RecordBatch) -> None:
        """Write one Arrow record batch into the open transaction."""

    @abstractmethod
    def pre_commit(self, txn: TxnT) -> Committable:
        """Make the transaction's data durable and ready to commit; return its committable.

        After this returns, :meth:`commit` of the committable must be able to succeed, from
        this process or (with ``global_commit``) from any other.
        """

    @abstractmethod
    def abort(self, txn: TxnT) -> None:
        """Roll back an open (not yet pre-committed) transaction. Idempotent."""

    # -- phase 2 (driver, or task with commit_in_task) ------------------------------------

    @abstractmethod
    def commit(self, committables: Sequence[Committable]) -> list[CommitOutcome]:
        """Make the data of these committables visible; one outcome per committable.

        Idempotent: committing a committable again reports ``ALREADY_COMMITTED`` and writes
        nothing. Raise :class:`~twopc.errors.TransientSinkError` when a retry may help.
        """

    @abstractmethod
    def abort_prepared(self, committables: Sequence[Committable]) -> None:
        """Roll back prepared but uncommitted work. Idempotent; unknown work is ignored."""

    # -- recovery (driver) ------------------------------------------------------------------

    @abstractmethod
    def recover(self, sink_id: str) -> list[Committable]:
        """Prepared work for ``sink_id`` that is neither committed nor aborted.

        Covers every query id (earlier checkpoints too). The coordinator commits the
        committables whose batch was decided and aborts the others. Must be read-only:
        ``twopc status`` calls it too (through :meth:`inspect`).
        """

    def inspect(self, sink_id: str) -> Inspection:
        """What recovery would handle for ``sink_id``, read without side effects.

        Used by ``twopc status`` and ``twopc recover --dry-run``. It must not commit, abort,
        fence or delete anything. The default lists :meth:`recover`'s prepared work (which
        must itself be read-only); sinks with markers, sweepable leftovers or open
        transactions override it to show those too.
        """
        if not self.capabilities.recover:
            return Inspection(notes=(f"the {self.backend_name} sink shows no pending work",))
        return Inspection(
            pending=tuple(
                PendingWork.prepared(c, f"batch {c.batch_id} partition {c.partition}")
                for c in self.recover(sink_id)
            )
        )

    def sweep(self, sink_id: str, keep: Sequence[Committable] = ()) -> int:
        """Remove lingering, never-prepared work of ``sink_id`` (failed or speculative
        attempts), leaving ``keep`` alone. Returns how many items were removed."""
        return 0

    def is_committed(self, scope: RecoveryScope, batch_id: int) -> bool:
        """Whether the target system itself shows ``batch_id`` as committed (its markers).

        Sinks that commit on the driver can rely on the coordinator's commit log and keep
        the default. Sinks with markers (SQL marker rows, Kafka offsets) answer from them.
        """
        return False

    def naming(self) -> dict[str, Any]:
        """The options that decide the names of this sink's transactions (JSON-able).

        Recorded in the commit log with every batch (see :class:`Footprint`), so that a
        restart with other options can still clean up after an earlier run. The default,
        ``{}``, suits sinks whose :meth:`recover` and :meth:`sweep` find everything
        whatever the options were (listings rather than derived names).
        """
        return {}

    def sweep_lingering(self, sink_id: str, footprint: Footprint) -> int:
        """Abort work that a run with ``footprint`` may have left open, for ``sink_id``.

        Called at recovery, once per coordinator, for the footprint of each query's newest
        batch, including runs with other naming or more partitions than this one. Sinks
        whose transactions are found by name, not by listing (Kafka's transactional ids),
        implement it; it must not touch committed work. Returns how many it aborted, if
        known (else 0).
        """
        return 0

    def committed_partitions(
        self, scope: RecoveryScope, batch_id: int, footprint: Footprint
    ) -> set[int] | None:
        """Which partitions of ``batch_id`` the target shows as committed by a run with
        ``footprint`` (its markers), or ``None`` when the sink cannot tell.

        Only asked about ``commit_in_task`` sinks, when a batch that may be partly committed
        is replayed with another partition count, other naming or other input: a replay
        can then not be skipped partition by partition, and the coordinator refuses it if
        anything was committed.
        """
        return None

    def partition_columns(self) -> tuple[str, ...]:
        """Columns whose equal values must reach the same task (e.g. upsert keys).

        The Spark adapter hash-partitions the batch by them before phase 1; hash
        partitioning is deterministic, so a replay splits the batch the same way.
        """
        return ()

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
