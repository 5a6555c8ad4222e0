"""The Delta sink's committable payload: the table and the data files one attempt wrote."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from twopc import Payload
from twopc_delta._datafiles import WrittenFile

__all__ = ["DeltaPayload"]


@dataclass(frozen=True)
class DeltaPayload(Payload):
    """A task's committable: the table, the data files the attempt wrote, and the columns
    they hold (a Delta schema as JSON: what creates the table, or the new columns the
    commit adds with ``schema_evolution="add_columns"``)."""

    version: ClassVar[int] = 1

    table: str
    files: tuple[WrittenFile, ...]
    schema: str = ""
    """The files' columns, partition columns included (Delta schema JSON; ``""`` when the
    task wrote no row)."""
    key_columns: tuple[str, ...] = ()
    """The upsert keys the files were deduplicated by; empty in ``append`` mode."""

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "files": [f.to_json() for f in self.files],
            "schema": self.schema,
            "key_columns": list(self.key_columns),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], version: int) -> DeltaPayload:
        return cls(
            table=str(data["table"]),
            files=tuple(WrittenFile.from_json(f) for f in data["files"]),
            schema=str(data.get("schema") or ""),
            key_columns=tuple(str(c) for c in data.get("key_columns", ())),
        )
