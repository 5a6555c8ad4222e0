"""The Iceberg sink's committable payload: the table and the data files one attempt wrote."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from twopc import Payload
from twopc_iceberg._datafiles import WrittenFile

__all__ = ["IcebergPayload"]


@dataclass(frozen=True)
class IcebergPayload(Payload):
    """A task's committable: the table and the data files the attempt wrote."""

    version: ClassVar[int] = 1

    table: str
    files: tuple[WrittenFile, ...]
    key_columns: tuple[str, ...] = ()
    """The upsert keys the files were deduplicated by; empty in ``append`` mode."""

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "files": [f.to_json() for f in self.files],
            "key_columns": list(self.key_columns),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], version: int) -> IcebergPayload:
        return cls(
            table=str(data["table"]),
            files=tuple(WrittenFile.from_json(f) for f in data["files"]),
            key_columns=tuple(str(c) for c in data.get("key_columns", ())),
        )
