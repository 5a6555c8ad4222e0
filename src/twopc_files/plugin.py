"""Registers the ``files`` backend; imports nothing heavy so discovery stays cheap."""

from __future__ import annotations

from twopc import SinkSpec, hookimpl


@hookimpl
def twopc_sinks() -> list[SinkSpec]:
    return [
        SinkSpec(
            name="files",
            factory="twopc_files.sink:FilesSink",
            description="staged-rename files (Parquet, CSV, JSON lines, Arrow IPC) on fsspec",
            requires=("pyarrow", "fsspec"),
            install_hint='pip install "twopc[files]"',
        )
    ]
