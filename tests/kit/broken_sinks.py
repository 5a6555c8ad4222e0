"""Deliberately broken sinks: each breaks one guarantee the conformance kit checks.

``tests/kit/test_kit_catches_bugs.py`` runs the kit against every one of them and asserts the
kit reports the broken guarantee. Each is a small change to the files sink, the kind of bug a
plugin author could plausibly write, and each has a module-level factory ``(target) -> Sink``
so the kit can import it by name, also in the fresh processes its tests start.

The read side of (a) to (e), (i), (j) and (m) to (p) is the files sink's: committed rows are
the Parquet files under the target that ``pyarrow.dataset`` picks up (staging directories
start with ``_`` and are hidden). (f) to (h) and (k) commit in the task, (l), (q) and the
second sink of (n) on the driver, over the in-memory store of ``twopc.testing``.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import os
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from twopc import (
    CommitError,
    CommitOutcome,
    Committable,
    Footprint,
    Payload,
    PermanentSinkError,
    RecoveryScope,
    TaskContext,
    TransientSinkError,
)
from twopc.testing import MemoryDriverSink, MemoryTaskSink
from twopc.testing._memory import MemoryPayload, MemoryTransaction
from twopc_files import FilesPayload, FilesSink
from twopc_files._layout import STAGING_DIR
from twopc_files.sink import FilesTransaction

__all__ = [
    "abort_prepared_commits",
    "abort_prepared_does_nothing",
    "abort_promotes",
    "abort_reads_the_payload",
    "attempt_in_int32_column",
    "attempt_wraps_at_32_bits",
    "bad_records_retried",
    "commit_copies_again",
    "commit_trusts_memory",
    "committable_not_json",
    "holds_its_target",
    "in_task_visible_early",
    "marker_ignored",
    "markers_blind",
    "partial_row_group_fails",
    "payload_not_json",
    "payload_version_unchecked",
    "pre_commit_in_memory",
    "recover_deletes_staging",
    "visible_before_commit",
]


# -- (a) commit is not idempotent ---------------------------------------------------------


class CommitCopiesAgainSink(FilesSink):
    """Commit *copies* staged files to fresh, unique names and keeps the staging area.

    The outcome it reports looks right (``ALREADY_COMMITTED`` the second time, decided by a
    marker file), but the marker is checked *after* the copy: every commit adds the rows
    again. Only reading the target back shows the duplicates.
    """

    def _promote(self, committable: Committable) -> CommitOutcome:
        payload = FilesPayload.of(committable)
        marker = self._abs(f"{payload.staging}/_committed")
        for entry in payload.files:
            final = self._abs(entry.final)
            stem, _, extension = final.rpartition(".")
            self.fs.copy(self._abs(entry.staged), f"{stem}-{uuid.uuid4().hex[:8]}.{extension}")
        if self.fs.exists(marker):  # too late: the copy above already ran
            return CommitOutcome.ALREADY_COMMITTED
        self.fs.pipe_file(marker, b"")
        return CommitOutcome.COMMITTED


def commit_copies_again(target: str) -> FilesSink:
    return CommitCopiesAgainSink(target)


# -- (b) data visible before commit -------------------------------------------------------


class VisibleBeforeCommitSink(FilesSink):
    """pre_commit promotes the files right away ("commit early, it is faster")."""

    def pre_commit(self, txn: FilesTransaction) -> Committable:
        committable = super().pre_commit(txn)
        self._promote(committable)
        return committable


def visible_before_commit(target: str) -> FilesSink:
    return VisibleBeforeCommitSink(target)


# -- (c) abort leaves data ----------------------------------------------------------------


class AbortPromotesSink(FilesSink):
    """abort of an open transaction "flushes what it has": it finishes and promotes it."""

    def abort(self, txn: FilesTransaction) -> None:
        self.commit([self.pre_commit(txn)])


def abort_promotes(target: str) -> FilesSink:
    return AbortPromotesSink(target)


class AbortPreparedCommitsSink(FilesSink):
    """abort_prepared rolls *forward*: it commits the prepared work it was told to drop."""

    def abort_prepared(self, committables: Sequence[Committable]) -> None:
        self.commit(committables)


def abort_prepared_commits(target: str) -> FilesSink:
    return AbortPreparedCommitsSink(target)


# -- (d) recovery drops work --------------------------------------------------------------


class RecoverDeletesStagingSink(FilesSink):
    """recover() "cleans up" the staging area instead of listing it.

    Undecided work disappears without an abort, so the coordinator cannot tell what a crash
    left; decided work the decision log does not cover any more (the log was pruned, or the
    crash came between a commit and its clean-up) would be lost for good.
    """

    def recover(self, sink_id: str) -> list[Committable]:
        self._remove(f"{STAGING_DIR}/{sink_id}")
        return []


def recover_deletes_staging(target: str) -> FilesSink:
    return RecoverDeletesStagingSink(target)


class CommitTrustsMemorySink(FilesSink):
    """Commit decides "already committed" from what *this process* prepared.

    Work prepared by another process (the normal case for a driver that recovers after a
    restart) is taken for finished and silently dropped: recovery commits nothing.
    """

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self._prepared: set[tuple[str, int, int, int]] = set()

    @staticmethod
    def _key(committable: Committable) -> tuple[str, int, int, int]:
        return (
            committable.query_id,
            committable.batch_id,
            committable.partition,
            committable.attempt,
        )

    def pre_commit(self, txn: FilesTransaction) -> Committable:
        committable = super().pre_commit(txn)
        self._prepared.add(self._key(committable))
        return committable

    def _promote(self, committable: Committable) -> CommitOutcome:
        if self._key(committable) not in self._prepared:
            return CommitOutcome.ALREADY_COMMITTED
        self._prepared.discard(self._key(committable))
        return super()._promote(committable)


def commit_trusts_memory(target: str) -> FilesSink:
    return CommitTrustsMemorySink(target)


# -- (e) pre_commit is not durable --------------------------------------------------------

# Rows "prepared" by pre_commit, kept in this process only. A commit in another process (the
# driver, or a driver restarted after a crash) finds nothing here.
_BUFFERS: dict[str, list[pa.RecordBatch]] = {}
_BUFFERS_LOCK = threading.Lock()


@dataclass(frozen=True)
class _Buffer(Payload):
    key: str


@dataclass
class BufferedTransaction:
    ctx: TaskContext
    batches: list[pa.RecordBatch] = field(default_factory=list)


class PreCommitInMemorySink(FilesSink):
    """Rows stay in process memory until commit, which only then writes the files."""

    def begin_transaction(self, ctx: TaskContext) -> BufferedTransaction:  # type: ignore[override]
        return BufferedTransaction(ctx)

    def invoke(self, txn: BufferedTransaction, batch: pa.RecordBatch) -> None:  # type: ignore[override]
        txn.batches.append(batch)

    def pre_commit(self, txn: BufferedTransaction) -> Committable:  # type: ignore[override]
        key = uuid.uuid4().hex
        with _BUFFERS_LOCK:
            _BUFFERS[key] = list(txn.batches)
        return Committable.for_task(txn.ctx, _Buffer(key))

    def abort(self, txn: BufferedTransaction) -> None:  # type: ignore[override]
        txn.batches.clear()

    def commit(self, committables: Sequence[Committable]) -> list[CommitOutcome]:
        outcomes = []
        for committable in committables:
            with _BUFFERS_LOCK:
                batches = _BUFFERS.pop(_Buffer.of(committable).key, None)
            if batches is None:
                raise CommitError("no buffered rows for this committable in this process")
            ctx = TaskContext(
                committable.sink_id,
                committable.query_id,
                committable.batch_id,
                committable.partition,
                committable.attempt,
            )
            txn = super().begin_transaction(ctx)
            for batch in batches:
                super().invoke(txn, batch)
            outcomes.extend(super().commit([super().pre_commit(txn)]))
        return outcomes

    def abort_prepared(self, committables: Sequence[Committable]) -> None:
        with _BUFFERS_LOCK:
            for committable in committables:
                _BUFFERS.pop(_Buffer.of(committable).key, None)

    def recover(self, sink_id: str) -> list[Committable]:
        return []


def pre_commit_in_memory(target: str) -> FilesSink:
    return PreCommitInMemorySink(target)


# -- (f), (g), (h): sinks that commit in the task -----------------------------------------------
# Small changes to the in-memory reference sink of the same role (its target is a store in
# this process, named by the target string).


class MarkerIgnoredSink(MemoryTaskSink):
    """Never reads its marker: a replayed task writes its rows again."""

    def begin_transaction(self, ctx: TaskContext) -> MemoryTransaction:
        return MemoryTransaction(ctx)


def marker_ignored(target: str) -> MemoryTaskSink:
    return MarkerIgnoredSink(target)


class VisibleEarlySink(MemoryTaskSink):
    """Commits in pre_commit ("the task commits anyway"): readers see rows before the task
    says they are committed, and an abort after pre_commit cannot take them back."""

    def pre_commit(self, txn: MemoryTransaction) -> Committable:
        committable = super().pre_commit(txn)
        super().commit_in_task(txn)
        txn.skip = True
        return committable


def in_task_visible_early(target: str) -> MemoryTaskSink:
    return VisibleEarlySink(target)


class MarkersBlindSink(MemoryTaskSink):
    """Keeps markers but cannot read them back: a reshaped replay would go unnoticed."""

    def committed_partitions(
        self, scope: RecoveryScope, batch_id: int, footprint: Footprint
    ) -> set[int] | None:
        return set()


def markers_blind(target: str) -> MemoryTaskSink:
    return MarkersBlindSink(target)


# -- (i) the payload's version is never checked -------------------------------------------


class PayloadVersionUncheckedSink(FilesSink):
    """commit reads every payload as the version it writes itself (``committable.payload``
    taken as it is, not through ``FilesPayload.of``): a payload another version of the sink
    wrote is misread, never refused."""

    def _promote(self, committable: Committable) -> CommitOutcome:
        return super()._promote(dataclasses.replace(committable, version=FilesPayload.version))


def payload_version_unchecked(target: str) -> FilesSink:
    return PayloadVersionUncheckedSink(target)


# -- (j) abort_prepared does nothing, and prepared work is invisible -----------------------


class AbortPreparedDoesNothingSink(FilesSink):
    """abort_prepared does nothing ("staged files are hidden from readers anyway"): what
    readers see cannot tell, but the prepared work stays, and recovery keeps finding it."""

    def abort_prepared(self, committables: Sequence[Committable]) -> None:
        return None


def abort_prepared_does_nothing(target: str) -> FilesSink:
    return AbortPreparedDoesNothingSink(target)


# -- (k), (l): attempt ids kept in 32 bits -------------------------------------------------


class AttemptInInt32ColumnSink(MemoryTaskSink):
    """Records, with each marker, the attempt that committed it in a 32-bit column (an
    ``INTEGER`` column of a SQL target): Spark's task attempt ids are longs, and the insert
    fails once they pass 2**31."""

    def commit_in_task(self, txn: MemoryTransaction) -> CommitOutcome:
        if not txn.skip:
            pa.array([txn.ctx.attempt], pa.int32())  # the marker row's attempt column
        return super().commit_in_task(txn)


def attempt_in_int32_column(target: str) -> MemoryTaskSink:
    return AttemptInInt32ColumnSink(target)


class AttemptWrapsSink(MemoryDriverSink):
    """Keeps the prepared work's committable with its attempt in a 32-bit column that wraps
    silently: recover() lists the work under another attempt than the decision names, so
    recovery aborts decided work."""

    def pre_commit(self, txn: MemoryTransaction) -> Committable:
        committable = super().pre_commit(txn)
        key = MemoryPayload.of(committable).key
        stored, ids = self.store.prepared[key]
        wrapped = pa.array([stored.attempt], pa.int64()).cast(pa.int32(), safe=False)[0].as_py()
        self.store.prepared[key] = (dataclasses.replace(stored, attempt=wrapped), ids)
        return committable


def attempt_wraps_at_32_bits(target: str) -> MemoryDriverSink:
    return AttemptWrapsSink(target)


# -- (m) abort_prepared needs a payload it can read ---------------------------------------


class AbortReadsThePayloadSink(FilesSink):
    """abort_prepared finds the staging directory through the payload: a payload of a
    version it cannot read (a newer sink prepared the work) makes it raise, and recovery
    fails at every start."""

    def abort_prepared(self, committables: Sequence[Committable]) -> None:
        for committable in committables:
            self._remove(FilesPayload.of(committable).staging)


def abort_reads_the_payload(target: str) -> FilesSink:
    return AbortReadsThePayloadSink(target)


# -- (n) committables that are not JSON ---------------------------------------------------


class CommittableNotJsonSink(FilesSink):
    """Adds a checksum of the staged files to the payload as raw bytes (built by hand, not
    through a Payload): the committable cannot be written into a task report or the commit
    log, which are JSON."""

    def pre_commit(self, txn: FilesTransaction) -> Committable:
        committable = super().pre_commit(txn)
        digest = hashlib.sha256(committable.dumps().encode()).digest()
        return dataclasses.replace(committable, payload={**committable.payload, "sha256": digest})


def committable_not_json(target: str) -> FilesSink:
    return CommittableNotJsonSink(target)


@dataclass(frozen=True)
class _Fingerprinted(Payload):
    key: str
    rows: int
    fingerprint: bytes  # not JSON-able


class PayloadNotJsonSink(MemoryDriverSink):
    """The same mistake in a Payload: a field of raw bytes. ``Committable.for_task`` cannot
    make a committable of it, so pre_commit raises."""

    def pre_commit(self, txn: MemoryTransaction) -> Committable:
        prepared = super().pre_commit(txn)
        stored = MemoryPayload.of(prepared)
        digest = hashlib.sha256(repr(txn.ids).encode()).digest()
        return Committable.for_task(txn.ctx, _Fingerprinted(stored.key, stored.rows, digest))


def payload_not_json(target: str) -> MemoryDriverSink:
    return PayloadNotJsonSink(target)


# -- (o) a target only one process can open -----------------------------------------------

_HELD: dict[str, int] = {}


class HoldsItsTargetSink(FilesSink):
    """Opens its target in ``__init__`` and holds it, exclusively, for the life of the
    process (as an embedded database holds its file): a sink in another process, the one
    that prepares or the driver that commits after a crash, cannot open it."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        if path in _HELD:
            return
        os.makedirs(path, exist_ok=True)
        handle = os.open(os.path.join(path, ".lock"), os.O_CREAT | os.O_RDWR)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(handle)
            raise TransientSinkError(f"{path} is held open by another process") from None
        _HELD[path] = handle


def holds_its_target(target: str) -> FilesSink:
    return HoldsItsTargetSink(target)


# -- (p), (q): bad records, and good ones that fail --------------------------------------------


class BadRecordsRetriedSink(FilesSink):
    """Reports input it can never write as transient ("the target may take it later"):
    the task is retried in vain, and the batch's error does not say its records are bad."""

    def invoke(self, txn: FilesTransaction, batch: pa.RecordBatch) -> None:
        try:
            super().invoke(txn, batch)
        except PermanentSinkError as exc:
            raise TransientSinkError(f"write failed: {exc.cause_message}") from exc


def bad_records_retried(target: str) -> FilesSink:
    return BadRecordsRetriedSink(target)


class PartialRowGroupFailsSink(MemoryDriverSink):
    """Writes rows in groups of 32 and fails a task that ends with a partial group: good
    input fails, for another reason than bad records."""

    def pre_commit(self, txn: MemoryTransaction) -> Committable:
        if len(txn.ids) % 32:
            raise ValueError(f"a row group holds 32 rows, the last one has {len(txn.ids) % 32}")
        return super().pre_commit(txn)


def partial_row_group_fails(target: str) -> MemoryDriverSink:
    return PartialRowGroupFailsSink(target)
