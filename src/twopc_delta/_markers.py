"""The record, in the table's own log, of which batches this sink committed.

Every batch is one Delta commit that carries, atomically with its data:

* an **app transaction** (the log's ``txn`` action) with app id
  :func:`app_id` (sink id and query id) and version = the batch id: the action Spark's
  Delta writer writes for ``txnAppId`` / ``txnVersion``, kept in checkpoints (it survives
  log clean-up), read with ``DeltaTable.transaction_version``. Batches of one query commit
  in order, so "batch ``b`` or a later one is committed" once the version is ``>= b``;
* the batch's details in the commit's ``commitInfo`` (custom metadata
  ``twopc.sinkId``, ``twopc.queryId``, ``twopc.batchId``, ``twopc.attempts`` (partition →
  attempt), ``twopc.partitionCount``, ``twopc.sourceOffsets``), for ``twopc status``, the
  attempt a recovery must not delete, and :func:`twopc.starting_offsets`. These live in the
  log's JSON commits only, which ``delta.logRetentionDuration`` lets expire.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from deltalake import DeltaTable

from twopc import SourceOffsets

__all__ = [
    "KEY_ATTEMPTS",
    "KEY_BATCH",
    "KEY_COUNT",
    "KEY_OFFSETS",
    "KEY_QUERY",
    "KEY_SINK",
    "BatchCommit",
    "app_id",
    "batch_commits",
    "commit_metadata",
    "find_batch",
]

_log = logging.getLogger("twopc.delta")

KEY_SINK = "twopc.sinkId"
KEY_QUERY = "twopc.queryId"
KEY_BATCH = "twopc.batchId"
KEY_ATTEMPTS = "twopc.attempts"
KEY_COUNT = "twopc.partitionCount"
KEY_OFFSETS = "twopc.sourceOffsets"

_HISTORY_PAGE = 200
"""Commits read per page of the log's history when looking for a batch's commit."""


def app_id(sink_id: str, query_id: str) -> str:
    """The Delta app id of one query writing one sink id: ``twopc-<sink_id>-<query_id>``.

    Also what Spark's Delta writer takes as ``txnAppId`` to skip the batches twopc
    committed (its ``txnVersion`` being the batch id)."""
    return f"twopc-{sink_id}-{query_id}"


def commit_metadata(
    sink_id: str,
    query_id: str,
    batch_id: int,
    *,
    attempts: Mapping[int, int],
    count: int,
    offsets: SourceOffsets | None,
) -> dict[str, Any]:
    """The ``commitInfo`` custom metadata of a commit of ``attempts`` (partition ->
    attempt) of one batch."""
    meta: dict[str, Any] = {
        KEY_SINK: sink_id,
        KEY_QUERY: query_id,
        KEY_BATCH: batch_id,
        KEY_ATTEMPTS: {str(p): a for p, a in sorted(attempts.items())},
        KEY_COUNT: count,
    }
    if offsets is not None:
        meta[KEY_OFFSETS] = offsets.to_json()
    return meta


@dataclass(frozen=True)
class BatchCommit:
    """One commit of this sink, as its ``commitInfo`` tells."""

    version: int
    sink_id: str
    query_id: str
    batch_id: int
    attempts: Mapping[int, int]
    count: int
    offsets: SourceOffsets | None
    committed_at: float | None

    @classmethod
    def parse(cls, info: Mapping[str, Any]) -> BatchCommit | None:
        if KEY_SINK not in info:
            return None
        try:
            raw_offsets = info.get(KEY_OFFSETS)
            if isinstance(raw_offsets, str):
                raw_offsets = json.loads(raw_offsets)
            attempts = info.get(KEY_ATTEMPTS) or {}
            if isinstance(attempts, str):
                attempts = json.loads(attempts)
            stamp = info.get("timestamp")
            return cls(
                version=int(info["version"]),
                sink_id=str(info[KEY_SINK]),
                query_id=str(info[KEY_QUERY]),
                batch_id=int(info[KEY_BATCH]),
                attempts={int(p): int(a) for p, a in dict(attempts).items()},
                count=int(info.get(KEY_COUNT) or 0),
                offsets=SourceOffsets.from_json(raw_offsets) if raw_offsets else None,
                committed_at=float(stamp) / 1000 if stamp is not None else None,
            )
        except (KeyError, TypeError, ValueError) as exc:
            _log.warning("twopc delta: ignoring an unreadable commitInfo: %s", exc)
            return None


def batch_commits(table: DeltaTable, sink_id: str) -> Iterator[BatchCommit]:
    """This sink id's commits, newest first, as far back as the log keeps them."""
    try:
        history = table.history()
    except Exception as exc:  # an expired or unreadable log: nothing more to tell
        _log.warning("twopc delta: cannot read the history of %s: %s", table.table_uri, exc)
        return
    for info in history:
        commit = BatchCommit.parse(info)
        if commit is not None and commit.sink_id == sink_id:
            yield commit


def find_batch(
    table: DeltaTable, sink_id: str, query_id: str, batch_id: int
) -> dict[int, int] | None:
    """The attempts (partition -> attempt) that the log's commits of ``batch_id`` hold, or
    ``None`` when the log no longer shows them."""
    attempts: dict[int, int] = {}
    found = False
    for commit in batch_commits(table, sink_id):
        if commit.query_id != query_id:
            continue
        if commit.batch_id == batch_id:
            found = True
            attempts = {**commit.attempts, **attempts}
        elif commit.batch_id < batch_id:
            break
    return attempts if found else None
