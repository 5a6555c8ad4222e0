"""The coordinator's side of source progress: check the group once, hand the offsets to a
sink that commits them in its transaction, else publish them after the batch committed.

Publishing is reporting, never a condition of the batch: a failure is logged and shows in
the batch's metrics, and the next batch (or the replay of this one) publishes again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from twopc._contract.boundary import describe_exception
from twopc._coordination.records import DecidedProgress, Decision
from twopc.progress import (
    CommitsProgressInTask,
    ProgressInTask,
    ProgressReporter,
    SourceOffsets,
)
from twopc.protocol import Sink

__all__ = ["BatchProgress", "Published", "Publisher"]

_log = logging.getLogger("twopc")


@dataclass(frozen=True)
class Published:
    """What publishing a batch's offsets showed: the offsets, the group's lag after it
    (``None`` when unknown) and the error, if publishing failed."""

    offsets: SourceOffsets | None = None
    lag: int | None = None
    error: str | None = None


@dataclass(frozen=True)
class BatchProgress:
    """A new batch's source progress: what its tasks commit in their transaction
    (``in_task``) and what its decision records (``decided``); both ``None`` without a
    reporter or offsets."""

    in_task: ProgressInTask | None = None
    decided: DecidedProgress | None = None


class Publisher:
    """Source progress for one coordinator; does nothing without a reporter."""

    def __init__(self, reporter: ProgressReporter | None, sink: Sink[Any], sink_id: str) -> None:
        self.reporter = reporter
        self.sink_id = sink_id
        self.in_task = (
            reporter is not None
            and isinstance(sink, CommitsProgressInTask)
            and sink.commits_progress(reporter)
        )
        self._checked = False
        if reporter is not None:
            _log.info(
                "twopc sink=%s: source offsets go to consumer group %r %s",
                sink_id,
                reporter.group_id,
                "in each batch's transaction"
                if self.in_task
                else "after each batch's commit (progress reporting)",
            )

    def check(self) -> None:
        """Once per coordinator: the group must be this sink's (raises otherwise)."""
        if self.reporter is not None and not self._checked:
            self.reporter.check(self.sink_id)
            self._checked = True

    def for_batch(
        self, offsets: SourceOffsets | None, query_id: str, batch_id: int
    ) -> BatchProgress:
        """A new batch's progress, after checking the group (once per coordinator): the
        offsets for its transaction when the sink commits them there, and what its decision
        records about them."""
        self.check()
        if self.reporter is None or offsets is None:
            return BatchProgress()
        decided = DecidedProgress(offsets, self.in_task, self.reporter.describe())
        if not self.in_task:
            return BatchProgress(None, decided)
        metadata = self.reporter.offset_metadata(self.sink_id, query_id, batch_id)
        return BatchProgress(ProgressInTask(self.reporter.group_id, offsets, metadata), decided)

    def publish(self, decision: Decision, offsets: SourceOffsets | None = None) -> Published:
        """After the batch committed: advance the group to its offsets (unless its
        transaction already did) and read the lag. ``offsets`` stand in for a decision
        recorded without them (the same batch, so the same offsets)."""
        reporter = self.reporter
        recorded = decision.progress
        offsets = recorded.offsets if recorded is not None else offsets
        if reporter is None or offsets is None:
            return Published()
        try:
            if recorded is None or not recorded.in_task:
                reporter.publish(offsets, self.sink_id, decision.query_id)
            lag = reporter.progress(offsets).lag
        except Exception as exc:
            message = describe_exception(exc)
            _log.warning(
                "twopc sink=%s: batch %d is committed, but publishing its source offsets to "
                "group %r failed (the next batch publishes again): %s",
                self.sink_id,
                decision.batch_id,
                reporter.group_id,
                message,
            )
            return Published(offsets, None, message)
        return Published(offsets, lag)
