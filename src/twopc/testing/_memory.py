"""Reference sinks that keep everything in memory: one per commit role.

They are the smallest complete implementations of the contract, for reading and for tests
of code around a sink (the core's own unit tests use them). State lives in a
:class:`MemoryStore` looked up by name in this process (:func:`forget_store` drops it), so
they work with engines that run tasks in the same process
(``twopc.local.foreach_batch(..., processes=False)``), not across processes.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar

import pyarrow as pa

from twopc.errors import CommitError, PermanentSinkError, UnsupportedFormatError
from twopc.progress import SourceOffsets
from twopc.protocol import (
    CommitOutcome,
    CommitsInTask,
    CommitsOnDriver,
    Committable,
    Footprint,
    Inspection,
    KeepsSourceOffsets,
    LastResource,
    Payload,
    PendingWork,
    RecoveryScope,
    Sink,
    StoredBatch,
    TargetMarker,
    TaskContext,
)

__all__ = [
    "MemoryDriverSink",
    "MemoryLastResource",
    "MemoryPayload",
    "MemoryStore",
    "MemoryTaskSink",
    "forget_store",
    "memory_store",
]

_STORES: dict[str, MemoryStore] = {}
_LOCK = threading.RLock()


@dataclass
class MemoryStore:
    """The target of the memory sinks: visible rows, prepared rows, markers."""

    visible: list[int] = field(default_factory=list)
    prepared: dict[str, tuple[Committable, list[int]]] = field(default_factory=dict)
    committed: set[str] = field(default_factory=set)
    markers: dict[tuple[str, str, int], int] = field(default_factory=dict)
    """(sink id, query id, partition) -> newest committed batch."""
    epochs: dict[str, int] = field(default_factory=dict)
    """sink id -> its transactions' epoch (:class:`MemoryLastResource`): fencing bumps it,
    and a transaction of an older epoch cannot commit."""
    offsets: dict[tuple[str, str, int], tuple[int, int, SourceOffsets | None, float]] = field(
        default_factory=dict
    )
    """(sink id, query id, partition) -> (batch, the batch's partition count, its source
    offsets, commit time), written with the marker."""

    def clear(self) -> None:
        self.visible.clear()
        self.prepared.clear()
        self.committed.clear()
        self.markers.clear()
        self.epochs.clear()
        self.offsets.clear()


def memory_store(name: str) -> MemoryStore:
    """The store called ``name`` in this process, created empty on first use. Call
    :func:`forget_store` when done with it: stores live as long as the process."""
    with _LOCK:
        return _STORES.setdefault(name, MemoryStore())


def forget_store(name: str) -> None:
    """Drop the store called ``name`` (no error if there is none): the next
    :func:`memory_store` of that name starts empty. A test's target clean-up, e.g. a
    fixture that yields a fresh store name and forgets it afterwards."""
    with _LOCK:
        _STORES.pop(name, None)


@dataclass(frozen=True)
class MemoryPayload(Payload):
    """Where a task's rows wait for the commit (the store's ``prepared`` key)."""

    version: ClassVar[int] = 1

    key: str
    rows: int


@dataclass
class MemoryTransaction:
    ctx: TaskContext
    ids: list[int] = field(default_factory=list)
    skip: bool = False
    epoch: int = 0


_KEYS = itertools.count()


class _MemorySink(Sink[MemoryTransaction]):
    """The task side both memory sinks share: collect the ``id`` column of each batch."""

    backend_name = "memory"

    def __init__(self, store: str = "default") -> None:
        self.store_name = store

    @property
    def store(self) -> MemoryStore:
        return memory_store(self.store_name)

    def begin_transaction(self, ctx: TaskContext) -> MemoryTransaction:
        return MemoryTransaction(ctx)

    def invoke(self, txn: MemoryTransaction, batch: pa.RecordBatch) -> None:
        if "id" not in batch.schema.names:
            raise PermanentSinkError(f"no id column (columns: {batch.schema.names})")
        txn.ids.extend(int(i) for i in batch.column("id").to_pylist())

    def abort(self, txn: MemoryTransaction) -> None:
        txn.ids.clear()

    def describe(self) -> str:
        return f"memory store {self.store_name!r}"


class MemoryDriverSink(_MemorySink, CommitsOnDriver):
    """Prepared rows wait in the store until the driver commits them."""

    def pre_commit(self, txn: MemoryTransaction) -> Committable:
        key = f"{txn.ctx.query_id}/{txn.ctx.batch_id}/{txn.ctx.partition}/{next(_KEYS)}"
        committable = Committable.for_task(txn.ctx, MemoryPayload(key, len(txn.ids)))
        with _LOCK:
            self.store.prepared[key] = (committable, list(txn.ids))
        return committable

    def commit(self, committables: Sequence[Committable]) -> list[CommitOutcome]:
        outcomes = []
        with _LOCK:
            for committable in committables:
                key = MemoryPayload.of(committable).key
                if key in self.store.committed:
                    outcomes.append(CommitOutcome.ALREADY_COMMITTED)
                    continue
                if key not in self.store.prepared:
                    raise CommitError(f"prepared rows {key} are gone")
                _, ids = self.store.prepared.pop(key)
                self.store.visible.extend(ids)
                self.store.committed.add(key)
                outcomes.append(CommitOutcome.COMMITTED)
        return outcomes

    def abort_prepared(self, committables: Sequence[Committable]) -> None:
        with _LOCK:
            for committable in committables:
                for key in self._keys_of(committable):
                    self.store.prepared.pop(key, None)

    def _keys_of(self, committable: Committable) -> list[str]:
        """Where the work of ``committable`` waits: the payload says, and when this version
        cannot read the payload (a newer one wrote it), the task's ids find it."""
        try:
            return [MemoryPayload.of(committable).key]
        except UnsupportedFormatError:
            task = _task_of(committable)
            return [key for key, (c, _) in self.store.prepared.items() if _task_of(c) == task]

    def recover(self, sink_id: str) -> list[Committable]:
        with _LOCK:
            return [c for c, _ in self.store.prepared.values() if c.sink_id == sink_id]

    def inspect(self, sink_id: str) -> Inspection:
        return Inspection(
            pending=tuple(
                PendingWork.prepared(c, MemoryPayload.of(c).key) for c in self.recover(sink_id)
            )
        )


