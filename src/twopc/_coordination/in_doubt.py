"""The work a writer knows to be in doubt, kept in memory for its metrics.

In doubt: decided but not finished (a decision whose commit has not completed), or
prepared with no decision (what recovery aborts). The coordinator learns of it where it
already looks (a decision it records, the pending decisions and prepared work its recovery
reads) and forgets it where it finishes it, so the figure costs no read of its own. After a
batch that committed, nothing is in doubt; a commit or a recovery that keeps failing leaves
the work in doubt, and its age grows.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from twopc._coordination.records import Decision
from twopc.protocol import Committable

__all__ = ["InDoubt", "InDoubtWork"]

_Key = tuple[str, str, int]
"""("decided" or "undecided", query id, batch id)."""


@dataclass(frozen=True)
class InDoubt:
    """How many units of work are in doubt, and since when (Unix time) the oldest is
    (``None`` when none is)."""

    units: int = 0
    since: float | None = None


class InDoubtWork:
    """The in-doubt work of one sink, per batch. Thread-safe: a background commit finishes
    its batch in a thread of its own."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._work: dict[_Key, tuple[int, float]] = {}
        self._lock = threading.Lock()

    def decided(self, decision: Decision) -> None:
        """A decision recorded (or found pending): its work is in doubt until finished."""
        since = decision.decided_at or self._clock()
        self._add(
            ("decided", decision.query_id, decision.batch_id), len(decision.committables), since
        )

    def finished(self, query_id: str, batch_id: int) -> None:
        """A decision finished (committed and marked done) or withdrawn."""
        with self._lock:
            self._work.pop(("decided", query_id, batch_id), None)

    def undecided(self, committables: Iterable[Committable]) -> None:
        """Prepared work no decision holds, found by recovery: in doubt until aborted."""
        for key, count in _per_batch("undecided", committables).items():
            self._add(key, count, self._clock())

    def aborted(self, committables: Iterable[Committable]) -> None:
        """Undecided prepared work aborted."""
        with self._lock:
            for key in _per_batch("undecided", committables):
                self._work.pop(key, None)

    def now(self) -> InDoubt:
        """What is in doubt at this moment."""
        with self._lock:
            if not self._work:
                return InDoubt()
            return InDoubt(
                sum(units for units, _ in self._work.values()),
                min(since for _, since in self._work.values()),
            )

    def _add(self, key: _Key, units: int, since: float) -> None:
        with self._lock:
            known = self._work.get(key)
            # work seen again keeps the time it was first seen: its age keeps growing
            self._work[key] = (units, min(since, known[1]) if known else since)


def _per_batch(kind: str, committables: Iterable[Committable]) -> dict[_Key, int]:
    counts: dict[_Key, int] = {}
    for c in committables:
        key = (kind, c.query_id, c.batch_id)
        counts[key] = counts.get(key, 0) + 1
    return counts
