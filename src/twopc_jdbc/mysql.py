"""The ``mysql`` backend: MySQL 8 and MariaDB 10.5+ through PyMySQL.

Rows are bulk-loaded with ``LOAD DATA LOCAL INFILE`` from a CSV file pyarrow writes (no
Python object per value); ``LOCAL`` turns data errors into warnings, so every load reads
``SHOW WARNINGS`` and fails the batch on any warning. Upserts and deletes load into a
permanent staging table (DDL would end an XA transaction, so it is created beforehand, one
per task attempt, named by a hash of the attempt), then ``INSERT ... SELECT`` the last row
per key (``ROW_NUMBER()``) ``ON DUPLICATE KEY UPDATE``: MariaDB's ``VALUES(col)`` form, or
MySQL's reference to the derived table. Identifiers are quoted with backticks (doubled inside).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pymysql

from twopc import (
    Committable,
    ConfigurationError,
    PermanentSinkError,
    SinkError,
    TargetMarker,
    TaskContext,
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
from twopc_jdbc._limits import mysql_limits
from twopc_jdbc._offsets import MarkerOffsets, MarkerRow, warn_no_offset_columns
from twopc_jdbc._options import TableName
from twopc_jdbc._secrets import scrub
from twopc_jdbc._values import NumericColumn

__all__ = ["MySQLSink", "quote_identifier"]

_log = logging.getLogger("twopc.jdbc")

_STAGING_PREFIX = "twopc_stage_"

# client errors (can't connect, server gone, lost connection), lock wait timeout, deadlock,
# server shutdown: retrying may help. 1440 (XAER_DUPID): the XID is still active on the
# connection of a killed attempt of the same task (a stopped or crashed query's dying
# worker); the task's retry runs as a new attempt, under a new XID.
_TRANSIENT_CODES = frozenset({2003, 2006, 2013, 2055, 1205, 1213, 1053, 1927, 1440})
_XAER_NOTA = 1397
# no such table (1146), unknown database (1049)
_MISSING_TABLE = frozenset({1146, 1049})
_WRITER_COLUMNS = ("sink_id", "query_id", "host", "pid", "process_start", "updated_at")
_DUPLICATE_COLUMN = 1060
# access denied: to a database (1044), a table (1142), a column (1143), or a privilege the
# statement needs (1227)
_ACCESS_DENIED = frozenset({1044, 1142, 1143, 1227})
_NARROW_ATTEMPT = ("tinyint", "smallint", "mediumint", "int")
"""Types of a marker table's ``attempt`` column (``information_schema``) that cannot hold
Spark's task attempt ids: ``INT`` is what twopc 0.2 and earlier created."""
_SCALED_TYPES = ("decimal", "numeric")
_INTEGER_TYPES = ("tinyint", "smallint", "mediumint", "int", "integer", "bigint")
_CSV_OPTIONS = pacsv.WriteOptions(
    include_header=False, null_string="NULL", quoting_style="all_valid"
)


_BUFFER = "csv"
"""``SqlTransaction.extra`` entry: the task's CSV file not loaded yet."""
_LOAD_ROWS = 100_000


_TLS_CONTEXTS: dict[str, Any] = {}
"""Per process: PyMySQL's TLS contexts for connections that name no certificate file."""


class _Connection(pymysql.connections.Connection):  # type: ignore[misc]  # untyped
    """PyMySQL's connection with its TLS context made once per process where no
    certificate file is named: PyMySQL builds one per connection, loading the system's CA
    certificates (17 ms a connection on the test machine), even in its default mode, which
    only tries TLS. Contexts that name files are built every time (a renewed certificate
    is read by the next connection)."""

    def _create_ssl_ctx(self, sslp: Any) -> Any:
        if not isinstance(sslp, dict) or any(sslp.get(k) for k in ("ca", "capath", "cert", "key")):
            return super()._create_ssl_ctx(sslp)
        key = repr(sorted((k, repr(v)) for k, v in sslp.items()))
        context = _TLS_CONTEXTS.get(key)
        if context is None:
            context = _TLS_CONTEXTS[key] = super()._create_ssl_ctx(sslp)
        return context


