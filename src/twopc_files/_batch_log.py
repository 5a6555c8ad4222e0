"""A batch log in the layout of Spark's own file sink (``<output>/_spark_metadata``), so that
Spark's file sources read only the files of committed batches, each batch whole.

Spark's readers (``spark.read.parquet(path)``, a streaming file source) look for
``_spark_metadata`` in the directory they read; when it is there they read exactly the files
it lists and nothing else. Its layout: one file per log batch, ``<n>`` (ids from 0, no
gaps), holding the line ``v1`` and one JSON object per added file; every tenth batch
(``(n + 1) % 10 == 0``) is ``<n>.compact`` and holds every file added so far. The commit
appends one log batch after all the files of a twopc batch are visible, so a reader sees
all of a batch's files or none of them. Log batch ids count twopc's batches that wrote
files; they are not Spark's batch ids of the writing query (a new checkpoint starts those
at 0 again).

Readers need only the newest compact batch and the batches after it, so, as Spark's own
sink does, each compact batch deletes the log batches before the previous compact batch
(once older than :data:`CLEANUP_DELAY_SECONDS`, where the store says when they were
written): the log keeps 11 to 20 files however long the query runs (more for batches
younger than the delay), and finding the newest batch lists only those.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from twopc.storage import create_exclusive, is_local, join

__all__ = ["BATCH_LOG_DIR", "COMPACT_INTERVAL", "HADOOP_SCHEMES", "LoggedFile", "SparkBatchLog"]

BATCH_LOG_DIR = "_spark_metadata"
COMPACT_INTERVAL = 10
"""Spark's default ``spark.sql.streaming.fileSink.log.compactInterval``; its readers derive
the interval of an existing log from its compact files."""
CLEANUP_DELAY_SECONDS = 600.0
"""Spark's default ``spark.sql.streaming.fileSink.log.cleanupDelay`` (10 minutes): a log
file younger than this stays, for a reader that listed the log before it became old."""
_VERSION = "v1"
_log = logging.getLogger("twopc.files")
_BLOCK_SIZE = 32 * 1024 * 1024
_ATTEMPTS = 5


@dataclass(frozen=True)
class LoggedFile:
    """A file the log adds: its URI as Spark resolves it, and its size."""

    uri: str
    size: int

    def entry(self, modified_ms: int) -> dict[str, Any]:
        return {
            "path": self.uri,
            "size": self.size,
            "isDir": False,
            "modificationTime": modified_ms,
            "blockReplication": 1,
            "blockSize": _BLOCK_SIZE,
            "action": "add",
        }


class SparkBatchLog:
    """The ``_spark_metadata`` log under one output root. One writer per output."""

    def __init__(self, fs: Any, root: str) -> None:
        self.fs = fs
        self.directory = join(root, BATCH_LOG_DIR)

    def _path(self, batch: int) -> str:
        compact = (batch + 1) % COMPACT_INTERVAL == 0
        return join(self.directory, f"{batch}.compact" if compact else str(batch))

    def latest(self) -> int | None:
        """The newest log batch id, or ``None`` for an empty log."""
        if not self.fs.exists(self.directory):
            return None
        ids = []
        for path in self.fs.ls(self.directory, detail=False):
            name = str(path).rstrip("/").rsplit("/", 1)[-1].removesuffix(".compact")
            if name.isdigit():
                ids.append(int(name))
        return max(ids) if ids else None

    def read(self, batch: int) -> list[dict[str, Any]]:
        """The entries of one log batch (a compact batch: of every batch up to it)."""
        lines = self.fs.cat_file(self._path(batch)).decode().splitlines()
        if not lines or lines[0].strip() != _VERSION:
            raise ValueError(f"{self._path(batch)} is not a v1 file sink log")
        return [json.loads(line) for line in lines[1:] if line.strip()]

    def _since_compact(self, upto: int) -> list[dict[str, Any]]:
        """Every entry of log batches ``0..upto``: the last compact batch, then the rest."""
        start = (upto + 1) // COMPACT_INTERVAL * COMPACT_INTERVAL - 1
        entries = self.read(start) if start >= 0 else []
        for batch in range(start + 1, upto + 1):
            entries.extend(self.read(batch))
        return entries

    def append(self, files: Sequence[LoggedFile]) -> int | None:
        """Add one log batch listing ``files``; returns its id. Idempotent: when the newest
        log batch already lists them (a commit that is finished again after a crash), it
        writes nothing and returns that batch's id. An empty list adds nothing."""
        if not files:
            return None
        for _ in range(_ATTEMPTS):
            latest = self.latest()
            if latest is not None:
                listed = {entry["path"] for entry in self.read(latest)}
                if all(f.uri in listed for f in files):
                    return latest
            batch = 0 if latest is None else latest + 1
            now = int(time.time() * 1000)
            entries = [f.entry(now) for f in files]
            if (batch + 1) % COMPACT_INTERVAL == 0 and batch > 0:
                entries = self._since_compact(batch - 1) + entries
            lines = [_VERSION, *(json.dumps(e, separators=(",", ":")) for e in entries)]
            self.fs.makedirs(self.directory, exist_ok=True)
            if create_exclusive(self.fs, self._path(batch), "\n".join(lines).encode()):
                if (batch + 1) % COMPACT_INTERVAL == 0:
                    self._delete_expired(batch)
                return batch
            # another writer took this log batch id (or a listing lagged): look again
        raise OSError(
            f"{self.directory}: another writer keeps adding log batches; the batch log "
            "allows one writer per output path"
        )

    def _delete_expired(self, compact: int) -> None:
        """After compact batch ``compact``: delete the log batches before the compact batch
        one interval earlier, once older than :data:`CLEANUP_DELAY_SECONDS` (where the store
        reports a time). Best effort: the commit is done; a file left is retried at the
        next compact batch."""
        keep_from = compact - COMPACT_INTERVAL
        cutoff = time.time() - CLEANUP_DELAY_SECONDS
        try:
            listed = self.fs.ls(self.directory, detail=True)
            for info in listed:
                path = str(info["name"]).rstrip("/")
                name = path.rsplit("/", 1)[-1].removesuffix(".compact")
                if not name.isdigit() or int(name) >= keep_from:
                    continue
                written = _written_at(info)
                if written is None or written < cutoff:
                    self.fs.rm_file(path)
        except OSError as exc:
            _log.warning("could not delete old batch log files in %s: %s", self.directory, exc)


