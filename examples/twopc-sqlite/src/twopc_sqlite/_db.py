"""SQLite helpers both sinks share: a connection per operation, short write transactions,
and the checks of the target table's two columns."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa
from twopc import ConfigurationError, SinkError, TransientSinkError

__all__ = ["check_options", "connect", "rows", "schema_problem", "sink_error", "write"]

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RESERVED_PREFIX = "twopc_"


def check_options(backend: str, path: str, table: str) -> None:
    """A database path, and a target table that is a plain identifier (it is put into SQL
    text, quoted) and not one of the sinks' own tables."""
    if not isinstance(path, str) or not path:
        raise ConfigurationError(f"{backend} sink: path must be a non-empty string")
    if not _IDENTIFIER.fullmatch(table) or table.lower().startswith(_RESERVED_PREFIX):
        raise ConfigurationError(
            f"{backend} sink: table must be a plain identifier not starting with "
            f"{_RESERVED_PREFIX!r}, not {table!r}"
        )


@contextmanager
def connect(path: str, timeout: float) -> Iterator[sqlite3.Connection]:
    """A connection in WAL mode with ``synchronous=FULL``, closed after the block. The sinks
    open one per operation: they are pickled to executors, and a SQLite connection must not
    cross a fork."""
    try:
        connection = sqlite3.connect(path, timeout=timeout, isolation_level=None)
    except sqlite3.Error as exc:  # a missing directory, a file that is not a database
        raise SinkError(f"sqlite sink: cannot open {path}: {exc}") from exc
    try:
        connection.execute("PRAGMA synchronous=FULL")
        mode = connection.execute("PRAGMA journal_mode").fetchone()[0]
        if str(mode).lower() != "wal":
            connection.execute("PRAGMA journal_mode=WAL")
        yield connection
    finally:
        connection.close()


@contextmanager
def write(connection: sqlite3.Connection) -> Iterator[None]:
    """A short write transaction: takes the write lock up front (waiting up to the busy
    timeout), commits on success, rolls back on any error."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")


def schema_problem(schema: pa.Schema) -> str | None:
    names = schema.names
    extra = [n for n in names if n not in ("id", "payload")]
    if extra:
        return f"unknown column(s) {extra}; the table has id and payload"
    if "id" not in names:
        return f"no id column (columns: {names})"
    id_type = schema.field("id").type
    if not pa.types.is_integer(id_type) or id_type == pa.uint64():
        return f"column id must be a signed integer or smaller unsigned integer, not {id_type}"
    if "payload" in names:
        payload_type = schema.field("payload").type
        if not (
            pa.types.is_string(payload_type)
            or pa.types.is_large_string(payload_type)
            or pa.types.is_null(payload_type)
        ):
            return f"column payload must be a string, not {payload_type}"
    return None


def rows(batch: pa.RecordBatch) -> Iterator[tuple[Any, Any]]:
    """``(id, payload)`` of every row (payload ``None`` when the batch has no such column)."""
    ids = batch.column("id").to_pylist()
    if "payload" in batch.schema.names:
        payloads = batch.column("payload").to_pylist()
    else:
        payloads = [None] * len(ids)
    yield from zip(ids, payloads, strict=True)


def sink_error(exc: sqlite3.Error) -> SinkError:
    """A locked database (another writer past the timeout) may clear up: retryable. twopc
    adds the sink, batch and partition where the error leaves the sink."""
    error_type = TransientSinkError if isinstance(exc, sqlite3.OperationalError) else SinkError
    return error_type(f"sqlite error: {exc}")
