"""The ``postgres`` backend: PostgreSQL through psycopg 3.

Appends use binary ``COPY``; upserts and deletes ``COPY`` into an unlogged staging table
created inside the transaction (temporary tables cannot be prepared), then
``INSERT ... SELECT DISTINCT ON (keys) ... ON CONFLICT ... DO UPDATE``. Every identifier is
quoted with ``psycopg.sql.Identifier``; values travel as parameters or through ``COPY``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from decimal import Decimal
from typing import Any, ClassVar, Literal

import psycopg
import pyarrow as pa
import pyarrow.compute as pc
from psycopg import errors as pgerrors
from psycopg import sql

from twopc import (
    ConfigurationError,
    PermanentSinkError,
    SinkError,
    TargetMarker,
    TransientSinkError,
    WorkLimit,
    WriterRecord,
)
from twopc_jdbc._base import (
    SEQ_COLUMN,
    AttemptLock,
    CommitsSqlTransactionInTask,
    MarkerKey,
    SqlSink,
    SqlTransaction,
    TransactionId,
    _close_quietly,
    evolution_lock_name,
)
from twopc_jdbc._evolution import TableColumn
from twopc_jdbc._limits import postgres_limits
from twopc_jdbc._offsets import MarkerOffsets, MarkerRow, warn_no_offset_columns
from twopc_jdbc._options import TableName
from twopc_jdbc._pgcopy import HEADER, TRAILER, Encoder, encoder_for
from twopc_jdbc._secrets import scrub
from twopc_jdbc._values import NumericColumn

__all__ = ["PostgresSink"]

_log = logging.getLogger("twopc.jdbc")

# sqlstate classes that retrying will not fix: authorization, unknown database
_PERMANENT_OPERATIONAL = ("28", "3D")
# what psycopg's wait raises when its timeout expires (an OperationalError, named private)
_WAIT_TIMEOUT: type[psycopg.OperationalError] = pgerrors._WaitTimeout


class _TimedConnection(psycopg.Connection[Any]):
    """A connection that waits at most ``read_timeout`` seconds for any answer.

    A stalled server (stopped process, network dropping packets) keeps the socket open and
    silent. libpq then waits forever: ``statement_timeout`` runs on the server, and TCP
    keepalives or ``tcp_user_timeout`` see nothing wrong while the server's kernel still
    acknowledges. Every psycopg operation (statements, COPY chunks, commit, the two-phase
    calls) goes through :meth:`wait`, which takes a timeout; after it the protocol state is
    unknown, so the connection is closed and the operation fails as ``OperationalError``.
    (``wait`` takes a timeout since psycopg 3.3.8, the floor of the ``postgres`` extra.)
    """

    read_timeout: float | None = None

    def wait(self, gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
        if timeout is not None or self.read_timeout is None:
            return super().wait(gen, interval, timeout)
        try:
            return super().wait(gen, interval, self.read_timeout)
        except _WAIT_TIMEOUT as exc:
            self.close()
            raise psycopg.OperationalError(
                f"no answer from the server within {self.read_timeout:g}s "
                "(read_timeout_seconds); the connection was closed"
            ) from exc


_PG_TYPES: list[tuple[Callable[[pa.DataType], bool], str]] = [
    (pa.types.is_boolean, "boolean"),
    (lambda t: pa.types.is_int8(t) or pa.types.is_int16(t) or pa.types.is_uint8(t), "smallint"),
    (lambda t: pa.types.is_int32(t) or pa.types.is_uint16(t), "integer"),
    (lambda t: pa.types.is_int64(t) or pa.types.is_uint32(t), "bigint"),
    (pa.types.is_float32, "real"),
    (pa.types.is_float64, "double precision"),
    (lambda t: pa.types.is_string(t) or pa.types.is_large_string(t), "text"),
    (lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t), "bytea"),
    (pa.types.is_date, "date"),
]


# Two sessions racing through CREATE TABLE IF NOT EXISTS: the loser fails on the catalog's
# unique indexes, as "relation exists", a unique violation or "type ... already exists".
_ALREADY_CREATED = (pgerrors.DuplicateTable, pgerrors.UniqueViolation, pgerrors.DuplicateObject)

# binary COPY wraps integers that do not fit these types around silently: check first
_INT_LIMITS = {"int2": 2**15, "int4": 2**31, "int8": 2**63}
_TIMESTAMPS = ("timestamp", "timestamptz")
_CONVERSION = "conversion table"
"""``SqlTransaction.extra`` entry: the table an append with time-zone conversions loads
into before ``INSERT ... SELECT`` moves the rows into the target."""
_VARHDRSZ = 4
"""What ``atttypmod`` of a ``numeric(p,s)`` column adds to ``(p << 16) | s``."""
_NARROW_ATTEMPT = ("smallint", "integer")
"""Types of a marker table's ``attempt`` column (``information_schema``) that cannot hold
Spark's task attempt ids: ``integer`` is what twopc 0.2 and earlier created."""
_MARKER_ATTEMPT = (
    "SELECT n.nspname, c.data_type, o.column_name IS NOT NULL FROM pg_class r "
    "JOIN pg_namespace n ON n.oid = r.relnamespace "
    "LEFT JOIN information_schema.columns c ON c.table_schema = n.nspname "
    "AND c.table_name = r.relname AND c.column_name = 'attempt' "
    "LEFT JOIN information_schema.columns o ON o.table_schema = n.nspname "
    "AND o.table_name = r.relname AND o.column_name = 'source_offsets' "
    "WHERE r.oid = to_regclass(%s)"
)
"""The marker table's schema, the type of its ``attempt`` column and whether it has the
offset columns; no row if the table does not exist (``to_regclass`` finds it the way the
sink's statements do)."""