@dataclass
class _CsvBuffer:
    """Rows written to a local CSV file, waiting for one ``LOAD DATA LOCAL``."""

    table: TableName
    schema: pa.Schema
    path: str
    writer: Any
    rows: int = 0

    @classmethod
    def open(cls, table: TableName, schema: pa.Schema) -> _CsvBuffer:
        handle, path = tempfile.mkstemp(prefix="twopc-", suffix=".csv")
        os.close(handle)
        writer = pacsv.CSVWriter(path, schema, write_options=_CSV_OPTIONS)
        return cls(table, schema, path, writer)

    def remove(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


def quote_identifier(name: str) -> str:
    """Quote an identifier with backticks; PyMySQL has no tool for identifiers."""
    if not name or "\x00" in name or len(name) > 64:
        raise ConfigurationError(f"invalid MySQL identifier {name!r}")
    return "`" + name.replace("`", "``") + "`"


def _table(table: TableName) -> str:
    if table.schema:
        return f"{quote_identifier(table.schema)}.{quote_identifier(table.name)}"
    return quote_identifier(table.name)


def _columns(names: Any) -> str:
    return ", ".join(quote_identifier(n) for n in names)


_MYSQL_TYPES: list[tuple[Callable[[pa.DataType], bool], str]] = [
    (pa.types.is_boolean, "BOOLEAN"),
    (pa.types.is_int8, "TINYINT"),
    (lambda t: pa.types.is_int16(t) or pa.types.is_uint8(t), "SMALLINT"),
    (lambda t: pa.types.is_int32(t) or pa.types.is_uint16(t), "INT"),
    (lambda t: pa.types.is_int64(t) or pa.types.is_uint32(t), "BIGINT"),
    (pa.types.is_float32, "FLOAT"),
    (pa.types.is_float64, "DOUBLE"),
    (pa.types.is_date, "DATE"),
    (pa.types.is_timestamp, "DATETIME(6)"),
]


def _mysql_type(field: pa.Field, is_key: bool) -> str:
    t = field.type
    if pa.types.is_decimal(t):
        return f"DECIMAL({t.precision},{t.scale})"
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "VARCHAR(255)" if is_key else "TEXT"  # keys cannot be TEXT without a length
    for matches, name in _MYSQL_TYPES:
        if matches(t):
            return name
    raise ConfigurationError(
        f"create_table and schema_evolution cannot map the Arrow type {t} to MySQL"
    )


def _csv_ready(batch: pa.RecordBatch) -> pa.Table:
    """Types LOAD DATA reads back exactly: booleans as 0/1, timestamps as naive UTC."""
    columns = []
    for column in batch.columns:
        kind = column.type
        if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
            raise TypeError("binary columns are not supported by the mysql backend yet")
        if pa.types.is_boolean(kind):
            columns.append(pc.cast(column, pa.int8()))
        elif pa.types.is_timestamp(kind) and kind.tz is not None:
            columns.append(pc.cast(column, pa.timestamp(kind.unit)))
        else:
            columns.append(column)
    return pa.Table.from_arrays(columns, names=batch.schema.names)


class MySQLSink(SqlSink):
    """Exactly-once writes to a MySQL 8 or MariaDB 10.5+ table.

    Takes the same options as :class:`twopc_jdbc.postgres.PostgresSink`; ``dsn`` is
    ``mysql://user:password@host:port/database``, and ``connect_options`` go to
    ``pymysql.connect`` (``ssl={...}``, ``ssl_ca``, ...); its socket timeouts come from
    ``connect_timeout_seconds`` and ``read_timeout_seconds`` (also the write timeout).
    ``LOAD DATA LOCAL`` needs ``local_infile=ON`` on the server (MariaDB's default; MySQL 8
    defaults to OFF).
    """

    backend_name = "mysql"
    url_schemes = ("mysql", "mariadb")
    reserved_options = (
        "autocommit",
        "local_infile",
        "connect_timeout",
        "read_timeout",
        "write_timeout",
    )
    connection_keys: ClassVar[Mapping[str, tuple[str, ...]]] = {
        "host": ("host",),
        "port": ("port",),
        "user": ("user",),
        "password": ("password", "passwd"),
        "database": ("database", "db"),
    }
    max_lock_timeout_seconds = 1_073_741_824.0  # innodb_lock_wait_timeout's maximum
    max_identifier_length = 64  # characters

    @staticmethod
    def identifier_length(name: str) -> int:
        return len(name)

    def connect(self, *, autocommit: bool) -> Any:
        settings = self.settings
        params: dict[str, Any] = {
            "host": settings.host,
            "port": settings.port or 3306,
            "user": settings.user,
            "password": settings.password or "",
            "database": settings.database,
            "autocommit": autocommit,
            "local_infile": True,
            "charset": "utf8mb4",
            # Timestamps are written as UTC; TIMESTAMP columns must not shift them.
            "init_command": "SET time_zone = '+00:00'",
            # socket timeouts: a stalled server cannot hang a task or the driver forever
            "connect_timeout": self.options.connect_timeout_seconds,
            "read_timeout": self.options.read_timeout_seconds,
            "write_timeout": self.options.read_timeout_seconds,
            **{key: _coerce(value) for key, value in settings.options.items()},
        }
        try:
            return _Connection(**params)
        except pymysql.MySQLError as exc:
            scrub(exc, settings.secrets())
            raise self.classify(exc)(
                f"cannot connect to {settings.describe()}: {_message(exc)}"
            ) from exc
        except TypeError as exc:
            scrub(exc, settings.secrets())
            raise ConfigurationError(
                f"the mysql backend's option connect_options has an option pymysql does not "
                f"take: {exc}"
            ) from exc

    def classify(self, exc: Exception) -> type[SinkError]:
        code = _code(exc)
        if isinstance(exc, pymysql.err.InterfaceError) or code in _TRANSIENT_CODES:
            return TransientSinkError
        return PermanentSinkError

    def lock_timed_out(self, exc: Exception) -> bool:
        return _code(exc) == 1205  # ER_LOCK_WAIT_TIMEOUT

    def _flavor(self, conn: Any) -> str:
        with conn.cursor() as cursor:
            cursor.execute("SELECT VERSION()")
            version = str(cursor.fetchone()[0])
        return "mariadb" if "mariadb" in version.lower() else "mysql"

    # -- markers and transactions -----------------------------------------------------------

    def ensure_marker_table(self, conn: Any) -> bool:
        # Runs before the task's transaction begins (DDL would end it, and is refused
        # inside XA). Look first: CREATE TABLE IF NOT EXISTS needs the CREATE privilege
        # even when the table exists.
        keeps_offsets = True
        with conn.cursor() as cursor:
            found = self._marker_attempt(cursor)
            if found is None:
                cursor.execute(
                    f"CREATE TABLE IF NOT EXISTS {_table(self.options.marker_table)} ("
                    "sink_id VARCHAR(64) NOT NULL, query_id VARCHAR(64) NOT NULL, "
                    "batch_id BIGINT NOT NULL, partition_id INT NOT NULL, "
                    "attempt BIGINT NOT NULL, "
                    "committed_at TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), "
                    "partitions INT NULL, source_offsets TEXT NULL, "
                    "PRIMARY KEY (sink_id, query_id, batch_id, partition_id)) ENGINE=InnoDB"
                )
            else:
                database, attempt_type, has_offsets = found
                if attempt_type in _NARROW_ATTEMPT:
                    self._widen_attempt(database, attempt_type)
                keeps_offsets = has_offsets or self._add_offset_columns(database)
            if self.two_phase:
                try:
                    cursor.execute("XA RECOVER")
                    cursor.fetchall()
                except pymysql.MySQLError as exc:
                    scrub(exc, self.settings.secrets())
                    raise PermanentSinkError(
                        "transaction_mode='two_phase' needs XA RECOVER, which failed "
                        f"({_message(exc)}); grant XA_RECOVER_ADMIN (MySQL 8) or use "
                        "transaction_mode='transaction'"
                    ) from exc
        return keeps_offsets

    def _marker_attempt(self, cursor: Any) -> tuple[str, str, bool] | None:
        """The marker table's database, the type of its ``attempt`` column and whether it
        has the offset columns, from ``information_schema``; None if the table (or its
        ``attempt`` column) is not there."""
        marker = self.options.marker_table
        cursor.execute(
            "SELECT table_schema, column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = COALESCE(%s, DATABASE()) AND table_name = %s "
            "AND column_name IN ('attempt', 'source_offsets')",
            (marker.schema, marker.name),
        )
        rows = {str(r[1]).lower(): (str(r[0]), str(r[2]).lower()) for r in cursor.fetchall()}
        if "attempt" not in rows:
            return None
        database, attempt_type = rows["attempt"]
        return database, attempt_type, "source_offsets" in rows

    def _add_offset_columns(self, database: str) -> bool:
        """Give a marker table of an earlier version the offset columns, once (on a DDL
        session of its own, the catalog read again under its lock). Without the ALTER
        privilege, the sink goes on without them and says what to run: whether the table
        has them now."""
        marker = self.options.marker_table
        alter = (
            f"ALTER TABLE {_table(TableName(marker.name, database))} "
            "ADD COLUMN partitions INT NULL, ADD COLUMN source_offsets TEXT NULL"
        )
        what = f"adding the source offset columns to the marker table {marker}"
        with self._ddl_session(marker, what) as conn, conn.cursor() as cursor:
            now = self._marker_attempt(cursor)
            if now is None or now[2]:
                return True  # another task added them meanwhile
            try:
                cursor.execute(alter)
            except pymysql.MySQLError as exc:
                if _code(exc) not in _ACCESS_DENIED:
                    raise self._error(exc, what) from exc
                scrub(exc, self.settings.secrets())
                warn_no_offset_columns(str(marker), _message(exc), alter)
                return False
        _log.info("marker table %s: added the source offset columns", marker)
        return True

    def _widen_attempt(self, database: str, narrow: str) -> None:
        """Migrate a marker table of an earlier version, whose ``attempt`` column is 32-bit,
        to ``BIGINT`` (Spark's task attempt ids are longs). On a connection of its own, in
        autocommit: the DDL commits implicitly, and must not end the task's transaction
        (MariaDB ends an XA transaction on DDL). Runs once: under ``GET_LOCK`` the catalog
        is read again, so of tasks racing here one alters the table and the others find
        it done. Without the ALTER privilege, a :class:`ConfigurationError` gives the
        statement to run by hand."""
        marker = self.options.marker_table
        column = quote_identifier("attempt")
        what = f"widening the attempt column of the marker table {marker}"
        with self._ddl_session(marker, what) as conn, conn.cursor() as cursor:
            now = self._marker_attempt(cursor)
            if now is None or now[1] not in _NARROW_ATTEMPT:
                return  # another task migrated it meanwhile
            try:
                cursor.execute(f"ALTER TABLE {_table(marker)} MODIFY {column} BIGINT NOT NULL")
            except pymysql.MySQLError as exc:
                if _code(exc) not in _ACCESS_DENIED:
                    raise self._error(
                        exc,
                        f"cannot widen the attempt column of the marker table {marker} to BIGINT",
                    ) from exc
                scrub(exc, self.settings.secrets())
                where = TableName(marker.name, database)
                raise ConfigurationError(
                    f"the marker table {where} was created by twopc 0.2 or earlier: its "
                    f"attempt column is {narrow.upper()}, and Spark's task attempt ids are "
                    "longs (they pass 2**31 in a long-running application). The sink "
                    "widens the column to BIGINT on first use, but its user may not alter "
                    f"the table: {_message(exc)}. Have a user with the ALTER privilege "
                    f"on it run: ALTER TABLE {_table(where)} MODIFY {column} BIGINT "
                    "NOT NULL;"
                ) from exc
        _log.info("marker table %s: widened the attempt column to BIGINT", marker)

    def marker_exists(self, conn: Any, key: MarkerKey) -> bool:
        with conn.cursor() as cursor:
            cursor.execute(
                f"SELECT 1 FROM {_table(self.options.marker_table)} WHERE sink_id = %s AND "
                "query_id = %s AND batch_id = %s AND partition_id = %s",
                (key.sink_id, key.query_id, key.batch_id, key.partition),
            )
            return cursor.fetchone() is not None

    def insert_marker(
        self, conn: Any, key: MarkerKey, attempt: int, stored: MarkerOffsets | None
    ) -> None:
        marker = _table(self.options.marker_table)
        values = (key.sink_id, key.query_id, key.batch_id, key.partition, attempt)
        with conn.cursor() as cursor:
            if stored is None:
                cursor.execute(
                    f"INSERT INTO {marker} (sink_id, query_id, batch_id, partition_id, "
                    "attempt) VALUES (%s, %s, %s, %s, %s)",
                    values,
                )
                return
            cursor.execute(
                f"INSERT INTO {marker} (sink_id, query_id, batch_id, partition_id, attempt, "
                "partitions, source_offsets) VALUES (%s, %s, %s, %s, %s, %s, %s)",
                (*values, stored.partitions, stored.source_offsets),
            )

    def newest_marker_rows(self, sink_id: str) -> list[MarkerRow]:
        marker = _table(self.options.marker_table)
        conn = self.connect(autocommit=True)
        try:
            with conn.cursor() as cursor:
                found = self._marker_attempt(cursor)
                if found is None:
                    return []
                offsets = "m.partitions, m.source_offsets" if found[2] else "NULL, NULL"
                cursor.execute(
                    f"SELECT m.query_id, m.partition_id, m.batch_id, {offsets}, "
                    f"UNIX_TIMESTAMP(m.committed_at) FROM {marker} m JOIN ("
                    f"SELECT query_id, partition_id, MAX(batch_id) AS batch_id FROM {marker} "
                    "WHERE sink_id = %s GROUP BY query_id, partition_id) n "
                    "ON m.query_id = n.query_id AND m.partition_id = n.partition_id "
                    "AND m.batch_id = n.batch_id WHERE m.sink_id = %s",
                    (sink_id, sink_id),
                )
                rows = cursor.fetchall()
        finally:
            _close_quietly(conn)
        return [
            MarkerRow(str(q), int(p), int(b), n, o, None if t is None else float(t))
            for q, p, b, n, o, t in rows
        ]

    def hold_attempt_lock(self, conn: Any, name: AttemptLock) -> None:
        # a user-level lock: not transactional, released when the connection closes
        with conn.cursor() as cursor:
            cursor.execute("SELECT GET_LOCK(%s, 0)", (name.text,))
            cursor.fetchall()

    def attempt_lock_held(self, conn: Any, name: AttemptLock) -> bool:
        with conn.cursor() as cursor:
            cursor.execute("SELECT IS_USED_LOCK(%s)", (name.text,))
            row = cursor.fetchone()
        return row is not None and row[0] is not None

    def begin(self, conn: Any, xid: TransactionId | None) -> None:
        with conn.cursor() as cursor:
            cursor.execute(
                "SET SESSION innodb_lock_wait_timeout = %s",
                (max(1, int(self.options.lock_timeout_seconds)),),
            )
            # READ COMMITTED takes no gap locks: the tasks of one batch touch disjoint keys,
            # and a prepared XA branch keeps its locks until the driver commits it, so with
            # gap locks (REPEATABLE READ) one task could wait on another's prepared branch.
            cursor.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED")
            if xid is not None:
                cursor.execute("XA START %s, %s", (xid.gtrid, xid.bqual))
            else:
                conn.autocommit(False)
                conn.begin()

    def prepare(self, txn: SqlTransaction) -> None:
        assert txn.xid is not None
        with txn.conn.cursor() as cursor:
            cursor.execute("XA END %s, %s", (txn.xid.gtrid, txn.xid.bqual))
            cursor.execute("XA PREPARE %s, %s", (txn.xid.gtrid, txn.xid.bqual))

    def rollback(self, txn: SqlTransaction) -> None:
        buffer: _CsvBuffer | None = txn.extra.pop(_BUFFER, None)
        if buffer is not None:
            with contextlib.suppress(Exception):
                buffer.writer.close()
            buffer.remove()
        if txn.xid is None or txn.skip:
            txn.conn.rollback()
            return
        with txn.conn.cursor() as cursor:
            with contextlib.suppress(pymysql.MySQLError):  # already ended
                cursor.execute("XA END %s, %s", (txn.xid.gtrid, txn.xid.bqual))
            cursor.execute("XA ROLLBACK %s, %s", (txn.xid.gtrid, txn.xid.bqual))

    def _xa(self, verb: str, xid: TransactionId, conn: Any = None) -> bool:
        """``XA COMMIT`` or ``XA ROLLBACK`` of a prepared branch: False when the server
        does not know it. A ``COMMIT`` waits for a branch whose session is still
        closing (:func:`_wait_detached`)."""
        own = conn is None
        if own:
            # XA COMMIT of a detached branch needs autocommit
            conn = self.connect(autocommit=True)
        try:
            with conn.cursor() as cursor:
                statement = f"XA {verb} %s, %s"
                try:
                    cursor.execute(statement, (xid.gtrid, xid.bqual))
                except pymysql.MySQLError as exc:
                    if _code(exc) != _XAER_NOTA:
                        raise
                    if verb != "COMMIT" or not _wait_detached(cursor, xid, statement):
                        return False
            return True
        finally:
            if own:
                _close_quietly(conn)

    def delete_markers(self, conn: Any, sink_id: str, query_id: str, before_batch: int) -> int:
        with conn.cursor() as cursor:
            return int(
                cursor.execute(
                    f"DELETE FROM {_table(self.options.marker_table)} "
                    "WHERE sink_id = %s AND query_id = %s AND batch_id < %s",
                    (sink_id, query_id, before_batch),
                )
            )

    def read_limits(self, conn: Any) -> list[WorkLimit]:
        with conn.cursor() as cursor:
            return mysql_limits(cursor)

    def commit_prepared(self, xid: TransactionId, conn: Any = None) -> bool:
        return self._xa("COMMIT", xid, conn)

    def rollback_prepared(self, xid: TransactionId) -> bool:
        return self._xa("ROLLBACK", xid)

    def transaction_name(self, xid: TransactionId) -> str:
        return f"xid '{xid.gtrid}','{xid.bqual}'"

    def prepared_ids(self, sink_id: str, conn: Any = None) -> list[TransactionId]:
        prefix = TransactionId.gtrid_prefix(sink_id)
        own = conn is None
        if own:
            conn = self.connect(autocommit=True)
        try:
            with conn.cursor() as cursor:
                return [xid for xid in _recovered(cursor) if xid.gtrid.startswith(prefix)]
        finally:
            if own:
                _close_quietly(conn)

    # -- the writer registry ----------------------------------------------------------------
    # Each call runs on a connection of its own in autocommit (SqlSink.record_writer): never
    # inside a task's XA transaction, which the CREATE TABLE would end on MariaDB.

    def create_writer_table(self, conn: Any) -> None:
        with conn.cursor() as cursor:
            cursor.execute(
                f"CREATE TABLE IF NOT EXISTS {_table(self.writer_table)} ("
                "sink_id VARCHAR(64) NOT NULL, query_id VARCHAR(64) NOT NULL, "
                "host VARCHAR(255) NOT NULL, pid BIGINT NOT NULL, "
                "process_start VARCHAR(64) NULL, updated_at DATETIME(6) NOT NULL, "
                "PRIMARY KEY (sink_id, query_id)) ENGINE=InnoDB"
            )

    def upsert_writer(self, conn: Any, record: WriterRecord) -> None:
        # UTC without a zone: DATETIME is never shifted by a session's time_zone
        updated = dt.datetime.fromtimestamp(record.updated_at, dt.UTC).replace(tzinfo=None)
        changing = (record.host, record.pid, record.process_start, updated)
        with conn.cursor() as cursor:
            # the new values as parameters again: VALUES(col) is deprecated on MySQL 8,
            # and MariaDB has no row alias (INSERT ... AS new)
            cursor.execute(
                f"INSERT INTO {_table(self.writer_table)} ({_columns(_WRITER_COLUMNS)}) "
                "VALUES (%s, %s, %s, %s, %s, %s) ON DUPLICATE KEY UPDATE host = %s, "
                "pid = %s, process_start = %s, updated_at = %s",
                (record.sink_id, record.query_id, *changing, *changing),
            )

    def select_writers(self, conn: Any, sink_id: str) -> list[WriterRecord]:
        with conn.cursor() as cursor:
            cursor.execute(
                f"SELECT {_columns(_WRITER_COLUMNS)} FROM {_table(self.writer_table)} "
                "WHERE sink_id = %s ORDER BY query_id",
                (sink_id,),
            )
            rows = cursor.fetchall()
        return [
            WriterRecord(
                sink_id=str(s),
                query_id=str(q),
                host=str(h),
                pid=int(p),
                updated_at=u.replace(tzinfo=dt.UTC).timestamp(),
                process_start=None if start is None else str(start),
            )
            for s, q, h, p, start, u in rows
        ]

    def delete_writer(self, conn: Any, sink_id: str, query_id: str) -> None:
        with conn.cursor() as cursor:
            cursor.execute(
                f"DELETE FROM {_table(self.writer_table)} WHERE sink_id = %s AND query_id = %s",
                (sink_id, query_id),
            )

    def missing_table(self, exc: Exception) -> bool:
        return isinstance(exc, pymysql.MySQLError) and _code(exc) in _MISSING_TABLE

    # -- tables ---------------------------------------------------------------------------

    def table_columns(self, conn: Any, table: TableName) -> list[str] | None:
        with conn.cursor() as cursor:
            cursor.execute(
                "SELECT column_name FROM information_schema.columns WHERE "
                "table_schema = COALESCE(%s, DATABASE()) AND table_name = %s "
                "ORDER BY ordinal_position",
                (table.schema, table.name),
            )
            rows = cursor.fetchall()
        return [str(r[0]) for r in rows] or None

    def table_schema(self, conn: Any, table: TableName) -> list[TableColumn] | None:
        with conn.cursor() as cursor:
            # MariaDB shows the default of a nullable column without one as 'NULL'
            cursor.execute(
                "SELECT column_name, data_type, is_nullable = 'YES', column_default IS NOT NULL "
                "OR extra LIKE '%%auto_increment%%' OR extra LIKE '%%GENERATED%%' "
                "FROM information_schema.columns WHERE "
                "table_schema = COALESCE(%s, DATABASE()) AND table_name = %s "
                "ORDER BY ordinal_position",
                (table.schema, table.name),
            )
            rows = cursor.fetchall()
        return [TableColumn(str(n), str(t), bool(null), bool(d)) for n, t, null, d in rows] or None

    def numeric_columns(self, conn: Any, table: TableName) -> dict[str, NumericColumn]:
        with conn.cursor() as cursor:
            cursor.execute(
                "SELECT column_name, column_type, data_type, numeric_precision, numeric_scale "
                "FROM information_schema.columns WHERE "
                "table_schema = COALESCE(%s, DATABASE()) AND table_name = %s",
                (table.schema, table.name),
            )
            rows = cursor.fetchall()
        found = {}
        for name, shown, data_type, precision, scale in rows:
            kind = str(data_type).lower()
            if kind in _SCALED_TYPES:
                found[str(name)] = NumericColumn(str(shown), int(precision), int(scale))
            elif kind in _INTEGER_TYPES:
                found[str(name)] = NumericColumn(str(shown), None, 0)
        return found

    def evolution_session(self, txn: SqlTransaction) -> contextlib.AbstractContextManager[Any]:
        # DDL commits implicitly and is refused inside XA: always on a connection of its
        # own, before the task writes. GET_LOCK serializes the tasks of a batch: the first
        # adds the columns, the others find them and never ALTER a table on which a
        # prepared sibling holds its metadata lock.
        return self._ddl_session(self.options.table, f"schema evolution of {self.options.table}")

    @contextlib.contextmanager
    def _ddl_session(self, table: TableName, what: str) -> Iterator[Any]:
        """An autocommit connection of its own holding ``table``'s DDL lock (``GET_LOCK``,
        released when the connection closes), for DDL that must neither end a task's XA
        transaction nor race another task's DDL on the same table."""
        conn = self.connect(autocommit=True)
        lock = evolution_lock_name(self.settings.database, table)
        wait = max(1, int(self.options.lock_timeout_seconds))
        try:
            with conn.cursor() as cursor:
                # MariaDB waits a year for a metadata lock by default
                cursor.execute("SET SESSION lock_wait_timeout = %s", (wait,))
                cursor.execute("SELECT GET_LOCK(%s, %s)", (lock.text, wait))
                row = cursor.fetchone()
            if not row or row[0] != 1:
                raise TransientSinkError(
                    f"{what}: another task held its lock for more than {wait} s"
                )
            yield conn
        finally:
            _close_quietly(conn)  # releases the lock

    def add_columns(self, conn: Any, table: TableName, fields: Sequence[pa.Field]) -> None:
        for f in fields:
            with conn.cursor() as cursor:
                try:
                    cursor.execute(
                        f"ALTER TABLE {_table(table)} ADD COLUMN "
                        f"{quote_identifier(f.name)} {_mysql_type(f, False)} NULL"
                    )
                except pymysql.MySQLError as exc:
                    if _code(exc) != _DUPLICATE_COLUMN:  # another writer added it meanwhile
                        raise

    def create_table(self, schema: pa.Schema) -> None:
        keys = set(self.options.key_columns)
        columns = [
            f"{quote_identifier(f.name)} {_mysql_type(f, f.name in keys)}"
            for f in schema
            if f.name != SEQ_COLUMN
        ]
        if keys:
            columns.append(f"PRIMARY KEY ({_columns(self.options.key_columns)})")
        conn = self.connect(autocommit=True)
        try:
            with conn.cursor() as cursor:
                cursor.execute(
                    f"CREATE TABLE IF NOT EXISTS {_table(self.options.table)} "
                    f"({', '.join(columns)}) ENGINE=InnoDB"
                )
        finally:
            _close_quietly(conn)

    def staging_table(self, c: Committable | TaskContext) -> TableName:
        """One staging table per task attempt, named after it: tasks never share one, so
        they never wait on each other's (possibly prepared) locks in it."""
        sink = hashlib.sha256(c.sink_id.encode()).hexdigest()[:8]
        task = hashlib.sha256(
            f"{c.query_id}\0{c.batch_id}\0{c.partition}\0{c.attempt}".encode()
        ).hexdigest()[:20]
        return TableName(f"{_STAGING_PREFIX}{sink}_{task}", self.options.table.schema)

    def open_staging(self, txn: SqlTransaction, schema: pa.Schema) -> TableName:
        """Create the task's staging table outside the transaction (DDL commits implicitly
        and is not allowed inside XA); it is dropped after commit or abort, or swept."""
        options = self.options
        staging = self.staging_table(txn.ctx)
        flag = (
            f", {quote_identifier(options.delete_column)} BOOLEAN" if options.delete_column else ""
        )
        conn = self.connect(autocommit=True)
        try:
            with conn.cursor() as cursor:
                cursor.execute(f"DROP TABLE IF EXISTS {_table(staging)}")
                cursor.execute(
                    f"CREATE TABLE {_table(staging)} ("
                    f"{quote_identifier(SEQ_COLUMN)} BIGINT NOT NULL DEFAULT 0{flag}) "
                    f"ENGINE=InnoDB SELECT * FROM {_table(options.table)} WHERE 1 = 0"
                )
        finally:
            _close_quietly(conn)
        return staging

    def discard_staging(self, table: TableName, conn: Any = None) -> None:
        own = conn is None
        if own:
            conn = self.connect(autocommit=True)
        try:
            with conn.cursor() as cursor:
                cursor.execute(f"DROP TABLE IF EXISTS {_table(table)}")
        finally:
            if own:
                _close_quietly(conn)

    def staging_tables(self, sink_id: str) -> list[TableName]:
        prefix = f"{_STAGING_PREFIX}{hashlib.sha256(sink_id.encode()).hexdigest()[:8]}_"
        schema = self.options.table.schema
        conn = self.connect(autocommit=True)
        try:
            with conn.cursor() as cursor:
                cursor.execute(
                    "SELECT table_name FROM information_schema.tables WHERE "
                    "table_schema = COALESCE(%s, DATABASE()) AND table_name LIKE %s "
                    "ORDER BY table_name",
                    (schema, prefix.replace("_", "\\_") + "%"),
                )
                return [TableName(str(r[0]), schema) for r in cursor.fetchall()]
        finally:
            _close_quietly(conn)

    def sweep_staging(self, sink_id: str, keep: set[TableName]) -> int:
        dropped = 0
        for table in self.staging_tables(sink_id):
            if table not in keep:
                self.discard_staging(table)
                dropped += 1
        return dropped

    def last_markers(self, sink_id: str) -> list[TargetMarker]:
        marker = self.options.marker_table
        conn = self.connect(autocommit=True)
        try:
            with conn.cursor() as cursor:
                cursor.execute(
                    "SELECT 1 FROM information_schema.tables WHERE "
                    "table_schema = COALESCE(%s, DATABASE()) AND table_name = %s",
                    (marker.schema, marker.name),
                )
                if cursor.fetchone() is None:
                    return []
                cursor.execute(
                    f"SELECT query_id, partition_id, MAX(batch_id) FROM {_table(marker)} "
                    "WHERE sink_id = %s GROUP BY query_id, partition_id "
                    "ORDER BY query_id, partition_id",
                    (sink_id,),
                )
                rows = cursor.fetchall()
        finally:
            _close_quietly(conn)
        return [TargetMarker(str(q), int(p), int(b)) for q, p, b in rows]

    def load(self, txn: SqlTransaction, table: TableName, batch: pa.RecordBatch) -> None:
        """Append the batch to the task's CSV file; ``LOAD DATA`` it every
        ``_LOAD_ROWS`` rows (fewer, larger loads: about a quarter less server time than
        one per Arrow batch) and in :meth:`flush`."""
        try:
            data = _csv_ready(batch)
        except (TypeError, pa.ArrowInvalid) as exc:
            raise PermanentSinkError(str(exc)) from exc
        buffer: _CsvBuffer | None = txn.extra.get(_BUFFER)
        if buffer is not None and (buffer.table != table or buffer.schema != data.schema):
            self._load_buffer(txn)
            buffer = None
        if buffer is None:
            buffer = _CsvBuffer.open(table, data.schema)
            txn.extra[_BUFFER] = buffer
        buffer.writer.write_table(data)
        buffer.rows += data.num_rows
        if buffer.rows >= _LOAD_ROWS:
            self._load_buffer(txn)
        else:
            # one round trip: a lost connection fails this invoke, not only pre_commit
            txn.conn.ping(reconnect=False)

    def flush(self, txn: SqlTransaction) -> None:
        if _BUFFER in txn.extra:
            self._load_buffer(txn)

    def _load_buffer(self, txn: SqlTransaction) -> None:
        buffer: _CsvBuffer = txn.extra.pop(_BUFFER)
        try:
            buffer.writer.close()
            statement = (
                f"LOAD DATA LOCAL INFILE %s INTO TABLE {_table(buffer.table)} CHARACTER SET "
                "utf8mb4 FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '\"' ESCAPED BY '' "
                f"LINES TERMINATED BY '\\n' ({_columns(buffer.schema.names)})"
            )
            with txn.conn.cursor() as cursor:
                cursor.execute(statement, (buffer.path,))
                cursor.execute("SHOW WARNINGS LIMIT 5")
                warnings = cursor.fetchall()
        finally:
            buffer.remove()
        if warnings:
            details = "; ".join(f"{w[0]} {w[1]}: {w[2]}" for w in warnings)
            raise PermanentSinkError(
                f"the database rejected values while loading into {buffer.table}: {details}"
            )

    def merge_staging(self, txn: SqlTransaction) -> None:
        assert txn.staging is not None
        options = self.options
        keys = _columns(options.key_columns)
        order = f"{quote_identifier(options.order_column)} DESC, " if options.order_column else ""
        flag = quote_identifier(options.delete_column) if options.delete_column else None
        picked = _columns(txn.columns) + (f", {flag}" if flag else "")
        winners = (
            f"SELECT * FROM (SELECT {picked}, ROW_NUMBER() OVER (PARTITION BY {keys} "
            f"ORDER BY {order}{quote_identifier(SEQ_COLUMN)} DESC) AS twopc_rank "
            f"FROM {_table(txn.staging)}) AS ranked "
            "WHERE twopc_rank = 1"
        )
        in_key_order = ""
        if not flag and options.mode == "upsert" and self.keys_unique(txn):
            # No key twice: nothing to rank. Key order makes the upsert walk the primary
            # key's B-tree in order, about three times faster than ranked or random order.
            winners = f"SELECT {picked} FROM {_table(txn.staging)}"
            in_key_order = " ORDER BY " + ", ".join(
                "w." + quote_identifier(k) for k in options.key_columns
            )
        target = _table(options.table)
        with txn.conn.cursor() as cursor:
            if flag:
                match = " AND ".join(
                    f"t.{quote_identifier(k)} = w.{quote_identifier(k)}"
                    for k in options.key_columns
                )
                # The batch's rows first, then the target by key (STRAIGHT_JOIN fixes the
                # order): a plan that scans the target instead (MariaDB picks one for a
                # small table) takes locks on every row, and waits on the rows a sibling
                # partition's prepared XA branch holds until the batch fails (issue 30).
                cursor.execute(
                    f"DELETE t FROM ({winners}) AS w STRAIGHT_JOIN {target} AS t "
                    f"ON {match} WHERE w.{flag}"
                )
            keep = f" WHERE NOT COALESCE(w.{flag}, FALSE)" if flag else ""
            insert = (
                f"INSERT INTO {target} ({_columns(txn.columns)}) SELECT "
                f"{', '.join('w.' + quote_identifier(c) for c in txn.columns)} "
                f"FROM ({winners}) AS w{keep}{in_key_order}"
            )
            if options.mode == "upsert":
                insert += self._on_duplicate(txn)
            cursor.execute(insert)
        txn.staging = None

    def _on_duplicate(self, txn: SqlTransaction) -> str:
        updates = [c for c in txn.columns if c not in self.options.key_columns]
        if not updates:
            # qualified: the derived table of winners has the same column names
            first = f"{_table(self.options.table)}.{quote_identifier(self.options.key_columns[0])}"
            return f" ON DUPLICATE KEY UPDATE {first} = {first}"
        if "flavor" not in txn.extra:
            txn.extra["flavor"] = self._flavor(txn.conn)
        if txn.extra["flavor"] == "mariadb":
            parts = [f"{quote_identifier(c)} = VALUES({quote_identifier(c)})" for c in updates]
        else:
            parts = [f"{quote_identifier(c)} = w.{quote_identifier(c)}" for c in updates]
        return " ON DUPLICATE KEY UPDATE " + ", ".join(parts)


def _coerce(value: Any) -> Any:
    """Options from a URL's query string arrive as text; pymysql wants ints and bools."""
    if not isinstance(value, str):
        return value
    if value.isdigit():
        return int(value)
    if value.lower() in ("true", "false"):
        return value.lower() == "true"
    return value


_DETACH_WAIT_SECONDS = 10.0
"""How long a commit waits for a prepared branch's session to let go of it."""


def _wait_detached(cursor: Any, xid: TransactionId, statement: str) -> bool:
    """Run ``statement`` (an ``XA COMMIT``) again until the branch's session lets go of it.

    MariaDB hands a prepared branch to other sessions only once the session that prepared
    it has disconnected; until then ``XA COMMIT`` from another session answers
    ``XAER_NOTA`` although ``XA RECOVER`` lists the branch. A task closes its connection
    right after ``XA PREPARE``, but the server may finish that disconnect after the driver,
    which commits as soon as the batch is decided, asks (measured: a 2-task batch of
    200,000 rows). False when the branch is not prepared at all; a
    ``TransientSinkError`` (the commit is retried) when its session still holds it after
    ``_DETACH_WAIT_SECONDS``.
    """
    deadline = time.monotonic() + _DETACH_WAIT_SECONDS
    pause = 0.005
    while _listed(cursor, xid):
        time.sleep(pause)
        pause = min(pause * 2, 0.25)
        try:
            cursor.execute(statement, (xid.gtrid, xid.bqual))
            return True
        except pymysql.MySQLError as exc:
            if _code(exc) != _XAER_NOTA:
                raise
        if time.monotonic() > deadline:
            raise TransientSinkError(
                f"prepared branch xid '{xid.gtrid}','{xid.bqual}' is still held by a "
                f"connected session after {_DETACH_WAIT_SECONDS:g} s (MariaDB lets another "
                "session commit a branch only once the one that prepared it disconnected)"
            )
    return False


def _listed(cursor: Any, xid: TransactionId) -> bool:
    """Whether ``XA RECOVER`` lists the branch ``xid`` as prepared."""
    return xid in _recovered(cursor)


def _recovered(cursor: Any) -> list[TransactionId]:
    """The prepared branches ``XA RECOVER`` lists (every sink's)."""
    cursor.execute("XA RECOVER")
    found = []
    for _format_id, gtrid_length, bqual_length, data in cursor.fetchall():
        raw = data.decode() if isinstance(data, bytes | bytearray) else str(data)
        gtrid = raw[: int(gtrid_length)]
        found.append(
            TransactionId(gtrid, raw[int(gtrid_length) : int(gtrid_length) + int(bqual_length)])
        )
    return found


def _code(exc: BaseException) -> int | None:
    args: tuple[Any, ...] = tuple(getattr(exc, "args", ()))
    return args[0] if args and isinstance(args[0], int) else None


def _message(exc: BaseException) -> str:
    args: tuple[Any, ...] = tuple(getattr(exc, "args", ()))
    if len(args) >= 2:
        return f"({args[0]}) {args[1]}"
    return str(exc)


class _MySQLTransactionSink(MySQLSink, CommitsSqlTransactionInTask):
    """:class:`MySQLSink` in ``transaction_mode="transaction"``: each task commits itself.
    ``MySQLSink(...)`` returns it for that mode."""


MySQLSink.in_task_class = _MySQLTransactionSink
