"""The plugin module the ``twopc`` entry point names.

twopc imports it while discovering backends (``twopc plugins``, ``twopc.create_sink``), so it
imports nothing but twopc itself: a sink's module, and anything it needs, loads only when a
``sqlite`` (commits on the driver) or ``sqlite-task`` (commits in the task) sink is created.
``requires`` is checked without importing, so ``twopc plugins`` can say why the backend is
unusable (here: a Python built without the ``_sqlite3`` module).
"""

from __future__ import annotations

from twopc import SinkSpec, hookimpl


@hookimpl
def twopc_sinks() -> list[SinkSpec]:
    return [
        SinkSpec(
            name="sqlite",
            factory="twopc_sqlite.sink:SqliteSink",
            description="exactly-once append into a SQLite database file (example plugin)",
            requires=("_sqlite3",),
            install_hint="use a Python built with SQLite support (the _sqlite3 module)",
        ),
        SinkSpec(
            name="sqlite-task",
            factory="twopc_sqlite.task_sink:SqliteTaskSink",
            description="the same, each task committing with a marker (example plugin)",
            requires=("_sqlite3",),
            install_hint="use a Python built with SQLite support (the _sqlite3 module)",
        ),
    ]