_WRITER_COLUMNS = ("sink_id", "query_id", "host", "pid", "process_start", "updated_at")
_MISSING = (pgerrors.UndefinedTable, pgerrors.InvalidSchemaName)
"""What a statement on a table that does not exist (or whose schema does not) raises."""
# MERGE failures that ON CONFLICT does not have: a key another writer inserted (or a row it
# deleted, before 15.3) meanwhile; a table MERGE refuses (rules, a view, a foreign table)
_MERGE_RACES = (pgerrors.UniqueViolation, pgerrors.SerializationFailure)
_MERGE_FALLBACKS = (*_MERGE_RACES, pgerrors.FeatureNotSupported, pgerrors.WrongObjectType)


def _zone_kind(arrow_type: pa.DataType) -> str | None:
    """``timestamptz`` for Arrow timestamps with a time zone, ``timestamp`` without."""
    if not pa.types.is_timestamp(arrow_type):
        return None
    return "timestamptz" if arrow_type.tz is not None else "timestamp"


def _converted(schema: pa.Schema, types: dict[str, str]) -> dict[str, str]:
    """Columns whose timestamps are of the other time-zone kind than the table's column:
    name -> the data's kind. PostgreSQL converts them itself, by its casts."""
    found = {}
    for f in schema:
        kind = _zone_kind(f.type)
        if kind is not None and types.get(f.name) in _TIMESTAMPS and types[f.name] != kind:
            found[f.name] = kind
    return found


def _to_integers(batch: pa.RecordBatch, types: dict[str, str], table: TableName) -> pa.RecordBatch:
    """Decimals and floats bound for integer columns as int64 (the values are whole
    numbers by now: ``_values.check_fit`` ran), so COPY encodes them as integers."""
    for i, f in enumerate(batch.schema):
        if types.get(f.name) not in _INT_LIMITS:
            continue
        if not (pa.types.is_decimal(f.type) or pa.types.is_floating(f.type)):
            continue
        try:
            column = pc.cast(batch.column(i), pa.int64())
        except pa.ArrowInvalid as exc:
            raise PermanentSinkError(
                f"column {f.name!r} of table {table} is {types[f.name]}: a value is out of "
                f"its range ({exc})"
            ) from exc
        batch = batch.set_column(i, f.name, column)
    return batch


def _out_of_range(batch: pa.RecordBatch, types: dict[str, str]) -> str | None:
    """Why an integer of the batch does not fit its integer column, or None."""
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        limit = _INT_LIMITS.get(types[name])
        if limit is None or not pa.types.is_integer(column.type):
            continue
        bounds = pc.min_max(column).as_py()
        for value in (bounds["min"], bounds["max"]):
            if value is not None and not -limit <= value < limit:
                return f"column {name!r}: {value} is out of range for {types[name]}"
    return None


def _pg_type(arrow_type: pa.DataType) -> str:
    """The column type ``create_table`` uses for an Arrow type."""
    if pa.types.is_decimal(arrow_type):
        return f"numeric({arrow_type.precision},{arrow_type.scale})"
    if pa.types.is_timestamp(arrow_type):
        return "timestamptz" if arrow_type.tz else "timestamp"
    for matches, name in _PG_TYPES:
        if matches(arrow_type):
            return name
    raise ConfigurationError(
        f"create_table and schema_evolution cannot map the Arrow type {arrow_type} to PostgreSQL"
    )


