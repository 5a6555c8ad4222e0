"""Phase 1 by Spark's own writer (the JVM write path): which sinks Spark can serve, the
options its writer gets, and how the files it wrote get twopc's names.

Spark names its output ``[col=value/...]part-<split>-<job uuid>[-.]c<counter><ext>``
(``part-00001-8f79...-c000.snappy.parquet``): ``split`` is the Spark partition that wrote
the file and ``counter`` numbers the files one task wrote into one directory. The files of
one split become one committable, and each file gets twopc's deterministic name in its
directory, ``part-<token>-b<batch>-p<split>-<seq>.<ext>``, with ``seq`` in the order of
Spark's counter. The job's uuid, which differs between runs, never reaches a final name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import fsspec

__all__ = [
    "AUTO_PROTOCOLS",
    "HADOOP_PROTOCOLS",
    "SPARK_FORMATS",
    "WRITE_PATHS",
    "SparkFile",
    "parse_spark_file",
    "protocol_of",
    "spark_option_values",
    "translate_write_options",
]

WRITE_PATHS = ("auto", "spark", "python")
"""Where phase 1 runs (``FilesSink(write_path=...)``)."""

SPARK_FORMATS = frozenset({"parquet", "orc", "csv", "json"})
"""Formats Spark's own writer writes (``arrow`` is the Python path's only)."""

AUTO_PROTOCOLS = frozenset({"file", "local", "hdfs", "viewfs", "webhdfs"})
"""Where ``write_path="auto"`` chooses Spark's writer: filesystems whose rename is a rename,
so that Spark's output committer and twopc's promotion move no data."""

HADOOP_PROTOCOLS = AUTO_PROTOCOLS | {"s3", "s3a", "gs", "gcs"}
"""Where ``write_path="spark"`` may be forced: Hadoop reaches the same objects under a URI
twopc can derive from the fsspec path (``s3://`` is Hadoop's ``s3a://``). On object stores
every rename is a copy: Spark's committer copies each file twice, twopc's staging and
promotion twice more."""

_SPARK_FILE = re.compile(r"^part-(?P<split>\d+)-.+?[-.]c(?P<counter>\d+)(?P<ext>(?:\.[^/]*)?)$")

# The write options of the Python path (pyarrow's) that have a counterpart in Spark's writer.
_COMPRESSION = {
    "parquet": {"none", "uncompressed", "snappy", "gzip", "brotli", "zstd", "lz4_raw"},
    "orc": {"none", "uncompressed", "snappy", "zlib", "zstd", "lz4"},
}


@dataclass(frozen=True)
class SparkFile:
    """One data file of a Spark write job's output."""

    path: str
    directory: str
    """The Hive directories above it, relative to the job's output (``""`` for none)."""
    split: int
    counter: int
    extension: str
    """What follows Spark's counter, without the leading dot (``snappy.parquet``)."""
    size: int


def parse_spark_file(path: str, relative: str, size: int) -> SparkFile | None:
    """The file Spark wrote at ``relative`` (under the job's output), or ``None`` when the
    name is not one of Spark's part files."""
    directory, _, name = relative.rpartition("/")
    match = _SPARK_FILE.match(name)
    if match is None:
        return None
    return SparkFile(
        path,
        directory,
        int(match["split"]),
        int(match["counter"]),
        match["ext"].lstrip("."),
        size,
    )


def protocol_of(url: str) -> str:
    """The fsspec protocol of an output URL (``file`` for a plain path)."""
    protocol, _ = fsspec.core.split_protocol(url)
    return protocol or "file"


def translate_write_options(
    fmt: str, options: Mapping[str, Any]
) -> tuple[dict[str, str], list[str]]:
    """The Python path's ``write_options`` as options of Spark's writer, and the keys that
    have no counterpart there. ``json`` ignores write options on both paths."""
    spark: dict[str, str] = {}
    untranslated: list[str] = []
    for key, value in options.items():
        if fmt == "json":
            continue
        if key == "compression" and fmt in _COMPRESSION:
            codec = str(value).lower()
            if codec in _COMPRESSION[fmt]:
                spark["compression"] = "none" if codec == "uncompressed" else codec
                continue
        elif fmt == "csv" and key == "include_header":
            spark["header"] = "true" if value else "false"
            continue
        elif fmt == "csv" and key == "delimiter" and isinstance(value, str):
            spark["sep"] = value
            continue
        untranslated.append(key)
    return spark, sorted(untranslated)


def spark_option_values(options: Mapping[str, Any]) -> dict[str, str]:
    """``spark_options`` as the strings Spark's writer takes: booleans as ``true``/``false``,
    numbers as written. Anything else is refused."""
    values: dict[str, str] = {}
    for key, value in options.items():
        if not isinstance(key, str) or not key:
            raise TypeError(f"option names must be strings, not {key!r}")
        if isinstance(value, bool):
            values[key] = "true" if value else "false"
        elif isinstance(value, str | int | float):
            values[key] = str(value)
        else:
            raise TypeError(f"option {key!r}: {type(value).__name__} is not a string or number")
    return values
