"""``mode="upsert"``: one row per key.

Within a batch the last row of a key wins: the engine hash-partitions the batch by the key
columns, so all rows of a key reach one task, which keeps the key columns of every row it
wrote (not the rows) and, at ``pre_commit``, rewrites the files holding an earlier row of a
key written again (:func:`last_rows_win`).

Across batches the driver's commit replaces the table's rows of the batch's keys
copy-on-write (:func:`plan_rewrite`): the table's files that may hold such a key (by their
statistics) are read, and those that do are removed, in the batch's own commit, and
replaced by files without those rows. A file with a deletion vector is refused (this sink
does not apply them).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake.transaction import RemoveAction

from twopc import PermanentSinkError
from twopc.table_formats import key_mask
from twopc_delta._datafiles import (
    FileWriter,
    PartitionValues,
    WrittenFile,
    with_partition_columns,
)
from twopc_delta._table import Place, arrow_schema

__all__ = ["KeyLog", "Rewrite", "last_rows_win", "plan_rewrite"]

_FILE, _ROW = "__twopc_file", "__twopc_row"


@dataclass
class KeyLog:
    """The key columns of every row a task wrote, with the file it went to (by partition
    value) and its running number in the task."""

    names: tuple[str, ...]
    pieces: list[pa.Table] = field(default_factory=list)

    def add(
        self, rows: pa.RecordBatch, positions: pa.Array | None, file_key: str, base: int
    ) -> None:
        """Log the keys of ``rows`` (the rows at ``positions`` of them, when given) that
        went to the file of ``file_key``; ``base``: the task's row number of ``rows[0]``."""
        keys = pa.Table.from_batches([rows.select(list(self.names))])
        if positions is None:
            numbers = pa.array(range(base, base + keys.num_rows), pa.int64())
        else:
            keys = keys.take(positions)
            numbers = pc.add(positions.cast(pa.int64()), base)
        keys = keys.append_column(_FILE, pa.array([file_key] * keys.num_rows, pa.string()))
        self.pieces.append(keys.append_column(_ROW, numbers))


def last_rows_win(
    writer: FileWriter, log: KeyLog, files: list[WrittenFile], key_of: Callable[[WrittenFile], str]
) -> list[WrittenFile]:
    """Keep one row per key, the last the task wrote: rewrite the files that hold an
    earlier row of a key written again. ``files`` are the task's closed files."""
    if not log.pieces:
        return files
    keys = pa.concat_tables(log.pieces)
    latest = keys.group_by(list(log.names), use_threads=False).aggregate([(_ROW, "max")])
    if latest.num_rows == keys.num_rows:
        return files
    keep = latest.column(f"{_ROW}_max").combine_chunks()
    out: list[WrittenFile] = []
    for entry in files:
        mine = keys.filter(pc.equal(keys.column(_FILE), key_of(entry)))
        mask = pc.is_in(mine.column(_ROW), value_set=keep)
        if pc.all(mask).as_py():
            out.append(entry)
            continue
        path = f"{writer.directory}/{entry.path.rsplit('/', 1)[1]}"
        rows = pq.read_table(writer.fs.open(path, "rb")).filter(mask)
        writer.fs.rm(path)
        for batch in rows.to_batches():
            writer.write(entry.partition_values, batch)
        out += writer.close_all()
    return out


@dataclass
class Rewrite:
    """What an upsert's commit changes in files the table holds already."""

    rewrite_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    removed: list[RemoveAction] = field(default_factory=list)
    added: list[WrittenFile] = field(default_factory=list)
    directory: str = ""
    """Where the rewritten files went (``""``: none written)."""


def _batch_keys(
    place: Place, files: Sequence[WrittenFile], names: Sequence[str], schema: pa.Schema
) -> pa.Table | None:
    pieces = []
    for written in files:
        data_names = [n for n in names if n not in written.partition_values]
        rows = pq.read_table(place.fs.open(place.join(written.path), "rb"), columns=data_names)
        rows = with_partition_columns(
            rows, {k: v for k, v in written.partition_values.items() if k in names}, schema
        )
        pieces.append(rows.select(list(names)))
    if not pieces:
        return None
    keys = pa.concat_tables(pieces)
    return keys.group_by(list(names), use_threads=False).aggregate([])


