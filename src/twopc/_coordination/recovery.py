"""What a crash or a failed batch left, finished or removed: decided batches committed,
undecided prepared work aborted, lingering open transactions of earlier runs aborted,
never-prepared leftovers swept. Every entry point's batch flow and ``twopc recover`` go
through here."""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from twopc._contract.boundary import describe_exception, leaving_sink
from twopc._coordination.commit_log import CommitLog
from twopc._coordination.deciding import Decider
from twopc._coordination.engine import BatchEngine
from twopc._coordination.marker_proof import decided_by_markers
from twopc._coordination.records import BatchRun, Decision, LogListing
from twopc._coordination.reports import TaskReport
from twopc._coordination.steps import QUIET, Steps, counted, counter
from twopc.faults import CrashPoint
from twopc.protocol import CommitsInTask, CommitsOnDriver, Committable, Footprint, Sink

__all__ = ["STRAGGLER_WAIT_SECONDS", "Recovery", "RecoveryStats"]

_log = logging.getLogger("twopc")

STRAGGLER_WAIT_SECONDS = 60.0
"""How long, at most, to wait for losing task attempts to end before cleaning up after them."""

_ABORT_SLICE = 50
"""Prepared work aborted per call of ``abort_prepared`` (any number is correct: each
committable is aborted on its own terms)."""


@dataclass
class RecoveryStats:
    """What one recovery did. ``lingering``: the part of ``aborted`` that were transactions
    earlier runs left open (an in-task sink's lingering sweep)."""

    committed: int = 0
    aborted: int = 0
    swept: int = 0
    lingering: int = 0


