"""One open output file per format: write record batches, report bytes written, close."""

from __future__ import annotations

import datetime
import decimal
import json
from typing import IO, Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

__all__ = ["FORMATS", "FormatWriter", "open_format_writer"]

FORMATS: dict[str, str] = {
    "parquet": "parquet",
    "csv": "csv",
    "json": "json",
    "arrow": "arrow",
}
"""Supported formats and the file extension each one writes."""


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
    use Parquet or Arrow for throughput."""

    def __init__(self, handle: IO[bytes], schema: pa.Schema, options: dict[str, Any]) -> None:
        super().__init__(handle, schema)
        self._written = 0

    def write(self, batch: pa.RecordBatch) -> None:
        lines = [
            json.dumps(row, default=_json_default, separators=(",", ":"), ensure_ascii=False)
            for row in batch.to_pylist()
        ]
        data = ("\n".join(lines) + "\n").encode()
        self.handle.write(data)
        self._written += len(data)

    def bytes_written(self) -> int:
        return self._written


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


def open_format_writer(
    fmt: str, handle: IO[bytes], schema: pa.Schema, options: dict[str, Any]
) -> FormatWriter:
    return _WRITERS[fmt](handle, schema, options)  # type: ignore[call-arg]
