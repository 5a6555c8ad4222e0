"""The output of a Spark write job, as table-format sinks on the Spark write path read it
(:class:`~twopc.WritesWithSpark`): Spark's part files, the Spark partition (task) that
wrote each, and the values of the columns it was partitioned by, from its directory names.

Spark names a part file ``part-<split>-<job uuid>...`` and a partition directory
``<column>=<value>``, with the value percent-escaped (``/`` as ``%2F``) and a null (or an
empty string) as ``__HIVE_DEFAULT_PARTITION__``; its own files (``_SUCCESS``,
``_temporary/``, ``.crc`` checksums) are hidden by a leading ``_`` or ``.``::

    for found in job_files(fs, "/warehouse/t/_job"):
        found.split, found.directories   # 3, {"region": "eu/west"}
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from twopc.errors import ConfigurationError, SinkError

__all__ = [
    "DEFAULT_PARTITION",
    "JobFile",
    "job_files",
    "unescape_path_name",
    "write_path_refusal",
]

DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
"""Spark's directory name for a null partition value."""

_SPARK_FILE = re.compile(r"^part-(?P<split>\d+)-")
_ESCAPED = re.compile(r"%([0-9A-Fa-f]{2})")


@dataclass(frozen=True)
class JobFile:
    """One data file of a write job's output."""

    path: str
    """fsspec path."""
    split: int
    """The Spark partition (task) that wrote it."""
    directories: Mapping[str, str | None] = field(default_factory=dict)
    """The values of the columns Spark partitioned by, from its directory names, unescaped
    (``None``: Spark's default partition, a null)."""


def unescape_path_name(text: str) -> str:
    """A partition value as Spark had it before it escaped it into a directory name."""
    return _ESCAPED.sub(lambda m: chr(int(m[1], 16)), text)


def job_files(fs: Any, job: str) -> Iterator[JobFile]:
    """The data files of a write job's output at ``job`` (an fsspec path), in path order.
    Raises :class:`~twopc.SinkError` for a visible file that is not one of Spark's part
    files."""
    base = job.rstrip("/")
    for path, info in sorted(fs.find(base, detail=True).items()):
        relative = str(path)[len(base) + 1 :]
        *directories, name = relative.split("/")
        hidden = name.startswith(("_", ".")) or any(
            part.startswith(("_", ".")) and "=" not in part for part in directories
        )
        if info.get("type") == "directory" or hidden:
            continue
        match = _SPARK_FILE.match(name)
        if match is None:
            raise SinkError(
                f"Spark's write job left {relative} in {job}, which is not one of its part files"
            )
        values = dict(part.split("=", 1) for part in directories if "=" in part)
        yield JobFile(
            str(path),
            int(match["split"]),
            {
                unescape_path_name(k): None if v == DEFAULT_PARTITION else unescape_path_name(v)
                for k, v in values.items()
            },
        )


def write_path_refusal(
    write_path: str, refusals: Callable[[], list[str]], backend: str, table: str
) -> str | None:
    """:meth:`~twopc.WritesWithSpark.spark_write_refusal` of a table-format sink with a
    ``write_path`` option: ``"python"`` refuses, ``"spark"`` raises
    :class:`~twopc.ConfigurationError` when Spark's writer cannot write ``table``,
    ``"auto"`` returns why it cannot (``None`` when it can)."""
    if write_path == "python":
        return "write_path='python'"
    found = refusals()
    if not found:
        return None
    if write_path == "spark":
        raise ConfigurationError(
            f"{backend} sink: write_path='spark', but Spark's writer cannot write table "
            f"{table}: {'; '.join(found)}"
        )
    return "; ".join(found)
