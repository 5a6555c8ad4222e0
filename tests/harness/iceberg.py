"""Reading an Iceberg target back the way a user would: a pyiceberg scan of the table, its
snapshot history, and the data files on disk that no snapshot references."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow as pa


def load(warehouse: str | Path, table: str) -> Any:
    """The table (pyiceberg's ``Table``) in the embedded catalog of ``warehouse``, or None."""
    from twopc_iceberg import IcebergSink

    return IcebergSink(table, warehouse=str(warehouse)).load_table()


def scan(warehouse: str | Path, table: str) -> pa.Table:
    """Every row a pyiceberg scan sees now (an empty table when there is no table)."""
    loaded = load(warehouse, table)
    if loaded is None:
        return pa.table({})
    return loaded.scan().to_arrow()


def ids(warehouse: str | Path, table: str, column: str = "id") -> Counter[int]:
    rows = scan(warehouse, table)
    if column not in rows.column_names:
        return Counter()
    return Counter(int(i) for i in rows.column(column).to_pylist())


def unreferenced_data_files(warehouse: str | Path, table: str) -> list[str]:
    """Files under the table's data path that no snapshot (of all the table keeps)
    references: what a crash may leave and recovery must remove (a Spark write job's
    ``_SUCCESS`` and ``.crc`` checksums included)."""
    loaded = load(warehouse, table)
    if loaded is None:
        return []
    data = Path(loaded.location().removeprefix("file://")) / "data"
    on_disk = {str(p) for p in data.rglob("*") if p.is_file()}
    referenced = {
        str(p).removeprefix("file://") for p in loaded.inspect.all_files()["file_path"].to_pylist()
    }
    return sorted(on_disk - referenced)


def records_left(warehouse: str | Path, table: str) -> list[str]:
    """The sink's attempt records still next to the table (none once batches resolved)."""
    loaded = load(warehouse, table)
    if loaded is None:
        return []
    base = Path(loaded.location().removeprefix("file://")) / "twopc"
    return sorted(str(p) for p in base.rglob("*") if p.is_file()) if base.exists() else []
