"""Exactly-once Apache Iceberg tables for twopc (pyiceberg): one snapshot per batch.

Create the sink by name (``twopc.create_sink("iceberg", table="db.events",
warehouse="/data/warehouse")``) or import :class:`twopc_iceberg.sink.IcebergSink` (needs
``twopc[iceberg]``); pyiceberg is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twopc import BackendNotInstalledError

if TYPE_CHECKING:
    from twopc_iceberg.sink import IcebergPayload, IcebergSink

__all__ = ["IcebergPayload", "IcebergSink"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'twopc_iceberg' has no attribute {name!r}")
    import importlib

    try:
        return getattr(importlib.import_module("twopc_iceberg.sink"), name)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.partition(".")[0] not in ("pyiceberg", "pyiceberg_core"):
            raise
        raise BackendNotInstalledError(
            f'{name} needs pyiceberg: pip install "twopc[iceberg]"'
        ) from exc
