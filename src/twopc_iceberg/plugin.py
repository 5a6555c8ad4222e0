"""Registers the ``iceberg`` backend; imports nothing heavy so discovery stays cheap."""

from __future__ import annotations

from twopc import SinkSpec, hookimpl


@hookimpl
def twopc_sinks() -> list[SinkSpec]:
    return [
        SinkSpec(
            name="iceberg",
            factory="twopc_iceberg.sink:IcebergSink",
            description="Apache Iceberg tables through pyiceberg: one snapshot per batch",
            requires=("pyiceberg", "pyarrow", "fsspec"),
            install_hint='pip install "twopc[iceberg]"',
        )
    ]
