"""An exactly-once twopc sink for a SQLite file that commits in the task.

The other way to write a twopc sink (compare :mod:`twopc_sqlite.sink`, which commits on the
driver): each task commits its own transaction, and a **marker** committed in the same
transaction says "partition p of batch b of this query is committed". A replayed task reads
the marker and writes nothing. How the phases map onto SQLite:

* ``begin_transaction``: read the partition's marker (``twopc_task_markers``, the newest
  committed batch per sink, query and partition). At or past this batch: the task is a
  replay and writes nothing.
* ``invoke``: check the columns and keep the batch.
* ``pre_commit``: open a write transaction (``BEGIN IMMEDIATE``), read the marker again
  (another attempt of the task may have committed meanwhile: a speculative copy), insert the
  rows and move the marker to this batch. The transaction stays open.
* ``commit_in_task``: ``COMMIT``. Rows and marker become visible together.
* ``abort``: ``ROLLBACK``. A task that dies leaves nothing: SQLite rolls back an open
  transaction whose connection is gone.

Readers see each partition of a batch when its task commits, not the whole batch at once.
Nothing is ever left prepared, so there is nothing to recover or sweep.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pyarrow as pa
from twopc import (
    CommitOutcome,
    CommitsInTask,
    Committable,
    Footprint,
    Inspection,
    Payload,
    PermanentSinkError,
    RecoveryScope,
    Sink,
    TargetMarker,
    TaskContext,
)

from twopc_sqlite._db import check_options, connect, rows, schema_problem, sink_error

__all__ = ["SqliteTaskPayload", "SqliteTaskSink", "SqliteTaskTransaction"]


@dataclass(frozen=True)
class SqliteTaskPayload(Payload):
    """What a task reports: the rows it wrote (0 when its marker showed the batch
    committed: ``commit_in_task`` says so). Version 1 also carried an unread ``skipped``
    flag; it is dropped when read."""

    version: ClassVar[int] = 2
    reads: ClassVar[tuple[int, ...]] = (1, 2)

    rows: int

    @classmethod
    def from_json(cls, data: Mapping[str, Any], version: int) -> SqliteTaskPayload:
        return cls(int(data["rows"]))


@dataclass
class SqliteTaskTransaction:
    """One task's rows, and from ``pre_commit`` on its open write transaction."""

    ctx: TaskContext
    skip: bool
    batches: list[pa.RecordBatch] = field(default_factory=list)
    rows: int = 0
    open: ExitStack | None = None
    connection: sqlite3.Connection | None = None


