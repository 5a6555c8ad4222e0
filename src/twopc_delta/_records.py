"""The sink's records of task attempts and upsert rewrites, in the table's hidden
``_twopc`` directory (:mod:`twopc_delta._layout` says where): written while a batch is in
flight, read by recovery, ``twopc status`` and the sweep, removed once the batch is
resolved."""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass

from twopc import Committable, TransientSinkError, UnsupportedFormatError
from twopc.storage import atomic_write, create_exclusive
from twopc_delta._layout import (
    PREPARED_SUFFIX,
    REWRITE_PREFIX,
    STARTED_SUFFIX,
    AttemptId,
    batch_record_dir,
    parse_record_name,
    sink_record_dir,
)
from twopc_delta._table import Place

__all__ = ["GaveWay", "RecordEntry", "Records"]

_log = logging.getLogger("twopc.delta")


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
class Records:
    """The records of one sink id in one table."""

    home: Place
    sink_id: str

    def path(self, attempt: AttemptId, suffix: str) -> str:
        directory = batch_record_dir(
            self.home.path, self.sink_id, attempt.query_id, attempt.batch_id
        )
        return f"{directory}/{attempt.stem}{suffix}"

    def rewrite_path(self, query_id: str, batch_id: int, rewrite_id: str) -> str:
        directory = batch_record_dir(self.home.path, self.sink_id, query_id, batch_id)
        return f"{directory}/{REWRITE_PREFIX}{rewrite_id}{STARTED_SUFFIX}"

    def _write(self, path: str, data: bytes) -> None:
        fs = self.home.fs
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        atomic_write(fs, path, data)

    def mark_started(self, attempt: AttemptId) -> None:
        """Before the attempt's first data file: the sweep finds it if it never prepares."""
        self._write(self.path(attempt, STARTED_SUFFIX), b"")

    def mark_prepared(self, attempt: AttemptId, committable: Committable) -> None:
        """Record the prepared attempt's committable (never over another process's)."""
        fs = self.home.fs
        path = self.path(attempt, PREPARED_SUFFIX)
        data = committable.dumps().encode()
        fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        if not (create_exclusive(fs, path, data) or fs.cat_file(path) == data):
            raise GaveWay(
                f"another process prepared the same task attempt ({path}) with other "
                "files; this one gives way (a retry runs as a new attempt)"
            )
        with contextlib.suppress(FileNotFoundError):
            fs.rm(self.path(attempt, STARTED_SUFFIX))

    def mark_rewrite(self, query_id: str, batch_id: int, rewrite_id: str) -> None:
        self._write(self.rewrite_path(query_id, batch_id, rewrite_id), b"")

    def forget(self, attempt: AttemptId) -> None:
        """Remove an attempt's records (its data files are not touched)."""
        for suffix in (PREPARED_SUFFIX, STARTED_SUFFIX):
            with contextlib.suppress(FileNotFoundError):
                self.home.fs.rm(self.path(attempt, suffix))

    def forget_path(self, path: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.home.fs.rm(path)

    def listing(self) -> list[RecordEntry]:
        """Every record of this sink id, oldest batch first."""
        fs = self.home.fs
        base = sink_record_dir(self.home.path, self.sink_id)
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
            return Committable.loads(self.home.fs.cat_file(entry.path).decode())
        except (UnsupportedFormatError, UnicodeDecodeError, FileNotFoundError) as exc:
            _log.warning("twopc delta: ignoring unreadable record %s: %s", entry.path, exc)
            return None


class GaveWay(TransientSinkError):
    """Another process prepared the same attempt first: this one leaves its files alone."""
