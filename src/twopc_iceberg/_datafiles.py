"""Parquet data files as Iceberg wants them: the table's columns with their field ids,
split by the partition spec, rolled at a target size, described by the statistics Iceberg
keeps per file (:class:`WrittenFile`).

A :class:`WrittenFile` travels in the committable as JSON and becomes pyiceberg's
``DataFile`` on the driver (:meth:`WrittenFile.data_file`); the statistics are computed
from the Parquet footer with pyiceberg's own functions, as ``add_files`` does.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import decimal
import os
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.io.pyarrow import (
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
    schema_to_pyarrow,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.partitioning import PartitionFieldValue, PartitionKey, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.typedef import Record

from twopc import PermanentSinkError
from twopc.storage import is_local

__all__ = [
    "FileRoller",
    "WrittenFile",
    "conform",
    "file_schema",
    "split_by_partition",
]


def file_schema(schema: Schema) -> pa.Schema:
    """The Arrow schema of the table's data files: its columns, with field ids."""
    return schema_to_pyarrow(schema, include_field_ids=True)


def conform(batch: pa.RecordBatch, schema: Schema, target: pa.Schema) -> pa.RecordBatch:
    """``batch`` as the table's columns (by name, cast to the table's types); a column the
    table has and the data lacks is null. Raises :class:`~twopc.PermanentSinkError` naming
    the column the data cannot fill."""
    names = set(batch.schema.names)
    arrays = []
    for column, wanted in zip(schema.fields, target, strict=True):
        if column.name not in names:
            if column.required:
                raise PermanentSinkError(
                    f"the data has no column {column.name!r}, which the table requires"
                )
            arrays.append(pa.nulls(batch.num_rows, wanted.type))
            continue
        values = batch.column(column.name)
        if column.required and values.null_count:
            raise PermanentSinkError(
                f"column {column.name!r} holds {values.null_count} null(s), but the table "
                "requires it"
            )
        arrays.append(_cast(values, wanted.type, column.name))
    return pa.RecordBatch.from_arrays(arrays, schema=target)


def _cast(values: pa.Array, wanted: pa.DataType, name: str) -> pa.Array:
    if values.type.equals(wanted):
        return values
    try:
        return values.cast(wanted, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as exc:
        raise PermanentSinkError(
            f"column {name!r} of type {values.type} cannot be written as the table's "
            f"{wanted} ({exc})"
        ) from None


def split_by_partition(
    batch: pa.RecordBatch, spec: PartitionSpec, schema: Schema
) -> Iterator[tuple[PartitionKey | None, pa.RecordBatch]]:
    """The rows of ``batch`` per partition of ``spec`` (its transforms applied), with each
    partition's key; one piece with key ``None`` for an unpartitioned table."""
    if spec.is_unpartitioned():
        yield None, batch
        return
    values: dict[str, pa.Array] = {}
    for spec_field in spec.fields:
        source = schema.find_field(spec_field.source_id)
        column = schema.find_column_name(spec_field.source_id)
        if column is None or column not in batch.schema.names:
            raise PermanentSinkError(
                f"partition field {spec_field.name!r} reads column {column!r}, which is not "
                "a top-level column of the data"
            )
        transform = spec_field.transform.pyarrow_transform(source.field_type)
        source_values = batch.column(column)
        if pa.types.is_large_binary(source_values.type):  # pyiceberg-core: binary, not large
            source_values = source_values.cast(pa.binary())
        elif pa.types.is_large_string(source_values.type):
            source_values = source_values.cast(pa.string())
        try:
            values[spec_field.name] = transform(source_values)
        except (ValueError, pa.ArrowException) as exc:
            raise PermanentSinkError(
                f"partition field {spec_field.name!r} ({spec_field.transform} of column "
                f"{column!r}) cannot be computed: {exc}"
            ) from None
    names = [f"__p{i}" for i in range(len(spec.fields))]
    keys = pa.table(dict(zip(names, values.values(), strict=True)))
    keys = keys.append_column("__row", pa.array(range(batch.num_rows), pa.int64()))
    groups = keys.group_by(names, use_threads=False).aggregate([("__row", "list")])
    for group in groups.to_pylist():
        key = PartitionKey(
            field_values=[
                PartitionFieldValue(spec_field, group[name])
                for spec_field, name in zip(spec.fields, names, strict=True)
            ],
            partition_spec=spec,
            schema=schema,
        )
        rows = group["__row_list"]
        piece = batch if len(rows) == batch.num_rows else batch.take(pa.array(rows))
        yield key, piece


# -- what a file holds, as JSON --------------------------------------------------------------


@dataclass(frozen=True)
class WrittenFile:
    """One data file a task wrote, with what Iceberg's manifest keeps about it."""

    path: str
    """Its full URL (the table's scheme), as the manifest will hold it."""
    spec_id: int
    partition: tuple[Any, ...]
    """The partition tuple as Iceberg stores it (after the transforms); JSON-tagged in
    :meth:`to_json` where JSON has no type for a value."""
    partition_path: str
    size: int
    stats: Mapping[str, Any]
    """``DataFileStatistics.to_serialized_dict()``: counts and bounds per field id."""
    field_ids: bool = True
    """Whether the file's columns carry Iceberg field ids (Spark's writer's do not: readers
    then match columns by name, through the table's name mapping)."""

    @property
    def rows(self) -> int:
        return int(self.stats["record_count"])

    def to_json(self) -> dict[str, Any]:
        data = {
            "path": self.path,
            "spec_id": self.spec_id,
            "partition": [_encode(v) for v in self.partition],
            "partition_path": self.partition_path,
            "size": self.size,
            "stats": {key: _encode_stat(value) for key, value in self.stats.items()},
        }
        if not self.field_ids:
            data["field_ids"] = False
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WrittenFile:
        stats = {key: _decode_stat(key, value) for key, value in data["stats"].items()}
        return cls(
            path=str(data["path"]),
            spec_id=int(data["spec_id"]),
            partition=tuple(_decode(v) for v in data["partition"]),
            partition_path=str(data.get("partition_path", "")),
            size=int(data["size"]),
            stats=stats,
            field_ids=bool(data.get("field_ids", True)),
        )

    def data_file(self) -> DataFile:
        """pyiceberg's ``DataFile`` for this file, to append in a snapshot."""
        return DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=self.path,
            file_format=FileFormat.PARQUET,
            partition=Record(*self.partition),
            file_size_in_bytes=self.size,
            sort_order_id=None,
            spec_id=self.spec_id,
            equality_ids=None,
            key_metadata=None,
            **dict(self.stats),
        )


