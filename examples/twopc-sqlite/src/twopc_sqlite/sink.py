"""An exactly-once twopc sink for a SQLite database file.

How the two phases map onto SQLite:

* ``begin_transaction`` / ``invoke`` (each task): the task collects its Arrow batches, after
  checking their columns. Nothing touches the database yet, so a task that dies before
  ``pre_commit`` leaves nothing behind and there is nothing to sweep.
* ``pre_commit`` (each task): one committed SQLite transaction writes the task's rows into
  the staging table ``twopc_staging`` under a fresh transaction id and records the
  committable in ``twopc_prepared``. From then on any process can commit it.
* ``commit`` (the driver): one SQLite transaction per committable copies its staged rows
  into the target table, inserts a marker row (the transaction id) into ``twopc_markers``
  and deletes the staging rows. A committable whose marker exists is reported as already
  committed, so commit is idempotent.
* ``abort_prepared`` deletes the staging rows; ``recover`` lists ``twopc_prepared``.

Readers of the target table never see staged rows. Every partition of a micro-batch is
committed in its own SQLite transaction, so a reader may see some partitions of a batch
before the others: the sink does not offer atomic batch visibility.

Concurrency: tasks run in several processes that write to one file. Connections use WAL
mode (readers do not block the writer) and a busy timeout, and every write is a short
``BEGIN IMMEDIATE`` transaction; ``synchronous=FULL`` makes each commit durable.
"""

from __future__ import annotations

import re
import sqlite3
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
from twopc import (
    Capabilities,
    CommitError,
    CommitOutcome,
    Committable,
    ConfigurationError,
    PermanentSinkError,
    Sink,
    SinkError,
    TaskContext,
    TransientSinkError,
)

__all__ = ["PAYLOAD_VERSION", "SqliteSink", "SqliteTransaction"]

PAYLOAD_VERSION = 1
"""Version of this sink's committable payload (``{"txn", "table", "rows"}``)."""

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_RESERVED_PREFIX = "twopc_"


@dataclass
class SqliteTransaction:
    """One task's rows until ``pre_commit``. Only the task that created it uses it."""

    ctx: TaskContext
    batches: list[pa.RecordBatch] = field(default_factory=list)
    rows: int = 0


