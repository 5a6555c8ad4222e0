"""What a phase-1 task sends back to the driver: a small, versioned, JSON report."""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar, TypeVar

from twopc._coordination.batch_metrics import TaskMetrics
from twopc.errors import PermanentSinkError, UnsupportedFormatError
from twopc.protocol import Committable

__all__ = ["TaskOutcome", "TaskReport", "class_name"]

E = TypeVar("E", bound=BaseException)


class TaskOutcome(StrEnum):
    """How a task left its partition of the batch."""

    PREPARED = "prepared"
    """Prepared; the driver commits it after the decision (``CommitsOnDriver``)."""
    COMMITTED = "committed"
    """Committed by the task itself, with its marker (``CommitsInTask``)."""
    ALREADY_COMMITTED = "already_committed"
    """The task found its marker: committed before, nothing written this time."""
    REJECTED = "rejected"
    """The sink refused the data for good (``PermanentSinkError``): the batch fails."""


@dataclass(frozen=True)
class TaskReport:
    """One task's report. ``format`` is checked on read: a driver and executors running
    different twopc versions fail clearly instead of misreading each other."""

    FORMAT: ClassVar[int] = 2

    partition: int
    attempt: int
    outcome: TaskOutcome
    committable: Committable | None
    rows: int = 0
    bytes: int = 0
    seconds: float = 0.0
    error: str | None = None
    """Why the sink rejected the data (``REJECTED`` only)."""
    error_type: str | None = None
    """The class of the sink's error, ``module.QualifiedName`` (``REJECTED`` only; a
    report of an older twopc has none): the driver rebuilds the error as that class."""
    began_at: float | None = None
    """When the task began its transaction (seconds since the epoch); ``None`` in a report
    of an older twopc."""
    open_seconds: float | None = None
    """A task that committed itself: how old its transaction was at the commit."""
    near_timeout: bool = False
    """Whether that age passed 80 % of the sink's :meth:`~twopc.Sink.work_timeout`."""

    def dumps(self) -> str:
        body: dict[str, Any] = {
            "format": self.FORMAT,
            "partition": self.partition,
            "attempt": self.attempt,
            "outcome": self.outcome.value,
            "committable": None if self.committable is None else self.committable.to_json(),
            "rows": self.rows,
            "bytes": self.bytes,
            "seconds": self.seconds,
            "error": self.error,
            "error_type": self.error_type,
            "began_at": self.began_at,
            "open_seconds": self.open_seconds,
            "near_timeout": self.near_timeout,
        }
        return json.dumps(body, sort_keys=True)

    @classmethod
    def loads(cls, text: str) -> TaskReport:
        """Read a report written by :meth:`dumps`; anything else is refused with
        :class:`~twopc.UnsupportedFormatError`, never misread."""
        try:
            body = json.loads(text)
        except (TypeError, ValueError) as exc:  # JSONDecodeError is a ValueError
            raise UnsupportedFormatError(f"a task's report is not JSON ({exc})") from exc
        fmt = body.get("format") if isinstance(body, dict) else None
        if fmt != cls.FORMAT:
            raise UnsupportedFormatError(
                f"a task reported in format {fmt!r}, this driver reads format "
                f"{cls.FORMAT}: the executors run another twopc version than the driver "
                "(install the same version everywhere, e.g. through PYSPARK_PYTHON)"
            )
        try:
            raw = body.get("committable")
            return cls(
                partition=int(body["partition"]),
                attempt=int(body["attempt"]),
                outcome=TaskOutcome(body["outcome"]),
                committable=None if raw is None else Committable.from_json(raw),
                rows=int(body.get("rows", 0)),
                bytes=int(body.get("bytes", 0)),
                seconds=float(body.get("seconds", 0.0)),
                error=_optional_text(body.get("error")),
                error_type=_optional_text(body.get("error_type")),
                began_at=_optional_number(body.get("began_at")),
                open_seconds=_optional_number(body.get("open_seconds")),
                near_timeout=bool(body.get("near_timeout", False)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise UnsupportedFormatError(f"a task's report is incomplete ({exc!r})") from exc

    def rejection(self) -> PermanentSinkError:
        """The error the sink rejected the data with, rebuilt where the report is read,
        as its own class when this process has loaded it (the sink's module has, wherever
        the sink is), else as :class:`~twopc.PermanentSinkError`. Classes are looked up
        among those loaded, never imported by name."""
        cls = _loaded_subclass(PermanentSinkError, self.error_type)
        message = self.error or "the sink rejected the data"
        if cls is not None:
            try:
                return cls(message, partition=self.partition)
            except TypeError:  # a subclass with a constructor of its own
                pass
        named = f"{self.error_type}: " if self.error_type else ""
        return PermanentSinkError(f"{named}{message}", partition=self.partition)

    @property
    def metrics(self) -> TaskMetrics:
        return TaskMetrics(self.partition, self.attempt, self.rows, self.bytes, self.seconds)


def _optional_number(value: Any) -> float | None:
    return None if value is None else float(value)


def _optional_text(value: Any) -> str | None:
    if value is not None and not isinstance(value, str):
        raise TypeError(f"expected text, got {type(value).__name__}")
    return value


def class_name(cls: type) -> str:
    """``module.QualifiedName``: how a report names an error class."""
    return f"{cls.__module__}.{cls.__qualname__}"


def _loaded_subclass(base: type[E], name: str | None) -> type[E] | None:
    if name is None:
        return None
    pending: list[type[E]] = [base]
    while pending:
        cls = pending.pop()
        if class_name(cls) == name:
            return cls
        pending.extend(cls.__subclasses__())
    return None