def _written_at(info: dict[str, Any]) -> float | None:
    """When a listed file was last written (seconds since the epoch), if the store says:
    ``mtime`` (local files, seconds or a datetime), ``LastModified`` (S3), ``updated`` or
    ``last_modified`` (other fsspec stores)."""
    for key in ("mtime", "LastModified", "last_modified", "updated"):
        value = info.get(key)
        if isinstance(value, int | float):
            return float(value)
        if isinstance(value, dt.datetime):
            return value.timestamp()
        if isinstance(value, str):
            try:
                return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return None


HADOOP_SCHEMES = {"s3": "s3a"}
"""fsspec protocol -> the scheme open-source Spark reads those files with (Hadoop's S3A
connector serves ``s3a://``; Hadoop has no ``s3://`` filesystem of its own)."""


def file_uri(fs: Any, path: str, scheme: str = "") -> str:
    """The URI Spark resolves for a file of ``fs`` at ``path``: ``file:`` for local files;
    otherwise ``scheme``, or by default the filesystem's protocol as Hadoop names it
    (:data:`HADOOP_SCHEMES`). Spark's reader matches the log's URIs against the path it was
    given, so they must carry the scheme the readers use."""
    if is_local(fs):
        return "file://" + path if path.startswith("/") else "file:///" + path
    protocol = fs.protocol[0] if isinstance(fs.protocol, (tuple, list)) else fs.protocol
    return f"{scheme or HADOOP_SCHEMES.get(protocol, protocol)}://{path}"
