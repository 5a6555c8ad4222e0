"""Fault injection: crash the protocol at a named point, to prove exactly-once by crashing.

A :class:`FaultPlan` holds :class:`Fault` rules. Each rule names a :class:`CrashPoint`, an
:class:`FaultAction` and optional filters (batch, partition, task attempt, rows invoked).
The coordinator asks the plan at every step; with no plan configured the check is a single
``if`` on ``None``, so injection is free when off.

Plans come from code or from the ``TWOPC_FAULTS`` environment variable, e.g.::

    TWOPC_FAULTS="between_commits:kill@batch=2"
    TWOPC_FAULTS="after_invoke:raise@batch=1,partition=0,rows=500;after_decision:exit"

Actions:

* ``raise``: raise :class:`~twopc.errors.InjectedFault` (a task failure or a failed batch);
* ``exit``: ``os._exit`` the current Python process (a Python worker or driver dying);
* ``kill``: ``SIGKILL`` the current process, no clean-up at all;
* ``sleep=SECONDS``: stall there, then go on (a slow task for speculation, a stalled driver
  for a crash while work is open), e.g. ``after_invoke:sleep=20@partition=1,attempt=0``.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from twopc.errors import ConfigurationError, InjectedFault

__all__ = ["ENV_VAR", "EXIT_CODE", "CrashPoint", "Fault", "FaultAction", "FaultPlan"]

ENV_VAR = "TWOPC_FAULTS"
EXIT_CODE = 86
"""Exit status used by the ``exit`` action, so tests can tell an injected exit apart."""

_log = logging.getLogger("twopc.faults")


class CrashPoint(Enum):
    """Every step of the protocol where a crash can be injected, in protocol order."""

    BEFORE_BEGIN = "before_begin"
    """Task: before ``begin_transaction``."""
    AFTER_INVOKE = "after_invoke"
    """Task: after ``invoke`` has written at least ``rows`` rows (every invoke if unset)."""
    BEFORE_PRE_COMMIT = "before_pre_commit"
    """Task: all rows written, ``pre_commit`` not called."""
    AFTER_PRE_COMMIT = "after_pre_commit"
    """Task: prepared, committable not yet reported to the driver."""
    BEFORE_TASK_COMMIT = "before_task_commit"
    """Task (``commit_in_task`` sinks): prepared, own commit not yet called."""
    AFTER_TASK_COMMIT = "after_task_commit"
    """Task (``commit_in_task`` sinks): committed, not yet reported to the driver."""
    BEFORE_DECISION = "before_decision"
    """Driver: every partition prepared, decision not recorded."""
    BEFORE_LAST_RESOURCE = "before_last_resource"
    """Driver, a group with a last resource (Kafka ``atomic``): the other members prepared
    and the work they hold is recorded; the last resource's transaction not yet run, so
    nothing is decided."""
    AFTER_LAST_RESOURCE = "after_last_resource"
    """Driver, a group with a last resource: its transaction committed (the group's
    decision), no other member committed yet."""
    AFTER_DECISION = "after_decision"
    """Driver: decision durable, nothing committed."""
    BETWEEN_COMMITS = "between_commits"
    """Driver: the first partition committed, the others not."""
    BETWEEN_MEMBERS = "between_members"
    """Driver, a :class:`~twopc.SinkGroup`'s batch: its first member committed, the next
    not yet."""
    AFTER_COMMIT = "after_commit"
    """Driver: every partition committed, before Spark records the batch (``commits/N``)."""
    RECOVERY_BEFORE_COMMIT = "recovery_before_commit"
    """Driver, recovery: a decided, unfinished batch found; none of it committed yet."""
    RECOVERY_BETWEEN_COMMITS = "recovery_between_commits"
    """Driver, recovery: the decided batch's first partition committed, the others not."""
    RECOVERY_BEFORE_ABORT = "recovery_before_abort"
    """Driver, recovery: undecided prepared work of the batch found; none of it aborted."""
    RECOVERY_BETWEEN_ABORTS = "recovery_between_aborts"
    """Driver, recovery: the first undecided unit of the batch aborted, the others not."""

    @property
    def in_group_only(self) -> bool:
        """Fires only in a :class:`~twopc.SinkGroup`'s batch (``between_members`` and the
        last-resource points)."""
        return self is CrashPoint.BETWEEN_MEMBERS or self.needs_last_resource

    @property
    def needs_last_resource(self) -> bool:
        """Fires only in the batch of a group with a last resource (a Kafka ``atomic``
        member)."""
        return self in (CrashPoint.BEFORE_LAST_RESOURCE, CrashPoint.AFTER_LAST_RESOURCE)

    @property
    def on_driver(self) -> bool:
        return self in _DRIVER_POINTS

    @property
    def in_recovery(self) -> bool:
        """Fires only while recovery finishes or aborts what an earlier crash left, so a
        test reaches it with a crash first (the ``batch`` filter names the recovered batch).
        """
        return self in _RECOVERY_POINTS


_RECOVERY_POINTS = frozenset(
    {
        CrashPoint.RECOVERY_BEFORE_COMMIT,
        CrashPoint.RECOVERY_BETWEEN_COMMITS,
        CrashPoint.RECOVERY_BEFORE_ABORT,
        CrashPoint.RECOVERY_BETWEEN_ABORTS,
    }
)
_DRIVER_POINTS = frozenset(
    {
        CrashPoint.BEFORE_DECISION,
        CrashPoint.BEFORE_LAST_RESOURCE,
        CrashPoint.AFTER_LAST_RESOURCE,
        CrashPoint.AFTER_DECISION,
        CrashPoint.BETWEEN_COMMITS,
        CrashPoint.BETWEEN_MEMBERS,
        CrashPoint.AFTER_COMMIT,
        *_RECOVERY_POINTS,
    }
)


