"""What the Postgres and MySQL sinks share: the transaction flow, markers and recovery.

Every task writes its rows and one marker row ``(sink_id, query_id, batch_id, partition)``
in one database transaction, so "this partition of this batch is committed" is decided by
the database itself, atomically with the data.

* ``transaction`` mode (default): the task commits its own transaction right after
  ``pre_commit`` (the sink is a :class:`~twopc.CommitsInTask`). A replayed or retried task
  finds its marker and writes nothing. Readers may see some partitions of a batch before
  others.
* ``two_phase`` mode: the task prepares (``PREPARE TRANSACTION`` / ``XA PREPARE``) and
  reports the transaction id; the driver commits every branch after all partitions
  prepared. Recovery commits decided branches and rolls back the others. A decided branch
  that is gone (rolled back by hand, database restored) without a marker row fails the
  commit with a :class:`~twopc.CommitError` naming the batch and the transaction.

In both modes a task whose marker row exists writes nothing (a replay, or a batch rerun
after its decision was lost). Both modes can commit prepared branches on the driver
(:class:`~twopc.CommitsOnDriver`), so a restart in ``transaction`` mode still finishes a
batch that a ``two_phase`` run decided. ``PostgresSink(...)`` and ``MySQLSink(...)``
return the class of the chosen mode: a subclass that also commits in the task for
``transaction``, the class itself for ``two_phase``.

Upserts and deletes go through a staging table so that duplicate keys inside a partition
are resolved in SQL (last wins: by ``order_column``, then by input order).

Next to the marker table, a registry of running writers (``<marker_table>_writers``, one
row per sink id and query id) lets the driver refuse a second query of a sink id that
writes at the same time (:class:`~twopc.TracksWriters`): two checkpoints keep two commit
logs, so only the database can see both.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import time
from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Concatenate, ParamSpec, Self, TypeVar

import pyarrow as pa
import pyarrow.compute as pc

from twopc import (
    CommitError,
    CommitOutcome,
    CommitsInTask,
    CommitsOnDriver,
    Committable,
    ConfigurationError,
    Footprint,
    Inspection,
    KeepsMarkers,
    KeepsSourceOffsets,
    Payload,
    PendingWork,
    PermanentSinkError,
    RecoveryScope,
    Sink,
    SinkError,
    StoredBatch,
    TargetMarker,
    TaskContext,
    TracksWriters,
    TransientSinkError,
    WorkKind,
    WorkLimit,
    WriterRecord,
)
from twopc.retrying import POLLING
from twopc_jdbc._evolution import TableColumn, new_columns
from twopc_jdbc._offsets import MarkerOffsets, MarkerRow, marker_offsets, stored_batches
from twopc_jdbc._options import (
    TIMEOUTS,
    ConnectionSettings,
    SqlOptions,
    TableName,
    column_names,
    option_error,
    seconds,
)
from twopc_jdbc._secrets import scrub
from twopc_jdbc._values import NumericColumn, check_fit

__all__ = [
    "AttemptLock",
    "CommitsSqlTransactionInTask",
    "MarkerKey",
    "SqlPayload",
    "SqlSink",
    "SqlTransaction",
    "TransactionId",
    "attempt_lock_name",
    "evolution_lock_name",
    "writer_table_name",
]

_log = logging.getLogger("twopc.jdbc")

_MARKER_TABLES: set[str] = set()
"""Per process: the sinks whose marker table a task found as this version makes it, so
that later tasks of the same Python worker skip the catalog queries."""

_MAX_SECONDS = 1e9
"""A bound for timeouts: beyond it a number of seconds is a mistake (and overflows)."""
_KEYS = "keys"
"""``SqlTransaction.extra`` entry: the key columns of an upsert task's batches."""
_GIVE_WAY_AFTER_SECONDS = 10.0
"""How long an attempt waits for the driver to commit an ended sibling's prepared work
before it gives way (``TaskContext.concurrent_attempts``)."""
SEQ_COLUMN = "twopc_seq"
"""Input order of a staged row, for last-wins de-duplication."""
_NUMERIC = "numeric columns"
"""``SqlTransaction.extra`` entry: the target's columns of limited scale (``_values``)."""
WRITERS_SUFFIX = "_writers"
"""The writer registry is the marker table's name with this suffix, in its schema."""

_P = ParamSpec("_P")
_R = TypeVar("_R")
_S = TypeVar("_S", bound="SqlSink")


def masked(method: Callable[Concatenate[_S, _P], _R]) -> Callable[Concatenate[_S, _P], _R]:
    """Mask the sink's secrets in any exception leaving ``method``, and in every
    exception chained to it (a driver's message may echo a connection string)."""

    @functools.wraps(method)
    def call(self: _S, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return method(self, *args, **kwargs)
        except BaseException as exc:
            scrub(exc, self.settings.secrets())
            raise

    return call


@dataclass(frozen=True)
class SqlPayload(Payload):
    """A task's committable: its rows and, when it prepared (``two_phase``), its branch.

    Without a branch, nothing waits to be committed: the task committed in the task
    (``transaction`` mode), or found its marker and wrote nothing. The driver then reads
    the partition's marker row to tell committed from lost. Version 1 also carried a
    ``skipped`` flag for the second case; the marker says the same, so it is dropped when
    read.
    """

    version: ClassVar[int] = 2
    reads: ClassVar[tuple[int, ...]] = (1, 2)

    rows: int
    gtrid: str | None = None
    bqual: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any], version: int) -> SqlPayload:
        return cls(int(data["rows"]), data.get("gtrid"), data.get("bqual"))

    @property
    def xid(self) -> TransactionId | None:
        if self.gtrid is None or self.bqual is None:
            return None
        return TransactionId(self.gtrid, self.bqual)


@dataclass(frozen=True)
class MarkerKey:
    sink_id: str
    query_id: str
    batch_id: int
    partition: int

    @classmethod
    def of(cls, owner: TaskContext | Committable) -> MarkerKey:
        """The marker row's key of a task, or of the committable it prepared."""
        return cls(owner.sink_id, owner.query_id, owner.batch_id, owner.partition)


