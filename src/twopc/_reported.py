"""A batch whose tasks ran before the coordinator was asked: the ``format("twopc")``
writers. Spark runs ``write()`` (phase 1) on the executors, then calls ``commit(messages,
batch_id)`` or ``abort(messages, batch_id)`` in a fresh Python process on the driver's
host, with the tasks' reports and nothing else: every check reads the commit log.

Compared with :meth:`Coordinator.run_batch` the order changes, not the rules: a replay of
a decided batch has already prepared again when the coordinator sees it, so its work is
aborted (driver path) or was skipped by the tasks' markers (task path); speculative copies
cannot be observed, so every commit cleans up as if one had run.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import replace

from twopc._boundary import describe_exception, leaving_sink
from twopc._commit_log import BatchRun, Decision
from twopc._coordinator import Coordinator, metrics_with_progress
from twopc._metrics import BatchMetrics, BatchStatus
from twopc._reports import TaskReport
from twopc.errors import BatchFailedError
from twopc.progress import SourceOffsets
from twopc.protocol import Committable, Footprint

__all__ = ["abort_reported", "commit_reported"]

_log = logging.getLogger("twopc")


def commit_reported(
    coordinator: Coordinator,
    query_id: str,
    batch_id: int,
    reports: Sequence[TaskReport | None],
    *,
    input_fingerprint: str | None = None,
    source_offsets: SourceOffsets | None = None,
) -> BatchMetrics:
    """Decide and commit a batch from its tasks' reports (one per partition, ``None``
    where a task failed). A batch already decided is a replay: its new work is aborted
    and the batch counts as skipped. ``source_offsets`` go to the coordinator's progress
    group after the commit (and again for a replay). Raises when the batch cannot commit;
    nothing of it is then visible (driver path) or a replay finishes it (task path)."""
    c = coordinator
    started = time.monotonic()
    earlier = c._runs_before_this_process()  # before this batch's run is recorded
    finished = c.finish_decided()
    state = c.commit_log.batch_state(query_id, batch_id)
    # the tasks ran before this check: their own markers show this batch
    c._guard.markers_not_ahead(query_id, batch_id, state, tasks_ran=True)
    c.check_progress()
    base = BatchMetrics(
        c.sink_id, query_id, batch_id, status=BatchStatus.SKIPPED, recovered_committed=finished
    )
    present = [r for r in reports if r is not None]
    if state.decision is not None:
        c._guard.same_input(state.runs, input_fingerprint, query_id, batch_id)
        _log.info(
            "twopc sink=%s: batch %d of query %s is already committed; the replay's work "
            "is discarded",
            c.sink_id,
            batch_id,
            query_id,
        )
        aborted = _abort_replayed(c, present)
        published = c.publish_progress(state.decision, source_offsets)
        skipped = replace(base, recovered_aborted=aborted, swept=c._sweep())
        return c._finish(metrics_with_progress(skipped, published), started)
    failed = [index for index, report in enumerate(reports) if report is None]
    if failed:
        abort_reported(c, query_id, batch_id, reports)
        raise BatchFailedError(
            f"the task(s) of partition(s) {failed} failed; nothing of the batch was committed",
            sink_id=c.sink_id,
            batch_id=batch_id,
            partition=failed[0],
        )
    run = c.record_run(query_id, batch_id, state, len(reports), input_fingerprint)
    try:
        committables = c._collect(present, query_id, batch_id)
    except BaseException:
        c._abort_batch(query_id, batch_id)
        raise
    written_at = time.monotonic()
    decision, decided_at, retries = c.decide_and_commit(
        query_id, batch_id, committables, source_offsets
    )
    committed_at = time.monotonic()
    published = c.publish_progress(decision)
    aborted, swept = _clean_up(c, decision, run, earlier)
    tasks = tuple(r.metrics for r in sorted(present, key=lambda r: r.partition))
    metrics = replace(
        base,
        status=BatchStatus.COMMITTED,
        partitions=len(present),
        rows=sum(t.rows for t in tasks),
        bytes=sum(t.bytes for t in tasks),
        write_seconds=max((t.seconds for t in tasks), default=0.0),
        decide_seconds=decided_at - written_at,
        commit_seconds=committed_at - decided_at,
        commit_retries=retries,
        recovered_aborted=aborted,
        swept=swept,
        tasks=tasks,
    )
    return c._finish(metrics_with_progress(metrics, published), started)


def abort_reported(
    coordinator: Coordinator,
    query_id: str,
    batch_id: int,
    reports: Sequence[TaskReport | None],
) -> None:
    """Spark gave up on the batch (a task failed, or ``commit`` raised): abort what its
    tasks prepared, except what a recorded decision holds (a restart commits that), and
    remove what never prepared. Tasks that committed in the task stay committed; their
    markers make the replay skip them."""
    c = coordinator
    decision = c.commit_log.decision(query_id, batch_id)
    present = [r for r in reports if r is not None]
    if decision is None:
        c._abort_batch(query_id, batch_id)
        return
    _abort_outside(c, present, decision)
    c._sweep()


def _abort_replayed(c: Coordinator, reports: Sequence[TaskReport]) -> int:
    """Abort all the work a replay of a decided batch prepared. The decision was finished
    before the replay's tasks started (the writer finishes decided batches where it is
    planned), so none of it is decided work, even where an attempt id repeats one of the
    decision's (Spark counts task attempts from 0 again after a restart)."""
    if c._driver is None:
        return 0
    work = [r.committable for r in reports if r.committable is not None]
    c._abort(c._driver, work, "work of a replayed batch that is already committed")
    return len(work)


