"""Where the Delta sink keeps what it writes, relative to the table's root.

Data files of one task attempt live in a directory of their own,
``<table>/twopc-data/<sink_id>/<query_id>/<batch>/<partition>-<attempt>/``: aborting an
attempt removes one directory, and the sweep never has to tell this sink's files from
another writer's. The directory is not hidden (no leading ``_`` or ``.``) on purpose: a
Delta ``VACUUM`` skips hidden directories, and files an upsert later removes from the table
must be vacuumed like any other. Committed files stay where they are (the log references
them by path, relative to the table's root).

The attempt's state lives in the hidden ``<table>/_twopc/<sink_id>/<query_id>/<batch>/``
(``VACUUM`` leaves it alone): ``<partition>-<attempt>.started`` while it writes,
``<partition>-<attempt>.json`` (its committable) once prepared; both are removed when the
batch commits or aborts. An upsert's commit that rewrites existing files marks its
directory with ``rewrite-<id>.started`` until the commit's outcome is known
(:mod:`twopc.table_formats` keeps these records).
"""

from __future__ import annotations

from urllib.parse import quote

from twopc.table_formats import REWRITE_PREFIX, AttemptId

__all__ = [
    "DATA_DIR",
    "RECORD_DIR",
    "attempt_data_dir",
    "record_root",
    "relative_uri",
    "rewrite_data_dir",
]

DATA_DIR = "twopc-data"
RECORD_DIR = "_twopc"


def record_root(root: str) -> str:
    """Where the attempt records of every sink id live (:mod:`twopc.table_formats`)."""
    return f"{root.rstrip('/')}/{RECORD_DIR}"


def attempt_data_dir(root: str, sink_id: str, attempt: AttemptId) -> str:
    """The directory of an attempt's data files (``root``: the table's root, or ``""``
    for the path relative to it)."""
    head = f"{root.rstrip('/')}/" if root else ""
    return f"{head}{DATA_DIR}/{sink_id}/{attempt.query_id}/{attempt.batch_id}/{attempt.stem}"


def rewrite_data_dir(root: str, sink_id: str, query_id: str, batch_id: int, rewrite: str) -> str:
    head = f"{root.rstrip('/')}/" if root else ""
    return f"{head}{DATA_DIR}/{sink_id}/{query_id}/{batch_id}/{REWRITE_PREFIX}{rewrite}"


def relative_uri(path: str) -> str:
    """A path relative to the table's root as the Delta log writes it: a URI reference,
    percent-encoded (a sink id may hold a space)."""
    return quote(path, safe="/=-_.~")
