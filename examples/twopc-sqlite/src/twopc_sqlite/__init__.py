"""twopc-sqlite: an example third-party twopc plugin, exactly-once into a SQLite file.

Create the sink by name, as users of any twopc backend do::

    import twopc

    sink = twopc.create_sink("sqlite", path="/data/out.sqlite3", table="rows")

or directly with :class:`twopc_sqlite.sink.SqliteSink`; ``"sqlite-task"`` /
:class:`twopc_sqlite.task_sink.SqliteTaskSink` is the same output committed in each task.
Importing this package imports nothing else: a sink module (and with it pyarrow) loads on
first use of its class, and the plugin module twopc imports during discovery
(:mod:`twopc_sqlite.plugin`) imports only twopc.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

__all__ = ["SqliteSink", "SqliteTaskSink", "__version__"]

if TYPE_CHECKING:
    from twopc_sqlite.sink import SqliteSink
    from twopc_sqlite.task_sink import SqliteTaskSink


def __getattr__(name: str) -> Any:
    # Lazy: ``import twopc_sqlite`` stays cheap; a sink module loads on first use.
    if name == "SqliteSink":
        from twopc_sqlite.sink import SqliteSink

        return SqliteSink
    if name == "SqliteTaskSink":
        from twopc_sqlite.task_sink import SqliteTaskSink

        return SqliteTaskSink
    raise AttributeError(f"module 'twopc_sqlite' has no attribute {name!r}")