def _abort_outside(c: Coordinator, reports: Sequence[TaskReport], decision: Decision) -> int:
    """Abort the reported work that the decision does not hold (a replay's, a loser's)."""
    if c._driver is None:
        return 0
    outside: list[Committable] = [
        r.committable
        for r in reports
        if r.committable is not None and not decision.contains(r.committable)
    ]
    c._abort(c._driver, outside, "work of a replayed batch that is already committed")
    return len(outside)


def _clean_up(
    c: Coordinator, decision: Decision, run: BatchRun, earlier: Sequence[BatchRun]
) -> tuple[int, int]:
    """After the commit: abort whatever no decision holds (losing copies of this batch's
    tasks, work a crash left), let an in-task sink abort what earlier runs with another
    naming or more partitions left open, and remove unprepared leftovers. Logged, never
    raised: the batch is committed and the next batch cleans up again."""
    try:
        aborted = c._abort_undecided(c._driver) if c._driver is not None else 0
        if c._in_task is not None:
            with leaving_sink(c.sink_id, what="aborting an earlier run's open work failed: "):
                for footprint in _not_covered(earlier, run.footprint):
                    aborted += c._in_task.sweep_lingering(c.sink_id, footprint)
        return aborted, c._sweep()
    except Exception as exc:
        _log.warning(
            "twopc sink=%s: batch %d is committed, but the clean-up after it failed; the "
            "next batch retries: %s",
            c.sink_id,
            decision.batch_id,
            describe_exception(exc),
        )
        return 0, 0


def _not_covered(earlier: Sequence[BatchRun], current: Footprint) -> list[Footprint]:
    """Footprints of earlier runs that this run's tasks did not reuse (another naming, or
    partitions this run does not have): only those can still hold open work."""
    current_naming = json.dumps(current.naming, sort_keys=True)
    found: dict[str, Footprint] = {}
    for run in earlier:
        footprint = run.footprint
        same_naming = json.dumps(footprint.naming, sort_keys=True) == current_naming
        if same_naming and footprint.partitions <= current.partitions:
            continue
        found.setdefault(json.dumps(footprint.to_json(), sort_keys=True), footprint)
    return list(found.values())
