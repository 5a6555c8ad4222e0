"""The sink's records of task attempts and upsert rewrites (:mod:`twopc.table_formats`),
next to the table (:mod:`twopc_iceberg._layout` says where): written while a batch is in
flight, read by recovery, ``twopc status`` and the sweep, removed once the batch is
resolved."""

from __future__ import annotations

from twopc.table_formats import AttemptRecords
from twopc_iceberg._layout import record_root
from twopc_iceberg._tables import Place

__all__ = ["records_of"]


def records_of(home: Place, sink_id: str) -> AttemptRecords:
    """The records of one sink id at the table's location ``home`` (a rewrite's record
    keeps the commit's first partition; the started record makes the batch's directory)."""
    return AttemptRecords(
        home.fs, record_root(home.path), sink_id, backend="iceberg", prepare_makes_dir=False
    )