class SqliteSink(Sink[SqliteTransaction]):
    """Exactly-once append into ``table`` (columns ``id INTEGER``, ``payload TEXT``).

    Args:
        path: the SQLite database file; created with its tables when missing.
        table: the target table; created when missing. A plain identifier.
        timeout: seconds a connection waits for another writer's lock.
    """

    backend_name = "sqlite"
    capabilities = Capabilities(
        global_commit=True,
        commit_in_task=False,
        atomic_batch_visibility=False,
        recover=True,
        modes=("append",),
    )

    def __init__(self, path: str, *, table: str = "rows", timeout: float = 30.0) -> None:
        if not isinstance(path, str) or not path:
            raise ConfigurationError("sqlite sink: path must be a non-empty string")
        if not _IDENTIFIER.fullmatch(table) or table.lower().startswith(_RESERVED_PREFIX):
            raise ConfigurationError(
                f"sqlite sink: table must be a plain identifier not starting with "
                f"{_RESERVED_PREFIX!r}, not {table!r}"
            )
        self.path = path
        self.table = table
        self.timeout = float(timeout)

    def __repr__(self) -> str:
        return f"SqliteSink(path={self.path!r}, table={self.table!r})"

    def describe(self) -> str:
        return f"sqlite {self.path} table {self.table}"

    # -- connections --------------------------------------------------------------------
    # A connection is opened per operation and closed right after: the sink is pickled to
    # executors and tasks may run in forked processes, where an inherited SQLite connection
    # must not be used.

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        try:
            connection = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
        except sqlite3.Error as exc:  # a missing directory, a file that is not a database
            raise SinkError(f"sqlite sink: cannot open {self.path}: {exc}") from exc
        try:
            connection.execute("PRAGMA synchronous=FULL")
            mode = connection.execute("PRAGMA journal_mode").fetchone()[0]
            if str(mode).lower() != "wal":
                connection.execute("PRAGMA journal_mode=WAL")
            self._create_tables(connection)
            yield connection
        finally:
            connection.close()

    def _create_tables(self, connection: sqlite3.Connection) -> None:
        names = {"twopc_staging", "twopc_prepared", "twopc_markers", self.table}
        found = connection.execute(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN (?, ?, ?, ?)",
            tuple(sorted(names)),
        ).fetchone()[0]
        if found == len(names):
            return  # the usual case: no write lock needed
        with _write(connection):
            connection.execute(
                f'CREATE TABLE IF NOT EXISTS "{self.table}" (id INTEGER, payload TEXT)'
            )
            connection.execute(
                "CREATE TABLE IF NOT EXISTS twopc_staging "
                "(txn TEXT NOT NULL, id INTEGER, payload TEXT)"
            )
            connection.execute(
                "CREATE INDEX IF NOT EXISTS twopc_staging_txn ON twopc_staging (txn)"
            )
            connection.execute(
                "CREATE TABLE IF NOT EXISTS twopc_prepared "
                "(txn TEXT PRIMARY KEY, sink_id TEXT NOT NULL, committable TEXT NOT NULL)"
            )
            connection.execute(
                "CREATE TABLE IF NOT EXISTS twopc_markers (txn TEXT PRIMARY KEY, "
                "sink_id TEXT NOT NULL, query_id TEXT NOT NULL, batch_id INTEGER NOT NULL, "
                "partition INTEGER NOT NULL, committed_at REAL NOT NULL)"
            )

    # -- phase 1 ------------------------------------------------------------------------

    def begin_transaction(self, ctx: TaskContext) -> SqliteTransaction:
        return SqliteTransaction(ctx)

    def invoke(self, txn: SqliteTransaction, batch: pa.RecordBatch) -> None:
        problem = _schema_problem(batch.schema)
        if problem:
            raise PermanentSinkError(
                f"cannot write to table {self.table!r}: {problem}",
                sink_id=txn.ctx.sink_id,
                batch_id=txn.ctx.batch_id,
                partition=txn.ctx.partition,
            )
        txn.batches.append(batch)
        txn.rows += batch.num_rows

    def pre_commit(self, txn: SqliteTransaction) -> Committable:
        ctx = txn.ctx
        txn_id = uuid.uuid4().hex
        committable = Committable.for_task(
            ctx, {"txn": txn_id, "table": self.table, "rows": txn.rows}, PAYLOAD_VERSION
        )
        try:
            with self._connect() as connection, _write(connection):
                for batch in txn.batches:
                    connection.executemany(
                        "INSERT INTO twopc_staging (txn, id, payload) VALUES (?, ?, ?)",
                        _rows(txn_id, batch),
                    )
                connection.execute(
                    "INSERT INTO twopc_prepared (txn, sink_id, committable) VALUES (?, ?, ?)",
                    (txn_id, ctx.sink_id, committable.dumps()),
                )
        except (sqlite3.IntegrityError, OverflowError) as exc:
            raise PermanentSinkError(
                f"cannot stage rows: {exc}",
                sink_id=ctx.sink_id,
                batch_id=ctx.batch_id,
                partition=ctx.partition,
            ) from exc
        except sqlite3.Error as exc:
            raise _sink_error(exc, ctx.sink_id, ctx.batch_id, ctx.partition) from exc
        txn.batches.clear()
        return committable

    def abort(self, txn: SqliteTransaction) -> None:
        txn.batches.clear()  # nothing reached the database before pre_commit

    # -- phase 2 ------------------------------------------------------------------------

    def commit(self, committables: Sequence[Committable]) -> list[CommitOutcome]:
        if not committables:
            return []
        outcomes = []
        with self._connect() as connection:
            for committable in committables:
                try:
                    outcomes.append(self._commit_one(connection, committable))
                except sqlite3.Error as exc:
                    raise _sink_error(
                        exc, committable.sink_id, committable.batch_id, committable.partition
                    ) from exc
        return outcomes

    def _commit_one(
        self, connection: sqlite3.Connection, committable: Committable
    ) -> CommitOutcome:
        txn_id = _txn_id(committable)
        with _write(connection):
            marker = connection.execute(
                "SELECT 1 FROM twopc_markers WHERE txn = ?", (txn_id,)
            ).fetchone()
            if marker is not None:
                return CommitOutcome.ALREADY_COMMITTED
            prepared = connection.execute(
                "SELECT 1 FROM twopc_prepared WHERE txn = ?", (txn_id,)
            ).fetchone()
            if prepared is None:
                raise CommitError(
                    f"transaction {txn_id} is neither prepared nor committed: it was aborted "
                    "or removed outside twopc",
                    sink_id=committable.sink_id,
                    batch_id=committable.batch_id,
                    partition=committable.partition,
                )
            # Data, marker and clean-up in one SQLite transaction: all or nothing.
            connection.execute(
                f'INSERT INTO "{self.table}" (id, payload) '
                "SELECT id, payload FROM twopc_staging WHERE txn = ? ORDER BY rowid",
                (txn_id,),
            )
            connection.execute(
                "INSERT INTO twopc_markers "
                "(txn, sink_id, query_id, batch_id, partition, committed_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (
                    txn_id,
                    committable.sink_id,
                    committable.query_id,
                    committable.batch_id,
                    committable.partition,
                    time.time(),
                ),
            )
            connection.execute("DELETE FROM twopc_staging WHERE txn = ?", (txn_id,))
            connection.execute("DELETE FROM twopc_prepared WHERE txn = ?", (txn_id,))
        return CommitOutcome.COMMITTED

    def abort_prepared(self, committables: Sequence[Committable]) -> None:
        txn_ids = [c.payload.get("txn") for c in committables]
        txn_ids = [t for t in txn_ids if isinstance(t, str)]  # unknown work is ignored
        if not txn_ids:
            return
        try:
            with self._connect() as connection, _write(connection):
                for txn_id in txn_ids:
                    connection.execute("DELETE FROM twopc_staging WHERE txn = ?", (txn_id,))
                    connection.execute("DELETE FROM twopc_prepared WHERE txn = ?", (txn_id,))
        except sqlite3.Error as exc:
            raise TransientSinkError(f"sqlite sink: abort failed: {exc}") from exc

    # -- recovery -----------------------------------------------------------------------

    def recover(self, sink_id: str) -> list[Committable]:
        try:
            with self._connect() as connection:
                rows = connection.execute(
                    "SELECT committable FROM twopc_prepared WHERE sink_id = ? ORDER BY txn",
                    (sink_id,),
                ).fetchall()
        except sqlite3.Error as exc:
            raise TransientSinkError(f"sqlite sink: recover failed: {exc}") from exc
        return [Committable.loads(text) for (text,) in rows]


