"""The checks a batch passes before the coordinator skips or writes it.

A replay is only exact in the shape its first run had: the same input (a checkpoint put
back from an older copy may plan the batch anew), the same partition count and naming (the
markers of sinks that commit in the task are per partition and per name), a commit log that
knows the newest committed batch, and markers that still exist. Each check refuses, with an
error that says what to run, where skipping or writing again would lose or duplicate rows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from twopc._boundary import leaving_sink
from twopc._commit_log import BatchRun, CommitLog
from twopc._paths import CommitPath
from twopc.errors import (
    CheckpointMismatchError,
    CommitStateUnknownError,
    ReplayMismatchError,
    TwoPCError,
)
from twopc.protocol import Footprint, KeepsMarkers, RecoveryScope

__all__ = ["ReplayGuard", "describe_run"]

_BEFORE_PHASE1 = (
    "reading the target's markers before phase 1 failed (nothing of the batch was written; "
    "a restart runs it again): "
)


class ReplayGuard:
    """The replay checks of one sink, against its commit log and, where the sink keeps
    them (:class:`~twopc.KeepsMarkers`), its target's markers."""

    def __init__(
        self,
        sink_id: str,
        commit_log: CommitLog,
        markers: KeepsMarkers | None,
        naming: Callable[[], dict[str, Any]],
    ) -> None:
        self.sink_id = sink_id
        self.commit_log = commit_log
        self.markers = markers
        self.naming = naming

    def committed_partitions(
        self, scope: RecoveryScope, batch_id: int, footprint: Footprint, *, asked_for: int
    ) -> set[int] | None:
        """The target's markers (``None`` when the sink keeps none), with its errors
        naming the sink and the batch being run. The sink's error class stays (a wrong
        password is permanent, a stalled server transient)."""
        if self.markers is None:
            return None
        with leaving_sink(self.sink_id, asked_for, what=_BEFORE_PHASE1):
            try:
                return self.markers.committed_partitions(scope, batch_id, footprint)
            except TwoPCError as exc:
                if exc.sink_id is not None:
                    raise
                raise type(exc)(f"{_BEFORE_PHASE1}{exc.cause_message}") from exc

    def markers_not_ahead(self, query_id: str, batch_id: int, newest_decided: int | None) -> None:
        """The target's markers never show a batch newer than the one the query runs,
        unless the checkpoint went back (an older copy put back, with the commit log inside
        it). Then the replays' input cannot be checked against the log, so refuse."""
        if newest_decided is not None and newest_decided > batch_id:
            return  # the log knows the newer batches: it checks their input itself
        scope = RecoveryScope(self.sink_id, query_id)
        ahead = self.committed_partitions(
            scope, batch_id + 1, Footprint(self.naming(), 0), asked_for=batch_id
        )
        if not ahead:
            return
        raise CheckpointMismatchError(
            f"the target's markers show a batch after {batch_id} of query {query_id} "
            f"committed, but the query is now running batch {batch_id}, and the commit log "
            f"at {self.commit_log.url} does not know it: the checkpoint and the commit log "
            "inside it were put back from an older copy. twopc cannot tell whether the "
            "batches planned again read the same input as when they were committed, so it "
            "refuses rather than lose or duplicate rows. Put the newer checkpoint back, or "
            "start from a new checkpoint location; keep the commit log outside the "
            "checkpoint (commit_log=...) if you restore checkpoints from copies (see "
            "docs/operations.md, 'An older checkpoint restored')",
            sink_id=self.sink_id,
            batch_id=batch_id,
        )

    def markers_kept(self, runs: Sequence[BatchRun], query_id: str, batch_id: int) -> None:
        """A replayed batch whose tasks may have committed relies on the target's markers
        to skip those partitions. If even the previous batch's markers are gone (Kafka
        marker groups expire after ``offsets.retention.minutes`` while a query is down),
        nobody can tell which partitions committed: refuse rather than write them twice."""
        earlier = [r for r in runs if r.committed_in_task]
        if not earlier or batch_id == 0:
            return
        previous = self.commit_log.decision(query_id, batch_id - 1)
        if previous is None or previous.path is CommitPath.DRIVER:
            return
        scope = RecoveryScope(self.sink_id, query_id)
        footprint = replace(earlier[-1].footprint, partitions=0)
        seen = self.committed_partitions(scope, batch_id - 1, footprint, asked_for=batch_id)
        if seen is None or seen:
            return
        raise CommitStateUnknownError(
            f"batch {batch_id} of query {query_id} crashed after some of its tasks may have "
            f"committed, and the target no longer shows markers even for batch "
            f"{batch_id - 1}, which committed: they were deleted or expired while the query "
            "was down (Kafka marker groups expire after the broker's "
            "offsets.retention.minutes). twopc cannot tell which partitions of batch "
            f"{batch_id} committed, so it refuses to write them again. Check the target for "
            f"batch {batch_id}'s rows; to write the batch again anyway (rows of partitions "
            f"that had committed appear twice), delete "
            f"{self.commit_log.url}/{query_id}/{batch_id:020d}.runs.json and restart (see "
            "docs/operations.md, 'Long pauses')",
            sink_id=self.sink_id,
            batch_id=batch_id,
        )

    def same_input(
        self, runs: Sequence[BatchRun], fingerprint: str | None, query_id: str, batch_id: int
    ) -> None:
        """A committed batch may only be skipped when its replay reads the same input."""
        recorded = {run.input for run in runs if run.input is not None}
        if fingerprint is None or not recorded or fingerprint in recorded:
            return
        raise CheckpointMismatchError(
            f"batch {batch_id} of query {query_id} was committed over other input than the "
            "checkpoint now plans for it (its offsets differ): the checkpoint was put back "
            "from an older copy and the query planned the batch anew. Skipping it would "
            "lose rows and rewriting it would duplicate rows, so twopc refuses. Put the "
            "newer checkpoint back, or start from a new checkpoint location whose starting "
            "offsets follow the committed output (see docs/operations.md, 'An older "
            "checkpoint restored')",
            sink_id=self.sink_id,
            batch_id=batch_id,
        )

    def replay_shape(
        self, runs: Sequence[BatchRun], run: BatchRun, query_id: str, batch_id: int
    ) -> None:
        """Refuse to replay a partly committed batch in another shape than its first run.

        Sinks that commit in the task skip a replayed partition by its marker; that is only
        right when partition ``p`` holds the same rows as in the run that committed it.
        Another partition count, other naming (markers under another name) or other input
        breaks that, so the earlier runs' markers are read and any commit refuses the replay.
        """
        for earlier in runs:
            if not earlier.committed_in_task or earlier.same_shape(run):
                continue
            scope = RecoveryScope(self.sink_id, query_id)
            committed = self.committed_partitions(
                scope, batch_id, earlier.footprint, asked_for=batch_id
            )
            if committed is not None and not committed:
                continue
            what = (
                "the sink cannot tell which of its partitions committed"
                if committed is None
                else f"partition(s) {', '.join(map(str, sorted(committed)))} committed"
            )
            raise ReplayMismatchError(
                f"batch {batch_id} of query {query_id} was partly written by an earlier run "
                f"({describe_run(earlier)}; {what}) and is now replayed with "
                f"{describe_run(run)}. Replayed in another shape, some rows would be "
                f"written twice and others lost. Restart the query once as it ran before "
                f"so that batch {batch_id} finishes, then change it (see docs/operations.md, "
                "'Rescaling and changed options')",
                sink_id=self.sink_id,
                batch_id=batch_id,
            )

    def order(self, query_id: str, batch_id: int, newest_decided: int | None) -> None:
        if newest_decided is not None and newest_decided > batch_id:
            raise CheckpointMismatchError(
                f"the commit log at {self.commit_log.url} already holds batch {newest_decided} "
                f"of query {query_id}, but the query is now running batch {batch_id}. The "
                "checkpoint was restored from an older copy or the commit log belongs to "
                "another checkpoint; refusing to write rather than skip or duplicate data",
                sink_id=self.sink_id,
                batch_id=batch_id,
            )


def describe_run(run: BatchRun) -> str:
    partitions = run.footprint.partitions
    parts = [f"{partitions} partition(s)" if partitions else "an unknown partition count"]
    if run.footprint.naming:
        naming = ", ".join(f"{k}={v!r}" for k, v in sorted(run.footprint.naming.items()))
        parts.append(naming)
    parts.append("input " + (run.input[:12] if run.input else "unknown"))
    return ", ".join(parts)