def _task_of(committable: Committable) -> tuple[str, str, int, int, int]:
    c = committable
    return (c.sink_id, c.query_id, c.batch_id, c.partition, c.attempt)


class MemoryTaskSink(_MemorySink, CommitsInTask[MemoryTransaction], KeepsSourceOffsets):
    """Each task appends its rows and its marker, with the batch's source offsets, in one
    step; a task whose marker shows its batch writes nothing."""

    def begin_transaction(self, ctx: TaskContext) -> MemoryTransaction:
        with _LOCK:
            newest = self.store.markers.get((ctx.sink_id, ctx.query_id, ctx.partition), -1)
        return MemoryTransaction(ctx, skip=newest >= ctx.batch_id)

    def pre_commit(self, txn: MemoryTransaction) -> Committable:
        return Committable.for_task(txn.ctx, MemoryPayload("", 0 if txn.skip else len(txn.ids)))

    def commit_in_task(self, txn: MemoryTransaction) -> CommitOutcome:
        if txn.skip:
            return CommitOutcome.ALREADY_COMMITTED
        ctx = txn.ctx
        with _LOCK:
            self.store.visible.extend(txn.ids)
            key = (ctx.sink_id, ctx.query_id, ctx.partition)
            self.store.markers[key] = ctx.batch_id
            self.store.offsets[key] = (
                ctx.batch_id,
                ctx.partitions,
                ctx.source_offsets,
                time.time(),
            )
        txn.ids = []
        return CommitOutcome.COMMITTED

    def stored_offsets(self, sink_id: str) -> list[StoredBatch]:
        with _LOCK:
            found = [(k, v) for k, v in self.store.offsets.items() if k[0] == sink_id]
        batches: dict[tuple[str, int], StoredBatch] = {}
        for (_, query_id, partition), (batch_id, count, offsets, at) in found:
            known = batches.get((query_id, batch_id))
            batches[(query_id, batch_id)] = StoredBatch(
                query_id,
                batch_id,
                frozenset({partition} | (known.partitions if known else set())),
                count,
                offsets,
                max(at, (known.committed_at or 0.0) if known else 0.0),
            )
        return list(batches.values())

    def committed_partitions(
        self, scope: RecoveryScope, batch_id: int, footprint: Footprint
    ) -> set[int] | None:
        with _LOCK:
            return {
                partition
                for (sink_id, query_id, partition), batch in self.store.markers.items()
                if (sink_id, query_id) == (scope.sink_id, scope.query_id) and batch >= batch_id
            }

    def inspect(self, sink_id: str) -> Inspection:
        with _LOCK:
            markers = tuple(
                TargetMarker(query_id, partition, batch)
                for (owner, query_id, partition), batch in self.store.markers.items()
                if owner == sink_id
            )
        return Inspection(markers=markers)


class MemoryLastResource(MemoryTaskSink, LastResource):
    """An in-task sink that writes each batch in one task and can be a
    :class:`~twopc.SinkGroup`'s last resource: its transactions carry an epoch, fencing
    bumps it (like Kafka's ``init_transactions``), and a fenced transaction cannot commit."""

    single_task = True

    def begin_transaction(self, ctx: TaskContext) -> MemoryTransaction:
        txn = super().begin_transaction(ctx)
        with _LOCK:
            txn.epoch = self.store.epochs.get(ctx.sink_id, 0)
        return txn

    def commit_in_task(self, txn: MemoryTransaction) -> CommitOutcome:
        with _LOCK:
            if not txn.skip and self.store.epochs.get(txn.ctx.sink_id, 0) != txn.epoch:
                raise PermanentSinkError(
                    f"transaction of batch {txn.ctx.batch_id} fenced (epoch {txn.epoch})"
                )
            return super().commit_in_task(txn)

    def fence_and_check(self, scope: RecoveryScope, batch_id: int) -> bool:
        with _LOCK:
            self.store.epochs[scope.sink_id] = self.store.epochs.get(scope.sink_id, 0) + 1
            return self.store.markers.get((scope.sink_id, scope.query_id, 0), -1) >= batch_id
