"""Registers the ``delta`` backend; imports nothing heavy so discovery stays cheap."""

from __future__ import annotations

from twopc import SinkSpec, hookimpl


@hookimpl
def twopc_sinks() -> list[SinkSpec]:
    return [
        SinkSpec(
            name="delta",
            factory="twopc_delta.sink:DeltaSink",
            description="Delta Lake tables through deltalake: one Delta commit per batch",
            requires=("deltalake", "pyarrow", "fsspec"),
            install_hint='pip install "twopc[delta]"',
        )
    ]
