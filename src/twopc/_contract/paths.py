"""The two ways a batch is committed, chosen once from the sink's commit role.

A batch's path is recorded with its runs and its decision in the commit log, so a restart
finishes a batch the way it was started, even when the sink's options changed meanwhile
(SQL ``two_phase`` → ``transaction``).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from twopc.errors import ConfigurationError
from twopc.protocol import CommitsInTask, CommitsOnDriver, Sink

__all__ = ["CommitPath", "check_roles"]


class CommitPath(StrEnum):
    """Where a batch's work becomes visible."""

    DRIVER = "driver"
    """The driver commits prepared work after the decision (:class:`CommitsOnDriver`)."""
    TASK = "task"
    """Each task committed its own work with a marker (:class:`CommitsInTask`); the
    decision only records that the batch is complete."""

    @classmethod
    def of(cls, sink: Sink[Any]) -> CommitPath:
        """The path of new batches of ``sink``."""
        check_roles(sink)
        return cls.TASK if isinstance(sink, CommitsInTask) else cls.DRIVER


def check_roles(sink: object) -> None:
    """Refuse an object that is not a :class:`Sink` with a commit role, naming what is
    missing."""
    if not isinstance(sink, Sink):
        raise ConfigurationError(
            f"expected a twopc.Sink, got {type(sink).__name__}; create one with "
            "twopc.create_sink(backend, ...)"
        )
    if not isinstance(sink, CommitsOnDriver | CommitsInTask):
        raise ConfigurationError(
            f"{type(sink).__name__} implements no commit role: subclass "
            "twopc.CommitsOnDriver (prepared work committed on the driver) or "
            "twopc.CommitsInTask (the task commits, with a marker); see docs/plugins.md"
        )