class PostgresSink(SqlSink):
    """Exactly-once writes to a PostgreSQL table.

    Args:
        dsn: ``postgresql://user:password@host:port/database[?sslmode=require...]``.
        table: target table, ``name`` or ``schema.name``.
        mode: ``append`` (binary COPY) or ``upsert`` on ``key_columns``.
        key_columns: the conflict target for upserts (a unique index must exist) and the
            keys that ``delete_column`` deletes by.
        order_column: among duplicate keys of one partition, the row with the largest
            value wins; input order breaks ties.
        delete_column: a boolean column; rows where it is true delete their key instead.
        shuffle_by_key: shuffle each batch by ``key_columns`` before phase 1 (default), so
            every key's rows meet in one task. ``False`` skips the shuffle where each key is
            in one partition of a batch already (unique keys, or grouped by them).
        create_table: create the table from the data's schema if it does not exist.
        schema_evolution: ``none`` (the data's columns must exist) or ``add_columns``:
            add the data's new columns as nullable columns, in the task's transaction in
            ``transaction`` mode, in a transaction of their own before the rows in
            ``two_phase`` mode; changes it cannot follow fail the batch first.
        transaction_mode: ``transaction`` (commit in each task) or ``two_phase``
            (``PREPARE TRANSACTION`` in the task, ``COMMIT PREPARED`` on the driver).
        marker_table: where commit markers live (created if missing).
        lock_timeout_seconds: ``lock_timeout`` inside each transaction.
        connect_timeout_seconds: libpq's ``connect_timeout``.
        read_timeout_seconds: the longest wait for any answer of the server (client side:
            a stalled server cannot hang a task or the driver longer than this).
        connect_options: passed to ``psycopg.connect`` (``sslmode``, ``sslrootcert``, ...).
    """

    backend_name = "postgres"
    url_schemes = ("postgresql", "postgres")
    reserved_options = ("autocommit", "connect_timeout")
    connection_keys: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "host": ("host",),
        "port": ("port",),
        "user": ("user",),
        "password": ("password",),
        "database": ("dbname",),
    }
    max_lock_timeout_seconds = 2_147_483.0  # lock_timeout is an int of milliseconds

    def connect(self, *, autocommit: bool) -> Any:
        settings = self.settings
        params: dict[str, Any] = {
            "host": settings.host,
            "autocommit": autocommit,
            # libpq takes whole seconds; 1 is the smallest that means "bounded"
            "connect_timeout": max(1, round(self.options.connect_timeout_seconds)),
            **dict(settings.options),
        }
        for key, value in (
            ("port", settings.port),
            ("user", settings.user),
            ("password", settings.password),
            ("dbname", settings.database),
        ):
            if value is not None:
                params[key] = value
        try:
            conn = _TimedConnection.connect(**params)
        except psycopg.Error as exc:
            scrub(exc, settings.secrets())
            raise self.classify(exc)(
                f"cannot connect to {settings.describe()}: {_first_line(exc)}"
            ) from exc
        conn.read_timeout = self.options.read_timeout_seconds
        return conn

    def classify(self, exc: Exception) -> type[SinkError]:
        state = getattr(exc, "sqlstate", None) or ""
        if isinstance(exc, psycopg.OperationalError):
            if state.startswith(_PERMANENT_OPERATIONAL) or "password authentication" in str(exc):
                return PermanentSinkError
            return TransientSinkError
        if isinstance(exc, psycopg.InterfaceError):
            return TransientSinkError
        return PermanentSinkError

    def lock_timed_out(self, exc: Exception) -> bool:
        return isinstance(exc, pgerrors.LockNotAvailable)

    # -- identifiers ----------------------------------------------------------------------

    @staticmethod
    def _ident(table: TableName) -> sql.Composable:
        if table.schema:
            return sql.Identifier(table.schema, table.name)
        return sql.Identifier(table.name)

    @staticmethod
    def _columns(names: Any) -> sql.Composable:
        return sql.SQL(", ").join(sql.Identifier(n) for n in names)

    # -- markers and transactions -----------------------------------------------------------

    def ensure_marker_table(self, conn: Any) -> bool:
        marker = self._ident(self.options.marker_table)
        # Look first: CREATE TABLE IF NOT EXISTS needs the CREATE privilege on the schema
        # even when the table exists, and writers often lack it.
        found = self._marker_attempt(conn)
        keeps_offsets = True
        if found is None:
            statement = sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (sink_id text NOT NULL, query_id text NOT NULL, "
                "batch_id bigint NOT NULL, partition_id integer NOT NULL, "
                "attempt bigint NOT NULL, committed_at timestamptz NOT NULL DEFAULT now(), "
                "partitions integer, source_offsets text, "
                "PRIMARY KEY (sink_id, query_id, batch_id, partition_id))"
            ).format(marker)
            # another task may create it at the same moment
            with contextlib.suppress(*_ALREADY_CREATED):
                conn.execute(statement)
        else:
            schema, attempt_type, has_offsets = found
            if attempt_type in _NARROW_ATTEMPT:
                self._widen_attempt(conn, schema, attempt_type)
            keeps_offsets = has_offsets or self._add_offset_columns(conn, schema)
        if self.two_phase:
            value = conn.execute("SHOW max_prepared_transactions").fetchone()[0]
            if int(value) == 0:
                raise PermanentSinkError(
                    "transaction_mode='two_phase' needs prepared transactions, but the server "
                    "has max_prepared_transactions = 0; set it above 0 (e.g. 64) and restart "
                    "PostgreSQL, or use transaction_mode='transaction'"
                )
        return keeps_offsets

    def _marker_attempt(self, conn: Any) -> tuple[str, str | None, bool] | None:
        """Where the marker table is (the schema the connection's ``search_path`` finds it
        in), the type of its ``attempt`` column and whether it has the offset columns, from
        the catalog; None if it does not exist."""
        regclass = self._ident(self.options.marker_table).as_string(conn)
        row = conn.execute(_MARKER_ATTEMPT, (regclass,)).fetchone()
        if row is None:
            return None
        return str(row[0]), None if row[1] is None else str(row[1]), bool(row[2])

    @contextlib.contextmanager
    def _migrating_markers(self, conn: Any) -> Iterator[tuple[str, str | None, bool] | None]:
        """A transaction holding the marker table's migration lock (tasks racing to migrate
        it take turns), with the catalog read again under it: what it says now."""
        lock = evolution_lock_name(self.settings.database, self.options.marker_table)
        with conn.transaction():
            conn.execute(
                sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(self._lock_timeout))
            )
            conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", lock.keys)
            yield self._marker_attempt(conn)

    def _add_offset_columns(self, conn: Any, schema: str) -> bool:
        """Give a marker table of an earlier version the offset columns, once (under an
        advisory lock, the catalog read again). Without the right to alter the table, the
        sink goes on without them and says what to run: whether the table has them now."""
        table = self.options.marker_table
        alter = sql.SQL(
            "ALTER TABLE {} ADD COLUMN IF NOT EXISTS partitions integer, "
            "ADD COLUMN IF NOT EXISTS source_offsets text"
        )
        try:
            with self._migrating_markers(conn) as now:
                if now is None or now[2]:
                    return True  # another task added them meanwhile
                conn.execute(alter.format(self._ident(table)))
        except pgerrors.InsufficientPrivilege as exc:
            statement = alter.format(self._ident(TableName(table.name, schema)))
            warn_no_offset_columns(str(table), _first_line(exc), statement.as_string(conn))
            return False
        except psycopg.Error as exc:
            raise self._error(
                exc, f"cannot add the source offset columns to the marker table {table}"
            ) from exc
        _log.info("marker table %s: added the source offset columns", table)
        return True

    def _widen_attempt(self, conn: Any, schema: str, narrow: str | None) -> None:
        """Migrate a marker table of an earlier version, whose ``attempt`` column is 32-bit,
        to ``bigint`` (Spark's task attempt ids are longs). Runs once: under an advisory
        lock the catalog is read again, so of tasks racing here one alters the table and
        the others find it done. ``ALTER TABLE`` needs to own the table: without that, a
        :class:`ConfigurationError` gives the statement to run by hand."""
        table = self.options.marker_table
        alter = sql.SQL("ALTER TABLE {} ALTER COLUMN {} TYPE bigint")
        try:
            with self._migrating_markers(conn) as now:
                if now is None or now[1] not in _NARROW_ATTEMPT:
                    return  # another task migrated it meanwhile
                conn.execute(alter.format(self._ident(table), sql.Identifier("attempt")))
        except pgerrors.InsufficientPrivilege as exc:
            where = TableName(table.name, schema)
            statement = alter.format(self._ident(where), sql.Identifier("attempt"))
            raise ConfigurationError(
                f"the marker table {where} was created by twopc 0.2 or earlier: its attempt "
                f"column is {narrow}, and Spark's task attempt ids are longs (they pass 2**31 "
                "in a long-running application). The sink widens the column to bigint on "
                f"first use, but its user may not alter the table: {_first_line(exc)}. Have "
                f"the table's owner run: {statement.as_string(conn)};"
            ) from exc
        except psycopg.Error as exc:
            raise self._error(
                exc, f"cannot widen the attempt column of the marker table {table} to bigint"
            ) from exc
        _log.info("marker table %s: widened the attempt column to bigint", table)

    def marker_exists(self, conn: Any, key: MarkerKey) -> bool:
        row = conn.execute(
            sql.SQL(
                "SELECT 1 FROM {} WHERE sink_id = %s AND query_id = %s AND batch_id = %s "
                "AND partition_id = %s"
            ).format(self._ident(self.options.marker_table)),
            (key.sink_id, key.query_id, key.batch_id, key.partition),
        ).fetchone()
        return row is not None

    def insert_marker(
        self, conn: Any, key: MarkerKey, attempt: int, stored: MarkerOffsets | None
    ) -> None:
        marker = self._ident(self.options.marker_table)
        values = (key.sink_id, key.query_id, key.batch_id, key.partition, attempt)
        if stored is None:
            conn.execute(
                sql.SQL(
                    "INSERT INTO {} (sink_id, query_id, batch_id, partition_id, attempt) "
                    "VALUES (%s, %s, %s, %s, %s)"
                ).format(marker),
                values,
            )
            return
        conn.execute(
            sql.SQL(
                "INSERT INTO {} (sink_id, query_id, batch_id, partition_id, attempt, "
                "partitions, source_offsets) VALUES (%s, %s, %s, %s, %s, %s, %s)"
            ).format(marker),
            (*values, stored.partitions, stored.source_offsets),
        )

    def hold_attempt_lock(self, conn: Any, name: AttemptLock) -> None:
        # a session-level advisory lock, taken outside the transaction the task prepares
        conn.execute("SELECT pg_try_advisory_lock(%s, %s)", name.keys)

    def attempt_lock_held(self, conn: Any, name: AttemptLock) -> bool:
        row = conn.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_locks l JOIN pg_database d ON d.oid = l.database "
            "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 "
            "AND l.classid = %s::bigint::oid AND l.objid = %s::bigint::oid "
            "AND d.datname = current_database())",
            name.keys,
        ).fetchone()
        return bool(row[0])

    def begin(self, conn: Any, xid: TransactionId | None) -> None:
        conn.autocommit = False
        if xid is not None:
            conn.tpc_begin(xid.gid)
        conn.execute(sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(self._lock_timeout)))

    @property
    def _lock_timeout(self) -> str:
        # at least 1 ms: 0 would mean "wait forever"
        return f"{max(1, int(self.options.lock_timeout_seconds * 1000))}ms"

    def prepare(self, txn: SqlTransaction) -> None:
        txn.conn.tpc_prepare()

    def rollback(self, txn: SqlTransaction) -> None:
        if txn.xid is not None and not txn.skip:
            txn.conn.tpc_rollback()
        else:
            txn.conn.rollback()

    def _on_server(self, statement: sql.Composable, conn: Any = None) -> bool:
        own = conn is None
        if own:
            conn = self.connect(autocommit=True)
        try:
            conn.execute(statement)
            return True
        except pgerrors.UndefinedObject:
            return False
        finally:
            if own:
                _close_quietly(conn)

    def delete_markers(self, conn: Any, sink_id: str, query_id: str, before_batch: int) -> int:
        cursor = conn.execute(
            sql.SQL("DELETE FROM {} WHERE sink_id = %s AND query_id = %s AND batch_id < %s").format(
                self._ident(self.options.marker_table)
            ),
            (sink_id, query_id, before_batch),
        )
        return int(cursor.rowcount or 0)

    def read_limits(self, conn: Any) -> list[WorkLimit]:
        return postgres_limits(conn, two_phase=self.two_phase)

    def commit_prepared(self, xid: TransactionId, conn: Any = None) -> bool:
        return self._on_server(sql.SQL("COMMIT PREPARED {}").format(sql.Literal(xid.gid)), conn)

    def rollback_prepared(self, xid: TransactionId) -> bool:
        return self._on_server(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(xid.gid)))

    def prepared_ids(self, sink_id: str, conn: Any = None) -> list[TransactionId]:
        own = conn is None
        if own:
            conn = self.connect(autocommit=True)
        try:
            rows = conn.execute(
                "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() "
                "AND starts_with(gid, %s) ORDER BY gid",
                (TransactionId.gtrid_prefix(sink_id),),
            ).fetchall()
        finally:
            if own:
                _close_quietly(conn)
        return [x for x in (TransactionId.parse_gid(r[0]) for r in rows) if x is not None]

    def prepared_ages(self, sink_id: str) -> dict[str, float]:
        conn = self.connect(autocommit=True)
        try:
            rows = conn.execute(
                "SELECT gid, extract(epoch FROM now() - prepared) FROM pg_prepared_xacts "
                "WHERE database = current_database() AND starts_with(gid, %s)",
                (TransactionId.gtrid_prefix(sink_id),),
            ).fetchall()
        finally:
            _close_quietly(conn)
        return {str(gid): float(age) for gid, age in rows}

    def last_markers(self, sink_id: str) -> list[TargetMarker]:
        conn = self.connect(autocommit=True)
        try:
            marker = self._ident(self.options.marker_table)
            found = conn.execute("SELECT to_regclass(%s)", (marker.as_string(conn),)).fetchone()
            if found is None or found[0] is None:
                return []
            rows = conn.execute(
                sql.SQL(
                    "SELECT query_id, partition_id, max(batch_id) FROM {} WHERE sink_id = %s "
                    "GROUP BY query_id, partition_id ORDER BY query_id, partition_id"
                ).format(marker),
                (sink_id,),
            ).fetchall()
        finally:
            _close_quietly(conn)
        return [TargetMarker(str(q), int(p), int(b)) for q, p, b in rows]

    def newest_marker_rows(self, sink_id: str) -> list[MarkerRow]:
        conn = self.connect(autocommit=True)
        try:
            found = self._marker_attempt(conn)
            if found is None:
                return []
            offsets = sql.SQL("m.partitions, m.source_offsets" if found[2] else "NULL, NULL")
            rows = conn.execute(
                sql.SQL(
                    "SELECT m.query_id, m.partition_id, m.batch_id, {offsets}, "
                    "extract(epoch FROM m.committed_at) FROM {marker} m JOIN ("
                    "SELECT query_id, partition_id, max(batch_id) AS batch_id FROM {marker} "
                    "WHERE sink_id = %s GROUP BY query_id, partition_id) n "
                    "USING (query_id, partition_id, batch_id) WHERE m.sink_id = %s"
                ).format(offsets=offsets, marker=self._ident(self.options.marker_table)),
                (sink_id, sink_id),
            ).fetchall()
        finally:
            _close_quietly(conn)
        return [
            MarkerRow(str(q), int(p), int(b), n, o, None if t is None else float(t))
            for q, p, b, n, o, t in rows
        ]

    # -- the writer registry ----------------------------------------------------------------

    def create_writer_table(self, conn: Any) -> None:
        statement = sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (sink_id text NOT NULL, query_id text NOT NULL, "
            "host text NOT NULL, pid bigint NOT NULL, process_start text, "
            "updated_at timestamptz NOT NULL, PRIMARY KEY (sink_id, query_id))"
        ).format(self._ident(self.writer_table))
        with contextlib.suppress(*_ALREADY_CREATED):  # another driver at the same moment
            conn.execute(statement)

    def upsert_writer(self, conn: Any, record: WriterRecord) -> None:
        conn.execute(
            sql.SQL(
                "INSERT INTO {} ({}) VALUES (%s, %s, %s, %s, %s, %s) "
                "ON CONFLICT (sink_id, query_id) DO UPDATE SET host = EXCLUDED.host, "
                "pid = EXCLUDED.pid, process_start = EXCLUDED.process_start, "
                "updated_at = EXCLUDED.updated_at"
            ).format(self._ident(self.writer_table), self._columns(_WRITER_COLUMNS)),
            (
                record.sink_id,
                record.query_id,
                record.host,
                record.pid,
                record.process_start,
                dt.datetime.fromtimestamp(record.updated_at, dt.UTC),
            ),
        )

    def select_writers(self, conn: Any, sink_id: str) -> list[WriterRecord]:
        rows = conn.execute(
            sql.SQL("SELECT {} FROM {} WHERE sink_id = %s ORDER BY query_id").format(
                self._columns(_WRITER_COLUMNS), self._ident(self.writer_table)
            ),
            (sink_id,),
        ).fetchall()
        return [
            WriterRecord(
                sink_id=str(s),
                query_id=str(q),
                host=str(h),
                pid=int(p),
                updated_at=u.timestamp(),
                process_start=None if start is None else str(start),
            )
            for s, q, h, p, start, u in rows
        ]

    def delete_writer(self, conn: Any, sink_id: str, query_id: str) -> None:
        conn.execute(
            sql.SQL("DELETE FROM {} WHERE sink_id = %s AND query_id = %s").format(
                self._ident(self.writer_table)
            ),
            (sink_id, query_id),
        )

    def missing_table(self, exc: Exception) -> bool:
        return isinstance(exc, _MISSING)

    # -- tables ---------------------------------------------------------------------------

    def table_columns(self, conn: Any, table: TableName) -> list[str] | None:
        rows = conn.execute(
            "SELECT column_name FROM information_schema.columns "
            "WHERE table_schema = coalesce(%s, current_schema()) AND table_name = %s "
            "ORDER BY ordinal_position",
            (table.schema, table.name),
        ).fetchall()
        return [r[0] for r in rows] or None

    def table_schema(self, conn: Any, table: TableName) -> list[TableColumn] | None:
        rows = conn.execute(
            "SELECT column_name, data_type, is_nullable = 'YES', column_default IS NOT NULL "
            "OR is_identity = 'YES' OR is_generated <> 'NEVER' FROM information_schema.columns "
            "WHERE table_schema = coalesce(%s, current_schema()) AND table_name = %s "
            "ORDER BY ordinal_position",
            (table.schema, table.name),
        ).fetchall()
        return [
            TableColumn(str(n), str(t), bool(null), bool(dflt)) for n, t, null, dflt in rows
        ] or None

    @contextlib.contextmanager
    def evolution_session(self, txn: SqlTransaction) -> Iterator[Any]:
        # Transaction mode: in the task's transaction, so a partition that rolls back takes
        # its ALTER with it; ALTER's ACCESS EXCLUSIVE lock makes the batch's other partitions
        # wait for this one's commit (only in the batch that brings the column).
        if not self.two_phase:
            yield txn.conn
            return
        # two_phase: a prepared branch would hold ACCESS EXCLUSIVE until the driver commits,
        # after every partition prepared: the others could never write. Commit it first.
        conn = self.connect(autocommit=False)
        try:
            conn.execute(
                sql.SQL("SET LOCAL lock_timeout = {}").format(sql.Literal(self._lock_timeout))
            )
            lock = evolution_lock_name(self.settings.database, self.options.table)
            conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", lock.keys)
            yield conn
            conn.commit()
        finally:
            _close_quietly(conn)

    def add_columns(self, conn: Any, table: TableName, fields: Sequence[pa.Field]) -> None:
        conn.execute(
            sql.SQL("ALTER TABLE {} {}").format(
                self._ident(table),
                sql.SQL(", ").join(
                    sql.SQL("ADD COLUMN IF NOT EXISTS {} {}").format(
                        sql.Identifier(f.name), sql.SQL(_pg_type(f.type))
                    )
                    for f in fields
                ),
            )
        )

    def create_table(self, schema: pa.Schema) -> None:
        columns = [
            sql.SQL("{} {}").format(sql.Identifier(f.name), sql.SQL(_pg_type(f.type)))
            for f in schema
            if f.name != SEQ_COLUMN
        ]
        if self.options.key_columns:
            columns.append(
                sql.SQL("PRIMARY KEY ({})").format(self._columns(self.options.key_columns))
            )
        conn = self.connect(autocommit=True)
        try:
            conn.execute(
                sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(
                    self._ident(self.options.table), sql.SQL(", ").join(columns)
                )
            )
        except _ALREADY_CREATED:
            pass
        finally:
            _close_quietly(conn)

    def _column_types(self, conn: Any, table: TableName) -> dict[str, str]:
        regclass = self._ident(table).as_string(conn)
        rows = conn.execute(
            "SELECT a.attname, t.typname FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
            "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped",
            (regclass,),
        ).fetchall()
        return dict(rows)

    def numeric_columns(self, conn: Any, table: TableName) -> dict[str, NumericColumn]:
        rows = conn.execute(
            "SELECT a.attname, format_type(a.atttypid, a.atttypmod), t.typname, a.atttypmod "
            "FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
            "WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped "
            "AND t.typname IN ('numeric', 'int2', 'int4', 'int8')",
            (self._ident(table).as_string(conn),),
        ).fetchall()
        found = {}
        for name, shown, typname, typmod in rows:
            if typname != "numeric":
                found[str(name)] = NumericColumn(str(shown), None, 0)
            elif typmod >= _VARHDRSZ:  # numeric without (p,s) holds any value exactly
                bits = typmod - _VARHDRSZ
                scale = ((bits & 0x7FF) ^ 1024) - 1024  # 11 signed bits (PostgreSQL 15)
                found[str(name)] = NumericColumn(str(shown), (bits >> 16) & 0xFFFF, scale)
        return found

    def _types(self, txn: SqlTransaction, table: TableName) -> dict[str, str]:
        """Column name -> type name of ``table``, read once per task."""
        key = f"types:{table}"
        if key not in txn.extra:
            txn.extra[key] = self._column_types(txn.conn, table)
        types: dict[str, str] = txn.extra[key]
        return types

    def _select_list(
        self, txn: SqlTransaction, columns: Sequence[str], schema: pa.Schema
    ) -> sql.Composable:
        """The target's columns for a table that receives the data first: a timestamp
        column of the other time-zone kind than the data's takes the data's kind, so
        that the data loads unchanged and PostgreSQL's own cast converts it when the rows
        move into the target (``timestamptz`` -> ``timestamp`` in the session's TimeZone,
        and back)."""
        converted = _converted(schema, self._types(txn, self.options.table))
        return sql.SQL(", ").join(
            sql.SQL("{}::{} AS {}").format(
                sql.Identifier(c), sql.SQL(converted[c]), sql.Identifier(c)
            )
            if c in converted
            else sql.Identifier(c)
            for c in columns
        )

    def _conversion_table(self, txn: SqlTransaction, schema: pa.Schema) -> TableName:
        """An append's table for rows whose timestamps PostgreSQL must convert (created
        in the task's transaction, dropped by :meth:`flush`)."""
        found: TableName | None = txn.extra.get(_CONVERSION)
        if found is not None:
            return found
        table = TableName(f"twopc_conv_{_task_digest(txn)}", self.options.table.schema)
        txn.conn.execute(
            sql.SQL("CREATE UNLOGGED TABLE {} AS SELECT {} FROM {} WITH NO DATA").format(
                self._ident(table),
                self._select_list(txn, schema.names, schema),
                self._ident(self.options.table),
            )
        )
        txn.extra[_CONVERSION] = table
        return table

    def flush(self, txn: SqlTransaction) -> None:
        table: TableName | None = txn.extra.pop(_CONVERSION, None)
        if table is not None:
            txn.conn.execute(sql.SQL("DROP TABLE {}").format(self._ident(table)))

    def open_staging(self, txn: SqlTransaction, schema: pa.Schema) -> TableName:
        staging = TableName(f"twopc_stage_{_task_digest(txn)}", self.options.table.schema)
        target = self._ident(self.options.table)
        conn = txn.conn
        conn.execute(
            sql.SQL("CREATE UNLOGGED TABLE {} AS SELECT {} FROM {} WITH NO DATA").format(
                self._ident(staging), self._select_list(txn, txn.columns, schema), target
            )
        )
        conn.execute(
            sql.SQL("ALTER TABLE {} ADD COLUMN {} bigint").format(
                self._ident(staging), sql.Identifier(SEQ_COLUMN)
            )
        )
        if self.options.delete_column:
            conn.execute(
                sql.SQL("ALTER TABLE {} ADD COLUMN {} boolean").format(
                    self._ident(staging), sql.Identifier(self.options.delete_column)
                )
            )
        return staging

    def load(self, txn: SqlTransaction, table: TableName, batch: pa.RecordBatch) -> None:
        batch = _to_integers(batch, self._types(txn, table), table)
        if table == self.options.table and _converted(batch.schema, self._types(txn, table)):
            # timestamps of the other time-zone kind: load them as they are, and let
            # PostgreSQL's assignment cast convert them on the way into the target
            staged = self._conversion_table(txn, batch.schema)
            self._copy(txn, staged, batch)
            columns = self._columns(batch.schema.names)
            txn.conn.execute(
                sql.SQL("INSERT INTO {} ({}) SELECT {} FROM {}").format(
                    self._ident(table), columns, columns, self._ident(staged)
                )
            )
            txn.conn.execute(sql.SQL("TRUNCATE {}").format(self._ident(staged)))
            return
        self._copy(txn, table, batch)

    def _copy(self, txn: SqlTransaction, table: TableName, batch: pa.RecordBatch) -> None:
        """Binary ``COPY`` of ``batch`` into ``table``: column-wise where the encoder
        takes every column, row by row through psycopg otherwise."""
        conn = txn.conn
        types = self._types(txn, table)
        names = batch.schema.names
        statement = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(
            self._ident(table), self._columns(names)
        )
        problem = _out_of_range(batch, types)
        if problem is not None:
            raise PermanentSinkError(f"a value does not fit its column in {table}: {problem}")
        encoder = self._encoder(txn, table, batch.schema, types)
        try:
            with conn.cursor() as cursor, cursor.copy(statement) as copy:
                if encoder is not None:
                    copy.write(HEADER)
                    for part in encoder(batch):
                        copy.write(part)
                    copy.write(TRAILER)
                else:
                    _write_rows(copy, batch, [types[n] for n in names])
        except (TypeError, ValueError, OverflowError) as exc:
            mapping = ", ".join(f"{f.name} {f.type} -> {types[f.name]}" for f in batch.schema)
            raise PermanentSinkError(
                f"a value does not fit its column in {table}: {type(exc).__name__}: {exc} "
                f"(data -> table types: {mapping})"
            ) from exc

    @staticmethod
    def _encoder(
        txn: SqlTransaction, table: TableName, schema: pa.Schema, types: dict[str, str]
    ) -> Encoder | None:
        """The column-wise COPY encoder for this schema, built once per table and task."""
        key = f"encoder:{table}"
        cached = txn.extra.get(key)
        if cached is None or cached[0] != schema:
            cached = (schema, encoder_for(schema, [types[n] for n in schema.names]))
            txn.extra[key] = cached
        encoder: Encoder | None = cached[1]
        return encoder

    _upsert_statement = "merge"
    """How an upsert leaves its staging table: ``merge`` (``MERGE`` on PostgreSQL 15 and
    later, ``INSERT ... ON CONFLICT`` where it cannot run) or ``on_conflict`` (always;
    only the benchmark sets it, ``TWOPC_BENCH_PG_UPSERT=on_conflict``, to compare)."""

    _merge_refused: str | None = None
    """Why this table refused ``MERGE`` (rules, a view): later tasks of this process go
    straight to ``ON CONFLICT``."""

    def merge_staging(self, txn: SqlTransaction) -> None:
        assert txn.staging is not None
        options = self.options
        winners = self._winners(txn)
        keep: sql.Composable = sql.SQL("")
        if options.delete_column:
            flag = sql.Identifier(options.delete_column)
            txn.conn.execute(
                sql.SQL(
                    "DELETE FROM {target} AS t USING ({winners}) AS w WHERE {match} AND w.{flag}"
                ).format(
                    target=self._ident(options.table),
                    winners=winners,
                    match=self._key_match(),
                    flag=flag,
                )
            )
            keep = sql.SQL(" WHERE NOT coalesce(w.{}, false)").format(flag)
        merges = options.mode == "upsert" and not options.delete_column and self._merges(txn)
        if not (merges and self._merged(txn, winners)):
            txn.conn.execute(self._insert(txn, winners, keep))
        txn.conn.execute(sql.SQL("DROP TABLE {}").format(self._ident(txn.staging)))
        txn.staging = None

    def _winners(self, txn: SqlTransaction) -> sql.Composable:
        """The staged rows to write, one per key: the largest ``order_column``, then the
        latest row. Sorted by key even where no key repeats: the merge join then walks
        the table's index in order, and updating rows in key order took 1.50 s against
        1.91 s unsorted (hash join) for 500,000 existing keys (0.75 against 0.63 s into
        an empty table)."""
        assert txn.staging is not None
        options = self.options
        keys = self._columns(options.key_columns)
        order = (
            [sql.SQL("{} DESC NULLS LAST").format(sql.Identifier(options.order_column))]
            if options.order_column
            else []
        )
        order.append(sql.SQL("{} DESC").format(sql.Identifier(SEQ_COLUMN)))
        return sql.SQL(
            "SELECT DISTINCT ON ({keys}) * FROM {stage} ORDER BY {keys}, {order}"
        ).format(keys=keys, stage=self._ident(txn.staging), order=sql.SQL(", ").join(order))

    def _key_match(self) -> sql.Composable:
        return sql.SQL(" AND ").join(
            sql.SQL("t.{k} = w.{k}").format(k=sql.Identifier(k)) for k in self.options.key_columns
        )

    def _insert(
        self, txn: SqlTransaction, winners: sql.Composable, keep: sql.Composable
    ) -> sql.Composable:
        """``INSERT ... SELECT`` of the winners; for upserts ``ON CONFLICT`` on the keys
        updates the rows whose key exists."""
        options = self.options
        columns = self._columns(txn.columns)
        insert = sql.SQL(
            "INSERT INTO {target} ({columns}) SELECT {columns} FROM ({winners}) AS w{keep}"
        ).format(target=self._ident(options.table), columns=columns, winners=winners, keep=keep)
        if options.mode != "upsert":
            return insert
        assignments = self._assignments(txn, "EXCLUDED")
        action: sql.Composable = sql.SQL("DO NOTHING")
        if assignments is not None:
            action = sql.SQL("DO UPDATE SET {}").format(assignments)
        return sql.SQL("{} ON CONFLICT ({}) {}").format(
            insert, self._columns(options.key_columns), action
        )

    def _assignments(
        self, txn: SqlTransaction, source: Literal["EXCLUDED", "w"]
    ) -> sql.Composable | None:
        """``c = <source>.c`` for every non-key column (``ON CONFLICT``'s ``EXCLUDED``,
        ``MERGE``'s winners ``w``); ``None`` when every column is a key."""
        updates = [c for c in txn.columns if c not in self.options.key_columns]
        if not updates:
            return None
        return sql.SQL(", ").join(
            sql.SQL("{c} = {s}.{c}").format(c=sql.Identifier(c), s=sql.SQL(source)) for c in updates
        )

    def _merges(self, txn: SqlTransaction) -> bool:
        """Whether this upsert tries ``MERGE`` first (PostgreSQL 15 and later)."""
        return (
            self._upsert_statement == "merge"
            and self._merge_refused is None
            and txn.conn.info.server_version >= 150000
        )

    def _merged(self, txn: SqlTransaction, winners: sql.Composable) -> bool:
        """``MERGE`` the winners into the table under a savepoint, in one round trip;
        whether it did. ``MERGE`` joins once where ``ON CONFLICT`` probes the index row by
        row (faster when keys exist), but it raises a unique violation where another
        writer inserted one of the keys since the statement began, and some tables
        (rules, views) refuse it: then the savepoint is rolled back and the caller runs
        ``ON CONFLICT``, which absorbs both. Nothing of the failed ``MERGE`` stays."""
        conn = txn.conn
        try:
            conn.execute(
                sql.SQL("SAVEPOINT twopc_merge; {}; RELEASE SAVEPOINT twopc_merge").format(
                    self._merge(txn, winners)
                )
            )
        except _MERGE_FALLBACKS as exc:
            conn.execute("ROLLBACK TO SAVEPOINT twopc_merge")
            cause = f"{type(exc).__name__}: {_first_line(exc)}"
            if not isinstance(exc, _MERGE_RACES):
                self._merge_refused = cause
            _log.info(
                "table %s: MERGE failed (%s); upserting with INSERT ... ON CONFLICT instead",
                self.options.table,
                cause,
            )
            return False
        return True

    def _merge(self, txn: SqlTransaction, winners: sql.Composable) -> sql.Composable:
        """``MERGE`` of the winners into the table: matched keys updated, the others
        inserted (the same rows ``ON CONFLICT`` leaves)."""
        options = self.options
        assignments = self._assignments(txn, "w")
        matched: sql.Composable = (
            sql.SQL("DO NOTHING")
            if assignments is None
            else sql.SQL("UPDATE SET {}").format(assignments)
        )
        return sql.SQL(
            "MERGE INTO {target} AS t USING ({winners}) AS w ON {match} "
            "WHEN MATCHED THEN {matched} "
            "WHEN NOT MATCHED THEN INSERT ({columns}) VALUES ({values})"
        ).format(
            target=self._ident(options.table),
            winners=winners,
            match=self._key_match(),
            matched=matched,
            columns=self._columns(txn.columns),
            values=sql.SQL(", ").join(
                sql.SQL("w.{}").format(sql.Identifier(c)) for c in txn.columns
            ),
        )


