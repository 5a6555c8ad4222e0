"""Reading a Delta target back the way a user would: deltalake's reader, DuckDB's Parquet
reader over exactly the files the log references (DuckDB's ``delta`` extension is
downloaded on first use, which this machine cannot), the log's file list, and the data
files on disk that no version references."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pyarrow as pa


def load(uri: str | Path) -> Any:
    """The table (deltalake's ``DeltaTable``), or None when there is none."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(str(uri))
    except TableNotFoundError:
        return None


def scan(uri: str | Path) -> pa.Table:
    """Every row deltalake's reader sees now (an empty table when there is no table)."""
    table = load(uri)
    if table is None:
        return pa.table({})
    return table.to_pyarrow_table()


def ids(uri: str | Path, column: str = "id") -> Counter[int]:
    rows = scan(uri)
    if column not in rows.column_names:
        return Counter()
    return Counter(int(i) for i in rows.column(column).to_pylist())


def referenced(uri: str | Path) -> list[str]:
    """The paths (relative, decoded) the table's current version references."""
    table = load(uri)
    if table is None:
        return []
    paths = pa.table(table.get_add_actions()).column("path").to_pylist()
    return [unquote(str(p)) for p in paths]


def every_referenced(uri: str | Path) -> set[str]:
    """The paths any version the log keeps added (removed files of an upsert included)."""
    import json

    log = Path(uri) / "_delta_log"
    found = set()
    for entry in sorted(log.glob("*.json")):
        for line in entry.read_text().splitlines():
            action = json.loads(line)
            for kind in ("add", "remove"):
                if kind in action:
                    found.add(unquote(action[kind]["path"]))
    return found


def added_twice(uri: str | Path) -> list[str]:
    """Paths that two commits of the log add with no remove of them in between: a batch
    committed twice. deltalake's reader keeps one file per path, so the ids it shows would
    not reveal it."""
    import json

    live: set[str] = set()
    twice: set[str] = set()
    for entry in sorted((Path(uri) / "_delta_log").glob("*.json")):
        for line in entry.read_text().splitlines():
            if not line.strip():
                continue
            action = json.loads(line)
            if "remove" in action:
                live.discard(unquote(action["remove"]["path"]))
            if "add" in action:
                path = unquote(action["add"]["path"])
                if path in live:
                    twice.add(path)
                live.add(path)
    return sorted(twice)


def unreferenced_data_files(uri: str | Path) -> list[str]:
    """Files outside the log and the sink's records that no version references: what a
    crash may leave and recovery must remove."""
    root = Path(uri)
    if not (root / "_delta_log").exists():
        return sorted(
            str(p.relative_to(root))
            for p in root.rglob("*")
            if p.is_file() and not str(p.relative_to(root)).startswith("_twopc")
        )
    known = every_referenced(root)
    on_disk = {
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and not str(p.relative_to(root)).startswith(("_delta_log", "_twopc"))
    }
    return sorted(on_disk - known)


def records_left(uri: str | Path) -> list[str]:
    """The sink's attempt records still in the table's ``_twopc`` directory."""
    base = Path(uri) / "_twopc"
    return sorted(str(p) for p in base.rglob("*") if p.is_file()) if base.exists() else []


def duckdb_parquet_ids(uri: str | Path, column: str = "id") -> Counter[int]:
    """The ids DuckDB reads from exactly the Parquet files the log references."""
    import duckdb

    files = [str(Path(uri) / p) for p in referenced(uri)]
    if not files:
        return Counter()
    rows = duckdb.connect().execute(f"SELECT {column} FROM read_parquet(?)", [files]).fetchall()
    return Counter(int(r[0]) for r in rows)
