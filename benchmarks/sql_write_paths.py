#!/usr/bin/env python
"""Rows per second of the SQL write paths twopc could use, measured on real servers.

Every path starts from the same ``pyarrow.Table`` and ends with a committed transaction,
so converting Arrow data to what the driver wants (Python tuples, CSV, COPY rows) is part
of the time. Each run writes into a freshly created table; the upsert runs load the table
first (untimed) and then time a second load in which every row updates an existing key.

Paths:

* MariaDB/MySQL: PyMySQL ``executemany`` (rewritten into multi-row INSERTs), the same with
  ``ON DUPLICATE KEY UPDATE``, ``LOAD DATA LOCAL INFILE`` from a pyarrow-written CSV file
  (the CSV options of ``twopc_jdbc.mysql``), and twopc's ``MySQLSink``.
* PostgreSQL: psycopg ``executemany``, binary ``COPY`` with ``write_row`` and
  ``set_types``, and twopc's ``PostgresSink``.
* optional: mysql-connector-python ``executemany``, run in another interpreter
  (``--mysql-connector-python /path/to/python``) so that this venv stays as it is.

The sinks are driven through the protocol the way one Spark task drives them:
``begin_transaction``, ``invoke`` per Arrow batch (``--batch-rows``, Spark's default is
10,000), ``pre_commit``, then ``commit``.

    .venv/bin/python benchmarks/sql_write_paths.py --rows 200000 --repeat 3

Results are printed as a table and written as JSON (``--output``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

HERE = Path(__file__).resolve().parent
DEFAULT_OUTPUT = HERE / "results" / "sql_write_paths.json"
PREFIX = "bench_sqlwp"
TABLE = f"{PREFIX}_rows"
MARKERS = f"{PREFIX}_markers"
COLUMNS = ("id", "ts", "name", "score", "qty")
SINK_ID = "bench-sql-write-paths"


# -- data ------------------------------------------------------------------------------------


def make_table(rows: int, version: int = 0) -> Any:
    """(bigint id, timestamptz ts, ~20-char text, float8, int4); ``version`` changes values."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ids = pa.array(range(rows), pa.int64())
    base = 1_700_000_000_000_000 + version * 1_000_000
    ts = pc.cast(
        pa.array(range(base, base + rows * 1_000_003, 1_000_003), pa.int64()),
        pa.timestamp("us", tz="UTC"),
    )
    names = pa.array([f"customer-{i:08d}-v{version}" for i in range(rows)], pa.string())
    score = pa.array([(i * 0.37 + version) % 1000.0 for i in range(rows)], pa.float64())
    qty = pa.array([(i * 7 + version) % 100_000 for i in range(rows)], pa.int32())
    return pa.Table.from_arrays([ids, ts, names, score, qty], names=list(COLUMNS))


def python_rows(table: Any, naive_utc: bool) -> list[tuple[Any, ...]]:
    """Row tuples for ``executemany``; MySQL DATETIME wants naive UTC datetimes."""
    import pyarrow as pa
    import pyarrow.compute as pc

    columns = []
    for column in table.columns:
        values = column
        if naive_utc and pa.types.is_timestamp(column.type) and column.type.tz:
            values = pc.cast(column, pa.timestamp(column.type.unit))
        columns.append(values.to_pylist())
    return list(zip(*columns, strict=True))


# -- connections -----------------------------------------------------------------------------


def mysql_params(dsn: str) -> dict[str, Any]:
    parts = urlsplit(dsn)
    return {
        "host": parts.hostname or "127.0.0.1",
        "port": parts.port or 3306,
        "user": unquote(parts.username or ""),
        "password": unquote(parts.password or ""),
        "database": unquote(parts.path.lstrip("/")),
    }


