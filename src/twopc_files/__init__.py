"""Staged-rename file output for twopc: Parquet, CSV, JSON lines and Arrow IPC on fsspec.

Create sinks by name (``twopc.create_sink("files", path=..., format="parquet")``) or
directly with :class:`FilesSink`.
"""

from twopc_files.sink import FORMATS, FilesPayload, FilesSink, StagedFile

__all__ = ["FORMATS", "FilesPayload", "FilesSink", "StagedFile"]
