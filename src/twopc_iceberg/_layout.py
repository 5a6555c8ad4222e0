"""Where the Iceberg sink keeps what it writes, relative to the table.

Data files of one task attempt live in a directory of their own under the table's data
path, ``<data>/twopc/<sink_id>/<query_id>/<batch>/<partition>-<attempt>/``, followed by the
Iceberg partition path: aborting an attempt removes one directory, and the sweep never has
to tell this sink's files from another writer's by listing the data path. Committed files
stay where they are (a snapshot references them by path).

The attempt's state lives under ``<table>/twopc/<sink_id>/<query_id>/<batch>/``:
``<partition>-<attempt>.started`` while it writes, ``<partition>-<attempt>.json`` (its
committable) once prepared; both are removed when the batch commits or aborts. A commit in
``upsert`` mode that rewrites existing files marks its directory with
``rewrite-<id>.started`` until the commit's outcome is known (:mod:`twopc.table_formats`
keeps these records).
"""

from __future__ import annotations

from twopc.table_formats import REWRITE_PREFIX, AttemptId

__all__ = ["attempt_data_dir", "record_root", "rewrite_data_dir"]

_DIR = "twopc"


def record_root(table_location: str) -> str:
    """Where the attempt records of every sink id live (:mod:`twopc.table_formats`)."""
    return f"{table_location.rstrip('/')}/{_DIR}"


def attempt_data_dir(data_location: str, sink_id: str, attempt: AttemptId) -> str:
    return (
        f"{data_location.rstrip('/')}/{_DIR}/{sink_id}/{attempt.query_id}/"
        f"{attempt.batch_id}/{attempt.stem}"
    )


def rewrite_data_dir(
    data_location: str, sink_id: str, query_id: str, batch_id: int, rewrite: str
) -> str:
    return (
        f"{data_location.rstrip('/')}/{_DIR}/{sink_id}/{query_id}/{batch_id}/"
        f"{REWRITE_PREFIX}{rewrite}"
    )