def _write_rows(copy: Any, batch: pa.RecordBatch, pg_types: list[str]) -> None:
    """Row by row through psycopg: for column types the column-wise encoder leaves out."""
    copy.set_types(pg_types)
    columns = [
        _as_decimals(values) if pg_type == "numeric" and pa.types.is_floating(values.type)
        else values.to_pylist()
        for values, pg_type in zip(batch.columns, pg_types, strict=True)
    ]  # fmt: skip
    for row in zip(*columns, strict=True):
        copy.write_row(row)


def _as_decimals(values: pa.Array) -> list[Decimal | None]:
    """Floats for a numeric column, by their shortest round-trip form (``1.24``, not
    ``1.2399999999999999911182158029987``), as :mod:`._values` judged them."""
    return [None if v is None else Decimal(repr(v)) for v in values.to_pylist()]


def _task_digest(txn: SqlTransaction) -> str:
    """Names a task attempt's own tables: sink, query, batch, partition and attempt."""
    ctx = txn.ctx
    identity = f"{ctx.sink_id}\0{ctx.query_id}\0{ctx.batch_id}\0{ctx.partition}\0{ctx.attempt}"
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


class _PostgresTransactionSink(PostgresSink, CommitsSqlTransactionInTask):
    """:class:`PostgresSink` in ``transaction_mode="transaction"``: each task commits itself.
    ``PostgresSink(...)`` returns it for that mode."""


PostgresSink.in_task_class = _PostgresTransactionSink
