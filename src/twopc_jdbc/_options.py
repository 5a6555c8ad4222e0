"""Options shared by the SQL sinks, validated when the sink is created."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

from twopc import ConfigurationError

__all__ = [
    "MODES",
    "SCHEMA_EVOLUTIONS",
    "TRANSACTION_MODES",
    "ConnectionSettings",
    "SqlOptions",
    "TableName",
]

MODES = ("append", "upsert")
TRANSACTION_MODES = ("transaction", "two_phase")
SCHEMA_EVOLUTIONS = ("none", "add_columns")


@dataclass(frozen=True)
class TableName:
    """A table name, optionally qualified by a schema (``schema.table``).

    Kept as parts and quoted by the driver's own tools, never spliced into SQL raw.
    """

    name: str
    schema: str | None = None

    @classmethod
    def parse(cls, text: str) -> TableName:
        if not isinstance(text, str) or not text.strip():
            raise ConfigurationError("table must be a non-empty string")
        schema, dot, name = text.rpartition(".")
        if dot and schema and name:
            return cls(name=name, schema=schema)
        return cls(name=text)

    def __str__(self) -> str:
        return f"{self.schema}.{self.name}" if self.schema else self.name


@dataclass(frozen=True)
class ConnectionSettings:
    """Where and how to connect. ``repr`` and ``describe`` never show secrets."""

    host: str = "127.0.0.1"
    port: int | None = None
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    database: str | None = None
    options: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def from_url(
        cls, url: str | None, schemes: Sequence[str], options: Mapping[str, Any] | None
    ) -> ConnectionSettings:
        extra = dict(options or {})
        if not url:
            return cls(options=extra)
        parts = urlsplit(url)
        if parts.scheme not in schemes:
            raise ConfigurationError(
                f"connection URL scheme {parts.scheme!r} is not one of {', '.join(schemes)}"
            )
        for item in filter(None, parts.query.split("&")):
            key, _, value = item.partition("=")
            extra.setdefault(unquote(key), unquote(value))
        try:
            port = parts.port
        except ValueError as exc:
            raise ConfigurationError(f"bad port in connection URL: {exc}") from None
        return cls(
            host=parts.hostname or "127.0.0.1",
            port=port,
            user=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password else None,
            database=unquote(parts.path.lstrip("/")) or None,
            options=extra,
        )

    def describe(self) -> str:
        """``user@host:port/database`` without the password or other secrets."""
        who = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port else ""
        database = f"/{self.database}" if self.database else ""
        return f"{who}{self.host}{port}{database}"


_COLUMN = re.compile(r"^[^\x00]{1,63}$")


@dataclass(frozen=True)
class SqlOptions:
    """What to write and how; see each backend's documentation for the table of options."""

    table: TableName
    mode: str = "append"
    key_columns: tuple[str, ...] = ()
    order_column: str | None = None
    delete_column: str | None = None
    create_table: bool = False
    schema_evolution: str = "none"
    """``add_columns``: add the data's new columns to the table as nullable columns."""
    transaction_mode: str = "transaction"
    marker_table: TableName = TableName("twopc_markers")
    lock_timeout_seconds: float = 60.0
    connect_timeout_seconds: float = 60.0
    read_timeout_seconds: float = 300.0
    """Client side: how long the sink waits for any answer of the server (a stalled server
    keeps the connection open and silent; no server-side setting can end that wait)."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigurationError(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        if self.transaction_mode not in TRANSACTION_MODES:
            raise ConfigurationError(
                f"transaction_mode must be one of {', '.join(TRANSACTION_MODES)}, "
                f"not {self.transaction_mode!r}"
            )
        if self.schema_evolution not in SCHEMA_EVOLUTIONS:
            raise ConfigurationError(
                f"schema_evolution must be one of {', '.join(SCHEMA_EVOLUTIONS)}, "
                f"not {self.schema_evolution!r}"
            )
        if self.mode == "upsert" and not self.key_columns:
            raise ConfigurationError("mode='upsert' needs key_columns")
        if self.delete_column and not self.key_columns:
            raise ConfigurationError("delete_column needs key_columns to find the rows to delete")
        for column in (*self.key_columns, self.order_column, self.delete_column):
            if column is not None and not _COLUMN.match(column):
                raise ConfigurationError(f"invalid column name {column!r}")
        if len(set(self.key_columns)) != len(self.key_columns):
            raise ConfigurationError("key_columns has duplicates")
        for name in ("lock_timeout_seconds", "connect_timeout_seconds", "read_timeout_seconds"):
            if not getattr(self, name) > 0:
                raise ConfigurationError(f"{name} must be positive")

    @property
    def needs_staging(self) -> bool:
        """Upserts, deletes and de-duplication go through a staging table."""
        return self.mode == "upsert" or self.delete_column is not None
