"""Arrow record batches to PostgreSQL's binary ``COPY`` format, column by column.

Why: sending rows through psycopg's ``Copy.write_row`` builds a Python object per value
and was the hot path of the postgres sink (about 0.2 M rows/s per task). Here every
column becomes, with numpy and Arrow compute kernels, a binary array whose element ``i`` is
the field of row ``i`` as the format wants it (a big-endian int32 length, or -1 for NULL,
then the value's bytes); ``binary_join_element_wise`` then concatenates the fields of each
row, and the data buffer of the result is the rows' COPY payload.

Only pairs of Arrow type and column type whose binary encoding is unambiguous are encoded
here (integers, floats, booleans, text, bytea, dates, timestamps of matching time-zone
kind); :func:`encoder_for` returns None for anything else, and the caller falls back to
``write_row``.

Format reference: PostgreSQL documentation, ``COPY``, "Binary Format": an 11-byte
signature, int32 flags, int32 header extension length, then per row an int16 field count
and the fields, and an int16 -1 trailer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["HEADER", "TRAILER", "encoder_for"]

HEADER = b"PGCOPY\n\xff\r\n\x00" + b"\x00\x00\x00\x00" + b"\x00\x00\x00\x00"
TRAILER = b"\xff\xff"

_NULL = b"\xff\xff\xff\xff"
_BINARY = pa.large_binary()
"""Every piece is large_binary (64-bit offsets), so long text values cannot overflow."""
_CHUNK_ROWS = 65_536
"""Rows encoded at once: bounds the temporary memory and keeps int32 offsets safe."""

# PostgreSQL's epoch is 2000-01-01; Arrow's is 1970-01-01
_PG_EPOCH_DAYS = 10_957
_PG_EPOCH_MICROS = _PG_EPOCH_DAYS * 86_400 * 1_000_000
_MICROS_PER_UNIT = {"s": 1_000_000, "ms": 1_000, "us": 1}

_FIXED: dict[str, np.dtype] = {
    "int2": np.dtype(">i2"),
    "int4": np.dtype(">i4"),
    "int8": np.dtype(">i8"),
    "float4": np.dtype(">f4"),
    "float8": np.dtype(">f8"),
}
_TEXT = frozenset({"text", "varchar", "bpchar"})

Encoder = Callable[[pa.RecordBatch], list[memoryview]]
ColumnEncoder = Callable[[pa.Array], list[pa.Array]]


def encoder_for(schema: pa.Schema, pg_types: Sequence[str]) -> Encoder | None:
    """An encoder of whole batches of ``schema`` into COPY rows (a list of buffers to send
    in order, without header and trailer), or None if a column needs the row-by-row path."""
    columns = []
    for field, pg_type in zip(schema, pg_types, strict=True):
        column = _column_encoder(field.type, pg_type)
        if column is None:
            return None
        columns.append(column)
    count = len(columns).to_bytes(2, "big", signed=True)

    def encode(batch: pa.RecordBatch) -> list[memoryview]:
        parts = []
        for start in range(0, batch.num_rows, _CHUNK_ROWS):
            chunk = batch.slice(start, _CHUNK_ROWS)
            pieces: list[pa.Array | pa.Scalar] = [_constant(count, chunk.num_rows)]
            for encode_column, column in zip(columns, chunk.columns, strict=True):
                pieces.extend(encode_column(column))
            pieces.append(pa.scalar(b"", _BINARY))  # the separator: none
            rows = pc.binary_join_element_wise(*pieces, null_handling="skip")
            parts.append(_data(rows))
        return parts

    return encode


def _column_encoder(arrow_type: pa.DataType, pg_type: str) -> ColumnEncoder | None:
    return (
        _numeric_encoder(arrow_type, pg_type)
        or _bytes_encoder(arrow_type, pg_type)
        or _temporal_encoder(arrow_type, pg_type)
    )


def _numeric_encoder(arrow_type: pa.DataType, pg_type: str) -> ColumnEncoder | None:
    if pg_type == "bool" and pa.types.is_boolean(arrow_type):
        return lambda column: [_fixed(pc.cast(column, pa.uint8()), np.dtype("u1"))]
    if pg_type not in _FIXED:
        return None
    integer_into_any = pa.types.is_integer(arrow_type)
    float_into_float = pa.types.is_floating(arrow_type) and pg_type.startswith("float")
    if not (integer_into_any or float_into_float):
        return None  # floats into integer columns: rounding is the driver's business
    dtype = _FIXED[pg_type]
    target = pa.from_numpy_dtype(dtype.newbyteorder("="))
    return lambda column: [_fixed(pc.cast(column, target), dtype)]


def _bytes_encoder(arrow_type: pa.DataType, pg_type: str) -> ColumnEncoder | None:
    text = pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
    binary = pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type)
    if (pg_type in _TEXT and text) or (pg_type == "bytea" and binary):
        return _variable
    return None


def _temporal_encoder(arrow_type: pa.DataType, pg_type: str) -> ColumnEncoder | None:
    if pg_type == "date" and pa.types.is_date32(arrow_type):
        return lambda column: [_fixed(_shift(column, pa.int32(), -_PG_EPOCH_DAYS), np.dtype(">i4"))]
    if not pa.types.is_timestamp(arrow_type) or arrow_type.unit not in _MICROS_PER_UNIT:
        return None
    # timestamptz takes UTC instants, timestamp a wall-clock time: only matching kinds
    kind = "timestamptz" if arrow_type.tz is not None else "timestamp"
    if pg_type != kind:
        return None
    factor = _MICROS_PER_UNIT[arrow_type.unit]
    return lambda column: [_fixed(_micros(column, factor), np.dtype(">i8"))]


def _shift(column: pa.Array, as_type: pa.DataType, offset: int) -> pa.Array:
    return pc.add(column.cast(as_type), offset)


def _micros(column: pa.Array, factor: int) -> pa.Array:
    values = column.cast(pa.int64())
    if factor != 1:
        values = pc.multiply_checked(values, factor)
    return pc.subtract_checked(values, _PG_EPOCH_MICROS)


def _fixed(column: pa.Array, dtype: np.dtype) -> pa.Array:
    """Length word and big-endian value per row (just -1 for NULL)."""
    width = dtype.itemsize
    n = len(column)
    values = column.fill_null(0) if column.null_count else column
    raw = np.empty((n, 4 + width), dtype=np.uint8)
    raw[:, :4] = np.frombuffer(width.to_bytes(4, "big"), dtype=np.uint8)
    big = values.to_numpy(zero_copy_only=False).astype(dtype, copy=False)
    raw[:, 4:] = big.view(np.uint8).reshape(n, width)
    encoded = _constant_width(raw, 4 + width, n)
    if column.null_count:
        encoded = pc.if_else(column.is_valid(), encoded, pa.scalar(_NULL, _BINARY))
    return encoded


def _variable(column: pa.Array) -> list[pa.Array]:
    """A length word per row (-1 for NULL), then the value's bytes (skipped when NULL)."""
    lengths = pc.binary_length(column).fill_null(-1).to_numpy(zero_copy_only=False)
    prefix = _constant_width(lengths.astype(">i4").view(np.uint8), 4, len(column))
    return [prefix, column.cast(_BINARY)]


def _constant_width(raw: np.ndarray, width: int, n: int) -> pa.Array:
    offsets = np.arange(0, (n + 1) * width, width, dtype=np.int64)
    return pa.Array.from_buffers(_BINARY, n, [None, pa.py_buffer(offsets), pa.py_buffer(raw)])


def _constant(value: bytes, n: int) -> pa.Array:
    raw = np.tile(np.frombuffer(value, dtype=np.uint8), n)
    return _constant_width(raw, len(value), n)


def _data(rows: pa.Array) -> memoryview:
    """The concatenated values of a large_binary array: its data buffer between the
    first and the last offset (no copy)."""
    _validity, offsets, data = rows.buffers()
    bounds = np.frombuffer(offsets, dtype=np.int64)
    first = int(bounds[rows.offset])
    last = int(bounds[rows.offset + len(rows)])
    if data is None:
        return memoryview(b"")
    return memoryview(data)[first:last]
