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

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, TypeVar

import pyarrow as pa

from twopc._contract import spark_role as _spark_role
from twopc._contract import values as _values
from twopc._contract.spark_role import SparkOutput, SparkWrite, WritesWithSpark
from twopc._contract.values import (
    COMMITTABLE_FORMAT_VERSION,
    CommitOutcome,
    Committable,
    Footprint,
    Inspection,
    Payload,
    PendingWork,
    RecoveryScope,
    StoredBatch,
    TargetMarker,
    TaskContext,
    WorkKind,
    WorkLimit,
    WorkTimeout,
)

__all__ = [
    "COMMITTABLE_FORMAT_VERSION",
    "CommitOutcome",
    "CommitsInTask",
    "CommitsOnDriver",
    "Committable",
    "Footprint",
    "Inspection",
    "KeepsMarkers",
    "KeepsSourceOffsets",
    "LastResource",
    "Payload",
    "PendingWork",
    "RecoveryScope",
    "Sink",
    "SparkOutput",
    "SparkWrite",
    "StoredBatch",
    "TargetMarker",
    "TaskContext",
    "TracksWriters",
    "WorkKind",
    "WorkLimit",
    "WorkTimeout",
    "WriterRecord",
    "WritesWithSpark",
]

TxnT = TypeVar("TxnT")


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

    def work_limits(self) -> Sequence[WorkLimit]:
        """The target's limits on work a batch holds at once (prepared transactions,
        connections), read from the target; the driver checks each batch's planned
        partition count against them before phase 1 and refuses a batch that cannot fit,
        with an error naming both numbers and the fixes.

        Called on the driver at a writer's first batch, after a failed batch and every few
        minutes; a failure to read them is logged and the batch goes on. Default: none.
        """
        return ()

    def forget_markers(self, sink_id: str, query_id: str, before_batch: int) -> int:
        """Optional: delete the target's markers of ``query_id``'s batches before
        ``before_batch``; returns how many went. The driver calls it every
        ``MARKER_PRUNE_EVERY`` batches with the oldest batch its commit log still keeps
        (``log_retention`` batches back): only a query's latest batch is ever replayed,
        and its markers, and the commit log's, stay. A sink whose markers grow with every
        batch (a row per partition and batch) implements it; one that overwrites them (a
        consumer group's offset) need not. Errors are logged, never fail the batch.
        Default: nothing."""
        return 0

    def work_timeout(self) -> WorkTimeout | None:
        """How old a transaction this sink leaves open may get before the target aborts
        it (Kafka's ``transaction.timeout.ms``); ``None``: the target aborts none. Asked in
        the task and on the driver: must not reach the target. The core warns when a
        batch's work passes 80 % of it before its commit. Default: ``None``."""
        return None

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

    def commit_units(self, committables: Sequence[Committable]) -> list[list[Committable]]:
        """How the driver splits a decided batch into :meth:`commit` calls, in order.

        Default: one call per committable, so that a crash between two of them is a crash
        point of its own (``between_commits``). A target that makes a whole batch visible in
        one atomic step (one Iceberg snapshot per batch) returns one unit with every
        committable; :meth:`commit` must then still accept any subset (recovery may hand it
        the committables a crash left) and stay idempotent per committable.
        """
        return [[committable] for committable in committables]

    def commits_concurrently(self) -> bool:
        """Optional: whether :meth:`commit` may run in several threads at once, each on
        other committables of the same batch.

        When it returns ``True``, the driver commits a decided batch's first unit alone
        (so ``between_commits`` still falls between two commits), then hands the other
        units to at most ``commit_parallelism`` threads (a writer option, default 8),
        each thread one :meth:`commit` call over a contiguous share of the units; recovery
        finishes a decided batch the same way. Default: ``False``, one unit after another.
        """
        return False

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


class KeepsSourceOffsets(ABC):
    """Optional role: the target stores each batch's source offsets
    (:attr:`TaskContext.source_offsets`, :attr:`Committable.source_offsets`) atomically with
    the batch's data, so that a query whose checkpoint is gone can start again where the
    committed output ends (:func:`twopc.starting_offsets`).

    Store them in the same transaction as the data: a task-commit sink with its marker
    (with :attr:`TaskContext.partitions`), a driver-commit sink in what its commit makes
    visible. Store nothing when they are ``None``. The core decides from what
    :meth:`stored_offsets` returns where a new query may start, and refuses a partly
    committed batch; the sink only reports what it holds.

    A driver-commit sink without this role is served by its commit log's decisions, which
    record the offsets too (the files sink keeps its commit log with its output).
    """

    @abstractmethod
    def stored_offsets(self, sink_id: str) -> list[StoredBatch]:
        """For every query of ``sink_id``, the batches that are the newest commit of at
        least one partition, with the offsets stored with them (read-only; ``[]`` when the
        target holds nothing of the sink id)."""


class LastResource(ABC):
    """Optional role of a :class:`CommitsInTask` sink that writes a batch as one
    transaction in one task (:attr:`Sink.single_task`): it may join a
    :class:`~twopc.SinkGroup` as its **last resource** (decision 41).

    The group runs it after every other member prepared and after recording, in its commit
    log, the work those members hold. Its one transaction (data and marker) then *is* the
    group's decision: committed, the driver commits every other member; not committed, it
    aborts them. A crash in between is resolved by :meth:`fence_and_check`. Kafka's
    ``atomic`` mode implements it.
    """

    def last_resource_refusal(self) -> str | None:
        """Why this instance cannot be a group's last resource (an option that splits a
        batch into several transactions), or ``None`` when it can. Default: ``None``."""
        return None

    @abstractmethod
    def fence_and_check(self, scope: RecoveryScope, batch_id: int) -> bool:
        """Make sure no transaction of ``scope`` still open can commit later (fence it),
        then say whether batch ``batch_id`` (or a later one) committed, by the marker.

        Called on the driver when the group's run was cut short between recording its work
        and learning the outcome of the last resource's transaction: a crash, or a failed
        task whose transaction may have committed anyway. Raise (a
        :class:`~twopc.TransientSinkError`) when the target cannot be asked: the group then
        decides nothing until it can."""


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


# The values are defined in a private module and shown as this module's own (their home for
# users, plugin authors, reprs and the reference docs).
for _module in (_values, _spark_role):
    for _name in _module.__all__:
        _value = getattr(_module, _name)
        if isinstance(_value, type):
            _value.__module__ = __name__
del _module, _name, _value
