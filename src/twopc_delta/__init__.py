"""Exactly-once Delta Lake tables for twopc (deltalake): one Delta commit per batch.

Create the sink by name (``twopc.create_sink("delta", table_uri="/data/events",
create_table=True)``) or import :class:`twopc_delta.sink.DeltaSink` (needs
``twopc[delta]``); deltalake is imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twopc import BackendNotInstalledError

if TYPE_CHECKING:
    from twopc_delta.sink import DeltaPayload, DeltaSink

__all__ = ["DeltaPayload", "DeltaSink"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'twopc_delta' has no attribute {name!r}")
    import importlib

    try:
        return getattr(importlib.import_module("twopc_delta.sink"), name)
    except ModuleNotFoundError as exc:
        if exc.name is None or exc.name.partition(".")[0] != "deltalake":
            raise
        raise BackendNotInstalledError(
            f'{name} needs deltalake: pip install "twopc[delta]"'
        ) from exc
