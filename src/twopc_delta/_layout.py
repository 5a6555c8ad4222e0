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
directory with ``rewrite-<id>.started`` until the commit's outcome is known.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote

from twopc import Committable, TaskContext

__all__ = [
    "DATA_DIR",
    "PREPARED_SUFFIX",
    "RECORD_DIR",
    "REWRITE_PREFIX",
    "STARTED_SUFFIX",
    "AttemptId",
    "attempt_data_dir",
    "batch_record_dir",
    "parse_record_name",
    "relative_uri",
    "rewrite_data_dir",
    "sink_record_dir",
]

STARTED_SUFFIX = ".started"
PREPARED_SUFFIX = ".json"
REWRITE_PREFIX = "rewrite-"
DATA_DIR = "twopc-data"
RECORD_DIR = "_twopc"


@dataclass(frozen=True)
class AttemptId:
    """One task attempt of one batch, as its records and directories name it."""

    query_id: str
    batch_id: int
    partition: int
    attempt: int

    @property
    def stem(self) -> str:
        return f"{self.partition}-{self.attempt}"

    @classmethod
    def of(cls, work: Committable | TaskContext) -> AttemptId:
        """The attempt a task context or a committable names."""
        return cls(work.query_id, work.batch_id, work.partition, work.attempt)


def sink_record_dir(root: str, sink_id: str) -> str:
    return f"{root.rstrip('/')}/{RECORD_DIR}/{sink_id}"


def batch_record_dir(root: str, sink_id: str, query_id: str, batch_id: int) -> str:
    return f"{sink_record_dir(root, sink_id)}/{query_id}/{batch_id}"


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


def parse_record_name(name: str) -> tuple[int, int, str] | None:
    """``(partition, attempt, suffix)`` of an attempt's record file name, else ``None``."""
    for suffix in (STARTED_SUFFIX, PREPARED_SUFFIX):
        if name.endswith(suffix):
            stem = name[: -len(suffix)]
            partition, sep, attempt = stem.partition("-")
            if sep and partition.isdigit() and attempt.isdigit():
                return int(partition), int(attempt), suffix
    return None
