"""The Hadoop settings every Spark write job of the Spark write path runs with, because its
output goes to a location of the run's own (:class:`~twopc.protocol.SparkWrite`'s
contract): nothing reads it before the job succeeded, and what a failed job left there is
swept whole. A sink's own options override them."""

from __future__ import annotations

__all__ = ["LOCAL_OPTIONS", "RUN_LOCATION_OPTIONS", "run_location_options"]

RUN_LOCATION_OPTIONS: dict[str, str] = {
    # Algorithm 2 moves a task's files into the location when the task commits, instead of
    # once more when the job commits; and no _SUCCESS marker, which nothing reads. A task
    # that fails while committing fails the job (Spark 3.4+, SPARK-39195), so the sink never
    # describes a location where a half-committed task left files.
    "mapreduce.fileoutputcommitter.algorithm.version": "2",
    "mapreduce.fileoutputcommitter.marksuccessfuljobs": "false",
}
"""For every run location."""

LOCAL_OPTIONS: dict[str, str] = {
    # Hadoop's local filesystem computes a checksum file (.crc) beside every file over all
    # its bytes; the sinks take the data files and drop the rest, so the job writes through
    # the raw local filesystem, in an instance of its own (Hadoop caches one per scheme).
    "fs.file.impl": "org.apache.hadoop.fs.RawLocalFileSystem",
    "fs.file.impl.disable.cache": "true",
}
"""For a run location on the local filesystem (``file:`` URIs)."""


def run_location_options(path: str) -> dict[str, str]:
    """The settings for a write job into ``path`` (a Hadoop URI)."""
    if path.startswith("file:"):
        return {**RUN_LOCATION_OPTIONS, **LOCAL_OPTIONS}
    return dict(RUN_LOCATION_OPTIONS)