class FaultAction(Enum):
    RAISE = "raise"
    EXIT = "exit"
    KILL = "kill"
    SLEEP = "sleep"


_DEFAULT_SLEEP_SECONDS = 30.0


@dataclass(frozen=True)
class Fault:
    """One rule: at ``point`` do ``action``, if the filters match (``None`` matches all)."""

    point: CrashPoint
    action: FaultAction = FaultAction.RAISE
    batch_id: int | None = None
    partition: int | None = None
    attempt: int | None = None
    rows: int | None = None
    seconds: float | None = None
    """How long the ``sleep`` action stalls (default 30 s)."""

    def matches(
        self,
        point: CrashPoint,
        batch_id: int,
        partition: int | None,
        attempt: int | None,
        rows: int | None,
    ) -> bool:
        if point is not self.point:
            return False
        if self.batch_id is not None and self.batch_id != batch_id:
            return False
        if self.partition is not None and partition is not None and self.partition != partition:
            return False
        if self.attempt is not None and attempt is not None and self.attempt != attempt:
            return False
        return not (self.rows is not None and (rows is None or rows < self.rows))

    def render(self) -> str:
        filters = [
            f"{key}={value}"
            for key, value in (
                ("batch", self.batch_id),
                ("partition", self.partition),
                ("attempt", self.attempt),
                ("rows", self.rows),
            )
            if value is not None
        ]
        suffix = f"@{','.join(filters)}" if filters else ""
        action = self.action.value
        if self.action is FaultAction.SLEEP and self.seconds is not None:
            action += f"={self.seconds:g}"
        return f"{self.point.value}:{action}{suffix}"


_FILTER_KEYS = {"batch": "batch_id", "partition": "partition", "attempt": "attempt", "rows": "rows"}


@dataclass(frozen=True)
class FaultPlan:
    """A set of fault rules. Picklable, so it travels to executors with the task."""

    faults: tuple[Fault, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.faults)

    @classmethod
    def parse(cls, spec: str) -> FaultPlan:
        """Parse ``point:action[@key=value,...]`` rules separated by ``;``."""
        return cls(tuple(_parse_rule(rule) for rule in spec.split(";") if rule.strip()))

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> FaultPlan | None:
        """The plan in ``TWOPC_FAULTS``, or ``None`` when unset (injection off)."""
        spec = (environ if environ is not None else os.environ).get(ENV_VAR, "").strip()
        return cls.parse(spec) if spec else None

    def render(self) -> str:
        return ";".join(f.render() for f in self.faults)

    def fire(
        self,
        point: CrashPoint,
        *,
        sink_id: str,
        batch_id: int,
        partition: int | None = None,
        attempt: int | None = None,
        rows: int | None = None,
    ) -> None:
        """Carry out the first rule matching this step, if any."""
        for fault in self.faults:
            if fault.matches(point, batch_id, partition, attempt, rows):
                _carry_out(fault, sink_id, batch_id, partition)
                return


def _carry_out(fault: Fault, sink_id: str, batch_id: int, partition: int | None) -> None:
    where = f"sink {sink_id!r} batch {batch_id}" + (
        "" if partition is None else f" partition {partition}"
    )
    _log.warning("fault injection: %s at %s (pid %d)", fault.render(), where, os.getpid())
    if fault.action is FaultAction.RAISE:
        raise InjectedFault(
            f"injected fault at {fault.point.value}",
            sink_id=sink_id,
            batch_id=batch_id,
            partition=partition,
        )
    if fault.action is FaultAction.SLEEP:
        time.sleep(fault.seconds if fault.seconds is not None else _DEFAULT_SLEEP_SECONDS)
        return
    for handler in logging.getLogger().handlers:
        handler.flush()
    if fault.action is FaultAction.EXIT:
        os._exit(EXIT_CODE)
    os.kill(os.getpid(), signal.SIGKILL)


def _parse_rule(rule: str) -> Fault:
    text = rule.strip()
    head, _, filters = text.partition("@")
    point_name, _, action_name = head.partition(":")
    try:
        point = CrashPoint(point_name.strip())
    except ValueError:
        known = ", ".join(p.value for p in CrashPoint)
        raise ConfigurationError(
            f"{ENV_VAR}: unknown crash point {point_name!r} in {text!r}; known: {known}"
        ) from None
    action_word, _, seconds_text = (action_name or "raise").partition("=")
    try:
        action = FaultAction(action_word.strip())
    except ValueError:
        raise ConfigurationError(
            f"{ENV_VAR}: unknown action {action_name!r} in {text!r}; use raise, exit, kill "
            "or sleep=SECONDS"
        ) from None
    seconds: float | None = None
    if seconds_text.strip():
        try:
            seconds = float(seconds_text)
        except ValueError:
            seconds = -1.0
        if action is not FaultAction.SLEEP or seconds < 0:
            raise ConfigurationError(
                f"{ENV_VAR}: bad action {action_name!r} in {text!r}; only sleep takes a "
                "duration (sleep=SECONDS, not negative)"
            )
    values: dict[str, int] = {}
    for item in _split_filters(filters):
        key, _, value = item.partition("=")
        field = _FILTER_KEYS.get(key.strip())
        if field is None or not value.strip().lstrip("-").isdigit():
            raise ConfigurationError(
                f"{ENV_VAR}: bad filter {item!r} in {text!r}; use batch=, partition=, "
                "attempt= or rows= with an integer"
            )
        values[field] = int(value)
    return Fault(point, action, seconds=seconds, **values)


def _split_filters(filters: str) -> Iterable[str]:
    return (part.strip() for part in filters.split(",") if part.strip())