_BOUNDS = ("lower_bounds", "upper_bounds")


def _encode_stat(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _encode(v) for k, v in value.items()}
    return value


def _decode_stat(key: str, value: Any) -> Any:
    if isinstance(value, dict):
        return {int(k): _decode(v) for k, v in value.items()}
    return value


def _encode(value: Any) -> Any:
    """A value as JSON: bytes, decimals, UUIDs and dates tagged, the rest as they are."""
    if isinstance(value, bytes):
        return {"b64": base64.b64encode(value).decode()}
    if isinstance(value, decimal.Decimal):
        return {"decimal": str(value)}
    if isinstance(value, uuid.UUID):
        return {"uuid": str(value)}
    if isinstance(value, datetime.datetime | datetime.date | datetime.time):
        raise TypeError(f"unexpected {type(value).__name__} in a data file's description")
    return value


def _decode(value: Any) -> Any:
    if isinstance(value, dict):
        if "b64" in value:
            return base64.b64decode(value["b64"])
        if "decimal" in value:
            return decimal.Decimal(value["decimal"])
        if "uuid" in value:
            return uuid.UUID(value["uuid"])
    return value


# -- writing ---------------------------------------------------------------------------------


@dataclass
class _OpenFile:
    path: str
    """fsspec path (no protocol)."""
    handle: IO[bytes]
    writer: pq.ParquetWriter
    key: PartitionKey | None
    rows: int = 0
    pending: list[pa.RecordBatch] = field(default_factory=list)
    """Rows not yet written: one row group is written at a time, up to its limit."""
    pending_rows: int = 0
    pending_bytes: int = 0


ROW_GROUP_BYTES = 128 * 1024 * 1024
"""A row group is written once its rows hold this many bytes in memory, or reach the
table's ``write.parquet.row-group-limit`` rows: what one open file holds back at most."""


def writer_options(properties: Mapping[str, str]) -> dict[str, Any]:
    """``pyarrow.parquet.ParquetWriter`` options from the table's ``write.parquet.*``
    properties, with Iceberg's defaults (zstd)."""
    codec = properties.get("write.parquet.compression-codec", "zstd")
    options: dict[str, Any] = {"compression": "none" if codec == "uncompressed" else codec}
    if properties.get("write.parquet.compression-level"):
        options["compression_level"] = int(properties["write.parquet.compression-level"])
    sizes = {
        "data_page_size": "write.parquet.page-size-bytes",
        "dictionary_pagesize_limit": "write.parquet.dict-size-bytes",
        "write_batch_size": "write.parquet.page-row-limit",
    }
    for option, key in sizes.items():
        if properties.get(key):
            options[option] = int(properties[key])
    return options


