"""A SQL database as the crash and stall tests see it (PostgreSQL or MariaDB): create a
table, read its ids, list the sink's prepared branches; and the local-engine SQL query's
command line."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import pymysql

from tests.harness.processes import local_query
from tests.harness.services import parse_mysql_dsn
from twopc_jdbc._base import TransactionId


class Database:
    """Just enough SQL for the test: create a table, read ids, list prepared branches."""

    def __init__(self, backend: str, dsn: str) -> None:
        self.backend, self.dsn = backend, dsn

    def _connect(self) -> Any:
        if self.backend == "postgres":
            return psycopg.connect(self.dsn, autocommit=True)
        return pymysql.connect(**parse_mysql_dsn(self.dsn).connect_kwargs(), autocommit=True)

    def query(self, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        conn = self._connect()
        try:
            with conn.cursor() as cursor:
                cursor.execute(statement, params)
                return list(cursor.fetchall()) if cursor.description else []
        finally:
            conn.close()

    def create(self, table: str) -> None:
        self.query(f"CREATE TABLE {table} (id BIGINT, payload VARCHAR(40))")

    def drop(self, table: str) -> None:
        self.query(f"DROP TABLE IF EXISTS {table}")

    def ids(self, table: str) -> Counter[int]:
        return Counter(int(r[0]) for r in self.query(f"SELECT id FROM {table}"))

    def prepared(self, sink_id: str) -> list[str]:
        prefix = TransactionId.gtrid_prefix(sink_id)
        if self.backend == "postgres":
            rows = self.query("SELECT gid FROM pg_prepared_xacts")
            return [r[0] for r in rows if r[0].startswith(prefix)]
        rows = self.query("XA RECOVER")
        return [bytes(r[3]).decode() for r in rows if bytes(r[3]).decode().startswith(prefix)]


def sql_query(
    db: Database, tmp_path: Path, table: str, mode: str, sink_id: str, **shape: Any
) -> list[str]:
    """The command of a local-engine query into ``table`` (``shape``: batches, partitions,
    rows and the other options of ``tests.harness.local_sql_query``; by default the shape
    of ``tests/crash/test_sql_crash_matrix.py``: 3 batches of 2 partitions x 20 rows)."""
    options: dict[str, Any] = {"batches": 3, "partitions": 2, "rows": 20}
    options.update(shape)
    return local_query(
        "local_sql_query",
        backend=db.backend,
        dsn=db.dsn,
        table=table,
        transaction_mode=mode,
        checkpoint=tmp_path / "chk",
        sink_id=sink_id,
        **options,
    )