MYSQL_DDL = (
    f"CREATE TABLE {TABLE} (id BIGINT NOT NULL PRIMARY KEY, ts DATETIME(6) NOT NULL, "
    "name VARCHAR(64) NOT NULL, score DOUBLE NOT NULL, qty INT NOT NULL) ENGINE=InnoDB"
)
PG_DDL = (
    f"CREATE TABLE {TABLE} (id bigint PRIMARY KEY, ts timestamptz NOT NULL, "
    "name text NOT NULL, score float8 NOT NULL, qty int4 NOT NULL)"
)


def mysql_reset(dsn: str) -> None:
    import pymysql

    conn = pymysql.connect(**mysql_params(dsn), autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"DROP TABLE IF EXISTS {TABLE}")
            cur.execute(MYSQL_DDL)
    finally:
        conn.close()


def pg_reset(dsn: str) -> None:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {TABLE}")
        conn.execute(PG_DDL)


def count_rows(db: str, dsn: str) -> int:
    if db == "postgres":
        import psycopg

        with psycopg.connect(dsn, autocommit=True) as conn:
            row = conn.execute(f"SELECT count(*) FROM {TABLE}").fetchone()
            return int(row[0]) if row else -1
    import pymysql

    conn = pymysql.connect(**mysql_params(dsn), autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"SELECT count(*) FROM {TABLE}")
            return int(cur.fetchone()[0])
    finally:
        conn.close()


# -- MariaDB / MySQL paths -------------------------------------------------------------------

MYSQL_INSERT = f"INSERT INTO {TABLE} ({', '.join(COLUMNS)}) VALUES (%s, %s, %s, %s, %s)"
MYSQL_ODKU = MYSQL_INSERT + (
    " ON DUPLICATE KEY UPDATE ts = VALUES(ts), name = VALUES(name), "
    "score = VALUES(score), qty = VALUES(qty)"
)


def pymysql_executemany(dsn: str, table: Any, statement: str = MYSQL_INSERT) -> None:
    import pymysql

    conn = pymysql.connect(**mysql_params(dsn), autocommit=False, charset="utf8mb4")
    try:
        with conn.cursor() as cur:
            cur.executemany(statement, python_rows(table, naive_utc=True))
        conn.commit()
    finally:
        conn.close()