@dataclass(frozen=True)
class TransactionId:
    """A prepared transaction's id: ``gtrid`` names the sink and query, ``bqual`` the task.

    Both stay under 64 bytes (the XA limit); Postgres uses ``gtrid:bqual`` as its gid.
    """

    gtrid: str
    bqual: str

    PREFIX: ClassVar[str] = "twopc-"

    @classmethod
    def for_task(cls, ctx: TaskContext) -> TransactionId:
        return cls(
            f"{cls.gtrid_prefix(ctx.sink_id)}{ctx.query_id}",
            f"{ctx.batch_id}-{ctx.partition}-{ctx.attempt}",
        )

    @classmethod
    def for_committable(cls, c: Committable) -> TransactionId:
        """The id the task of ``c`` prepared under (``two_phase``)."""
        return cls(
            f"{cls.gtrid_prefix(c.sink_id)}{c.query_id}", f"{c.batch_id}-{c.partition}-{c.attempt}"
        )

    @classmethod
    def gtrid_prefix(cls, sink_id: str) -> str:
        return f"{cls.PREFIX}{hashlib.sha256(sink_id.encode()).hexdigest()[:12]}-"

    @property
    def gid(self) -> str:
        return f"{self.gtrid}:{self.bqual}"

    @classmethod
    def parse_gid(cls, gid: str) -> TransactionId | None:
        gtrid, sep, bqual = gid.partition(":")
        return cls(gtrid, bqual) if sep else None

    def committable(self, sink_id: str) -> Committable | None:
        """Rebuild the committable a prepared branch belongs to, or None if foreign."""
        prefix = self.gtrid_prefix(sink_id)
        if not self.gtrid.startswith(prefix):
            return None
        try:
            batch, partition, attempt = (int(x) for x in self.bqual.split("-"))
        except ValueError:
            return None
        payload = SqlPayload(rows=0, gtrid=self.gtrid, bqual=self.bqual)
        return Committable(
            sink_id=sink_id,
            query_id=self.gtrid[len(prefix) :],
            batch_id=batch,
            partition=partition,
            attempt=attempt,
            payload=payload.to_json(),
            version=payload.version,
        )


@dataclass(frozen=True)
class AttemptLock:
    """The name of the session lock a running ``two_phase`` attempt holds: a string (MySQL
    ``GET_LOCK``) and two non-negative 31-bit keys (PostgreSQL advisory locks), both
    derived from the attempt's sink, query, batch, partition and attempt id."""

    text: str
    keys: tuple[int, int]


def attempt_lock_name(of: TaskContext | Committable) -> AttemptLock:
    identity = f"{of.sink_id}\0{of.query_id}\0{of.batch_id}\0{of.partition}\0{of.attempt}"
    digest = hashlib.sha256(identity.encode()).digest()
    keys = (
        int.from_bytes(digest[:4], "big") & 0x7FFFFFFF,
        int.from_bytes(digest[4:8], "big") & 0x7FFFFFFF,
    )
    return AttemptLock(f"twopc-{digest.hex()[:40]}", keys)


def evolution_lock_name(database: str | None, table: TableName) -> AttemptLock:
    """The lock that serializes schema evolution of one table (``GET_LOCK`` names are
    server-wide, so the database is part of it; advisory locks are per database)."""
    digest = hashlib.sha256(f"evolve\0{database}\0{table}".encode()).digest()
    keys = (
        int.from_bytes(digest[:4], "big") & 0x7FFFFFFF,
        int.from_bytes(digest[4:8], "big") & 0x7FFFFFFF,
    )
    return AttemptLock(f"twopc-evolve-{digest.hex()[:40]}", keys)


def writer_table_name(marker: TableName, limit: int, measure: Callable[[str], int]) -> TableName:
    """The writer registry of a marker table: ``<marker name>_writers`` in the marker
    table's schema. A name longer than the database's identifier limit (``measure`` counts
    as the database does: bytes or characters) keeps the start of the marker table's name,
    followed by ``_`` and 8 hex digits of its SHA-256, then ``_writers``, so that the
    database never cuts it (PostgreSQL would, silently, possibly to the marker table's own
    name)."""
    name = marker.name + WRITERS_SUFFIX
    if measure(name) <= limit:
        return TableName(name, marker.schema)
    tail = "_" + hashlib.sha256(marker.name.encode()).hexdigest()[:8] + WRITERS_SUFFIX
    head = marker.name
    while head and measure(head + tail) > limit:
        head = head[:-1]
    return TableName(head + tail, marker.schema)


@dataclass
class SqlTransaction:
    """One task's open database transaction."""

    ctx: TaskContext
    conn: Any
    xid: TransactionId | None
    skip: bool = False
    rows: int = 0
    checked: bool = False
    columns: tuple[str, ...] = ()
    staging: TableName | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    keeps_offsets: bool = False
    """Whether the marker table has the offset columns (one of an earlier version gains
    them on first use, when the sink's user may alter it)."""
    unanswered: str = ""
    """Why this transaction's COMMIT got no answer (``transaction`` mode): its connection
    is gone, so a retried commit asks the marker row instead of committing again."""

    @property
    def marker(self) -> MarkerKey:
        return MarkerKey.of(self.ctx)


