"""The column-wise binary COPY encoder of the postgres sink, checked by what the server reads.

The same Arrow batch is sent to two tables, once column-wise (``twopc_jdbc._pgcopy``) and
once row by row through psycopg's ``write_row`` (the path the encoder replaced and still
uses for other column types); both tables must read back identical, and a few values are
checked against the literal the server prints for them.
"""

from __future__ import annotations

import datetime as dt
import math
import uuid
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from psycopg import sql

from twopc_jdbc._pgcopy import HEADER, TRAILER, encoder_for
from twopc_jdbc.postgres import _write_rows

pytestmark = pytest.mark.integration

UTC = dt.UTC

COLUMNS = {
    "i2": ("int2", pa.array([1, None, -32768, 32767], pa.int16())),
    "i4": ("int4", pa.array([1, 2, None, -(2**31)], pa.int32())),
    "i8": ("int8", pa.array([2**62, None, -5, 0], pa.int64())),
    "i8_from_i32": ("int8", pa.array([7, 8, None, 9], pa.int32())),
    "i4_from_u16": ("int4", pa.array([0, 65535, None, 1], pa.uint16())),
    "f4": ("float4", pa.array([1.5, None, float("inf"), -0.0], pa.float32())),
    "f8": ("float8", pa.array([1.25, float("nan"), None, 1e300], pa.float64())),
    "f8_from_f4": ("float8", pa.array([0.1, None, 2.5, 3.0], pa.float32())),
    "b": ("bool", pa.array([True, False, None, True])),
    "t": ("text", pa.array(["héllo", "", None, "x" * 1000])),
    "lt": ("text", pa.array(["a", None, "ccc", "日本"], pa.large_string())),
    "vc": ("varchar", pa.array(["a", "b", None, "d"])),
    "by": ("bytea", pa.array([b"\x00\x01", None, b"", b"zz"])),
    "d": (
        "date",
        pa.array([dt.date(2000, 1, 1), dt.date(1969, 12, 31), None, dt.date(2100, 5, 6)]),
    ),
    "tz": (
        "timestamptz",
        pa.array(
            [
                dt.datetime(2000, 1, 1, tzinfo=UTC),
                None,
                dt.datetime(1950, 6, 1, 12, 30, 15, 123456, tzinfo=UTC),
                dt.datetime(2262, 1, 1, tzinfo=UTC),
            ],
            pa.timestamp("us", tz="UTC"),
        ),
    ),
    "tz_ms_paris": (
        "timestamptz",
        pa.array([0, 1234567, None, -86400000], pa.timestamp("ms", tz="Europe/Paris")),
    ),
    "ts": (
        "timestamp",
        pa.array(
            [
                dt.datetime(2024, 2, 29, 23, 59, 59),
                None,
                dt.datetime(1999, 12, 31),
                dt.datetime(1, 1, 1),
            ],
            pa.timestamp("us"),
        ),
    ),
    "ts_s": ("timestamp", pa.array([0, None, 1, 1_700_000_000], pa.timestamp("s"))),
}


def _batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict({name: values for name, (_, values) in COLUMNS.items()})


def _same(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """NaN compares unequal to itself: make it comparable."""
    return [tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in r) for r in rows]


@pytest.fixture
def tables(postgres_dsn: str) -> Any:
    names = [f"copyenc_{uuid.uuid4().hex[:10]}_{side}" for side in ("cols", "rows")]
    ddl = ", ".join(f"{name} {pg}" for name, (pg, _) in COLUMNS.items())
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        for name in names:
            conn.execute(sql.SQL("CREATE TABLE {} (" + ddl + ")").format(sql.Identifier(name)))
    yield names
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        for name in names:
            conn.execute(sql.SQL("DROP TABLE IF EXISTS {}").format(sql.Identifier(name)))


def test_column_wise_copy_reads_back_like_row_by_row(postgres_dsn: str, tables: list[str]) -> None:
    batch = _batch()
    pg_types = [pg for pg, _ in COLUMNS.values()]
    encode = encoder_for(batch.schema, pg_types)
    assert encode is not None
    columns = sql.SQL(", ").join(sql.Identifier(n) for n in batch.schema.names)
    by_columns, by_rows = (
        sql.SQL("COPY {} ({}) FROM STDIN (FORMAT BINARY)").format(sql.Identifier(t), columns)
        for t in tables
    )
    with psycopg.connect(postgres_dsn) as conn:
        with conn.cursor() as cursor, cursor.copy(by_columns) as copy:
            copy.write(HEADER)
            for part in encode(batch):
                copy.write(part)
            copy.write(TRAILER)
        with conn.cursor() as cursor, cursor.copy(by_rows) as copy:
            _write_rows(copy, batch, pg_types)
        conn.commit()
        conn.execute("SET TimeZone = 'UTC'")
        order = sql.SQL(" ORDER BY i8 NULLS FIRST, i4 NULLS FIRST")
        read = [
            conn.execute(sql.SQL("SELECT * FROM {}").format(sql.Identifier(t)) + order).fetchall()
            for t in tables
        ]
        texts = conn.execute(
            sql.SQL(
                "SELECT tz::text, ts::text, d::text, t, by FROM {} ORDER BY i4 NULLS LAST"
            ).format(sql.Identifier(tables[0]))
        ).fetchall()
    assert len(read[0]) == 4
    assert _same(read[0]) == _same(read[1])
    assert texts == [  # ordered by i4: -2**31, 1, 2, NULL
        ("2262-01-01 00:00:00+00", "0001-01-01 00:00:00", "2100-05-06", "x" * 1000, b"zz"),
        ("2000-01-01 00:00:00+00", "2024-02-29 23:59:59", "2000-01-01", "héllo", b"\x00\x01"),
        (None, None, "1969-12-31", "", None),
        ("1950-06-01 12:30:15.123456+00", "1999-12-31 00:00:00", None, None, b""),
    ]


def test_many_rows_cross_the_chunk_boundary(postgres_dsn: str, tables: list[str]) -> None:
    """More rows than one encoding chunk (65,536): every row arrives once, in order."""
    rows = 150_000
    batch = pa.RecordBatch.from_pydict(
        {"i8": pa.array(range(rows), pa.int64()), "t": pa.array([str(i) for i in range(rows)])}
    )
    encode = encoder_for(batch.schema, ["int8", "text"])
    assert encode is not None
    statement = sql.SQL("COPY {} (i8, t) FROM STDIN (FORMAT BINARY)").format(
        sql.Identifier(tables[0])
    )
    with psycopg.connect(postgres_dsn) as conn:
        with conn.cursor() as cursor, cursor.copy(statement) as copy:
            copy.write(HEADER)
            for part in encode(batch):
                copy.write(part)
            copy.write(TRAILER)
        conn.commit()
        count, distinct, total, mismatched = conn.execute(
            sql.SQL(
                "SELECT count(*), count(DISTINCT i8), sum(i8), count(*) FILTER "
                "(WHERE t <> i8::text) FROM {}"
            ).format(sql.Identifier(tables[0]))
        ).fetchone()
    assert (count, distinct, total, mismatched) == (rows, rows, rows * (rows - 1) // 2, 0)
