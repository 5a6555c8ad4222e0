"""The checks a batch passes before the coordinator skips or writes it.

A replay is only exact in the shape its first run had: the same input (a checkpoint put
back from an older copy may plan the batch anew), the same partition count and naming (the
markers of sinks that commit in the task are per partition and per name), a commit log that
knows the newest committed batch, and markers that still exist. Each check refuses, with an
error that says what to run, where skipping or writing again would lose or duplicate rows.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from twopc._contract.boundary import leaving_sink
from twopc._contract.paths import CommitPath
from twopc._coordination.commit_log import CommitLog
from twopc._coordination.records import BatchRun, BatchState
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

    def markers_not_ahead(
        self, query_id: str, batch_id: int, state: BatchState, *, tasks_ran: bool = False
    ) -> None:
        """The target's markers never show a batch the commit log does not know, unless
        the checkpoint went back (an older copy put back, with the commit log inside it).
        Then the replays' input cannot be checked against the log, so refuse.

        Where the log holds a run or a decision of ``batch_id`` (or the batch's tasks ran
        already, ``tasks_ran``), the markers may show ``batch_id`` itself (a crash after
        some tasks committed) but nothing newer. Where the log knows earlier batches of the
        query but not this one, not even ``batch_id``: so a copy one batch behind is caught,
        whose log has never heard of the batch the restart plans anew while the target
        shows it committed. A log that knows nothing of the query (lost, or replaced by an
        empty one) cannot have gone back; the markers then skip what committed."""
        newest_decided = state.newest_decided
        if newest_decided is not None and newest_decided > batch_id:
            return  # the log knows the newer batches: it checks their input itself
        knows_batch = tasks_ran or bool(state.runs) or state.decision is not None
        known = knows_batch or newest_decided is None
        scope = RecoveryScope(self.sink_id, query_id)
        first_unknown = batch_id + 1 if known else batch_id
        ahead = self.committed_partitions(
            scope, first_unknown, Footprint(self.naming(), 0), asked_for=batch_id
        )
        if not ahead:
            return
        shown = f"batch {batch_id} or a later one" if not known else f"a batch after {batch_id}"
        raise CheckpointMismatchError(
            f"the target's markers show {shown} of query {query_id} committed "
            f"(partition(s) {', '.join(map(str, sorted(ahead)))}), but the query is now "
            f"running batch {batch_id}, and the commit log at {self.commit_log.url} does "
            "not know it: the checkpoint and the commit log inside it were put back from "
            "an older copy. twopc cannot tell whether the batches planned again read the "
            "same input as when they were committed, so it refuses rather than lose or "
            "duplicate rows. Put the newer checkpoint back, or start from a new checkpoint "
            "location at the offsets where the committed output ends (`twopc offsets`, "
            "twopc.starting_offsets: docs/operations.md, 'The checkpoint is gone'); keep the "
            "commit log outside the checkpoint (commit_log=...) if you restore checkpoints "
            "from copies (see docs/operations.md, 'An older checkpoint restored')",
            sink_id=self.sink_id,
            batch_id=batch_id,
        )

    def markers_kept(self, runs: Sequence[BatchRun], query_id: str, batch_id: int) -> None:
        """A replayed batch whose tasks may have committed relies on the target's markers
        to skip those partitions. If they may be gone (deleted, or expired while the query
        was down), nobody can tell which partitions committed: refuse rather than write
        them twice. Gone is shown by the previous batch's markers missing too; where there
        is no previous batch committed in its tasks, by the first run being older than the
        sink says its markers live (:meth:`~twopc.KeepsMarkers.markers_expire_after`)."""
        earlier = [r for r in runs if r.commits_in_task]
        if not earlier:
            return
        previous = self.commit_log.decision(query_id, batch_id - 1) if batch_id else None
        if previous is not None and previous.path is CommitPath.TASK:
            self._previous_markers_kept(earlier, query_id, batch_id)
        else:
            self._markers_young_enough(earlier, query_id, batch_id)

    def _previous_markers_kept(
        self, earlier: Sequence[BatchRun], query_id: str, batch_id: int
    ) -> None:
        scope = RecoveryScope(self.sink_id, query_id)
        footprint = replace(earlier[-1].footprint, partitions=0)
        seen = self.committed_partitions(scope, batch_id - 1, footprint, asked_for=batch_id)
        if seen is None or seen:
            return
        raise CommitStateUnknownError(
            f"batch {batch_id} of query {query_id} crashed after some of its tasks may have "
            f"committed, and the target no longer shows markers even for batch "
            f"{batch_id - 1}, which committed: they were deleted or expired while the query "
            f"was down. {self._cannot_tell(query_id, batch_id)}",
            sink_id=self.sink_id,
            batch_id=batch_id,
        )

    def _markers_young_enough(
        self, earlier: Sequence[BatchRun], query_id: str, batch_id: int
    ) -> None:
        if self.markers is None:
            return
        with leaving_sink(self.sink_id, batch_id, what=_BEFORE_PHASE1):
            lifetime = self.markers.markers_expire_after()
        started = [r.started_at for r in earlier if r.started_at]
        if lifetime is None or not started:
            return
        age = time.time() - min(started)
        if age < lifetime - min(60.0, lifetime / 10):  # a margin for the clocks' skew
            return
        scope = RecoveryScope(self.sink_id, query_id)
        # the newest run whose partition count is known, if any (format("twopc") learns it
        # only when the batch commits)
        counted = [r for r in earlier if r.footprint.partitions]
        footprint = (counted or earlier)[-1].footprint
        seen = self.committed_partitions(scope, batch_id, footprint, asked_for=batch_id)
        if seen is None or (footprint.partitions and seen >= set(range(footprint.partitions))):
            return  # the sink cannot tell, or every partition's marker is still there
        raise CommitStateUnknownError(
            f"batch {batch_id} of query {query_id} crashed after some of its tasks may have "
            f"committed, {_duration(age)} ago, and the target drops its markers "
            f"{_duration(lifetime)} after they were written: the markers of the partitions "
            f"that committed may be gone. {self._cannot_tell(query_id, batch_id)}",
            sink_id=self.sink_id,
            batch_id=batch_id,
        )

    def _cannot_tell(self, query_id: str, batch_id: int) -> str:
        return (
            f"twopc cannot tell which partitions of batch {batch_id} committed, so it "
            f"refuses to write them again. Check the target for batch {batch_id}'s rows; to "
            "write the batch again anyway (rows of partitions that had committed appear "
            f"twice), delete {self.commit_log.url}/{query_id}/{batch_id:020d}.runs.json "
            "and restart. A sink that keeps a durable copy of its markers restores them "
            "instead (see docs/operations.md, 'Long pauses')"
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
            "newer checkpoint back, or start from a new checkpoint location at the offsets "
            "where the committed output ends (`twopc offsets`, twopc.starting_offsets: "
            "docs/operations.md, 'The checkpoint is gone'; see also 'An older checkpoint "
            "restored')",
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
            if not earlier.commits_in_task or earlier.same_shape(run):
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

    def new_run(
        self,
        state: BatchState,
        run: BatchRun,
        query_id: str,
        batch_id: int,
        *,
        compare: Sequence[BatchRun] | None,
        markers: bool,
    ) -> None:
        """The checks before a new run of a batch is recorded: the batch is in order, in
        the shape of the earlier runs in ``compare`` (``None``: its shape cannot be told
        yet), and, with ``markers``, the markers of a partly committed earlier run are
        still there."""
        self.order(query_id, batch_id, state.newest_decided)
        if compare is not None:
            self.replay_shape(compare, run, query_id, batch_id)
        if markers:
            self.markers_kept(state.runs, query_id, batch_id)

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


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 2 * 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


def describe_run(run: BatchRun) -> str:
    partitions = run.footprint.partitions
    parts = [f"{partitions} partition(s)" if partitions else "an unknown partition count"]
    if run.footprint.naming:
        naming = ", ".join(f"{k}={v!r}" for k, v in sorted(run.footprint.naming.items()))
        parts.append(naming)
    parts.append("input " + (run.input[:12] if run.input else "unknown"))
    return ", ".join(parts)
