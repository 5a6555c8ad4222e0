"""Catalogs and tables: the embedded default, one catalog object per process, tables
loaded fresh for every decision, and pyiceberg's errors turned into twopc's.

Without catalog properties the sink uses pyiceberg's SQL catalog on a SQLite file in the
warehouse directory (``<warehouse>/twopc-catalog.db``): no server, as the demo and the
tests' local runs need. Any catalog pyiceberg loads (SQL on PostgreSQL, REST, Glue, ...)
is named by ``catalog`` and configured by ``catalog_properties`` or pyiceberg's own
configuration (``~/.pyiceberg.yaml``, ``PYICEBERG_CATALOG__...``).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Mapping
from typing import Any

from pyiceberg.catalog import Catalog, load_catalog
from pyiceberg.table import Table

from twopc import ConfigurationError
from twopc.secrets import MASK, redact

__all__ = [
    "SECRET_HINTS",
    "catalog_properties",
    "catalog_secrets",
    "load_catalog_cached",
    "public_properties",
    "without_commit_retries",
]

SQLITE_FILE = "twopc-catalog.db"
SECRET_HINTS = ("secret", "password", "token", "credential", "session")
"""Catalog property names holding one of these are masked in messages and ``repr``."""

_lock = threading.Lock()
_catalogs: dict[tuple[str, tuple[tuple[str, str], ...]], Catalog] = {}


def catalog_properties(warehouse: str | None, properties: Mapping[str, str]) -> dict[str, str]:
    """What ``load_catalog`` gets: ``properties``, or, with none that name a catalog and a
    local ``warehouse``, the embedded SQL catalog on a SQLite file in it."""
    chosen = {str(k): str(v) for k, v in properties.items()}
    if warehouse is not None:
        chosen.setdefault("warehouse", warehouse)
    names_catalog = any(key in chosen for key in ("type", "uri", "py-catalog-impl"))
    if not names_catalog and warehouse is not None:
        local = _local_directory(warehouse)
        if local is None:
            raise ConfigurationError(
                f"iceberg sink: the embedded catalog keeps its SQLite file in the warehouse, "
                f"which must then be a local directory, not {warehouse!r}: give "
                "catalog_properties (a SQL catalog on PostgreSQL, a REST catalog) for a "
                "warehouse on object storage"
            )
        chosen.setdefault("type", "sql")
        chosen["uri"] = f"sqlite:///{local}/{SQLITE_FILE}"
        chosen["warehouse"] = f"file://{local}"
    return chosen


def _local_directory(warehouse: str) -> str | None:
    if warehouse.startswith("file://"):
        return warehouse.removeprefix("file://").rstrip("/") or "/"
    if "://" in warehouse:
        return None
    return os.path.abspath(warehouse)


def _forget_inherited() -> None:
    """In a forked child (the local engine's tasks): drop the parent's catalogs. A SQL
    catalog's pool holds the parent's connections; used from two processes they hang or
    mix replies. Their pools are let go without closing what the parent still uses."""
    for catalog in _catalogs.values():
        engine = getattr(catalog, "engine", None)
        if engine is not None:
            with contextlib.suppress(Exception):
                engine.dispose(close=False)
    _catalogs.clear()


os.register_at_fork(after_in_child=_forget_inherited)


def load_catalog_cached(name: str, properties: Mapping[str, str]) -> Catalog:
    """One catalog object per name and properties in this process (a SQL catalog holds a
    connection pool, which every task would otherwise open again)."""
    key = (name, tuple(sorted(properties.items())))
    with _lock:
        catalog = _catalogs.get(key)
        if catalog is None:
            if properties.get("type") == "sql" and str(properties.get("uri", "")).startswith(
                "sqlite:///"
            ):
                os.makedirs(
                    os.path.dirname(str(properties["uri"]).removeprefix("sqlite:///")),
                    exist_ok=True,
                )
            catalog = _catalogs[key] = load_catalog(name, **dict(properties))
        return catalog


def forget_catalog(name: str, properties: Mapping[str, str]) -> None:
    """Drop the cached catalog (after its connection broke), so the next use connects anew."""
    with _lock:
        _catalogs.pop((name, tuple(sorted(properties.items()))), None)


def catalog_secrets(properties: Mapping[str, str]) -> list[str]:
    """The values of properties that hold credentials, for :func:`twopc.secrets.redact`."""
    return [
        str(value)
        for key, value in properties.items()
        if any(hint in key.lower() for hint in SECRET_HINTS) and value
    ]


def public_properties(properties: Mapping[str, str]) -> dict[str, str]:
    """``properties`` with credentials masked (also passwords inside a ``uri``)."""
    secrets = catalog_secrets(properties)
    return {
        key: MASK
        if any(hint in key.lower() for hint in SECRET_HINTS)
        else redact(str(value), secrets)
        for key, value in properties.items()
    }


def without_commit_retries(table: Table) -> Table:
    """A view of ``table`` whose transactions do not retry a lost compare-and-swap by
    themselves: pyiceberg would re-apply the same files on the new head without asking
    whether another process committed this batch meanwhile. The sink retries instead,
    reading its marker first. Only this process's copy of the metadata changes."""
    properties: dict[str, Any] = dict(table.metadata.properties)
    properties["commit.retry.num-retries"] = "0"
    metadata = table.metadata.model_copy(update={"properties": properties})
    return Table(
        identifier=table.name(),
        metadata=metadata,
        metadata_location=table.metadata_location,
        io=table.io,
        catalog=table.catalog,
    )
