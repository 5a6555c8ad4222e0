"""The sink's records of task attempts and upsert rewrites (:mod:`twopc.table_formats`), in
the table's hidden ``_twopc`` directory (:mod:`twopc_delta._layout` says where): written
while a batch is in flight, read by recovery, ``twopc status`` and the sweep, removed once
the batch is resolved."""

from __future__ import annotations

from twopc.table_formats import AttemptRecords
from twopc_delta._layout import record_root
from twopc_delta._table import Place

__all__ = ["records_of"]


def records_of(home: Place, sink_id: str) -> AttemptRecords:
    """The records of one sink id in the table at ``home``."""
    return AttemptRecords(home.fs, record_root(home.path), sink_id, backend="delta")