def _may_hold(actions: pa.Table, keys: pa.Table) -> list[int]:
    """The rows of ``actions`` (deltalake's flattened add actions) whose files may hold one
    of ``keys``, by their min/max statistics and partition values."""
    candidates = []
    for index in range(actions.num_rows):
        possible = True
        for name in keys.column_names:
            values = keys.column(name)
            part = f"partition.{name}"
            if part in actions.column_names:
                text = _text(actions.column(part)[index].as_py())
                matches = pc.equal(pc.cast(values, pa.string()), text) if text else None
                possible = matches is None or bool(pc.any(matches).as_py())
            else:
                low = (
                    actions.column(f"min.{name}")[index]
                    if f"min.{name}" in actions.column_names
                    else None
                )
                high = (
                    actions.column(f"max.{name}")[index]
                    if f"max.{name}" in actions.column_names
                    else None
                )
                if low is not None and high is not None and low.is_valid and high.is_valid:
                    try:
                        inside = pc.and_(
                            pc.greater_equal(values, low.cast(values.type)),
                            pc.less_equal(values, high.cast(values.type)),
                        )
                        possible = bool(pc.any(inside).as_py())
                    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                        possible = True
            if not possible:
                break
        if possible:
            candidates.append(index)
    return candidates


def plan_rewrite(
    table: DeltaTable,
    place: Place,
    files: Sequence[WrittenFile],
    *,
    names: Sequence[str],
    directory_of: Callable[[str], tuple[str, str]],
    on_first_write: Callable[[Rewrite], None],
) -> Rewrite:
    """The removes and adds that take the batch's keys out of the table's files.

    ``directory_of(rewrite_id)`` gives the rewrite's directory (filesystem path, path
    relative to the table's root); ``on_first_write`` runs before its first file is
    written (the record the sweep finds if the commit never lands)."""
    rewrite = Rewrite()
    schema = arrow_schema(table)
    keys = _batch_keys(place, files, names, schema)
    if keys is None or keys.num_rows == 0:
        return rewrite
    actions = pa.table(table.get_add_actions(flatten=True))
    if actions.num_rows == 0:
        return rewrite
    _refuse_deletion_vectors(table)
    writer: FileWriter | None = None
    for index in _may_hold(actions, keys):
        row: dict[str, Any] = {n: actions.column(n)[index].as_py() for n in actions.column_names}
        if row.get("deletionVector.storageType") or row.get("deletion_vector.storage_type"):
            raise PermanentSinkError(
                f"mode='upsert' cannot rewrite {row['path']}: it has a deletion vector"
            )
        relative = unquote(str(row["path"]))
        if "://" in relative or relative.startswith("/"):
            raise PermanentSinkError(
                f"mode='upsert' cannot rewrite {relative}: a file outside the table's root"
            )
        values: PartitionValues = {
            n.removeprefix("partition."): _text(row[n])
            for n in actions.column_names
            if n.startswith("partition.")
        }
        existing = pq.read_table(place.fs.open(place.join(relative), "rb"))
        full = with_partition_columns(existing, values, schema)
        hit = key_mask(full, keys)
        if not pc.any(hit).as_py():
            continue
        rewrite.removed.append(
            RemoveAction(str(row["path"]), True, _now_ms(), int(row["size_bytes"]), dict(values))
        )
        kept = existing.filter(pc.invert(hit))
        if kept.num_rows == 0:
            continue
        if writer is None:
            on_first_write(rewrite)
            directory, relative_dir = directory_of(rewrite.rewrite_id)
            rewrite.directory = directory
            writer = FileWriter(place.fs, directory, relative_dir)
        for batch in kept.to_batches():
            writer.write(values, batch)
        rewrite.added += writer.close_all()
    return rewrite


def _refuse_deletion_vectors(table: DeltaTable) -> None:
    """This sink rewrites whole files: one with a deletion vector would bring its deleted
    rows back."""
    if "deletionVectors" not in (table.protocol().reader_features or ()):
        return
    vectors = pa.RecordBatchReader.from_stream(table.deletion_vectors()).read_all()
    if vectors.num_rows:
        raise PermanentSinkError(
            f"mode='upsert' cannot rewrite the files of Delta table {table.table_uri}: "
            f"{vectors.num_rows} of them have deletion vectors (rewrite them with OPTIMIZE "
            "or REORG first)"
        )


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _now_ms() -> int:
    import time

    return int(time.time() * 1000)
