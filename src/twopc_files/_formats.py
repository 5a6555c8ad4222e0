"""One open output file per format: write record batches, report bytes written, close."""

from __future__ import annotations

import datetime
import decimal
import json
from typing import IO, Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from twopc.strict_json import NON_FINITE_CHOICES, non_finite_problem, without_non_finite

__all__ = [
    "FORMATS",
    "JSON_NON_FINITE",
    "FormatWriter",
    "NonFiniteValueError",
    "non_finite_message",
    "open_format_writer",
    "write_options_problem",
]

FORMATS: dict[str, str] = {
    "parquet": "parquet",
    "csv": "csv",
    "json": "json",
    "arrow": "arrow",
}
"""Supported formats and the file extension each one writes."""

JSON_NON_FINITE = NON_FINITE_CHOICES
"""What ``format="json"`` does with NaN and infinities, which JSON cannot hold: refuse the
batch (the default), or write ``null`` in their place."""


class NonFiniteValueError(ValueError):
    """A row holds NaN or an infinity, which the JSON lines writer refuses to write."""


class FormatWriter:
    """Writes Arrow batches of one schema to an open binary file."""

    def __init__(self, handle: IO[bytes], schema: pa.Schema) -> None:
        self.handle = handle
        self.schema = schema

    def write(self, batch: pa.RecordBatch) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Finish the format (footers); the caller closes the handle."""

    def bytes_written(self) -> int:
        return int(self.handle.tell())


class _ParquetWriter(FormatWriter):
    def __init__(self, handle: IO[bytes], schema: pa.Schema, options: dict[str, Any]) -> None:
        super().__init__(handle, schema)
        self._writer = pq.ParquetWriter(handle, schema, **options)

    def write(self, batch: pa.RecordBatch) -> None:
        self._writer.write_batch(batch)

    def close(self) -> None:
        self._writer.close()


class _CsvWriter(FormatWriter):
    def __init__(self, handle: IO[bytes], schema: pa.Schema, options: dict[str, Any]) -> None:
        super().__init__(handle, schema)
        self._writer = pacsv.CSVWriter(handle, schema, write_options=pacsv.WriteOptions(**options))

    def write(self, batch: pa.RecordBatch) -> None:
        self._writer.write_batch(batch)

    def close(self) -> None:
        self._writer.close()


class _ArrowWriter(FormatWriter):
    def __init__(self, handle: IO[bytes], schema: pa.Schema, options: dict[str, Any]) -> None:
        super().__init__(handle, schema)
        self._writer = pa.ipc.new_file(handle, schema, **options)

    def write(self, batch: pa.RecordBatch) -> None:
        self._writer.write_batch(batch)

    def close(self) -> None:
        self._writer.close()


class _JsonLinesWriter(FormatWriter):
    """JSON lines. pyarrow has no JSON writer, so rows go through Python objects here;
    use Parquet or Arrow for throughput. NaN and infinities, which Python's ``json`` would
    write as ``NaN``/``Infinity`` (not JSON: strict readers refuse them), raise
    :class:`NonFiniteValueError`, or become ``null`` with ``non_finite="null"``."""

    def __init__(
        self, handle: IO[bytes], schema: pa.Schema, options: dict[str, Any], non_finite: str
    ) -> None:
        super().__init__(handle, schema)
        self._written = 0
        self._non_finite = non_finite

    def write(self, batch: pa.RecordBatch) -> None:
        lines = [self._line(row) for row in batch.to_pylist()]
        data = ("\n".join(lines) + "\n").encode()
        self.handle.write(data)
        self._written += len(data)

    def _line(self, row: dict[str, Any]) -> str:
        try:
            return _dumps(row)
        except ValueError:  # a float JSON cannot hold
            if self._non_finite != "null":
                raise NonFiniteValueError("NaN or an infinity") from None
            return _dumps(without_non_finite(row))

    def bytes_written(self) -> int:
        return self._written


def _dumps(row: dict[str, Any]) -> str:
    return json.dumps(
        row, default=_json_default, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def non_finite_message(batch: pa.RecordBatch, first_row: int) -> str:
    """Which column of which row holds the first NaN or infinity of ``batch`` (its rows
    numbered from ``first_row``), and what to do."""
    for index, row in enumerate(batch.to_pylist()):
        problem = non_finite_problem(row, first_row + index)
        if problem is not None:
            return f"format='json': {problem}"
    return "format='json': a row holds NaN or an infinity, which JSON cannot represent"


def _json_default(value: object) -> object:
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    if isinstance(value, bytes):
        return value.hex()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


_WRITERS: dict[str, type[FormatWriter]] = {
    "parquet": _ParquetWriter,
    "csv": _CsvWriter,
    "json": _JsonLinesWriter,
    "arrow": _ArrowWriter,
}
"""The Python path's writer of each format (``json``'s takes ``non_finite`` too)."""


def open_format_writer(
    fmt: str,
    handle: IO[bytes],
    schema: pa.Schema,
    options: dict[str, Any],
    *,
    json_non_finite: str = "error",
) -> FormatWriter:
    if fmt == "json":
        return _JsonLinesWriter(handle, schema, options, json_non_finite)
    return _WRITERS[fmt](handle, schema, options)  # type: ignore[call-arg]


def write_options_problem(fmt: str, options: dict[str, Any]) -> str | None:
    """What the format's pyarrow writer refuses in ``options`` (an unknown keyword, a codec
    it lacks), found by opening it on an in-memory buffer; ``None`` when it takes them."""
    if fmt not in _WRITERS or fmt == "json" or not options:
        return None
    schema = pa.schema([("x", pa.int64())])
    try:
        open_format_writer(fmt, pa.BufferOutputStream(), schema, dict(options)).close()
    except (TypeError, ValueError, pa.ArrowException) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None