class Recovery:
    """Finishes and cleans up after the batches of one sink."""

    def __init__(
        self, sink: Sink[Any], sink_id: str, commit_log: CommitLog, decider: Decider
    ) -> None:
        self.sink = sink
        self.sink_id = sink_id
        self.commit_log = commit_log
        self.decider = decider
        self.needed = True
        """Whether the next batch recovers first: at the start, and after any failure."""
        self._driver = sink if isinstance(sink, CommitsOnDriver) else None
        self._in_task: CommitsInTask[Any] | None = sink if isinstance(sink, CommitsInTask) else None
        self._earlier_runs: list[BatchRun] | None = None
        self._lingering_swept = False

    def recover(self, steps: Steps = QUIET) -> RecoveryStats:
        """Finish what a crash left: commit what was decided, abort what was not, remove
        what never prepared. ``steps`` hears how far it is."""
        stats = RecoveryStats()
        self.commit_log.remove_temporaries()
        pending = self.commit_log.pending(on_read=counter(steps, "read", "pending decisions"))
        withdrawn = 0
        for decision in counted(steps, pending, "finished", "decided batches"):
            if self.finish_pending(decision):
                stats.committed += len(decision.committables)
            else:
                withdrawn += len(decision.committables)
        stats.aborted = self.abort_undecided(steps) + withdrawn
        stats.lingering = self._sweep_earlier_footprints(steps)
        stats.aborted += stats.lingering
        steps.note("sweeping leftovers that never prepared")
        stats.swept = self.sweep()
        self.needed = False
        return stats

    def recover_if_needed(self) -> RecoveryStats:
        """Recover at the start and after a failure; nothing (and no call to the target)
        when the previous batch of this coordinator committed."""
        return self.recover() if self.needed else RecoveryStats()

    def finish_decided(self, listing: LogListing | None = None) -> int:
        """Finish every batch decided but not finished, and nothing else; how many."""
        decisions = self.commit_log.pending(listing)
        for decision in decisions:
            self.finish_pending(decision)
        return len(decisions)

    def finish_pending(self, decision: Decision) -> bool:
        """Finish a decision a crash left unfinished; whether it committed. A conditional
        one (a group's, with a last resource) commits only if its last resource committed
        the batch; otherwise it is withdrawn and the batch's prepared work aborted, one by
        one under the recovery crash points."""
        self.decider.in_doubt.decided(decision)
        if decision.last_resource is not None and not self.decider.last_resource_committed(
            decision
        ):
            self.commit_log.withdraw_decision(decision)
            self.decider.in_doubt.finished(decision.query_id, decision.batch_id)
            self.abort(
                self._prepared_of(decision.query_id, decision.batch_id),
                f"prepared for a batch its last resource {decision.last_resource} did not commit",
                in_recovery=True,
            )
            return False
        self.decider.finish_pending(decision)
        return True

    def before_commit(self, listing: LogListing) -> tuple[int, list[BatchRun]]:
        """Before a batch whose tasks ran is committed: the runs earlier processes left
        (read before this batch's run is recorded; only an in-task sink needs them), then
        every decided batch finished. Returns how many were finished, and the runs."""
        earlier = self.runs_before_this_process(listing) if self._in_task is not None else []
        return self.finish_decided(listing), earlier

    def runs_before_this_process(self, listing: LogListing | None = None) -> list[BatchRun]:
        """The runs of each query's newest batch as the log held them when this object
        first asked: what a crashed or differently configured earlier run may have left."""
        if self._earlier_runs is None:
            self._earlier_runs = [
                run for _, runs in self.commit_log.newest_runs(listing).values() for run in runs
            ]
        return self._earlier_runs

    def _sweep_earlier_footprints(self, steps: Steps = QUIET) -> int:
        """Once: let an in-task sink abort what runs with other naming or more partitions
        left open (the log says how many there were). Driver-commit sinks find their
        prepared work by listing instead."""
        if self._lingering_swept or self._in_task is None:
            return 0
        steps.note("aborting what earlier runs left open")
        footprints: dict[str, Footprint] = {}
        for run in self.runs_before_this_process():
            key = json.dumps(run.footprint.to_json(), sort_keys=True)
            footprints.setdefault(key, run.footprint)
        aborted = self._sweep_lingering(footprints.values())
        self._lingering_swept = True
        return aborted

    def _sweep_lingering(self, footprints: Iterable[Footprint]) -> int:
        assert self._in_task is not None
        aborted = 0
        with leaving_sink(self.sink_id, what="aborting an earlier run's open work failed: "):
            for footprint in footprints:
                aborted += self._in_task.sweep_lingering(self.sink_id, footprint)
        return aborted

    def sweep(self, keep: Sequence[Committable] = ()) -> int:
        """Remove what never prepared (staged files, open branches) except ``keep``."""
        with leaving_sink(self.sink_id, what="removing unprepared leftovers failed: "):
            return self.sink.sweep(self.sink_id, keep)

    def _list_prepared(self) -> list[Committable]:
        if self._driver is None:
            return []
        with leaving_sink(self.sink_id, what="listing prepared work failed: "):
            return self._driver.recover(self.sink_id)

    def _prepared_of(self, query_id: str, batch_id: int) -> list[Committable]:
        """The prepared work of one batch."""
        return [
            c for c in self._list_prepared() if (c.query_id, c.batch_id) == (query_id, batch_id)
        ]

    def clear_before_tasks(self) -> None:
        """Where a batch's tasks are planned: abort the undecided prepared work earlier runs
        left and sweep what never prepared, so the tasks meet none of it."""
        self.abort_undecided()
        self.sweep()

    def abort_undecided(self, steps: Steps = QUIET) -> int:
        """Abort the prepared work no decision holds; finish decided work the target still
        shows prepared. Returns how many were aborted (0 for an in-task sink)."""
        if self._driver is None:
            return 0
        steps.note("listing prepared transactions")
        leftovers = self._list_prepared()
        checked = counter(steps, "checked", "prepared transactions")
        decisions = self.commit_log.decisions_for(leftovers, on_read=checked)
        # decided only once its last resource is asked (recover() does): left alone here
        waiting = {key for key, d in decisions.items() if d and self._awaits_last_resource(d)}
        to_commit: list[Committable] = []
        to_abort: list[Committable] = []
        for committable in leftovers:
            key = (committable.query_id, committable.batch_id)
            if key in waiting:
                continue
            decision = decisions[key]
            if decision is not None and decision.contains(committable):
                to_commit.append(committable)
            else:
                to_abort.append(committable)
        proven = self._decided_by_markers(
            [c for c in to_abort if decisions[(c.query_id, c.batch_id)] is None]
        )
        if proven:
            chosen = {id(c) for c in proven}
            to_abort = [c for c in to_abort if id(c) not in chosen]
            to_commit.extend(proven)
        if to_commit:
            # Decided work the log already marked done but the target still shows as
            # prepared (e.g. a crash between the commit and its clean-up), or work whose
            # decision is gone but whose batch the markers show committed: finish it.
            self.decider.commit(self._driver, to_commit)
        self.decider.in_doubt.undecided(to_abort)
        self.abort(to_abort, "prepared but undecided", in_recovery=True, steps=steps)
        self.decider.in_doubt.aborted(to_abort)
        return len(to_abort)

    def _decided_by_markers(self, undecided: Sequence[Committable]) -> list[Committable]:
        """Prepared work no decision names whose batch the target's markers show committed
        in other partitions: decided, so committed, not aborted (said in the log)."""
        proven = decided_by_markers(self.sink, self.sink_id, undecided)
        per_batch: Counter[tuple[str, int]] = Counter()
        for committable in proven:
            per_batch[(committable.query_id, committable.batch_id)] += 1
        for (query_id, batch_id), count in sorted(per_batch.items()):
            _log.warning(
                "twopc sink=%s: committing %d prepared partition(s) of batch %d of query %s "
                "that no decision in %s names: the target's markers show other partitions "
                "of that batch committed, so it was decided (its decision is not in this "
                "commit log)",
                self.sink_id,
                count,
                batch_id,
                query_id,
                self.commit_log.url,
            )
        return proven

    def _awaits_last_resource(self, decision: Decision) -> bool:
        """A conditional decision not resolved yet (its batch not done)."""
        return decision.last_resource is not None and not self.commit_log.is_done(
            decision.query_id, decision.batch_id
        )

    def abort(
        self,
        committables: Sequence[Committable],
        why: str,
        *,
        in_recovery: bool = False,
        steps: Steps = QUIET,
    ) -> None:
        """Abort prepared work (driver-commit sinks), saying what and why in the log."""
        if not committables or self._driver is None:
            return
        driver = self._driver
        _log.info(
            "twopc sink=%s: aborting %d %s unit(s) of work: %s",
            self.sink_id,
            len(committables),
            why,
            ", ".join(
                f"batch {c.batch_id} partition {c.partition} attempt {c.attempt}"
                for c in committables
            ),
        )
        first = committables[0]
        with leaving_sink(self.sink_id, first.batch_id, what="aborting prepared work failed: "):
            if self.decider.faults and in_recovery:
                # one by one, so a crash can land between two aborts
                for index, committable in enumerate(committables):
                    point = (
                        CrashPoint.RECOVERY_BETWEEN_ABORTS
                        if index
                        else CrashPoint.RECOVERY_BEFORE_ABORT
                    )
                    self.decider.fire(point, committable.batch_id)
                    driver.abort_prepared([committable])
                return
            # in slices, so that a recovery aborting hundreds can say how far it is
            total = len(committables)
            steps.count("aborted", 0, total, "prepared transactions")
            for start in range(0, total, _ABORT_SLICE):
                driver.abort_prepared(committables[start : start + _ABORT_SLICE])
                steps.count(
                    "aborted", min(start + _ABORT_SLICE, total), total, "prepared transactions"
                )

    def abort_batch(self, query_id: str, batch_id: int) -> None:
        """Phase 1 failed: abort what the batch prepared, including attempts that never
        reported back (failed or speculative tasks), and sweep what never prepared. Only
        this batch: pending decisions of other batches are the next recovery's. Logged,
        never raised: the batch's own error is the one to report."""
        try:
            self.abort(self._prepared_of(query_id, batch_id), "prepared work of the failed batch")
            self.sweep()
        except Exception:
            _log.exception(
                "twopc sink=%s batch %d: clean-up after a failed phase 1 failed; the next "
                "run's recovery will retry it",
                self.sink_id,
                batch_id,
            )

    def abort_reported(self, reports: Sequence[TaskReport], keep: Decision | None) -> int:
        """Abort the reported work that ``keep`` does not hold (all of it without one): a
        replay's, a losing attempt's."""
        if self._driver is None:
            return 0
        work = [
            r.committable
            for r in reports
            if r.committable is not None and (keep is None or not keep.contains(r.committable))
        ]
        self.abort(work, "work of a replayed batch that is already committed")
        return len(work)

    def clean_losing_attempts(
        self, reports: Sequence[TaskReport], decision: Decision, engine: BatchEngine
    ) -> tuple[int, int]:
        """Remove what the failed and losing attempts of a just-committed batch left (staged
        files, prepared branches), instead of leaving it to a later recovery: the last batch
        of a query may have no next batch. Returns (aborted, swept).

        Runs when a partition needed more than one attempt, or when the engine may have run
        a partition twice (speculative copies, a re-attempted stage), whose losers never
        report: attempt 0 may be the one that lost. Then it first waits, bounded, for the
        losing attempts to end. A failure here is logged, never raised (the batch is
        committed), and the next batch recovers first."""
        retried = sorted({r.partition for r in reports if r.attempt > 0})
        speculative = engine.duplicate_attempts_possible()
        if not retried and not speculative:
            return 0, 0
        if speculative:
            # another run of a partition may still be finishing: the next batch looks again
            self.needed = True
            engine.wait_for_stragglers(STRAGGLER_WAIT_SECONDS)
        aborted = 0
        try:
            losers = [
                c
                for c in self._prepared_of(decision.query_id, decision.batch_id)
                if not decision.contains(c)
            ]
            self.abort(losers, "losing or failed attempt")
            aborted = len(losers)
            return aborted, self.sweep()
        except Exception as exc:
            self.needed = True
            _log.warning(
                "twopc sink=%s: batch %d is committed, but cleaning up after its failed or "
                "losing task attempts (retried partitions: %s) failed; the next batch's "
                "recovery retries: %s",
                self.sink_id,
                decision.batch_id,
                ", ".join(map(str, retried)) or "none",
                describe_exception(exc),
            )
            return aborted, 0

    def clean_up_after(
        self, decision: Decision, run: BatchRun, earlier: Sequence[BatchRun]
    ) -> RecoveryStats:
        """After a commit whose tasks ran unobserved (``format("twopc")``): abort whatever
        no decision holds (losing copies, work a crash left), let an in-task sink abort what
        earlier runs with another naming or more partitions left open, and remove unprepared
        leftovers. Logged, never raised: the batch is committed and the next batch cleans
        up again."""
        try:
            aborted = self.abort_undecided()
            lingering = 0
            if self._in_task is not None:
                lingering = self._sweep_lingering(_not_covered(earlier, run.footprint))
            return RecoveryStats(
                aborted=aborted + lingering, swept=self.sweep(), lingering=lingering
            )
        except Exception as exc:
            _log.warning(
                "twopc sink=%s: batch %d is committed, but the clean-up after it failed; the "
                "next batch retries: %s",
                self.sink_id,
                decision.batch_id,
                describe_exception(exc),
            )
            return RecoveryStats()


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
