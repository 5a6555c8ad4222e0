"""Exactly-once Postgres and MySQL/MariaDB sinks for twopc.

Create sinks by name (``twopc.create_sink("postgres", dsn=..., table=...)``) or import the
classes; each backend imports its driver only when used::

    from twopc_jdbc.postgres import PostgresSink   # needs twopc[postgres]
    from twopc_jdbc.mysql import MySQLSink         # needs twopc[mysql]
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twopc import BackendNotInstalledError

if TYPE_CHECKING:
    from twopc_jdbc.mysql import MySQLSink
    from twopc_jdbc.postgres import PostgresSink

__all__ = ["MySQLSink", "PostgresSink"]

_LAZY = {
    "PostgresSink": ("twopc_jdbc.postgres", "psycopg", "postgres"),
    "MySQLSink": ("twopc_jdbc.mysql", "pymysql", "mysql"),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'twopc_jdbc' has no attribute {name!r}")
    module, driver, extra = _LAZY[name]
    import importlib

    try:
        return getattr(importlib.import_module(module), name)
    except ModuleNotFoundError as exc:
        if exc.name != driver:
            raise
        raise BackendNotInstalledError(
            f'{name} needs {driver}: pip install "twopc[{extra}]"'
        ) from exc