@contextmanager
def _write(connection: sqlite3.Connection) -> Iterator[None]:
    """A short write transaction: takes the write lock up front (waiting up to the busy
    timeout), commits on success, rolls back on any error."""
    connection.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")


def _schema_problem(schema: pa.Schema) -> str | None:
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


def _rows(txn_id: str, batch: pa.RecordBatch) -> Iterator[tuple[str, Any, Any]]:
    ids = batch.column("id").to_pylist()
    if "payload" in batch.schema.names:
        payloads = batch.column("payload").to_pylist()
    else:
        payloads = [None] * len(ids)
    for row_id, payload in zip(ids, payloads, strict=True):
        yield txn_id, row_id, payload


def _txn_id(committable: Committable) -> str:
    if committable.version > PAYLOAD_VERSION:
        raise CommitError(
            f"committable payload version {committable.version} was written by a newer "
            f"twopc-sqlite (this one reads up to {PAYLOAD_VERSION}); upgrade it",
            sink_id=committable.sink_id,
            batch_id=committable.batch_id,
            partition=committable.partition,
        )
    txn_id = committable.payload.get("txn")
    if not isinstance(txn_id, str):
        raise CommitError(
            "committable has no sqlite transaction id; it was not prepared by this sink",
            sink_id=committable.sink_id,
            batch_id=committable.batch_id,
            partition=committable.partition,
        )
    return txn_id


def _sink_error(exc: sqlite3.Error, sink_id: str, batch_id: int, partition: int) -> SinkError:
    """A locked database (another writer past the timeout) may clear up: retryable."""
    error_type = TransientSinkError if isinstance(exc, sqlite3.OperationalError) else SinkError
    return error_type(
        f"sqlite error: {exc}", sink_id=sink_id, batch_id=batch_id, partition=partition
    )
