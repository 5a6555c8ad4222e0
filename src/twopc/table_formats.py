"""Helpers for backends of table formats (the Delta Lake and Iceberg backends): the tasks
write data files, and the driver commits a batch's files to the table in one commit.

The records of task attempts, in ``<root>/<sink_id>/<query_id>/<batch>/`` (``root``: where
the backend keeps them, next to the table): ``<partition>-<attempt>.started`` while an
attempt writes, ``<partition>-<attempt>.json`` (its committable) once it prepared, and
``rewrite-<id>.started`` while an upsert's commit rewrites existing files. Recovery,
``twopc status`` and the sweep read them; the sink removes them once the batch is resolved::

    records = AttemptRecords(fs, f"{table_root}/_twopc", sink_id, backend="delta")
    records.mark_started(attempt)              # before the attempt's first data file
    records.mark_prepared(attempt, committable)
    records.sweep(keep, remove_attempt, sweep_rewrite)
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from twopc._contract.values import CommitOutcome, Committable, PendingWork, TaskContext, WorkKind
from twopc.errors import PermanentSinkError, TransientSinkError, UnsupportedFormatError
from twopc.storage import atomic_write, create_exclusive

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "PREPARED_SUFFIX",
    "REWRITE_PREFIX",
    "STARTED_SUFFIX",
    "AttemptId",
    "AttemptRecords",
    "GaveWay",
    "RecordEntry",
    "check_keys",
    "commit_by_batch",
    "key_mask",
    "parse_record_name",
]

STARTED_SUFFIX = ".started"
PREPARED_SUFFIX = ".json"
REWRITE_PREFIX = "rewrite-"


@dataclass(frozen=True)
class AttemptId:
    """One task attempt of one batch, as its records and directories name it."""

    query_id: str
    batch_id: int
    partition: int
    attempt: int

    @property
    def stem(self) -> str:
        return f"{self.partition}-{self.attempt}"

    @classmethod
    def of(cls, work: Committable | TaskContext) -> AttemptId:
        """The attempt a task context or a committable names."""
        return cls(work.query_id, work.batch_id, work.partition, work.attempt)


def parse_record_name(name: str) -> tuple[int, int, str] | None:
    """``(partition, attempt, suffix)`` of an attempt's record file name, else ``None``."""
    for suffix in (STARTED_SUFFIX, PREPARED_SUFFIX):
        if name.endswith(suffix):
            stem = name[: -len(suffix)]
            partition, sep, attempt = stem.partition("-")
            if sep and partition.isdigit() and attempt.isdigit():
                return int(partition), int(attempt), suffix
    return None


@dataclass(frozen=True)
class RecordEntry:
    """One record file found by a listing."""

    path: str
    query_id: str
    batch_id: int
    name: str

    @property
    def attempt(self) -> AttemptId | None:
        """The task attempt an attempt record names (``None`` for a rewrite's)."""
        parsed = parse_record_name(self.name)
        if parsed is None:
            return None
        return AttemptId(self.query_id, self.batch_id, parsed[0], parsed[1])

    @property
    def prepared(self) -> bool:
        return self.name.endswith(PREPARED_SUFFIX) and self.attempt is not None

    @property
    def started(self) -> bool:
        return self.name.endswith(STARTED_SUFFIX) and self.attempt is not None

    @property
    def rewrite_id(self) -> str | None:
        if self.name.startswith(REWRITE_PREFIX) and self.name.endswith(STARTED_SUFFIX):
            return self.name.removeprefix(REWRITE_PREFIX).removesuffix(STARTED_SUFFIX)
        return None


