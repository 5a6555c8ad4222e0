"""``mode="upsert"``: one row per key.

Within a batch the last row of a key wins: the engine hash-partitions the batch by the key
columns, so all rows of a key reach one task, which keeps the key columns of every row it
wrote (not the rows) and, at ``pre_commit``, rewrites the files holding an earlier row of a
key written again (:func:`last_rows_win`).

Across batches the commit replaces the table's rows of the batch's keys copy-on-write
(:func:`plan_rewrite`): the files that may hold such a key (by their statistics) are read,
and those that do are replaced, in the batch's own snapshot, by files without those rows.
A table with delete files (another engine's merge-on-read) is refused: rewriting its data
files would bring deleted rows back.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.expressions import AlwaysTrue, And, BooleanExpression, In
from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionKey
from pyiceberg.table import Table

from twopc import CommitError, PermanentSinkError
from twopc.table_formats import key_mask
from twopc_iceberg._datafiles import FileRoller, WrittenFile, conform, file_schema, read_columns
from twopc_iceberg._layout import rewrite_data_dir
from twopc_iceberg._tables import Place

__all__ = [
    "Rewrite",
    "key_columns_of",
    "keys_written",
    "last_rows_win",
    "plan_rewrite",
]

_FILE, _ROW = "__file", "__row"


def key_columns_of(table: Table, chosen: Sequence[str], name: str) -> tuple[str, ...]:
    """The upsert keys: ``chosen``, else the table's identifier fields."""
    if chosen:
        return tuple(chosen)
    names = tuple(table.schema().identifier_field_names())
    if not names:
        raise PermanentSinkError(
            f"mode='upsert' needs key columns: table {name} has no identifier fields; give "
            "key_columns"
        )
    return names


def keys_written(names: Sequence[str], piece: pa.RecordBatch, path: str, first: int) -> pa.Table:
    """The key columns of ``piece``, with the file it went to and each row's number in
    the task."""
    keys = pa.Table.from_batches([piece.select(list(names))])
    keys = keys.append_column(_FILE, pa.array([path] * piece.num_rows, pa.string()))
    return keys.append_column(_ROW, pa.array(range(first, first + piece.num_rows), pa.int64()))


def last_rows_win(
    roller: FileRoller,
    written: list[pa.Table],
    files: list[WrittenFile],
    partitions: dict[str, PartitionKey | None],
) -> list[WrittenFile]:
    """Keep one row per key, the last the task wrote: rewrite the files that hold an
    earlier row of a key written again. ``files`` are the task's closed files."""
    keys = pa.concat_tables(written)
    names = [n for n in keys.column_names if n not in (_FILE, _ROW)]
    latest = keys.group_by(names, use_threads=False).aggregate([(_ROW, "max")])
    if latest.num_rows == keys.num_rows:
        return files
    keep = latest.column(f"{_ROW}_max").combine_chunks()
    roller.written.clear()  # ``files`` holds them
    out: list[WrittenFile] = []
    for entry in files:
        path = entry.path.removeprefix(roller.url_prefix)
        mine = keys.filter(pc.equal(keys.column(_FILE), path))
        mask = pc.is_in(mine.column(_ROW), value_set=keep)
        if pc.all(mask).as_py():
            out.append(entry)
            continue
        rows = read_columns(roller.fs, path).filter(mask)
        roller.fs.rm(path)
        if rows.num_rows:
            for batch in rows.to_batches():
                roller.write(partitions.get(path), batch)
            out += roller.close_all()
            roller.written.clear()
    return out


def key_filter(keys: pa.Table) -> BooleanExpression:
    """A filter that keeps the files that may hold one of ``keys`` (for several key
    columns a superset: each column's values, matched per file by its statistics)."""
    expression: BooleanExpression = AlwaysTrue()
    for name in keys.column_names:
        term = In(term=name, values=set(keys.column(name).to_pylist()))
        expression = term if isinstance(expression, AlwaysTrue) else And(expression, term)
    return expression


@dataclass
class Rewrite:
    """What an upsert's commit changes in files the table holds already."""

    rewrite_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    deleted: list[DataFile] = field(default_factory=list)
    added: list[WrittenFile] = field(default_factory=list)
    directory: str = ""
    """fsspec path of the rewritten files' directory (empty until one is written)."""


@dataclass(frozen=True)
class _OldPartition:
    """The partition of a file being rewritten: the old file's, whatever spec wrote it."""

    partition: Any
    spec_id: int

    def to_path(self) -> str:
        return f"spec-{self.spec_id}"


def plan_rewrite(
    table: Table,
    *,
    place_of: Any,
    data: Place,
    batch: tuple[str, str, int],
    files: Sequence[WrittenFile],
    names: Sequence[str],
    target_size: int,
    on_first_write: Any,
) -> Rewrite:
    """Rewrite the table's files that hold a key of the batch's ``files``, without the
    rows of those keys. ``batch`` is (sink id, query id, batch id); ``place_of(url)``
    gives a file's :class:`~twopc_iceberg._tables.Place`; ``on_first_write(rewrite)`` runs
    before the first rewritten file is written (to record it for the sweep)."""
    rewrite = Rewrite()
    if not files or table.current_snapshot() is None:
        return rewrite
    place = place_of(files[0].path)
    keys = pa.concat_tables([read_columns(place.fs, place.path_of(f.path), names) for f in files])
    keys = keys.group_by(list(names), use_threads=False).aggregate([])
    schema = table.schema()
    arrow_schema = file_schema(schema)
    roller: FileRoller | None = None
    for task in table.scan(row_filter=key_filter(keys)).plan_files():
        if task.delete_files:
            raise CommitError(
                f"mode='upsert' rewrites the files that hold a batch's keys, but "
                f"{task.file.file_path} has delete files (written by another engine's "
                "merge-on-read); compact the table first (rewrite_data_files)"
            )
        old_place = place_of(task.file.file_path)
        old = read_columns(old_place.fs, old_place.path_of(task.file.file_path))
        old = pa.Table.from_batches(
            [conform(b, schema, arrow_schema) for b in old.to_batches()], schema=arrow_schema
        )
        hits = key_mask(old, keys.select(list(names)), row_column=_ROW)
        if not pc.any(hits).as_py():
            continue
        if roller is None:
            on_first_write(rewrite)
            rewrite.directory = rewrite_data_dir(data.path, *batch, rewrite.rewrite_id)
            roller = FileRoller(
                fs=data.fs,
                directory=rewrite.directory,
                url_prefix=data.prefix,
                schema=schema,
                arrow_schema=arrow_schema,
                properties=dict(table.properties),
                spec_id=table.spec().spec_id,
                target_size=target_size,
            )
        rewrite.deleted.append(task.file)
        roller.spec_id = task.file.spec_id
        old_key = _OldPartition(task.file.partition, task.file.spec_id)
        for piece in old.filter(pc.invert(hits)).to_batches():
            roller.write(old_key, piece)  # type: ignore[arg-type]
        rewrite.added += roller.close_all()
        roller.written.clear()
    return rewrite