class SqliteTaskSink(Sink[SqliteTaskTransaction], CommitsInTask[SqliteTaskTransaction]):
    """Exactly-once append into ``table`` (``id INTEGER``, ``payload TEXT``), committed by
    each task with a marker row.

    Args:
        path: the SQLite database file; created with its tables when missing.
        table: the target table; created when missing. A plain identifier.
        timeout: seconds a connection waits for another writer's lock.
    """

    backend_name = "sqlite-task"

    def __init__(self, path: str, *, table: str = "rows", timeout: float = 30.0) -> None:
        check_options("sqlite-task", path, table)
        self.path = path
        self.table = table
        self.timeout = float(timeout)

    def __repr__(self) -> str:
        return f"SqliteTaskSink(path={self.path!r}, table={self.table!r})"

    def describe(self) -> str:
        return f"sqlite-task {self.path} table {self.table}"

    def _create_tables(self, connection: sqlite3.Connection) -> None:
        connection.execute(f'CREATE TABLE IF NOT EXISTS "{self.table}" (id INTEGER, payload TEXT)')
        connection.execute(
            "CREATE TABLE IF NOT EXISTS twopc_task_markers (sink_id TEXT NOT NULL, "
            "query_id TEXT NOT NULL, partition INTEGER NOT NULL, batch_id INTEGER NOT NULL, "
            "PRIMARY KEY (sink_id, query_id, partition))"
        )

    def _marker(self, connection: sqlite3.Connection, ctx: TaskContext) -> int:
        """The newest committed batch of the task's partition, -1 when none."""
        row = connection.execute(
            "SELECT batch_id FROM twopc_task_markers "
            "WHERE sink_id = ? AND query_id = ? AND partition = ?",
            (ctx.sink_id, ctx.query_id, ctx.partition),
        ).fetchone()
        return -1 if row is None else int(row[0])

    # -- phase 1 ------------------------------------------------------------------------

    def begin_transaction(self, ctx: TaskContext) -> SqliteTaskTransaction:
        try:
            with connect(self.path, self.timeout) as connection:
                self._create_tables(connection)
                newest = self._marker(connection, ctx)
        except sqlite3.Error as exc:
            raise sink_error(exc) from exc
        return SqliteTaskTransaction(ctx, skip=newest >= ctx.batch_id)

    def invoke(self, txn: SqliteTaskTransaction, batch: pa.RecordBatch) -> None:
        problem = schema_problem(batch.schema)
        if problem:
            raise PermanentSinkError(f"cannot write to table {self.table!r}: {problem}")
        if not txn.skip:
            txn.batches.append(batch)
            txn.rows += batch.num_rows

    def pre_commit(self, txn: SqliteTaskTransaction) -> Committable:
        if not txn.skip:
            self._write_in_open_transaction(txn)
        payload = SqliteTaskPayload(0 if txn.skip else txn.rows)
        return Committable.for_task(txn.ctx, payload)

    def _write_in_open_transaction(self, txn: SqliteTaskTransaction) -> None:
        ctx = txn.ctx
        stack = ExitStack()
        try:
            connection = stack.enter_context(connect(self.path, self.timeout))
            connection.execute("BEGIN IMMEDIATE")
            if self._marker(connection, ctx) >= ctx.batch_id:
                connection.execute("ROLLBACK")  # another attempt committed it meanwhile
                stack.close()
                txn.skip, txn.batches = True, []
                return
            for batch in txn.batches:
                connection.executemany(
                    f'INSERT INTO "{self.table}" (id, payload) VALUES (?, ?)', rows(batch)
                )
            connection.execute(
                "INSERT INTO twopc_task_markers (sink_id, query_id, partition, batch_id) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (sink_id, query_id, partition) "
                "DO UPDATE SET batch_id = excluded.batch_id",
                (ctx.sink_id, ctx.query_id, ctx.partition, ctx.batch_id),
            )
        except (sqlite3.IntegrityError, OverflowError) as exc:
            stack.close()
            raise PermanentSinkError(f"cannot write rows: {exc}") from exc
        except sqlite3.Error as exc:
            stack.close()
            raise sink_error(exc) from exc
        txn.open, txn.connection, txn.batches = stack, connection, []

    def abort(self, txn: SqliteTaskTransaction) -> None:
        txn.batches.clear()
        if txn.connection is not None and txn.connection.in_transaction:
            txn.connection.execute("ROLLBACK")
        self._close(txn)

    # -- the commit, in the task --------------------------------------------------------

    def commit_in_task(self, txn: SqliteTaskTransaction) -> CommitOutcome:
        if txn.skip:
            return CommitOutcome.ALREADY_COMMITTED
        if txn.connection is None:
            raise PermanentSinkError("commit_in_task without pre_commit")
        try:
            txn.connection.execute("COMMIT")
        except sqlite3.Error as exc:
            raise sink_error(exc) from exc
        finally:
            self._close(txn)
        return CommitOutcome.COMMITTED

    @staticmethod
    def _close(txn: SqliteTaskTransaction) -> None:
        if txn.open is not None:
            txn.open.close()
        txn.open = txn.connection = None

    # -- markers ------------------------------------------------------------------------

    def committed_partitions(
        self, scope: RecoveryScope, batch_id: int, footprint: Footprint
    ) -> set[int] | None:
        return {m.partition for m in self._markers(scope.sink_id) if m.query_id == scope.query_id
                and m.batch_id >= batch_id}  # fmt: skip

    def inspect(self, sink_id: str) -> Inspection:
        return Inspection(
            markers=tuple(self._markers(sink_id)),
            notes=("sqlite-task: each task commits itself; nothing waits for a decision",),
        )

    def _markers(self, sink_id: str) -> list[TargetMarker]:
        try:
            with connect(self.path, self.timeout) as connection:
                self._create_tables(connection)
                found = connection.execute(
                    "SELECT query_id, partition, batch_id FROM twopc_task_markers "
                    "WHERE sink_id = ? ORDER BY query_id, partition",
                    (sink_id,),
                ).fetchall()
        except sqlite3.Error as exc:
            raise sink_error(exc) from exc
        return [TargetMarker(str(q), int(p), int(b)) for q, p, b in found]
