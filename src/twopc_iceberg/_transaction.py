"""The transaction a batch commits in: pyiceberg's, with two changes that keep a commit's
cost and outcome the sink's to decide.

* No retries of its own: a lost compare-and-swap is retried by the sink, which reads its
  marker first (:func:`~twopc_iceberg._catalogs.without_commit_retries`).
* Its view of the table (the metadata with the transaction's updates applied) is worked
  out once per change of those updates, and not at all before the first. pyiceberg works
  it out again, with a deep copy of the whole metadata, at every read, and a commit reads
  it about fifteen times: with the metadata growing by a snapshot per batch, each commit
  got about 0.6 ms slower per snapshot the table keeps (pyiceberg 0.12, measured by
  ``benchmarks/iceberg_commit_growth.py``).

The sink stages a batch's snapshot before its marker property, so that the snapshot is
planned on the table's own metadata, without a copy.
"""

from __future__ import annotations

from pyiceberg.table import Table, Transaction
from pyiceberg.table.metadata import TableMetadata

from twopc_iceberg._catalogs import without_commit_retries

__all__ = ["batch_transaction"]


class _KeptViewTransaction(Transaction):
    """pyiceberg's transaction whose ``table_metadata`` is kept until the next update."""

    _kept: tuple[object, TableMetadata] | None = None

    @property
    def table_metadata(self) -> TableMetadata:
        # ``_updates`` is a tuple pyiceberg replaces at every change: its identity tells
        # whether the kept view is current. Without it (another pyiceberg), as pyiceberg.
        updates = getattr(self, "_updates", None)
        if updates is None:
            return super().table_metadata
        if not updates:
            return self._table.metadata  # nothing to apply: the table's own, uncopied
        kept = self._kept
        if kept is None or kept[0] is not updates:
            kept = self._kept = (updates, super().table_metadata)
        return kept[1]


def batch_transaction(table: Table) -> Transaction:
    """A transaction on ``table`` for one batch's commit: it does not retry a lost
    compare-and-swap by itself, and reads its metadata view at the cost of one copy per
    change rather than one per read."""
    return _KeptViewTransaction(without_commit_retries(table))
