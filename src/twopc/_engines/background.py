"""Phase 2 of a decided batch in a thread of its own (``background_commit=True``), so that
Spark's own work between two batches (its commit log, the next batch's offsets and plan)
runs while the target commits.

The batch's decision is durable before ``foreachBatch`` returns, so a crash while the
thread runs is what a crash right after the decision always was: recovery finishes the
batch. One batch at a time: the next batch waits for the previous one's phase 2 before it
starts, and ``close()`` waits for the last.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from twopc.errors import CommitError, TwoPCError

__all__ = ["BackgroundCommit"]

_log = logging.getLogger("twopc")


class BackgroundCommit:
    """The phase 2 of one decided batch, running in a thread; :meth:`wait` joins it."""

    def __init__(self, sink_id: str, batch_id: int, finish: Callable[[], object]) -> None:
        self.sink_id = sink_id
        self.batch_id = batch_id
        self._finish = finish
        self.error: TwoPCError | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"twopc-commit-{sink_id}-{batch_id}", daemon=False
        )
        self._thread.start()

    def _run(self) -> None:
        try:
            self._finish()
        except TwoPCError as exc:
            self.error = exc
        except BaseException as exc:  # reported by wait(), never lost with the thread
            self.error = CommitError(
                f"phase 2 failed after the decision was recorded; a restart finishes it: {exc}",
                sink_id=self.sink_id,
                batch_id=self.batch_id,
            )
            self.error.__cause__ = exc

    def wait(self) -> TwoPCError | None:
        """Wait for the commit to end; its error, if it failed (the decided batch is then
        finished by the next batch's recovery, or by a restart)."""
        self._thread.join()
        if self.error is not None:
            _log.warning(
                "twopc sink=%s: batch %d is decided but its commit in the background failed; "
                "the next batch's recovery finishes it: %s",
                self.sink_id,
                self.batch_id,
                self.error,
            )
        return self.error
