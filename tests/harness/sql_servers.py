"""The two SQL servers of the suite as :class:`~tests.harness.sql_sink_cases.Db`: PostgreSQL
and MariaDB, each with the queries the shared SQL sink cases need (prepared branches,
column types, killing a connection, staging tables)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import psycopg
import pymysql
from psycopg import sql

from tests.harness.services import MysqlParams
from tests.harness.sql_sink_cases import Db, staging_prefix, wait_until
from twopc_jdbc._base import SqlSink, SqlTransaction
from twopc_jdbc.mysql import MySQLSink
from twopc_jdbc.postgres import PostgresSink


class PostgresDb(Db):
    name = "postgres"

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def sink_class(self) -> type[SqlSink]:
        return PostgresSink

    def query(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            cursor = conn.execute(statement, tuple(params) or None)  # type: ignore[arg-type]
            return list(cursor.fetchall()) if cursor.description else []

    def q(self, identifier: str) -> str:
        return '"' + identifier.replace('"', '""') + '"'

    def prepared(self, gtrid_prefix: str) -> list[str]:
        rows = self.query(
            "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() "
            "AND starts_with(gid, %s) ORDER BY gid",
            (gtrid_prefix,),
        )
        return [r[0] for r in rows]

    def rollback_prepared(self, gid: str) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))

    def column_types(self, table: str) -> dict[str, str]:
        rows = self.query(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = current_schema() AND table_name = %s ORDER BY ordinal_position",
            (table,),
        )
        return {r[0]: r[1].lower() for r in rows}

    def primary_key(self, table: str) -> list[str]:
        rows = self.query(
            "SELECT a.attname FROM pg_index i JOIN pg_attribute a "
            "ON a.attrelid = i.indrelid AND a.attnum = ANY(i.indkey) "
            "WHERE i.indrelid = %s::regclass AND i.indisprimary "
            "ORDER BY array_position(i.indkey::int2[], a.attnum)",
            (self.q(table),),
        )
        return [r[0] for r in rows]

    def terminate(self, txn: SqlTransaction) -> None:
        pid = txn.conn.info.backend_pid
        assert self.query("SELECT pg_terminate_backend(%s, 5000)", (pid,)) == [(True,)]

    def staging_tables(self, sink_id: str) -> list[str]:
        return []  # created and dropped inside the sink's own transaction

    def is_closed(self, conn: Any) -> bool:
        return bool(conn.closed)

    def drop(self, table: str) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute("SET lock_timeout = '10s'")
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(table)))


class MariaDb(Db):
    name = "mariadb"
    current_schema_sql = "DATABASE()"

    def __init__(self, dsn: str, params: MysqlParams) -> None:
        self.dsn = dsn
        self.params = params

    def sink_class(self) -> type[SqlSink]:
        return MySQLSink

    def connect(self) -> Any:
        return pymysql.connect(**self.params.connect_kwargs(), autocommit=True, charset="utf8mb4")

    def query(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        conn = self.connect()
        try:
            with conn.cursor() as cursor:
                cursor.execute(statement, tuple(params) or None)
                return list(cursor.fetchall()) if cursor.description else []
        finally:
            conn.close()

    def q(self, identifier: str) -> str:
        return "`" + identifier.replace("`", "``") + "`"

    def _xa_recover(self) -> list[tuple[str, str]]:
        found = []
        for _fmt, gtrid_length, bqual_length, data in self.query("XA RECOVER"):
            raw = data.decode() if isinstance(data, bytes) else str(data)
            split = int(gtrid_length)
            found.append((raw[:split], raw[split : split + int(bqual_length)]))
        return found

    def prepared(self, gtrid_prefix: str) -> list[str]:
        return sorted(f"{g}:{b}" for g, b in self._xa_recover() if g.startswith(gtrid_prefix))

    def rollback_prepared(self, gid: str) -> None:
        gtrid, _, bqual = gid.partition(":")
        self.execute("XA ROLLBACK %s, %s", (gtrid, bqual))

    def column_types(self, table: str) -> dict[str, str]:
        rows = self.query(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = DATABASE() AND table_name = %s ORDER BY ordinal_position",
            (table,),
        )
        return {str(r[0]): str(r[1]).lower() for r in rows}

    def primary_key(self, table: str) -> list[str]:
        rows = self.query(
            "SELECT column_name FROM information_schema.key_column_usage "
            "WHERE table_schema = DATABASE() AND table_name = %s "
            "AND constraint_name = 'PRIMARY' ORDER BY ordinal_position",
            (table,),
        )
        return [str(r[0]) for r in rows]

    def terminate(self, txn: SqlTransaction) -> None:
        with txn.conn.cursor() as cursor:
            cursor.execute("SELECT CONNECTION_ID()")
            connection_id = int(cursor.fetchone()[0])
        self.execute(f"KILL {connection_id}")
        wait_until(
            lambda: (
                not self.query(
                    "SELECT 1 FROM information_schema.processlist WHERE id = %s", (connection_id,)
                )
            ),
            what=f"connection {connection_id} to end",
        )

    def staging_tables(self, sink_id: str) -> list[str]:
        rows = self.query(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = DATABASE() "
            "AND table_name LIKE %s ORDER BY table_name",
            (staging_prefix(sink_id).replace("_", "\\_") + "%",),
        )
        return [str(r[0]) for r in rows]

    def is_closed(self, conn: Any) -> bool:
        return not conn.open

    def drop(self, table: str) -> None:
        conn = self.connect()
        try:
            with conn.cursor() as cursor:
                cursor.execute("SET SESSION lock_wait_timeout = 10")
                cursor.execute(f"DROP TABLE IF EXISTS {self.q(table)}")
        finally:
            conn.close()