class SqlSink(
    Sink[SqlTransaction], CommitsOnDriver, KeepsMarkers, KeepsSourceOffsets, TracksWriters
):
    """Base class of the SQL sinks; a backend implements the database-specific hooks.

    As constructed with ``transaction_mode="two_phase"`` the sink commits prepared branches
    on the driver; with ``transaction_mode="transaction"`` the constructor returns the
    backend's :attr:`in_task_class`, which commits in the task.

    The driver records each query writing a sink id in the writer registry
    (:attr:`writer_table`), one statement per batch on a short autocommit connection of its
    own, outside any batch's transaction (DDL would end an XA transaction on MariaDB).
    """

    url_schemes: ClassVar[tuple[str, ...]] = ()
    reserved_options: ClassVar[tuple[str, ...]] = ()
    """Connection options the sink sets itself; users may not override them."""
    connection_keys: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    """The driver's keywords for host, port, user, password and database: given in the
    DSN's query or in ``connect_options`` they set that part of the connection."""
    max_lock_timeout_seconds: ClassVar[float] = 2_147_483.0
    """The largest ``lock_timeout_seconds`` the database's setting takes."""
    in_task_class: ClassVar[type[SqlSink] | None] = None
    """The backend's subclass for ``transaction`` mode (it adds :class:`CommitsInTask`)."""
    max_identifier_length: ClassVar[int] = 63
    """The longest identifier the database keeps, as :meth:`identifier_length` counts."""

    def __new__(cls, *args: Any, **kwargs: Any) -> Self:
        # The constructor picks the class of the mode. Unpickling calls __new__ without
        # arguments and must keep the pickled class.
        mode = kwargs.get("transaction_mode", "transaction")
        variant = cls.in_task_class
        constructing = bool(args or kwargs) and mode == "transaction"
        if constructing and variant is not None and _switches(cls, variant):
            return super().__new__(variant)  # type: ignore[return-value]  # a subclass of cls
        return super().__new__(cls)

    def __init__(
        self,
        dsn: str | None = None,
        *,
        table: str,
        mode: str = "append",
        key_columns: Sequence[str] = (),
        order_column: str | None = None,
        delete_column: str | None = None,
        shuffle_by_key: bool = True,
        create_table: bool = False,
        schema_evolution: str = "none",
        transaction_mode: str = "transaction",
        marker_table: str = "twopc_markers",
        lock_timeout_seconds: float = 60.0,
        connect_timeout_seconds: float = 60.0,
        read_timeout_seconds: float = 300.0,
        connect_options: dict[str, Any] | None = None,
    ) -> None:
        backend = self.backend_name
        self.options = SqlOptions(
            table=TableName.parse(table, backend, "table"),
            mode=mode,
            key_columns=column_names(backend, key_columns),
            order_column=order_column,
            delete_column=delete_column,
            shuffle_by_key=shuffle_by_key,
            create_table=create_table,
            schema_evolution=schema_evolution,
            transaction_mode=transaction_mode,
            marker_table=TableName.parse(marker_table, backend, "marker_table"),
            lock_timeout_seconds=seconds(
                backend, TIMEOUTS[0], lock_timeout_seconds, self.max_lock_timeout_seconds
            ),
            connect_timeout_seconds=seconds(
                backend, TIMEOUTS[1], connect_timeout_seconds, _MAX_SECONDS
            ),
            read_timeout_seconds=seconds(backend, TIMEOUTS[2], read_timeout_seconds, _MAX_SECONDS),
            backend=backend,
        )
        self.settings = ConnectionSettings.from_url(
            dsn, self.url_schemes, connect_options, backend=backend, keys=self.connection_keys
        )
        clash = sorted(set(self.settings.options) & set(self.reserved_options))
        if clash:
            raise option_error(
                backend,
                "connect_options",
                f"sets {clash}, which the {backend} sink manages itself" + _timeout_hint(clash),
            )
        if self.writer_table == self.options.table:
            raise option_error(
                backend,
                "table",
                f"is {self.options.table}, the writer registry of marker_table "
                f"{self.options.marker_table}; name another table or another marker_table",
            )
        if isinstance(self, CommitsInTask) == (transaction_mode == "two_phase"):
            raise ConfigurationError(
                f"{type(self).__name__} cannot run in transaction_mode={transaction_mode!r}; "
                f"construct the backend's sink class ({self.public_name()}) instead"
            )

    @classmethod
    def public_name(cls) -> str:
        """The backend's class name as users construct it (not the mode's subclass)."""
        for klass in cls.__mro__:
            if not klass.__name__.startswith("_"):
                return klass.__name__
        return cls.__name__

    def __repr__(self) -> str:
        return (
            f"{self.public_name()}({self.settings.describe()!r}, "
            f"table={str(self.options.table)!r}, mode={self.options.mode!r}, "
            f"transaction_mode={self.options.transaction_mode!r})"
        )

    def describe(self) -> str:
        return f"{self.backend_name} {self.settings.describe()} table {self.options.table}"

    def partition_columns(self) -> tuple[str, ...]:
        # All rows of a key in one task, so that "last wins" is decided in one place;
        # shuffle_by_key=False: the caller's batches have each key in one partition already.
        options = self.options
        return options.key_columns if options.needs_staging and options.shuffle_by_key else ()

    @property
    def two_phase(self) -> bool:
        return self.options.transaction_mode == "two_phase"

    @property
    def writer_table(self) -> TableName:
        """The registry of running writers: ``<marker_table>_writers``, same schema."""
        return writer_table_name(
            self.options.marker_table, self.max_identifier_length, self.identifier_length
        )

    @staticmethod
    def identifier_length(name: str) -> int:
        """An identifier's length as the database limits it (PostgreSQL: UTF-8 bytes)."""
        return len(name.encode())

    # -- database hooks -------------------------------------------------------------------

    @abstractmethod
    def connect(self, *, autocommit: bool) -> Any:
        """A new connection; errors mapped with :meth:`classify`."""

    @abstractmethod
    def classify(self, exc: Exception) -> type[SinkError]:
        """Transient or permanent: how the coordinator should treat a driver error."""

    @abstractmethod
    def ensure_marker_table(self, conn: Any) -> bool:
        """Create the marker table if it is missing, migrate one of an earlier version;
        whether it has the offset columns (:data:`~twopc_jdbc._offsets.OFFSET_COLUMNS`)."""

    @abstractmethod
    def marker_exists(self, conn: Any, key: MarkerKey) -> bool: ...

    @abstractmethod
    def insert_marker(
        self, conn: Any, key: MarkerKey, attempt: int, stored: MarkerOffsets | None
    ) -> None:
        """Insert the marker row, with ``stored`` in the offset columns (``None``: the
        table has none)."""

    @abstractmethod
    def newest_marker_rows(self, sink_id: str) -> list[MarkerRow]:
        """The newest marker row of every (query, partition) of ``sink_id``; read-only,
        empty when the marker table does not exist."""

    @abstractmethod
    def begin(self, conn: Any, xid: TransactionId | None) -> None: ...

    @abstractmethod
    def table_columns(self, conn: Any, table: TableName) -> list[str] | None:
        """The table's column names, or None if it does not exist."""

    @abstractmethod
    def table_schema(self, conn: Any, table: TableName) -> list[TableColumn] | None:
        """The table's columns with type, nullability and default, or None if it does not
        exist (``information_schema.columns``)."""

    @abstractmethod
    def evolution_session(self, txn: SqlTransaction) -> contextlib.AbstractContextManager[Any]:
        """A connection on which the task checks and adds columns, holding the table's
        schema-evolution lock, so that one task of a batch adds a column and the others
        find it. Either the task's own transaction (the column commits or rolls back with
        the partition's rows) or a short transaction of its own, committed on leaving."""

    @abstractmethod
    def add_columns(self, conn: Any, table: TableName, fields: Sequence[pa.Field]) -> None:
        """Add ``fields`` to ``table`` as nullable columns; a column that exists by now (a
        concurrent writer added it) is not an error."""

    @abstractmethod
    def create_table(self, schema: pa.Schema) -> None:
        """Create the target table from the data's schema (on its own connection)."""

    @abstractmethod
    def open_staging(self, txn: SqlTransaction, schema: pa.Schema) -> TableName: ...

    @abstractmethod
    def load(self, txn: SqlTransaction, table: TableName, batch: pa.RecordBatch) -> None:
        """Bulk-load a batch into ``table`` (target or staging) inside the transaction."""

    @abstractmethod
    def merge_staging(self, txn: SqlTransaction) -> None:
        """De-duplicate the staged rows, apply deletes and upsert into the target."""

    def flush(self, txn: SqlTransaction) -> None:
        """Load rows that :meth:`load` buffered; runs first in ``pre_commit``."""
        return None

    def numeric_columns(self, conn: Any, table: TableName) -> dict[str, NumericColumn]:
        """The table's decimal and integer columns, with precision and scale, for the
        rule that a number is written only if its column holds it exactly."""
        return {}

    def lock_timed_out(self, exc: Exception) -> bool:
        """Whether ``exc`` is the database's lock wait timeout."""
        return False

    def _split_key_hint(self, exc: Exception) -> str:
        """What a lock timeout most likely means when the batch was not shuffled by key."""
        if self.options.shuffle_by_key or not self.lock_timed_out(exc):
            return ""
        return (
            " (shuffle_by_key=False: a key in two partitions of one batch makes one task "
            "wait for the other's row lock; in two_phase mode the other commits only after "
            "every task is prepared, so the wait ends at lock_timeout_seconds; leave "
            "shuffle_by_key at True unless each key is in one partition)"
        )

    def keys_unique(self, txn: SqlTransaction) -> bool:
        """Whether no key occurs twice among the rows of an upsert task without deletes;
        the merge can then skip de-duplication. Needs the keys :meth:`invoke` kept."""
        batches: list[pa.RecordBatch] = txn.extra.get(_KEYS, [])
        if not batches:
            return False
        keys = pa.Table.from_batches(batches)
        if keys.num_columns == 1:
            distinct = pc.count_distinct(keys.column(0)).as_py()
        else:
            distinct = keys.group_by(keys.column_names).aggregate([]).num_rows
        return bool(distinct == keys.num_rows)

    def staging_table(self, c: Committable | TaskContext) -> TableName | None:
        """The staging table a task uses when it outlives the transaction (MySQL: DDL is
        not allowed inside XA, so it is created before and dropped after). None when the
        staging table lives and dies inside the transaction (Postgres)."""
        return None

    def discard_staging(self, table: TableName, conn: Any = None) -> None:
        """Drop a staging table returned by :meth:`staging_table` (on ``conn`` when given,
        an autocommit connection, else on one of its own)."""

    def sweep_staging(self, sink_id: str, keep: set[TableName]) -> int:
        """Drop this sink's leftover staging tables except ``keep``; returns how many."""
        return 0

    @abstractmethod
    def prepare(self, txn: SqlTransaction) -> None: ...

    @abstractmethod
    def rollback(self, txn: SqlTransaction) -> None: ...

    @abstractmethod
    def commit_prepared(self, xid: TransactionId, conn: Any = None) -> bool:
        """Commit a prepared branch; False if the database does not know it. On ``conn``
        when given (an autocommit connection that phase 2 commits several branches on),
        else on a connection of its own."""

    @abstractmethod
    def rollback_prepared(self, xid: TransactionId) -> bool:
        """Roll back a prepared branch; False if the database does not know it."""

    def hold_attempt_lock(self, conn: Any, name: AttemptLock) -> None:
        """Take a session lock named ``name`` on ``conn`` (held until it closes), so other
        attempts of the task can tell this one still runs. Default: none."""

    def attempt_lock_held(self, conn: Any, name: AttemptLock) -> bool:
        """Whether some session holds the lock ``name`` (the attempt it names still runs).
        Default: ``False`` (the database cannot tell; every earlier attempt looks ended)."""
        return False

    def transaction_name(self, xid: TransactionId) -> str:
        """How an operator names the prepared transaction in this database's SQL."""
        return f"gid '{xid.gid}'"

    @abstractmethod
    def prepared_ids(self, sink_id: str, conn: Any = None) -> list[TransactionId]:
        """Prepared branches of this database whose gtrid starts with the sink's prefix
        (asked on ``conn``, an autocommit connection, when given)."""

    def prepared_ages(self, sink_id: str) -> dict[str, float]:
        """Seconds since each of the sink's branches prepared, by gid, where the database
        says (PostgreSQL does; MySQL's ``XA RECOVER`` does not)."""
        return {}

    def staging_tables(self, sink_id: str) -> list[TableName]:
        """This sink's staging tables that outlive a transaction (MySQL), for the sweep."""
        return []

    def stored_offsets(self, sink_id: str) -> list[StoredBatch]:
        """The newest marker row of each partition, grouped by query and batch."""
        return stored_batches(self.newest_marker_rows(sink_id))

    @abstractmethod
    def last_markers(self, sink_id: str) -> list[TargetMarker]:
        """Newest marker batch per (query, partition) of ``sink_id``; read-only, and empty
        when the marker table does not exist yet."""

    @abstractmethod
    def create_writer_table(self, conn: Any) -> None:
        """``CREATE TABLE IF NOT EXISTS`` the writer registry on an autocommit connection;
        another session creating it at the same moment is not an error."""

    @abstractmethod
    def upsert_writer(self, conn: Any, record: WriterRecord) -> None:
        """Insert or replace the row of ``(record.sink_id, record.query_id)``: one
        statement. Raises the driver's error for a missing table (:meth:`missing_table`)."""

    @abstractmethod
    def select_writers(self, conn: Any, sink_id: str) -> list[WriterRecord]:
        """The rows of ``sink_id``, by query id; the driver's error for a missing table."""

    @abstractmethod
    def delete_writer(self, conn: Any, sink_id: str, query_id: str) -> None:
        """Delete the row of ``(sink_id, query_id)``; the driver's error for a missing
        table."""

    @abstractmethod
    def missing_table(self, exc: Exception) -> bool:
        """Whether a driver error says the table (or its schema) does not exist."""

    @abstractmethod
    def delete_markers(self, conn: Any, sink_id: str, query_id: str, before_batch: int) -> int:
        """Delete the marker rows of the query's batches before ``before_batch``."""

    @masked
    def forget_markers(self, sink_id: str, query_id: str, before_batch: int) -> int:
        """One ``DELETE`` of the marker rows the driver no longer needs (see
        :meth:`twopc.Sink.forget_markers`), on a connection of its own."""
        conn = self.connect(autocommit=True)
        try:
            return self.delete_markers(conn, sink_id, query_id, before_batch)
        finally:
            _close_quietly(conn)

    @abstractmethod
    def read_limits(self, conn: Any) -> list[WorkLimit]:
        """The server's limits on what a batch holds at once (see :mod:`._limits`)."""

    @masked
    def work_limits(self) -> list[WorkLimit]:
        """Read from the server on a connection of its own: connections (every running
        task holds one) and, for PostgreSQL ``two_phase``, prepared transactions."""
        conn = self.connect(autocommit=True)
        try:
            return self.read_limits(conn)
        finally:
            _close_quietly(conn)

    # -- phase 1 --------------------------------------------------------------------------

    def _error(self, exc: Exception, what: str) -> SinkError:
        kind = self.classify(exc)
        scrub(exc, self.settings.secrets())
        return kind(f"{what}: {_described(exc)}")

    @masked
    def begin_transaction(self, ctx: TaskContext) -> SqlTransaction:
        conn = self.connect(autocommit=True)
        xid = TransactionId.for_task(ctx) if self.two_phase else None
        try:
            keeps_offsets = self._marker_table_ready(conn)
            if self.two_phase:
                # held until pre_commit closes the connection: other attempts of this task
                # can tell this one still runs
                self.hold_attempt_lock(conn, attempt_lock_name(ctx))
                self._settle_earlier_attempts(conn, ctx)
            # In two_phase mode a marker here means the partition was committed under a
            # decision the commit log no longer has (the log was lost, or an operator
            # removed a decision whose other branches were gone), or the driver committed
            # another attempt's branch while this one waited: write it only once.
            skip = self.marker_exists(conn, MarkerKey.of(ctx))
            self.begin(conn, None if skip else xid)
        except Exception as exc:
            _close_quietly(conn)
            if isinstance(exc, SinkError | ConfigurationError):
                # a hook's own error (server cannot prepare, recovery query failed, a marker
                # table of an earlier version the sink's user may not migrate)
                raise
            raise self._error(exc, f"cannot start a transaction on {self.describe()}") from exc
        if skip:
            _log.info(
                "sink %r batch %d partition %d already committed (marker found); skipping",
                ctx.sink_id,
                ctx.batch_id,
                ctx.partition,
            )
        return SqlTransaction(ctx, conn, xid, skip=skip, keeps_offsets=keeps_offsets)

    def _marker_table_ready(self, conn: Any) -> bool:
        """:meth:`ensure_marker_table` once per process (a Python worker runs many tasks of
        the same sink), once it found the table as this version makes it: remembered until
        a task of this sink fails (:meth:`abort` forgets it, so a table dropped meanwhile
        is created again by the retry). A table without the source offset columns is
        looked at again by every task, so that the columns an operator adds are used at
        once."""
        key = self._process_key
        if key in _MARKER_TABLES:
            return True
        keeps_offsets = self.ensure_marker_table(conn)
        if keeps_offsets:
            _MARKER_TABLES.add(key)
        return keeps_offsets

    @property
    def _process_key(self) -> str:
        """What a worker process's memory of this sink's target is keyed by."""
        return (
            f"{type(self).__name__} {self.settings.describe()} {self.options.marker_table} "
            f"two_phase={self.two_phase}"
        )

    def _settle_earlier_attempts(self, conn: Any, ctx: TaskContext) -> None:
        """Another attempt of this task may have prepared: its branch holds locks this
        attempt would wait on. An attempt that still runs (it holds its session lock) is
        waited for, up to ``lock_timeout_seconds``. One that ended is rolled back when it
        cannot have won: a failed attempt, which nothing will commit. But where copies of a
        task run side by side (``ctx.concurrent_attempts``), an ended attempt may have
        reported and be about to be committed by the driver; it is never touched: this
        attempt waits a little for the driver to commit it (then finds the marker and
        writes nothing), and otherwise gives way and fails, so that Spark keeps the other
        attempt or, if that one failed too, fails the batch, whose restart aborts what
        nothing decided."""
        started = time.monotonic()
        pauses = POLLING.delays()
        while True:
            siblings = self._prepared_siblings(ctx.sink_id, ctx, conn)
            if not siblings:
                return
            ended = [c for c in siblings if not self.attempt_lock_held(conn, attempt_lock_name(c))]
            if ended and not ctx.concurrent_attempts:
                for committable in ended:
                    self._roll_back_failed_attempt(ctx, committable)
                continue
            waited = time.monotonic() - started
            if ended and waited > min(_GIVE_WAY_AFTER_SECONDS, self.options.lock_timeout_seconds):
                raise TransientSinkError(
                    f"attempt(s) {', '.join(str(c.attempt) for c in ended)} of this task "
                    "ended and left prepared work that the driver may be about to commit "
                    "(speculative copies may run, so this attempt does not roll it back); "
                    f"after {waited:.0f} s this attempt gives way: Spark keeps the other "
                    "attempt, or the batch fails and its restart aborts what nothing decided"
                )
            if waited > self.options.lock_timeout_seconds:
                raise TransientSinkError(
                    f"attempt(s) {', '.join(str(c.attempt) for c in siblings)} of this "
                    "task still run holding prepared work after "
                    f"{self.options.lock_timeout_seconds:g} s; this attempt gives way"
                )
            time.sleep(next(pauses))

    def _roll_back_failed_attempt(self, ctx: TaskContext, committable: Committable) -> None:
        xid = TransactionId.for_committable(committable)
        _log.warning(
            "sink %r batch %d partition %d attempt %d: rolling back prepared branch %s of a "
            "failed earlier attempt",
            ctx.sink_id,
            ctx.batch_id,
            ctx.partition,
            ctx.attempt,
            xid.gid,
        )
        self.rollback_prepared(xid)

    def _prepared_siblings(
        self, sink_id: str, of: TaskContext | Committable, conn: Any = None
    ) -> list[Committable]:
        """Prepared branches of other attempts of the same task (sink, query, batch and
        partition)."""
        found = []
        for xid in self.prepared_ids(sink_id, conn):
            committable = xid.committable(sink_id)
            if (
                committable is not None
                and committable.query_id == of.query_id
                and committable.batch_id == of.batch_id
                and committable.partition == of.partition
                and committable.attempt != of.attempt
            ):
                found.append(committable)
        return found

    @masked
    def invoke(self, txn: SqlTransaction, batch: pa.RecordBatch) -> None:
        if txn.skip:
            return
        if not txn.checked:
            self._check_first_batch(txn, batch.schema)
        self._check_keys(txn, batch)
        self._check_values(txn, batch)
        try:
            if self.options.needs_staging:
                if txn.staging is None:
                    txn.staging = self.open_staging(txn, batch.schema)
                if self.options.mode == "upsert" and not self.options.delete_column:
                    txn.extra.setdefault(_KEYS, []).append(
                        batch.select(list(self.options.key_columns))
                    )
                seq = pa.array(range(txn.rows, txn.rows + batch.num_rows), pa.int64())
                self.load(txn, txn.staging, batch.append_column(SEQ_COLUMN, seq))
            else:
                self.load(txn, self.options.table, batch)
        except SinkError:
            raise
        except Exception as exc:
            raise self._error(exc, f"writing to {self.options.table} failed") from exc
        txn.rows += batch.num_rows

    def _check_first_batch(self, txn: SqlTransaction, schema: pa.Schema) -> None:
        names = [n for n in schema.names if n != self.options.delete_column]
        for column in (
            *self.options.key_columns,
            self.options.order_column,
            self.options.delete_column,
        ):
            if column is not None and column not in schema.names:
                raise PermanentSinkError(
                    f"column {column!r} is not in the data (columns: {schema.names})"
                )
        try:
            if self.options.schema_evolution == "add_columns":
                self._evolve(txn, [schema.field(n) for n in names])
            existing = self.table_columns(txn.conn, self.options.table)
            if existing is None and self.options.create_table:
                self.create_table(
                    schema.remove(schema.get_field_index(self.options.delete_column))
                    if self.options.delete_column
                    else schema
                )
                existing = self.table_columns(txn.conn, self.options.table)
        except SinkError:
            raise
        except Exception as exc:
            raise self._error(exc, f"cannot inspect table {self.options.table}") from exc
        if existing is None:
            raise PermanentSinkError(
                f"table {self.options.table} does not exist (set create_table=True to create "
                "it from the data's schema)"
            )
        missing = [n for n in names if n not in existing]
        if missing:
            raise PermanentSinkError(
                f"column(s) {missing} of the data are not in table {self.options.table} "
                f"(table columns: {existing})"
            )
        txn.columns = tuple(names)
        txn.checked = True

    def _evolve(self, txn: SqlTransaction, fields: Sequence[pa.Field]) -> None:
        """``schema_evolution="add_columns"``: check the data's columns against the table and
        add the ones it lacks, before the task writes a row (see :mod:`._evolution`)."""
        table = self.options.table
        with self.evolution_session(txn) as conn:
            columns = self.table_schema(conn, table)
            if columns is None:
                return  # create_table, or the error that the table does not exist
            added = new_columns(fields, columns, str(table))
            if added:
                self.add_columns(conn, table, added)
                _log.info(
                    "sink %r batch %d partition %d: added column(s) %s to table %s",
                    txn.ctx.sink_id,
                    txn.ctx.batch_id,
                    txn.ctx.partition,
                    ", ".join(f"{f.name} ({f.type})" for f in added),
                    table,
                )

    def _check_values(self, txn: SqlTransaction, batch: pa.RecordBatch) -> None:
        """Refuse numbers the target's columns cannot hold exactly (see :mod:`._values`),
        in every row: rows that delete their key pass through the staging table too, which
        has the target's column types."""
        specs: dict[str, NumericColumn] | None = txn.extra.get(_NUMERIC)
        if specs is None:
            try:
                specs = self.numeric_columns(txn.conn, self.options.table)
            except Exception as exc:
                raise self._error(exc, f"cannot read the columns of {self.options.table}") from exc
            txn.extra[_NUMERIC] = specs
        if specs:
            check_fit(batch, specs, str(self.options.table), txn.rows)

    def _check_keys(self, txn: SqlTransaction, batch: pa.RecordBatch) -> None:
        for column in self.options.key_columns:
            nulls = batch.column(column).null_count
            if nulls:
                row = pc.index(pc.is_null(batch.column(column)), True).as_py()
                raise PermanentSinkError(
                    f"key column {column!r} is null in {nulls} row(s) (first at row "
                    f"{txn.rows + row} of the partition); upserts need a key"
                )

    @masked
    def pre_commit(self, txn: SqlTransaction) -> Committable:
        if not txn.skip:
            try:
                self.flush(txn)
                if txn.staging is not None:
                    self.merge_staging(txn)
                try:
                    stored = marker_offsets(txn.ctx) if txn.keeps_offsets else None
                    self.insert_marker(txn.conn, txn.marker, txn.ctx.attempt, stored)
                except Exception:
                    if not self._committed_by_another_attempt(txn):
                        raise
                    txn.skip = True
                if self.two_phase and not txn.skip:
                    self.prepare(txn)
            except SinkError:
                raise
            except Exception as exc:
                raise self._error(exc, "pre-commit failed" + self._split_key_hint(exc)) from exc
        if txn.skip:
            self.abort(txn)  # nothing was written; end the empty transaction
            return Committable.for_task(txn.ctx, SqlPayload(rows=0))  # no branch: the marker
        if txn.xid is not None:
            _close_quietly(txn.conn)  # MariaDB lets others commit a branch only once detached
            payload = SqlPayload(txn.rows, gtrid=txn.xid.gtrid, bqual=txn.xid.bqual)
            return Committable.for_task(txn.ctx, payload)
        return Committable.for_task(txn.ctx, SqlPayload(txn.rows))

    @masked
    def commit_task(self, txn: SqlTransaction) -> CommitOutcome:
        """``transaction`` mode: commit the task's transaction (rows and marker row)."""
        if txn.skip:
            return CommitOutcome.ALREADY_COMMITTED
        if not txn.unanswered:
            try:
                txn.conn.commit()
            except Exception as exc:
                error = self._commit_error(exc)
                if not error.retryable:
                    raise error from exc
                txn.unanswered = error.cause_message  # a lost connection or a timeout
            finally:
                _close_quietly(txn.conn)
        if txn.unanswered and not self._commit_landed(txn):
            raise TransientSinkError(
                f"{txn.unanswered}; no marker row shows the transaction committed (yet): "
                "a rerun of the task skips the partition if it did, and writes it again if "
                "it did not"
            )
        self._discard(txn.ctx)
        return CommitOutcome.COMMITTED

    def _commit_landed(self, txn: SqlTransaction) -> bool:
        """Whether a COMMIT whose answer was lost took effect: the marker row committed in
        the same transaction tells. Raises a retryable error while the database cannot
        be asked, so the task's commit retries ask again."""
        try:
            found = self._has_marker(txn.marker)
        except Exception as exc:
            scrub(exc, self.settings.secrets())
            cause = exc.cause_message if isinstance(exc, SinkError) else _described(exc)
            raise TransientSinkError(
                f"{txn.unanswered}; whether it committed is unknown, the marker row cannot "
                f"be read: {cause}"
            ) from exc
        if found:
            _log.warning(
                "sink %r batch %d partition %d: the answer to COMMIT was lost (%s); its "
                "marker row shows the transaction committed",
                txn.ctx.sink_id,
                txn.ctx.batch_id,
                txn.ctx.partition,
                txn.unanswered,
            )
        return found

    def _committed_by_another_attempt(self, txn: SqlTransaction) -> bool:
        """Whether the marker insert failed because another attempt of the same task (a
        speculative copy, or attempt 0 when this is the copy) committed the partition
        after this attempt began: its marker row is there now. This attempt then rolls
        back and reports the partition skipped, instead of failing a batch that another
        attempt completed (Spark keeps whichever attempt reports first)."""
        with contextlib.suppress(Exception):
            self.rollback(txn)
        try:
            found = self._has_marker(txn.marker)
        except Exception:
            return False
        if found:
            _log.warning(
                "sink %r batch %d partition %d attempt %d: another attempt committed the "
                "partition meanwhile (its marker row is there); this attempt rolls back",
                txn.ctx.sink_id,
                txn.ctx.batch_id,
                txn.ctx.partition,
                txn.ctx.attempt,
            )
        return found

    @masked
    def abort(self, txn: SqlTransaction) -> None:
        _MARKER_TABLES.discard(self._process_key)
        try:
            self.rollback(txn)
        except Exception as exc:
            scrub(exc, self.settings.secrets())
            _log.warning("rollback failed; the database rolls back on disconnect", exc_info=exc)
        finally:
            _close_quietly(txn.conn)
        self._discard(txn.ctx)

    def _discard(self, owner: Committable | TaskContext, conn: Any = None) -> None:
        table = self.staging_table(owner) if self.options.needs_staging else None
        if table is None:
            return
        try:
            self.discard_staging(table, conn)
        except Exception as exc:
            scrub(exc, self.settings.secrets())
            _log.warning("dropping staging table %s failed; sweep retries", table, exc_info=exc)

    # -- phase 2 --------------------------------------------------------------------------

    def commits_concurrently(self) -> bool:
        """Each :meth:`commit` call runs on a connection of its own."""
        return True

    @masked
    def commit(self, committables: Sequence[Committable]) -> list[CommitOutcome]:
        """Commit the prepared branches one after another on one connection (the driver
        runs several calls side by side, :meth:`commits_concurrently`); an error names the
        partition whose branch failed."""
        if not committables:
            return []
        conn = self.connect(autocommit=True)
        try:
            outcomes = []
            for c in committables:
                try:
                    outcomes.append(self._commit_one(c, conn))
                except SinkError as exc:
                    exc.at(partition=c.partition)
                    raise
                self._discard(c, conn)
            return outcomes
        finally:
            _close_quietly(conn)

    def _commit_one(self, c: Committable, conn: Any) -> CommitOutcome:
        xid = SqlPayload.of(c).xid
        if xid is None:
            # Nothing was prepared: the task found its marker (a replay), or it committed
            # in the task (transaction mode, decided for the driver by a log that did not
            # record the path). The marker row tells committed from lost.
            return self._committed_in_its_task(c)
        try:
            if self.commit_prepared(xid, conn):
                return CommitOutcome.COMMITTED
        except SinkError as exc:
            raise type(exc)(f"commit failed: {exc.cause_message}") from exc
        except Exception as exc:
            raise self._commit_error(exc) from exc
        return self._already_or_lost(c, xid)

    def _commit_error(self, exc: Exception) -> SinkError:
        kind = self.classify(exc)
        if kind is not TransientSinkError:
            kind = CommitError
        scrub(exc, self.settings.secrets())
        return kind(f"commit failed: {_described(exc)}")

    def _committed_in_its_task(self, c: Committable) -> CommitOutcome:
        if self._has_marker(MarkerKey.of(c)):
            return CommitOutcome.ALREADY_COMMITTED
        raise CommitError(
            "the task prepared nothing, and no marker row shows the partition committed: "
            "its transaction was rolled back before it committed; the partition is written "
            "again when the task or the batch is rerun"
        )

    def _has_marker(self, key: MarkerKey) -> bool:
        """Whether the marker row ``key`` is committed, asked on a connection of its own."""
        conn = self.connect(autocommit=True)
        try:
            return self.marker_exists(conn, key)
        finally:
            _close_quietly(conn)

    def _already_or_lost(self, c: Committable, xid: TransactionId) -> CommitOutcome:
        """The prepared branch is gone: committed before (its marker shows it), replaced
        by another attempt of the same task that prepared the same partition (a copy that
        rolled the decided attempt back: commit that one instead, so the partition still
        commits exactly once), or lost."""
        if self._has_marker(MarkerKey.of(c)):
            return CommitOutcome.ALREADY_COMMITTED
        for sibling in self._prepared_siblings(c.sink_id, c):
            other = TransactionId.for_committable(sibling)
            if self.commit_prepared(other):
                _log.warning(
                    "sink %r batch %d partition %d: the decided attempt %d's prepared "
                    "transaction %s is gone; committed attempt %d's (%s), which prepared "
                    "the same partition, instead",
                    c.sink_id,
                    c.batch_id,
                    c.partition,
                    c.attempt,
                    self.transaction_name(xid),
                    sibling.attempt,
                    self.transaction_name(other),
                )
                return CommitOutcome.COMMITTED
        raise CommitError(
            f"the decision says commit, but prepared transaction {self.transaction_name(xid)} "
            "is neither prepared nor committed (no marker row): it was rolled back outside "
            "twopc (ROLLBACK PREPARED / XA ROLLBACK, or a restore of the database), so this "
            "partition's rows of the batch are not in the table. Nothing will commit them; "
            "see 'A prepared transaction that is gone' in docs/operations.md"
        )

    @masked
    def abort_prepared(self, committables: Sequence[Committable]) -> None:
        for c in committables:
            # the branch's id derives from the committable's identity, so even a payload
            # this version cannot read is aborted
            self.rollback_prepared(TransactionId.for_committable(c))
            self._discard(c)

    # -- recovery -------------------------------------------------------------------------

    @masked
    def sweep(self, sink_id: str, keep: Sequence[Committable] = ()) -> int:
        if not self.options.needs_staging:
            return 0
        prepared = [*keep, *self.recover(sink_id)]
        tables = {t for t in (self.staging_table(c) for c in prepared) if t is not None}
        return self.sweep_staging(sink_id, tables)

    @masked
    def inspect(self, sink_id: str) -> Inspection:
        """Prepared branches, leftover staging tables and the marker rows, read-only."""
        prepared = self.recover(sink_id)
        ages = self.prepared_ages(sink_id) if prepared else {}
        pending: list[PendingWork] = []
        for c in prepared:
            gid = TransactionId.for_committable(c).gid
            pending.append(PendingWork.prepared(c, gid, ages.get(gid)))
        if self.options.needs_staging:
            kept = {self.staging_table(c) for c in prepared}
            for table in self.staging_tables(sink_id):
                if table not in kept:
                    pending.append(
                        PendingWork(
                            kind=WorkKind.UNPREPARED,
                            ident=str(table),
                            detail="staging table of an attempt that did not finish",
                        )
                    )
        notes: list[str] = []
        if not self.two_phase:
            notes.append(
                "transaction mode: each task commits its own transaction; the server rolls "
                "back a crashed task's open transaction when its connection drops, so nothing "
                "stays prepared. The marker rows show which partitions committed."
            )
        return Inspection(tuple(pending), tuple(self.last_markers(sink_id)), tuple(notes))

    # -- the writer registry (TracksWriters) ---------------------------------------------

    @masked
    def record_writer(self, record: WriterRecord) -> None:
        """Upsert this writer's row: one statement on a short autocommit connection (the
        driver's, never a task's transaction). Creates the registry if it is missing."""
        conn = self.connect(autocommit=True)
        try:
            try:
                self.upsert_writer(conn, record)
            except Exception as exc:
                if not self.missing_table(exc):
                    raise
                self.create_writer_table(conn)
                self.upsert_writer(conn, record)
        except (SinkError, ConfigurationError):
            raise
        except Exception as exc:
            raise self._error(
                exc,
                f"cannot record query {record.query_id} of sink id {record.sink_id!r} in "
                f"the writer registry {self.writer_table} ({self.settings.describe()})",
            ) from exc
        finally:
            _close_quietly(conn)

    @masked
    def writers(self, sink_id: str) -> list[WriterRecord]:
        """The registry's rows of ``sink_id``; none while the registry does not exist (it
        is not created here: reading needs no ``CREATE`` privilege)."""
        conn = self.connect(autocommit=True)
        try:
            return self.select_writers(conn, sink_id)
        except Exception as exc:
            if self.missing_table(exc):
                return []
            if isinstance(exc, SinkError | ConfigurationError):
                raise
            raise self._error(
                exc,
                f"cannot read the writer registry {self.writer_table} ({self.settings.describe()})",
            ) from exc
        finally:
            _close_quietly(conn)

    @masked
    def remove_writer(self, sink_id: str, query_id: str) -> None:
        """Delete the row of a writer that stopped cleanly; nothing if there is none."""
        conn = self.connect(autocommit=True)
        try:
            self.delete_writer(conn, sink_id, query_id)
        except Exception as exc:
            if self.missing_table(exc):
                return
            if isinstance(exc, SinkError | ConfigurationError):
                raise
            raise self._error(
                exc,
                f"cannot remove query {query_id} of sink id {sink_id!r} from the writer "
                f"registry {self.writer_table} ({self.settings.describe()})",
            ) from exc
        finally:
            _close_quietly(conn)

    def naming(self) -> dict[str, Any]:
        """The mode: a replay in the other mode cannot be skipped partition by partition."""
        return {"transaction_mode": self.options.transaction_mode}

    @masked
    def committed_partitions(
        self, scope: RecoveryScope, batch_id: int, footprint: Footprint
    ) -> set[int] | None:
        """Partitions whose marker row shows ``batch_id`` (or a later batch) committed."""
        return {
            m.partition
            for m in self.last_markers(scope.sink_id)
            if m.query_id == scope.query_id and m.batch_id >= batch_id
        }

    @masked
    def recover(self, sink_id: str) -> list[Committable]:
        """Prepared branches of ``sink_id``, in both modes: ``transaction`` mode prepares
        nothing itself, but an earlier run in ``two_phase`` mode may have left some."""
        try:
            xids = self.prepared_ids(sink_id)
        except SinkError as exc:
            raise type(exc)(
                f"recovery cannot list prepared transactions: {exc.cause_message}"
            ) from exc
        found = []
        for xid in xids:
            committable = xid.committable(sink_id)
            if committable is not None:
                found.append(committable)
        return found


class CommitsSqlTransactionInTask(CommitsInTask[SqlTransaction]):
    """The ``transaction`` mode of a SQL sink: each task commits its own transaction, rows
    and marker row together. Mixed into each backend's ``in_task_class``."""

    def commit_in_task(self, txn: SqlTransaction) -> CommitOutcome:
        assert isinstance(self, SqlSink)
        return self.commit_task(txn)


def _switches(cls: type[SqlSink], variant: type[SqlSink]) -> bool:
    """Whether constructing ``cls`` in ``transaction`` mode gives its in-task subclass."""
    return not issubclass(cls, CommitsInTask) and issubclass(variant, cls)


def _timeout_hint(clash: Sequence[str]) -> str:
    if any("timeout" in name for name in clash):
        return " (set connect_timeout_seconds= / read_timeout_seconds= instead)"
    return ""


def _described(exc: Exception) -> str:
    return f"{type(exc).__name__}: {str(exc).strip()}"


def _close_quietly(conn: Any) -> None:
    try:
        conn.close()
    except Exception as exc:
        scrub(exc, ())  # connection strings and password= settings, whatever the secret
        _log.debug("closing a connection failed", exc_info=exc)
