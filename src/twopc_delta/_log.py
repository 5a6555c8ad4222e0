"""The table's current metadata and protocol, read from its ``_delta_log`` with fsspec and
pyarrow rather than deltalake.

Tasks read it: deltalake's Rust runtime refuses to run in a process forked from one that
used it (a panic, "Forked process detected"), which is how the local engine starts its
tasks and how some Python workers start, so the task side of the sink never calls into
deltalake's I/O. The driver uses deltalake itself (:meth:`TableInfo.of`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable
from deltalake import Schema as DeltaSchema

from twopc_delta._table import Place

__all__ = ["TableInfo", "read_log"]

_COMMIT = re.compile(r"^(\d{20})\.json$")
_CHECKPOINT = re.compile(r"^(\d{20})\.checkpoint(?:\.\d+\.\d+|\.[0-9a-fA-F-]+)?\.(parquet|json)$")


@dataclass(frozen=True)
class TableInfo:
    """What the sink needs to know of a table to write files for it."""

    version: int
    schema_json: str
    partition_columns: tuple[str, ...]
    configuration: Mapping[str, str] = field(default_factory=dict)
    min_writer_version: int = 2
    writer_features: tuple[str, ...] | None = None

    @classmethod
    def of(cls, table: DeltaTable) -> TableInfo:
        protocol = table.protocol()
        metadata = table.metadata()
        return cls(
            version=table.version(),
            schema_json=table.schema().to_json(),
            partition_columns=tuple(metadata.partition_columns),
            configuration=dict(metadata.configuration),
            min_writer_version=protocol.min_writer_version,
            writer_features=None
            if protocol.writer_features is None
            else tuple(protocol.writer_features),
        )

    def arrow_schema(self) -> pa.Schema:
        return pa.schema(DeltaSchema.from_json(self.schema_json).to_arrow())

    def column_metadata(self) -> dict[str, Mapping[str, Any]]:
        fields = json.loads(self.schema_json).get("fields", [])
        return {str(f["name"]): f.get("metadata") or {} for f in fields}


def _apply(action: Mapping[str, Any], found: dict[str, Any]) -> None:
    for kind in ("metaData", "protocol"):
        if action.get(kind):
            found[kind] = action[kind]


def _checkpoint_actions(place: Place, path: str, found: dict[str, Any]) -> None:
    if path.endswith(".json"):
        for line in place.fs.cat_file(path).decode().splitlines():
            if line.strip():
                _apply(json.loads(line), found)
        return
    with place.fs.open(path, "rb") as handle:
        parquet = pq.ParquetFile(handle)
        names = [n for n in ("metaData", "protocol") if n in parquet.schema_arrow.names]
        for row in parquet.read(columns=names).to_pylist():
            _apply(row, found)


def read_log(place: Place) -> TableInfo | None:
    """The table's newest metadata and protocol, or ``None`` when there is no log."""
    log = f"{place.path.rstrip('/')}/_delta_log"
    if not place.fs.exists(log):
        return None
    commits: dict[int, str] = {}
    checkpoints: dict[int, list[str]] = {}
    for path in place.fs.ls(log, detail=False):
        name = str(path).rsplit("/", 1)[-1]
        if match := _COMMIT.match(name):
            commits[int(match[1])] = str(path)
        elif match := _CHECKPOINT.match(name):
            checkpoints.setdefault(int(match[1]), []).append(str(path))
    if not commits and not checkpoints:
        return None
    found: dict[str, Any] = {}
    start = 0
    if checkpoints:
        start = max(checkpoints)
        for path in sorted(checkpoints[start]):
            _checkpoint_actions(place, path, found)
        start += 1
    latest = max([*commits, start - 1])
    for version in range(start, latest + 1):
        if version not in commits:
            continue
        for line in place.fs.cat_file(commits[version]).decode().splitlines():
            if line.strip():
                _apply(json.loads(line), found)
    metadata, protocol = found.get("metaData"), found.get("protocol") or {}
    if metadata is None:
        return None
    configuration = metadata.get("configuration") or {}
    if isinstance(configuration, list):  # a map read from Parquet: (key, value) pairs
        configuration = dict(configuration)
    features = protocol.get("writerFeatures")
    return TableInfo(
        version=latest,
        schema_json=str(metadata["schemaString"]),
        partition_columns=tuple(metadata.get("partitionColumns") or ()),
        configuration={str(k): str(v) for k, v in configuration.items()},
        min_writer_version=int(protocol.get("minWriterVersion") or 2),
        writer_features=None if features is None else tuple(features),
    )
