"""Which Arrow and PostgreSQL type pairs the column-wise COPY encoder takes, and its bytes."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from twopc_jdbc._pgcopy import HEADER, TRAILER, encoder_for

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("arrow_type", "pg_type"),
    [
        (pa.decimal128(10, 2), "numeric"),  # numeric's binary form: left to psycopg
        (pa.timestamp("ns", tz="UTC"), "timestamptz"),  # sub-microsecond: psycopg decides
        (pa.timestamp("us"), "timestamptz"),  # wall clock into an instant: ambiguous
        (pa.timestamp("us", tz="UTC"), "timestamp"),
        (pa.float64(), "int8"),  # rounding is the driver's business
        (pa.string(), "jsonb"),
        (pa.string(), "int4"),
        (pa.date64(), "date"),
    ],
)
def test_ambiguous_pairs_fall_back_to_row_by_row(arrow_type: pa.DataType, pg_type: str) -> None:
    schema = pa.schema([("id", pa.int64()), ("x", arrow_type)])
    assert encoder_for(schema, ["int8", pg_type]) is None


def test_bytes_of_one_row() -> None:
    """int8 42, text 'ab', NULL date, timestamptz 2000-01-01T00:00:01Z."""
    batch = pa.RecordBatch.from_pydict(
        {
            "id": pa.array([42], pa.int64()),
            "t": pa.array(["ab"]),
            "d": pa.array([None], pa.date32()),
            "at": pa.array(
                [dt.datetime(2000, 1, 1, 0, 0, 1, tzinfo=dt.UTC)], pa.timestamp("us", "UTC")
            ),
        }
    )
    encode = encoder_for(batch.schema, ["int8", "text", "date", "timestamptz"])
    assert encode is not None
    assert b"".join(encode(batch)) == (
        b"\x00\x04"  # four fields
        + b"\x00\x00\x00\x08"
        + (42).to_bytes(8, "big")
        + b"\x00\x00\x00\x02"
        + b"ab"
        + b"\xff\xff\xff\xff"  # NULL: length -1, no bytes
        + b"\x00\x00\x00\x08"
        + (1_000_000).to_bytes(8, "big")  # microseconds since 2000
    )
    assert HEADER.startswith(b"PGCOPY\n\xff\r\n\x00") and len(HEADER) == 19
    assert TRAILER == b"\xff\xff"


def test_empty_batch_encodes_to_nothing() -> None:
    schema = pa.schema([("id", pa.int64()), ("amount", pa.float64())])
    encode = encoder_for(schema, ["int8", "float8"])
    assert encode is not None
    assert b"".join(encode(pa.RecordBatch.from_pylist([], schema))) == b""