def pymysql_load_data(dsn: str, table: Any) -> None:
    """What twopc_jdbc.mysql does per Arrow batch, here for the whole table at once."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.csv as pacsv
    import pymysql

    columns = [
        pc.cast(c, pa.timestamp(c.type.unit)) if pa.types.is_timestamp(c.type) and c.type.tz else c
        for c in table.columns
    ]
    data = pa.Table.from_arrays(columns, names=table.column_names)
    options = pacsv.WriteOptions(
        include_header=False, null_string="NULL", quoting_style="all_valid"
    )
    handle, path = tempfile.mkstemp(prefix="bench-", suffix=".csv")
    os.close(handle)
    conn = pymysql.connect(
        **mysql_params(dsn), autocommit=False, local_infile=True, charset="utf8mb4"
    )
    try:
        pacsv.write_csv(data, path, write_options=options)
        with conn.cursor() as cur:
            cur.execute(
                f"LOAD DATA LOCAL INFILE %s INTO TABLE {TABLE} CHARACTER SET utf8mb4 "
                "FIELDS TERMINATED BY ',' OPTIONALLY ENCLOSED BY '\"' ESCAPED BY '' "
                f"LINES TERMINATED BY '\\n' ({', '.join(COLUMNS)})",
                (path,),
            )
            cur.execute("SHOW WARNINGS LIMIT 5")
            warnings = cur.fetchall()
            if warnings:
                raise RuntimeError(f"LOAD DATA warnings: {warnings}")
        conn.commit()
    finally:
        conn.close()
        os.unlink(path)


def connector_executemany(dsn: str, table: Any) -> None:
    """mysql-connector-python: one multi-row INSERT per call, so chunk it."""
    import mysql.connector

    params = mysql_params(dsn)
    conn = mysql.connector.connect(
        host=params["host"],
        port=params["port"],
        user=params["user"],
        password=params["password"],
        database=params["database"],
        autocommit=False,
    )
    try:
        rows = python_rows(table, naive_utc=True)
        cur = conn.cursor()
        for start in range(0, len(rows), 20_000):
            cur.executemany(MYSQL_INSERT, rows[start : start + 20_000])
        conn.commit()
        cur.close()
    finally:
        conn.close()


# -- PostgreSQL paths ------------------------------------------------------------------------


def psycopg_executemany(dsn: str, table: Any) -> None:
    import psycopg

    with psycopg.connect(dsn) as conn:
        with conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO {TABLE} ({', '.join(COLUMNS)}) VALUES (%s, %s, %s, %s, %s)",
                python_rows(table, naive_utc=False),
            )
        conn.commit()


def psycopg_copy_binary(dsn: str, table: Any) -> None:
    import psycopg

    with psycopg.connect(dsn) as conn:
        with (
            conn.cursor() as cur,
            cur.copy(f"COPY {TABLE} ({', '.join(COLUMNS)}) FROM STDIN (FORMAT BINARY)") as copy,
        ):
            copy.set_types(["int8", "timestamptz", "text", "float8", "int4"])
            for row in python_rows(table, naive_utc=False):
                copy.write_row(row)
        conn.commit()


# -- the twopc sinks -------------------------------------------------------------------------


def run_sink(sink: Any, table: Any, batch_rows: int) -> None:
    """One Spark task's worth of the protocol, plus the commit (in-task or driver)."""
    from twopc import TaskContext

    ctx = TaskContext(sink_id=SINK_ID, query_id=str(uuid.uuid4()), batch_id=0, partition=0)
    txn = sink.begin_transaction(ctx)
    try:
        for batch in table.to_batches(max_chunksize=batch_rows):
            sink.invoke(txn, batch)
        committable = sink.pre_commit(txn)
    except BaseException:
        sink.abort(txn)
        raise
    import twopc

    if isinstance(sink, twopc.CommitsInTask):
        outcomes = [sink.commit_in_task(txn)]
    else:
        outcomes = sink.commit([committable])
    if [o.name for o in outcomes] != ["COMMITTED"]:
        raise RuntimeError(f"unexpected commit outcome {outcomes}")


def make_sink(db: str, dsn: str, **options: Any) -> Any:
    import twopc

    return twopc.create_sink(db, dsn=dsn, table=TABLE, marker_table=MARKERS, **options)


# -- harness ---------------------------------------------------------------------------------


def timed(
    label: str,
    db: str,
    dsn: str,
    rows: int,
    repeat: int,
    *,
    reset: Callable[[], None],
    write: Callable[[], None],
    prepare: Callable[[], None] | None = None,
) -> dict[str, Any]:
    seconds = []
    for _ in range(repeat):
        reset()
        if prepare is not None:
            prepare()
        start = time.perf_counter()
        write()
        seconds.append(time.perf_counter() - start)
        found = count_rows(db, dsn)
        if found != rows:
            raise RuntimeError(f"{label}: expected {rows} rows, found {found}")
    rates = [rows / s for s in seconds]
    result = {
        "db": db,
        "path": label,
        "rows": rows,
        "seconds": [round(s, 4) for s in seconds],
        "rows_per_s": [round(r) for r in rates],
        "median_rows_per_s": round(statistics.median(rates)),
    }
    print(
        f"  {label:<58} {min(rates) / 1e3:7.1f}k - {max(rates) / 1e3:7.1f}k rows/s",
        flush=True,
    )
    return result


def cleanup(my: str, pg: str, skip: list[str]) -> None:
    """Drop the benchmark's tables, its marker table and the MySQL sink's staging table."""
    import hashlib

    if "mysql" not in skip:
        import pymysql

        staging = "twopc_stage_" + hashlib.sha256(f"{TABLE}\0None".encode()).hexdigest()[:12]
        conn = pymysql.connect(**mysql_params(my), autocommit=True)
        try:
            with conn.cursor() as cur:
                for name in (TABLE, MARKERS, staging):
                    cur.execute(f"DROP TABLE IF EXISTS `{name}`")
        finally:
            conn.close()
    if "postgres" not in skip:
        import psycopg

        with psycopg.connect(pg, autocommit=True) as conn:
            for name in (TABLE, MARKERS):
                conn.execute(f"DROP TABLE IF EXISTS {name}")


