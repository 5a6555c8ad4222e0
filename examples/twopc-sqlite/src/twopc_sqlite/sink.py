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
* ``abort_prepared`` deletes the staging rows (found by the task's ids when the payload is
  of a version it cannot read); ``recover`` lists ``twopc_prepared``.

Readers of the target table never see staged rows. Every partition of a micro-batch is
committed in its own SQLite transaction, so a reader may see some partitions of a batch
before the others: the sink does not offer atomic batch visibility.

Concurrency: tasks run in several processes that write to one file. Connections use WAL
mode (readers do not block the writer) and a busy timeout, and every write is a short
``BEGIN IMMEDIATE`` transaction; ``synchronous=FULL`` makes each commit durable.
"""

from __future__ import annotations

import sqlite3
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import ClassVar

import pyarrow as pa
from twopc import (
    CommitError,
    CommitOutcome,
    CommitsOnDriver,
    Committable,
    Payload,
    PermanentSinkError,
    Sink,
    TaskContext,
    TransientSinkError,
    UnsupportedFormatError,
)

from twopc_sqlite._db import check_options, connect, rows, schema_problem, sink_error, write

__all__ = ["SqlitePayload", "SqliteSink", "SqliteTransaction"]


@dataclass(frozen=True)
class SqlitePayload(Payload):
    """A prepared task: its SQLite transaction id, the table and the row count. The version
    is checked when a committable is read back (``SqlitePayload.of``)."""

    version: ClassVar[int] = 1

    txn: str
    table: str
    rows: int


@dataclass
class SqliteTransaction:
    """One task's rows until ``pre_commit``. Only the task that created it uses it."""

    ctx: TaskContext
    batches: list[pa.RecordBatch] = field(default_factory=list)
    rows: int = 0


class SqliteSink(Sink[SqliteTransaction], CommitsOnDriver):
    """Exactly-once append into ``table`` (columns ``id INTEGER``, ``payload TEXT``).

    Args:
        path: the SQLite database file; created with its tables when missing.
        table: the target table; created when missing. A plain identifier.
        timeout: seconds a connection waits for another writer's lock.
    """

    backend_name = "sqlite"

    def __init__(self, path: str, *, table: str = "rows", timeout: float = 30.0) -> None:
        check_options("sqlite", path, table)
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
        with connect(self.path, self.timeout) as connection:
            self._create_tables(connection)
            yield connection

    def _create_tables(self, connection: sqlite3.Connection) -> None:
        names = {"twopc_staging", "twopc_prepared", "twopc_markers", self.table}
        found = connection.execute(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN (?, ?, ?, ?)",
            tuple(sorted(names)),
        ).fetchone()[0]
        if found == len(names):
            return  # the usual case: no write lock needed
        with write(connection):
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
        problem = schema_problem(batch.schema)
        if problem:
            raise PermanentSinkError(f"cannot write to table {self.table!r}: {problem}")
        txn.batches.append(batch)
        txn.rows += batch.num_rows

    def pre_commit(self, txn: SqliteTransaction) -> Committable:
        ctx = txn.ctx
        txn_id = uuid.uuid4().hex
        committable = Committable.for_task(ctx, SqlitePayload(txn_id, self.table, txn.rows))
        try:
            with self._connect() as connection, write(connection):
                for batch in txn.batches:
                    connection.executemany(
                        "INSERT INTO twopc_staging (txn, id, payload) VALUES (?, ?, ?)",
                        ((txn_id, *row) for row in rows(batch)),
                    )
                connection.execute(
                    "INSERT INTO twopc_prepared (txn, sink_id, committable) VALUES (?, ?, ?)",
                    (txn_id, ctx.sink_id, committable.dumps()),
                )
        except (sqlite3.IntegrityError, OverflowError) as exc:
            raise PermanentSinkError(f"cannot stage rows: {exc}") from exc
        except sqlite3.Error as exc:
            raise sink_error(exc) from exc
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
                    raise sink_error(exc) from exc
        return outcomes

    def _commit_one(
        self, connection: sqlite3.Connection, committable: Committable
    ) -> CommitOutcome:
        txn_id = SqlitePayload.of(committable).txn
        with write(connection):
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
                    "or removed outside twopc"
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
        if not committables:
            return
        try:
            with self._connect() as connection, write(connection):
                for committable in committables:
                    for txn_id in self._prepared_txns(connection, committable):
                        connection.execute("DELETE FROM twopc_staging WHERE txn = ?", (txn_id,))
                        connection.execute("DELETE FROM twopc_prepared WHERE txn = ?", (txn_id,))
        except sqlite3.Error as exc:
            raise TransientSinkError(f"sqlite sink: abort failed: {exc}") from exc

    def _prepared_txns(self, connection: sqlite3.Connection, committable: Committable) -> list[str]:
        """The transaction id of ``committable``'s work. The payload says; when this
        version cannot read it (a newer version of the sink prepared the work, and recovery
        aborts it all the same), the task's ids find it in ``twopc_prepared``."""
        try:
            return [SqlitePayload.of(committable).txn]
        except UnsupportedFormatError:
            rows = connection.execute(
                "SELECT txn, committable FROM twopc_prepared WHERE sink_id = ?",
                (committable.sink_id,),
            ).fetchall()
            return [
                txn for txn, text in rows if _task(Committable.loads(text)) == _task(committable)
            ]

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


def _task(c: Committable) -> tuple[str, str, int, int, int]:
    """The task a committable comes from: its ids, whichever version wrote its payload."""
    return (c.sink_id, c.query_id, c.batch_id, c.partition, c.attempt)