@dataclass(frozen=True)
class AttemptRecords:
    """The records of one sink id in one table, on an fsspec filesystem."""

    fs: Any
    root: str
    """The directory of every sink id's records (``<table>/_twopc``)."""
    sink_id: str
    backend: str
    """The backend's name, for its log messages (``"delta"``: logger ``twopc.delta``)."""
    prepare_makes_dir: bool = True
    """Whether :meth:`mark_prepared` creates the batch's directory (``False`` where the
    started record always made it)."""

    def _batch_dir(self, query_id: str, batch_id: int) -> str:
        return f"{self.root.rstrip('/')}/{self.sink_id}/{query_id}/{batch_id}"

    def path(self, attempt: AttemptId, suffix: str) -> str:
        return f"{self._batch_dir(attempt.query_id, attempt.batch_id)}/{attempt.stem}{suffix}"

    def rewrite_path(self, query_id: str, batch_id: int, rewrite_id: str) -> str:
        return f"{self._batch_dir(query_id, batch_id)}/{REWRITE_PREFIX}{rewrite_id}{STARTED_SUFFIX}"

    def _write(self, path: str, data: bytes) -> None:
        self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        atomic_write(self.fs, path, data)

    def mark_started(self, attempt: AttemptId) -> None:
        """Before the attempt's first data file: the sweep finds it if it never prepares."""
        self._write(self.path(attempt, STARTED_SUFFIX), b"")

    def mark_prepared(self, attempt: AttemptId, committable: Committable) -> None:
        """Record the prepared attempt's committable (never over another process's)."""
        fs = self.fs
        path = self.path(attempt, PREPARED_SUFFIX)
        data = committable.dumps().encode()
        if self.prepare_makes_dir:
            fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        if not (create_exclusive(fs, path, data) or fs.cat_file(path) == data):
            raise GaveWay(
                f"another process prepared the same task attempt ({path}) with other "
                "files; this one gives way (a retry runs as a new attempt)"
            )
        with contextlib.suppress(FileNotFoundError):
            fs.rm(self.path(attempt, STARTED_SUFFIX))

    def mark_rewrite(
        self, query_id: str, batch_id: int, rewrite_id: str, partition: int | None = None
    ) -> None:
        """Mark an upsert's rewrite until its commit's outcome is known; ``partition``: the
        first partition of the commit, kept in the record when given."""
        data = b"" if partition is None else json.dumps({"partition": partition}).encode()
        self._write(self.rewrite_path(query_id, batch_id, rewrite_id), data)

    def rewrite_partition(self, entry: RecordEntry) -> int:
        """The first partition of the commit a rewrite record belongs to (0 if unknown)."""
        try:
            return int(json.loads(self.fs.cat_file(entry.path))["partition"])
        except (ValueError, KeyError, TypeError, FileNotFoundError):
            return 0

    def forget(self, attempt: AttemptId) -> None:
        """Remove an attempt's records (its data files are not touched)."""
        for suffix in (PREPARED_SUFFIX, STARTED_SUFFIX):
            with contextlib.suppress(FileNotFoundError):
                self.fs.rm(self.path(attempt, suffix))

    def forget_committed(self, committables: Sequence[Committable]) -> None:
        """Remove the records of committed attempts (a failure is logged: the records of a
        committed batch are only clutter)."""
        for c in committables:
            attempt = AttemptId.of(c)
            try:
                self.forget(attempt)
            except OSError as exc:
                self._log.warning(
                    "twopc %s: cannot remove the record of %s: %s", self.backend, attempt, exc
                )

    def forget_path(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm(path)

    def forget_rewrite(self, query_id: str, batch_id: int, rewrite_id: str) -> None:
        self.forget_path(self.rewrite_path(query_id, batch_id, rewrite_id))

    def listing(self) -> list[RecordEntry]:
        """Every record of this sink id, oldest batch first."""
        fs = self.fs
        base = f"{self.root.rstrip('/')}/{self.sink_id}"
        with contextlib.suppress(AttributeError):
            fs.invalidate_cache()
        if not fs.exists(base):
            return []
        found = []
        for path in sorted(fs.glob(f"{base}/*/*/*")):
            query_id, batch, name = path.rsplit("/", 3)[1:]
            if batch.isdigit():
                found.append(RecordEntry(path, query_id, int(batch), name))
        return sorted(found, key=lambda e: (e.batch_id, e.path))

    def committable(self, entry: RecordEntry) -> Committable | None:
        """A prepared attempt's committable; ``None`` (logged) when it cannot be read."""
        try:
            return Committable.loads(self.fs.cat_file(entry.path).decode())
        except (UnsupportedFormatError, UnicodeDecodeError, FileNotFoundError) as exc:
            self._log.warning(
                "twopc %s: ignoring unreadable record %s: %s", self.backend, entry.path, exc
            )
            return None

    def prepared(self) -> list[Committable]:
        """The committables of every prepared attempt (what recovery finds)."""
        found = (self.committable(e) for e in self.listing() if e.prepared)
        return [c for c in found if c is not None]

    def sweep(
        self,
        keep: Sequence[Committable],
        remove_attempt: Callable[[AttemptId], None],
        sweep_rewrite: Callable[[RecordEntry], None],
    ) -> int:
        """Hand every attempt that started but never prepared (and is not in ``keep``) to
        ``remove_attempt``, and every rewrite record to ``sweep_rewrite``, in the listing's
        order; returns how many were handed."""
        entries = self.listing()
        kept = {AttemptId.of(c) for c in keep}
        prepared = {e.attempt for e in entries if e.prepared}
        removed = 0
        for entry in entries:
            if entry.rewrite_id is not None:
                sweep_rewrite(entry)
                removed += 1
                continue
            attempt = entry.attempt
            if not entry.started or attempt is None or attempt in prepared or attempt in kept:
                continue
            remove_attempt(attempt)
            removed += 1
        return removed

    def pending(self) -> list[PendingWork]:
        """Prepared attempts, attempts that never prepared and unfinished rewrites, for
        :meth:`Sink.inspect <twopc.protocol.Sink.inspect>`."""
        entries = self.listing()
        prepared = {e.attempt for e in entries if e.prepared}
        pending: list[PendingWork] = []
        for entry in entries:
            attempt = entry.attempt
            if entry.prepared:
                committable = self.committable(entry)
                if committable is not None:
                    pending.append(PendingWork.prepared(committable, entry.path))
            elif entry.rewrite_id is not None or (entry.started and attempt not in prepared):
                pending.append(
                    PendingWork(
                        kind=WorkKind.UNPREPARED,
                        ident=entry.path,
                        query_id=entry.query_id,
                        batch_id=entry.batch_id,
                        partition=attempt.partition if attempt else None,
                        attempt=attempt.attempt if attempt else None,
                        detail="data files of an attempt that did not prepare"
                        if attempt
                        else "files of an upsert rewrite whose commit did not finish",
                    )
                )
        return pending

    @property
    def _log(self) -> logging.Logger:
        return logging.getLogger(f"twopc.{self.backend}")


class GaveWay(TransientSinkError):
    """Another process prepared the same attempt first: this one leaves its files alone."""


def commit_by_batch(
    committables: Sequence[Committable],
    commit_batch: Callable[[Sequence[Committable]], list[CommitOutcome]],
) -> list[CommitOutcome]:
    """Commit committables batch by batch, oldest first, with ``commit_batch`` (one table
    commit per batch); the outcomes in the committables' order."""
    outcomes: dict[int, CommitOutcome] = {}
    batches: dict[tuple[str, str, int], list[int]] = {}
    for index, committable in enumerate(committables):
        key = (committable.sink_id, committable.query_id, committable.batch_id)
        batches.setdefault(key, []).append(index)
    for key in sorted(batches, key=lambda k: k[2]):
        indexes = batches[key]
        found = commit_batch([committables[i] for i in indexes])
        outcomes.update(zip(indexes, found, strict=True))
    return [outcomes[i] for i in range(len(committables))]


def check_keys(names: Sequence[str], rows: pa.RecordBatch, offset: int, table: str) -> None:
    """Every upsert key column exists and is set in every row; ``offset``: the task's row
    number of ``rows[0]``, ``table``: the table as messages name it (``"table db.t"``)."""
    import pyarrow.compute as pc

    for name in names:
        if name not in rows.schema.names:
            raise PermanentSinkError(f"key column {name!r} is not a column of {table}")
        column = rows.column(name)
        if column.null_count:
            first = pc.index(pc.is_null(column), True).as_py()
            raise PermanentSinkError(
                f"key column {name!r} is null in row {offset + first} of this task: upsert "
                "keys must be set"
            )


def key_mask(table: pa.Table, keys: pa.Table, *, row_column: str = "__twopc_row") -> pa.Array:
    """Which rows of ``table`` have a key (the columns of ``keys``) that ``keys`` holds;
    ``row_column``: the name of a helper column, not one of the keys."""
    import pyarrow as pa
    import pyarrow.compute as pc

    names = keys.column_names
    if len(names) == 1:
        return pc.is_in(table.column(names[0]), value_set=keys.column(0).combine_chunks())
    numbers = pa.array(range(table.num_rows), pa.int64())
    probe = table.select(names).append_column(row_column, numbers)
    joined = probe.join(keys, keys=names, join_type="inner", use_threads=False)
    return pc.is_in(probe.column(row_column), value_set=joined.column(row_column).combine_chunks())