def server_versions(args: argparse.Namespace) -> dict[str, str]:
    import psycopg
    import pymysql

    versions = {}
    with psycopg.connect(args.dsn_postgres, autocommit=True) as conn:
        row = conn.execute("SHOW server_version").fetchone()
        versions["postgres"] = str(row[0]) if row else "?"
    conn = pymysql.connect(**mysql_params(args.dsn_mysql))
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT VERSION()")
            versions["mysql"] = str(cur.fetchone()[0])
    finally:
        conn.close()
    return versions


def worker_mysql_connector(args: argparse.Namespace) -> None:
    """Runs inside the other interpreter; prints one JSON result on stdout."""
    import mysql.connector

    table = make_table(args.rows)
    dsn = args.dsn_mysql
    seconds = []
    for _ in range(args.repeat):
        params = mysql_params(dsn)
        conn = mysql.connector.connect(**params, autocommit=True)
        cur = conn.cursor()
        cur.execute(f"DROP TABLE IF EXISTS {TABLE}")
        cur.execute(MYSQL_DDL)
        cur.close()
        conn.close()
        start = time.perf_counter()
        connector_executemany(dsn, table)
        seconds.append(time.perf_counter() - start)
    conn = mysql.connector.connect(**mysql_params(dsn))
    print(
        json.dumps(
            {
                "seconds": seconds,
                "version": mysql.connector.__version__,
                "c_extension": type(conn).__name__,
            }
        )
    )
    conn.close()


