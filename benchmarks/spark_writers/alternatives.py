"""What runs on the executors for the upsert alternative without twopc: ``foreachPartition``
with the Python driver's ``executemany``, as users write it today.

A module of its own because Spark's Python workers import the function by module path
(``benchmarks`` is on their ``PYTHONPATH``, see ``session.py``); the function and its
arguments are bound with :func:`functools.partial` on the driver.
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import islice
from typing import Any

from benchmarks.spark_writers.config import Database


def connect(flavor: str, db: Database) -> Any:
    """A connection of the driver twopc's sink for ``flavor`` uses (psycopg, PyMySQL)."""
    if flavor == "postgres":
        import psycopg

        return psycopg.connect(
            host=db.host, port=db.port, user=db.user, password=db.password, dbname=db.database
        )
    import pymysql

    return pymysql.connect(
        host=db.host, port=db.port, user=db.user, password=db.password, database=db.database
    )


def upsert_partition(
    flavor: str, db: Database, statement: str, batch_rows: int, rows: Iterable[Any]
) -> None:
    """One partition's rows through ``cursor.executemany(statement, ...)`` in chunks of
    ``batch_rows``, one transaction per partition.

    psycopg 3 sends an ``executemany`` in pipeline mode; PyMySQL rewrites an
    ``INSERT ... VALUES (%s, ...) ON DUPLICATE KEY UPDATE ...`` into multi-row statements
    of up to 1 MB: each driver's fast path. Spark hands the rows over as ``Row`` tuples.
    """
    conn = connect(flavor, db)
    try:
        with conn.cursor() as cursor:
            it = iter(rows)
            while chunk := list(islice(it, batch_rows)):
                cursor.executemany(statement, chunk)
        conn.commit()
    finally:
        conn.close()
