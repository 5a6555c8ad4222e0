"""How far a long operator command is: ``twopc status`` and ``twopc recover`` on a sink with
many pending batches or many lingering transactions.

The code doing the work tells a :class:`Steps` what it is at ("checked 120/400 prepared
transactions"). The base class discards it: library callers, and the coordinator's own
recovery at the start of a query, show nothing. The commands take theirs from
:func:`steps_on`, which shows progress only on a terminal and never in ``--json`` mode, so
a pipe, a log file or a program reading the JSON sees exactly what it saw before.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator, Sequence
from types import TracebackType
from typing import Self, TextIO, TypeVar

__all__ = ["QUIET", "Steps", "TerminalSteps", "counted", "counter", "steps_on"]

T = TypeVar("T")

_INTERVAL_SECONDS = 0.1
"""At most this often a terminal line is redrawn for the same step (a new step, and the last
count of a step, are drawn at once)."""


class Steps:
    """Where a long operation says how far it is. This base class shows nothing."""

    def count(self, verb: str, done: int, total: int, noun: str) -> None:
        """``done`` of ``total`` so far, read as "{verb} {done}/{total} {noun}"."""

    def note(self, text: str) -> None:
        """A step without a count, e.g. one call to the target that may take a while."""

    def close(self) -> None:
        """The operation is over: take back what was shown."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


QUIET = Steps()
"""Shows nothing: the default everywhere."""


class TerminalSteps(Steps):
    """One line on a terminal, redrawn in place (at most every ``interval`` seconds for the
    same step) and erased by :meth:`close`, so the command's report starts on a clean line.
    """

    def __init__(
        self,
        stream: TextIO,
        *,
        interval: float = _INTERVAL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._stream = stream
        self._interval = interval
        self._clock = clock
        self._step: tuple[str, str] | None = None
        self._drawn_at = 0.0
        self._width = 0

    def count(self, verb: str, done: int, total: int, noun: str) -> None:
        if total <= 0:
            return
        step = (verb, noun)
        now = self._clock()
        due = step != self._step or done >= total or now - self._drawn_at >= self._interval
        self._step = step
        if due:
            self._draw(f"{verb} {done}/{total} {noun}", now)

    def note(self, text: str) -> None:
        self._step = None
        self._draw(f"{text} ...", self._clock())

    def close(self) -> None:
        if self._width:
            self._stream.write("\r" + " " * self._width + "\r")
            self._stream.flush()
            self._width = 0
        self._step = None

    def _draw(self, text: str, now: float) -> None:
        # a line longer than the terminal would wrap, and "\r" goes back one row only
        text = text[: _columns(self._stream) - 1]
        self._stream.write("\r" + text.ljust(self._width))
        self._stream.flush()
        self._width = max(self._width, len(text))
        self._drawn_at = now


def _columns(stream: TextIO) -> int:
    try:
        columns = os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):  # not a terminal, or no descriptor
        return 80
    return columns if columns > 0 else 80  # a terminal that never said its size


def _is_terminal(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (ValueError, AttributeError):  # closed, or not a real stream
        return False


def steps_on(stream: TextIO, *, json: bool) -> Steps:
    """Progress on ``stream`` when it is a terminal and the output is not ``--json``."""
    if json or not _is_terminal(stream):
        return QUIET
    return TerminalSteps(stream)


def counted(steps: Steps, items: Sequence[T], verb: str, noun: str) -> Iterator[T]:
    """``items``, counting each one once the loop body has handled it."""
    total = len(items)
    steps.count(verb, 0, total, noun)
    for done, item in enumerate(items, 1):
        yield item
        steps.count(verb, done, total, noun)


def counter(steps: Steps, verb: str, noun: str) -> Callable[[int, int], None]:
    """A ``(done, total)`` callback that counts on ``steps`` (the commit log's ``on_read``)."""

    def count(done: int, total: int) -> None:
        steps.count(verb, done, total, noun)

    return count
