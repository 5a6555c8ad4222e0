"""What the conformance kit needs, importable by name in the kit's fresh processes.

``tests/test_conformance.py`` names ``"twopc_sqlite.testing:make_sink"`` as the sink factory:
the kit imports it in subprocesses (commit from a fresh process, the SIGKILL crash tests), so
it must live in the installed package, not in the tests directory.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import twopc
from twopc import Sink

__all__ = ["make_sink", "make_task_sink", "read_ids"]


def make_sink(target: str) -> Sink[object]:
    """The kit's factory: ``target`` is a database file path. Goes through the plugin
    registry, so the entry point is exercised too."""
    return twopc.create_sink("sqlite", path=target, table="rows")


def make_task_sink(target: str) -> Sink[object]:
    """The same for the sink that commits in the task."""
    return twopc.create_sink("sqlite-task", path=target, table="rows")


def read_ids(target: str, table: str = "rows") -> list[int]:
    """The ids a reader of ``table`` sees now: ``SELECT id FROM rows``, duplicates included.

    Opens the file read-only and never creates it; a missing file or table means no rows.
    """
    if not Path(target).exists():
        return []
    connection = sqlite3.connect(f"{Path(target).resolve().as_uri()}?mode=ro", uri=True, timeout=30)
    try:
        return [int(i) for (i,) in connection.execute(f'SELECT id FROM "{table}"')]
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return []
        raise
    finally:
        connection.close()
