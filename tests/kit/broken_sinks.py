"""Deliberately broken sinks: each breaks one guarantee the conformance kit checks.

``tests/kit/test_kit_catches_bugs.py`` runs the kit against every one of them and asserts the
kit reports the broken guarantee. Each is a small change to the files sink, the kind of bug a
plugin author could plausibly write, and each has a module-level factory ``(target) -> Sink``
so the kit can import it by name, also in the fresh processes its tests start.

The read side is the files sink's: committed rows are the Parquet files under the target
that ``pyarrow.dataset`` picks up (staging directories start with ``_`` and are hidden).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

import pyarrow as pa

from twopc import CommitError, CommitOutcome, Committable, TaskContext
from twopc_files import FilesSink
from twopc_files._layout import STAGING_DIR
from twopc_files.sink import FilesTransaction

__all__ = [
    "abort_prepared_commits",
    "abort_promotes",
    "commit_copies_again",
    "commit_trusts_memory",
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
        staging = str(committable.payload["staging"])
        marker = self._abs(f"{staging}/_committed")
        for entry in committable.payload["files"]:
            final = self._abs(entry["final"])
            stem, _, extension = final.rpartition(".")
            self.fs.copy(self._abs(entry["staged"]), f"{stem}-{uuid.uuid4().hex[:8]}.{extension}")
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
        ctx = txn.ctx
        return Committable(
            ctx.sink_id, ctx.query_id, ctx.batch_id, ctx.partition, ctx.attempt, {"buffer": key}
        )

    def abort(self, txn: BufferedTransaction) -> None:  # type: ignore[override]
        txn.batches.clear()

    def commit(self, committables: Sequence[Committable]) -> list[CommitOutcome]:
        outcomes = []
        for committable in committables:
            with _BUFFERS_LOCK:
                batches = _BUFFERS.pop(str(committable.payload.get("buffer")), None)
            if batches is None:
                raise CommitError(
                    "no buffered rows for this committable in this process",
                    sink_id=committable.sink_id,
                    batch_id=committable.batch_id,
                    partition=committable.partition,
                )
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
                _BUFFERS.pop(str(committable.payload.get("buffer")), None)

    def recover(self, sink_id: str) -> list[Committable]:
        return []


def pre_commit_in_memory(target: str) -> FilesSink:
    return PreCommitInMemorySink(target)