def run_mysql_connector(args: argparse.Namespace) -> dict[str, Any] | None:
    command = [
        args.mysql_connector_python,
        str(Path(__file__).resolve()),
        "--worker",
        "mysql-connector",
        "--rows",
        str(args.rows),
        "--repeat",
        str(args.repeat),
        "--dsn-mysql",
        args.dsn_mysql,
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        print(f"  mysql-connector-python skipped: {done.stderr.strip()[-300:]}")
        return None
    data = json.loads(done.stdout.strip().splitlines()[-1])
    rates = [args.rows / s for s in data["seconds"]]
    label = f"mysql-connector-python {data['version']} executemany ({data['c_extension']})"
    print(f"  {label:<58} {min(rates) / 1e3:7.1f}k - {max(rates) / 1e3:7.1f}k rows/s")
    return {
        "db": "mysql",
        "path": label,
        "rows": args.rows,
        "seconds": [round(s, 4) for s in data["seconds"]],
        "rows_per_s": [round(r) for r in rates],
        "median_rows_per_s": round(statistics.median(rates)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--batch-rows", type=int, default=10_000, help="rows per invoke()")
    parser.add_argument(
        "--dsn-postgres",
        default=os.environ.get("POSTGRES_DSN", "postgresql://twopc:twopc@127.0.0.1:15432/twopc"),
    )
    parser.add_argument(
        "--dsn-mysql",
        default=os.environ.get("MYSQL_DSN", "mysql://twopc:twopc@127.0.0.1:13306/twopc"),
    )
    parser.add_argument(
        "--mysql-connector-python",
        metavar="PYTHON",
        help="an interpreter with mysql-connector-python and pyarrow installed",
    )
    parser.add_argument("--skip", nargs="*", default=[], choices=["postgres", "mysql"])
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()

    if args.worker == "mysql-connector":
        worker_mysql_connector(args)
        return

    src = HERE.parent / "src"
    if src.is_dir():
        sys.path.insert(0, str(src))
    import psycopg
    import pyarrow
    import pymysql

    rows = args.rows
    table = make_table(rows)
    updated = make_table(rows, version=1)
    results: list[dict[str, Any]] = []
    my, pg = args.dsn_mysql, args.dsn_postgres
    print(f"{rows} rows x {len(COLUMNS)} columns, {args.repeat} runs per path")

    if "mysql" not in args.skip:
        print("MariaDB / MySQL")

        def my_reset() -> None:
            mysql_reset(my)

        def my_sink(**options: Any) -> Callable[[], None]:
            return lambda: run_sink(make_sink("mysql", my, **options), table, args.batch_rows)

        def my_sink_update(**options: Any) -> Callable[[], None]:
            return lambda: run_sink(make_sink("mysql", my, **options), updated, args.batch_rows)

        upsert = {"mode": "upsert", "key_columns": ["id"]}
        cases: list[tuple[str, Callable[[], None], Callable[[], None] | None]] = [
            (
                "PyMySQL executemany (multi-row INSERT)",
                lambda: pymysql_executemany(my, table),
                None,
            ),
            (
                "PyMySQL executemany ODKU (every row an update)",
                lambda: pymysql_executemany(my, updated, MYSQL_ODKU),
                lambda: pymysql_load_data(my, table),
            ),
            (
                "PyMySQL LOAD DATA LOCAL (pyarrow CSV file)",
                lambda: pymysql_load_data(my, table),
                None,
            ),
            ("twopc MySQLSink append, transaction", my_sink(), None),
            ("twopc MySQLSink append, two_phase", my_sink(transaction_mode="two_phase"), None),
            ("twopc MySQLSink upsert, new keys", my_sink(**upsert), None),
            (
                "twopc MySQLSink upsert, every row an update",
                my_sink_update(**upsert),
                lambda: pymysql_load_data(my, table),
            ),
        ]
        for label, write, prepare in cases:
            results.append(
                timed(
                    label,
                    "mysql",
                    my,
                    rows,
                    args.repeat,
                    reset=my_reset,
                    write=write,
                    prepare=prepare,
                )
            )
        if args.mysql_connector_python:
            result = run_mysql_connector(args)
            if result:
                results.append(result)

    if "postgres" not in args.skip:
        print("PostgreSQL")

        def pg_reset_() -> None:
            pg_reset(pg)

        def pg_sink(data: Any, **options: Any) -> Callable[[], None]:
            return lambda: run_sink(make_sink("postgres", pg, **options), data, args.batch_rows)

        upsert = {"mode": "upsert", "key_columns": ["id"]}
        pg_cases: list[tuple[str, Callable[[], None], Callable[[], None] | None]] = [
            ("psycopg executemany (pipeline)", lambda: psycopg_executemany(pg, table), None),
            (
                "psycopg COPY BINARY write_row + set_types",
                lambda: psycopg_copy_binary(pg, table),
                None,
            ),
            ("twopc PostgresSink append, transaction", pg_sink(table), None),
            (
                "twopc PostgresSink append, two_phase",
                pg_sink(table, transaction_mode="two_phase"),
                None,
            ),
            ("twopc PostgresSink upsert, new keys", pg_sink(table, **upsert), None),
            (
                "twopc PostgresSink upsert, every row an update",
                pg_sink(updated, **upsert),
                lambda: psycopg_copy_binary(pg, table),
            ),
        ]
        for label, write, prepare in pg_cases:
            results.append(
                timed(
                    label,
                    "postgres",
                    pg,
                    rows,
                    args.repeat,
                    reset=pg_reset_,
                    write=write,
                    prepare=prepare,
                )
            )

    cleanup(my, pg, args.skip)
    meta = {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "rows": rows,
        "repeat": args.repeat,
        "batch_rows": args.batch_rows,
        "columns": "bigint pk, timestamptz/DATETIME(6), ~20-char text, float8, int4",
        "cpus": os.cpu_count(),
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "python": platform.python_version(),
        "psycopg": psycopg.__version__,
        "pymysql": pymysql.__version__,
        "pyarrow": pyarrow.__version__,
        "servers": server_versions(args),
        "note": "client and servers on the same machine; one client thread",
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps({"meta": meta, "results": results}, indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
