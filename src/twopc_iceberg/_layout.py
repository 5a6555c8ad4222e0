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
``rewrite-<id>.started`` until the commit's outcome is known.
"""

from __future__ import annotations

from dataclasses import dataclass

from twopc import Committable, TaskContext

__all__ = [
    "PREPARED_SUFFIX",
    "REWRITE_PREFIX",
    "STARTED_SUFFIX",
    "AttemptId",
    "attempt_data_dir",
    "batch_record_dir",
    "parse_record_name",
    "rewrite_data_dir",
    "sink_record_dir",
]

STARTED_SUFFIX = ".started"
PREPARED_SUFFIX = ".json"
REWRITE_PREFIX = "rewrite-"
_DIR = "twopc"


@dataclass(frozen=True)
class AttemptId:
    """One task attempt of one batch, as its records name it."""

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


def sink_record_dir(table_location: str, sink_id: str) -> str:
    return f"{table_location.rstrip('/')}/{_DIR}/{sink_id}"


def batch_record_dir(table_location: str, sink_id: str, query_id: str, batch_id: int) -> str:
    return f"{sink_record_dir(table_location, sink_id)}/{query_id}/{batch_id}"


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


def parse_record_name(name: str) -> tuple[int, int, str] | None:
    """``(partition, attempt, suffix)`` of an attempt's record file name, else ``None``."""
    for suffix in (STARTED_SUFFIX, PREPARED_SUFFIX):
        if name.endswith(suffix):
            stem = name[: -len(suffix)]
            partition, sep, attempt = stem.partition("-")
            if sep and partition.isdigit() and attempt.isdigit():
                return int(partition), int(attempt), suffix
    return None
