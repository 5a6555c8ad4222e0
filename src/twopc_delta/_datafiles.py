"""Parquet data files as a Delta table wants them: the table's columns without its
partition columns (their values go into the add action), one file per partition value and
task, described by the statistics Delta keeps per file (:class:`WrittenFile`).

A :class:`WrittenFile` travels in the committable as JSON and becomes deltalake's
``AddAction`` on the driver (:meth:`WrittenFile.add_action`).
"""

from __future__ import annotations

import contextlib
import datetime
import json
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake.transaction import AddAction, RemoveAction

from twopc import PermanentSinkError
from twopc.storage import fsync_files, is_local
from twopc_delta._layout import relative_uri

__all__ = [
    "FileWriter",
    "PartitionValues",
    "WrittenFile",
    "check_partition_types",
    "conform",
    "file_stats",
    "footer_stats",
    "modified_ms",
    "split_by_partition",
    "with_partition_columns",
]

PartitionValues = dict[str, str | None]
"""A file's partition values as the Delta log keeps them (strings; ``None`` for null)."""

_MAX_STAT_STRING = 64
"""Longer strings get no min/max (a truncated max would be wrong for data skipping)."""


@dataclass(frozen=True)
class WrittenFile:
    """One closed data file, as its add action will describe it."""

    path: str
    """Relative to the table's root, not percent-encoded (a filesystem path)."""
    size: int
    rows: int
    partition_values: PartitionValues
    stats: str
    """Delta's per-file statistics (JSON: numRecords, minValues, maxValues, nullCount)."""
    modified_ms: int

    def add_action(self) -> AddAction:
        return AddAction(
            relative_uri(self.path),
            self.size,
            dict(self.partition_values),
            self.modified_ms,
            True,
            self.stats,
        )

    def remove_action(self) -> RemoveAction:
        return RemoveAction(
            relative_uri(self.path),
            True,
            int(time.time() * 1000),
            self.size,
            dict(self.partition_values),
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "size": self.size,
            "rows": self.rows,
            "partition_values": dict(self.partition_values),
            "stats": self.stats,
            "modified_ms": self.modified_ms,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> WrittenFile:
        return cls(
            path=str(data["path"]),
            size=int(data["size"]),
            rows=int(data["rows"]),
            partition_values={
                str(k): None if v is None else str(v)
                for k, v in dict(data["partition_values"]).items()
            },
            stats=str(data["stats"]),
            modified_ms=int(data["modified_ms"]),
        )


# -- columns -----------------------------------------------------------------------------


def conform(
    batch: pa.RecordBatch, target: pa.Schema, *, add_columns: bool, table: str
) -> pa.RecordBatch:
    """``batch`` as the table's columns (by name, cast to the table's types), followed by
    the data's new columns when ``add_columns``; a nullable column the data lacks is null.
    Raises :class:`~twopc.PermanentSinkError` naming the table and the column the data
    cannot fill."""
    names = set(batch.schema.names)
    arrays: list[pa.Array] = []
    fields: list[pa.Field] = []
    for wanted in target:
        if wanted.name not in names:
            if not wanted.nullable:
                raise PermanentSinkError(
                    f"the data has no column {wanted.name!r}, which Delta table {table} "
                    "requires (not null)"
                )
            arrays.append(pa.nulls(batch.num_rows, wanted.type))
        else:
            values = batch.column(wanted.name)
            if not wanted.nullable and values.null_count:
                raise PermanentSinkError(
                    f"column {wanted.name!r} holds {values.null_count} null(s), but Delta "
                    f"table {table} requires it (not null)"
                )
            arrays.append(_cast(values, wanted.type, wanted.name, table))
        fields.append(wanted)
    extra = [f for f in batch.schema if f.name not in set(target.names)]
    if extra and not add_columns:
        raise PermanentSinkError(
            f"the data has column(s) {', '.join(repr(f.name) for f in extra)} that Delta "
            f"table {table} does not have (schema_evolution='add_columns' adds them)"
        )
    for new in extra:
        arrays.append(batch.column(new.name))
        fields.append(new.with_nullable(True))
    return pa.RecordBatch.from_arrays(arrays, schema=pa.schema(fields))


def _cast(values: pa.Array, wanted: pa.DataType, name: str, table: str) -> pa.Array:
    if values.type.equals(wanted):
        return values
    try:
        return values.cast(wanted, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise PermanentSinkError(
            f"column {name!r} of type {values.type} cannot be written to Delta table "
            f"{table}, whose column is {wanted}: {exc}"
        ) from None


# -- partitions ----------------------------------------------------------------------------


def _partition_type_ok(kind: pa.DataType) -> bool:
    return bool(
        pa.types.is_integer(kind)
        or pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_boolean(kind)
        or pa.types.is_date32(kind)
    )


def check_partition_types(schema: pa.Schema, partition_by: Sequence[str], table: str) -> None:
    """Partition columns exist and have a type whose values this sink writes into the log."""
    for name in partition_by:
        if name not in schema.names:
            raise PermanentSinkError(
                f"partition column {name!r} of Delta table {table} is not in the data"
            )
        kind = schema.field(name).type
        if not _partition_type_ok(kind):
            raise PermanentSinkError(
                f"partition column {name!r} of Delta table {table} has type {kind}: the twopc "
                "delta sink partitions by strings, integers, booleans and dates"
            )


def _partition_text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime.date):
        return value.isoformat()
    return str(value)


def split_by_partition(
    rows: pa.RecordBatch, partition_by: Sequence[str]
) -> Iterator[tuple[PartitionValues, pa.RecordBatch, pa.Array | None]]:
    """The rows of each partition value, without the partition columns (Delta keeps their
    values in the log, not in the files), with their positions in ``rows`` (``None``: all
    of them, in order)."""
    if not partition_by:
        yield {}, rows, None
        return
    data = [n for n in rows.schema.names if n not in partition_by]
    table = pa.Table.from_batches([rows])
    keys = table.select(list(partition_by)).group_by(list(partition_by), use_threads=False)
    for key in keys.aggregate([]).to_pylist():
        mask = None
        for name, value in key.items():
            column = table.column(name)
            term = pc.is_null(column) if value is None else pc.equal(column, value)
            term = pc.fill_null(term, False)
            mask = term if mask is None else pc.and_(mask, term)
        positions = pc.indices_nonzero(mask)
        piece = rows.select(data).take(positions)
        values = {name: _partition_text(key[name]) for name in partition_by}
        yield values, piece, positions


def with_partition_columns(rows: pa.Table, values: PartitionValues, schema: pa.Schema) -> pa.Table:
    """A file's rows with its partition columns put back (typed as ``schema`` says)."""
    for name, text in values.items():
        kind = schema.field(name).type
        if text is None:
            column = pa.nulls(rows.num_rows, kind)
        elif pa.types.is_boolean(kind):
            column = pa.array([text == "true"] * rows.num_rows, kind)
        else:
            column = pc.cast(pa.array([text] * rows.num_rows, pa.string()), kind)
        rows = rows.append_column(pa.field(name, kind), column)
    return rows


# -- statistics ----------------------------------------------------------------------------


def _stat_value(kind: pa.DataType, value: Any) -> Any:
    """A min or max as Delta's stats JSON holds it, or ``None`` when it keeps none."""
    if value is None:
        return None
    if pa.types.is_integer(kind):
        return int(value)
    if pa.types.is_floating(kind):
        return None if math.isnan(value) or math.isinf(value) else float(value)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return value if len(value) <= _MAX_STAT_STRING else None
    if pa.types.is_date32(kind):
        return value.isoformat()
    return None  # timestamps, decimals, binary, nested: no min/max (never a wrong one)


@dataclass
class _Stats:
    """Running statistics of one file."""

    rows: int = 0
    nulls: dict[str, int] = field(default_factory=dict)
    mins: dict[str, Any] = field(default_factory=dict)
    maxs: dict[str, Any] = field(default_factory=dict)
    no_bounds: set[str] = field(default_factory=set)

    def add(self, batch: pa.RecordBatch) -> None:
        self.rows += batch.num_rows
        for name, column in zip(batch.schema.names, batch.columns, strict=True):
            kind = column.type
            if pa.types.is_nested(kind):
                continue
            self.nulls[name] = self.nulls.get(name, 0) + column.null_count
            if name in self.no_bounds or column.null_count == len(column):
                continue
            if pa.types.is_floating(kind) and pc.any(pc.is_nan(column)).as_py():
                self.no_bounds.add(name)
                continue
            bounds = pc.min_max(column).as_py()
            low, high = _stat_value(kind, bounds["min"]), _stat_value(kind, bounds["max"])
            if low is None or high is None:
                self.no_bounds.add(name)
                continue
            self.mins[name] = low if name not in self.mins else min(self.mins[name], low)
            self.maxs[name] = high if name not in self.maxs else max(self.maxs[name], high)

    def to_json(self) -> str:
        mins = {k: v for k, v in self.mins.items() if k not in self.no_bounds}
        maxs = {k: v for k, v in self.maxs.items() if k not in self.no_bounds}
        return json.dumps(
            {
                "numRecords": self.rows,
                "minValues": mins,
                "maxValues": maxs,
                "nullCount": self.nulls,
            },
            separators=(",", ":"),
        )


def file_stats(table: pa.Table) -> str:
    """Delta's statistics of a file holding ``table``'s rows."""
    stats = _Stats()
    for batch in table.to_batches():
        stats.add(batch)
    return stats.to_json()


def footer_stats(metadata: pq.FileMetaData) -> str:
    """Delta's statistics of a Parquet file another writer (Spark's) wrote, from its
    footer: row and null counts, and the bounds :func:`file_stats` would give, except
    floats' (a footer's float bounds may leave NaN out) and any column a row group has no
    statistics for (never a wrong bound)."""
    stats = _Stats(rows=metadata.num_rows)
    groups = [metadata.row_group(g) for g in range(metadata.num_row_groups)]
    for index, column in enumerate(metadata.schema.to_arrow_schema()):
        kind = column.type
        if pa.types.is_nested(kind):
            continue
        found = [(group.num_rows, group.column(index).statistics) for group in groups]
        if any(s is None or not s.has_null_count for _, s in found):
            continue
        stats.nulls[column.name] = sum(s.null_count for _, s in found)
        if pa.types.is_floating(kind):
            continue
        for rows, chunk in found:
            if chunk.null_count == rows:
                continue
            low = _stat_value(kind, chunk.min) if chunk.has_min_max else None
            high = _stat_value(kind, chunk.max) if chunk.has_min_max else None
            if low is None or high is None:
                stats.no_bounds.add(column.name)
                break
            name = column.name
            stats.mins[name] = low if name not in stats.mins else min(stats.mins[name], low)
            stats.maxs[name] = high if name not in stats.maxs else max(stats.maxs[name], high)
    return stats.to_json()


def modified_ms(info: Mapping[str, Any]) -> int:
    """A file's modification time in milliseconds (an add action's), from fsspec's
    ``info`` (local files and object stores name it differently)."""
    mtime = info.get("mtime") or info.get("LastModified") or time.time()
    if isinstance(mtime, datetime.datetime):
        mtime = mtime.timestamp()
    return int(float(mtime) * 1000)


# -- the writer ----------------------------------------------------------------------------


@dataclass
class _Open:
    writer: pq.ParquetWriter
    handle: Any
    path: str
    relative: str
    values: PartitionValues
    stats: _Stats


@dataclass
class FileWriter:
    """The data files of one task attempt (or one upsert rewrite): one file per partition
    value, under ``directory`` (``relative``: the same, relative to the table's root)."""

    fs: Any
    directory: str
    relative: str
    compression: str = "snappy"
    _open: dict[tuple[tuple[str, str | None], ...], _Open] = field(default_factory=dict)
    _count: int = 0

    def write(self, values: PartitionValues, batch: pa.RecordBatch) -> None:
        key = tuple(sorted(values.items()))
        current = self._open.get(key)
        if current is None:
            name = f"part-{self._count:05d}.parquet"
            self._count += 1
            self.fs.makedirs(self.directory, exist_ok=True)
            path = f"{self.directory}/{name}"
            handle = self.fs.open(path, "wb")
            writer = pq.ParquetWriter(handle, batch.schema, compression=self.compression)
            current = _Open(writer, handle, path, f"{self.relative}/{name}", values, _Stats())
            self._open[key] = current
        elif not current.writer.schema.equals(batch.schema):
            batch = batch.cast(current.writer.schema)
        current.writer.write_batch(batch)
        current.stats.add(batch)

    def close_all(self) -> list[WrittenFile]:
        """Close every file, make them durable, and describe them."""
        closed: list[WrittenFile] = []
        for current in self._open.values():
            current.writer.close()
            current.handle.close()
        if is_local(self.fs) and self._open:
            fsync_files([c.path for c in self._open.values()], [self.directory])
        for current in self._open.values():
            info = self.fs.info(current.path)
            closed.append(
                WrittenFile(
                    path=current.relative,
                    size=int(info["size"]),
                    rows=current.stats.rows,
                    partition_values=dict(current.values),
                    stats=current.stats.to_json(),
                    modified_ms=modified_ms(info),
                )
            )
        self._open.clear()
        return closed

    def discard(self) -> None:
        """Close open files without describing them (abort removes the directory)."""
        for current in self._open.values():
            with contextlib.suppress(Exception):
                current.writer.close()
            with contextlib.suppress(Exception):
                current.handle.close()
        self._open.clear()