@dataclass
class FileRoller:
    """The open data files of one task, one per partition, rolled at ``target_size``
    bytes: a batch of any size is written with one row group in memory at a time."""

    fs: Any
    directory: str
    """fsspec path of the attempt's directory (files go below it)."""
    url_prefix: str
    """What turns an fsspec path into the URL the manifest holds (``file://``, ``s3://``)."""
    schema: Schema
    arrow_schema: pa.Schema
    properties: Mapping[str, str]
    spec_id: int
    target_size: int
    open_files: dict[str, _OpenFile] = field(default_factory=dict)
    written: list[WrittenFile] = field(default_factory=list)
    seq: int = 0

    @property
    def row_group_rows(self) -> int:
        return int(self.properties.get("write.parquet.row-group-limit", 1_048_576))

    def write(self, key: PartitionKey | None, piece: pa.RecordBatch) -> str:
        """Append ``piece`` to its partition's open file; returns that file's path."""
        partition_path = key.to_path() if key is not None else ""
        current = self.open_files.get(partition_path)
        if current is None:
            current = self.open_files[partition_path] = self._open(key, partition_path)
        current.pending.append(piece)
        current.pending_rows += piece.num_rows
        current.pending_bytes += piece.nbytes
        current.rows += piece.num_rows
        path = current.path
        if current.pending_rows >= self.row_group_rows or current.pending_bytes >= ROW_GROUP_BYTES:
            self._flush(current)
            if current.handle.tell() >= self.target_size:
                self._close(partition_path)
        return path

    def _flush(self, current: _OpenFile) -> None:
        """Write the pending rows as one row group."""
        if not current.pending:
            return
        table = pa.Table.from_batches(current.pending)
        current.pending, current.pending_rows, current.pending_bytes = [], 0, 0
        try:
            current.writer.write_table(table, row_group_size=max(table.num_rows, 1))
        except OSError as exc:
            raise _io_error(current.path, exc) from exc

    def _open(self, key: PartitionKey | None, partition_path: str) -> _OpenFile:
        directory = f"{self.directory}/{partition_path}" if partition_path else self.directory
        path = f"{directory}/part-{self.seq:05d}.parquet"
        self.seq += 1
        try:
            self.fs.makedirs(directory, exist_ok=True)
            handle = open(path, "wb") if is_local(self.fs) else self.fs.open(path, "wb")  # noqa: SIM115
        except OSError as exc:
            raise _io_error(path, exc) from exc
        try:
            writer = pq.ParquetWriter(
                handle,
                self.arrow_schema,
                store_decimal_as_integer=True,
                **writer_options(self.properties),
            )
        except BaseException:
            handle.close()
            raise
        return _OpenFile(path, handle, writer, key)

    def _close(self, partition_path: str) -> None:
        current = self.open_files.pop(partition_path)
        try:
            self._flush(current)
            current.writer.close()
            if is_local(self.fs):
                current.handle.flush()
                os.fsync(current.handle.fileno())
            size = current.handle.tell()
            current.handle.close()
        except OSError as exc:
            raise _io_error(current.path, exc) from exc
        statistics = data_file_statistics_from_parquet_metadata(
            parquet_metadata=current.writer.writer.metadata,
            stats_columns=compute_statistics_plan(self.schema, dict(self.properties)),
            parquet_column_mapping=parquet_path_to_id_mapping(self.schema),
        )
        partition: tuple[Any, ...] = ()
        if current.key is not None:
            record = current.key.partition
            partition = tuple(record[i] for i in range(len(record)))
        self.written.append(
            WrittenFile(
                path=f"{self.url_prefix}{current.path}",
                spec_id=self.spec_id,
                partition=partition,
                partition_path=partition_path,
                size=size,
                stats=statistics.to_serialized_dict(),
            )
        )

    def close_all(self) -> list[WrittenFile]:
        """Close every open file; returns every file written, in order."""
        for partition_path in list(self.open_files):
            self._close(partition_path)
        return list(self.written)

    def discard(self) -> None:
        """Close open files without describing them (the attempt aborts)."""
        for current in self.open_files.values():
            with contextlib.suppress(Exception):
                current.writer.close()
            with contextlib.suppress(Exception):
                current.handle.close()
        self.open_files.clear()


def _io_error(path: str, exc: OSError) -> Exception:
    from twopc import TransientSinkError

    if isinstance(exc, PermissionError):
        return PermanentSinkError(f"cannot write the data file {path}: permission denied ({exc})")
    return TransientSinkError(f"I/O error writing the data file {path}: {exc}")


def read_columns(fs: Any, path: str, columns: Sequence[str] | None = None) -> pa.Table:
    """A data file's rows (only ``columns`` if given), read through fsspec."""
    with fs.open(path, "rb") as handle:
        return pq.read_table(handle, columns=list(columns) if columns is not None else None)
