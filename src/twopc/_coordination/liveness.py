"""The running writer's liveness record, so that operators' tools can tell a live query
from a crashed one.

A writer keeps one record per streaming query next to its commit log entries,
``<log root>/<query_id>/.heartbeat.json`` (a hidden name: the commit log never reads it as a
batch). It is written when a batch starts and when it ends, and removed when the writer is
closed. ``twopc recover`` refuses to act while a record says the query runs.
"""

from __future__ import annotations

import functools
import json
import os
import socket
import time
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

__all__ = [
    "DEFAULT_STALE_AFTER",
    "HEARTBEAT_NAME",
    "Heartbeat",
    "HeartbeatState",
    "Liveness",
    "own_process_start",
    "process_start",
    "this_host",
]

HEARTBEAT_NAME = ".heartbeat.json"
DEFAULT_STALE_AFTER = 300.0
"""Seconds after which a record from another host no longer counts as a running query."""

_FORMAT = 1


def this_host() -> str:
    return socket.gethostname()


class HeartbeatState(StrEnum):
    """What the writer did when it last wrote its record. For people (``twopc status``):
    whether a query runs is judged by host, process and age, never by the state."""

    WRITING = "writing"
    """A batch is being written."""
    IDLE = "idle"
    """The last batch committed (or was skipped); the writer waits for the next."""
    FAILED = "failed"
    """The last batch failed; the query stops, or Spark retries it."""
    UNKNOWN = "unknown"
    """A state this version does not know (a newer writer's): read, never refused, so that
    the record still says a writer runs."""

    @classmethod
    def read(cls, value: str) -> HeartbeatState:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


@dataclass(frozen=True)
class Liveness:
    """Whether a heartbeat means the query is running, and why."""

    running: bool
    reason: str


@dataclass(frozen=True)
class Heartbeat:
    """Who writes a query's batches, and when it last said so, and what it did then
    (:class:`HeartbeatState`)."""

    sink_id: str
    query_id: str
    host: str
    pid: int
    started_at: float
    updated_at: float
    batch_id: int
    state: HeartbeatState
    process_start: str | None = None
    """When the writer's process started, as the host's kernel counts it
    (:func:`process_start`): a later process that got the same pid is not the writer.
    ``None`` where it cannot be read (not Linux, or a record of an older version)."""

    def to_bytes(self) -> bytes:
        return json.dumps({"format": _FORMAT, **asdict(self)}, sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> Heartbeat:
        body = json.loads(raw)
        if body.get("format") != _FORMAT:
            raise ValueError(f"unsupported heartbeat format {body.get('format')!r}")
        return cls(
            sink_id=str(body["sink_id"]),
            query_id=str(body["query_id"]),
            host=str(body["host"]),
            pid=int(body["pid"]),
            started_at=float(body["started_at"]),
            updated_at=float(body["updated_at"]),
            batch_id=int(body["batch_id"]),
            state=HeartbeatState.read(str(body["state"])),
            process_start=str(body["process_start"]) if body.get("process_start") else None,
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def assess(
        self,
        stale_after: float = DEFAULT_STALE_AFTER,
        *,
        now: float | None = None,
        host: str | None = None,
    ) -> Liveness:
        """Running or not: on this host the process decides; elsewhere the record's age.

        On the same host a live process counts as running however old the record is (a
        query with a long trigger interval writes rarely), and a dead one as stopped however
        fresh. From another host only the age can tell: a record older than
        ``stale_after`` seconds is presumed to belong to a stopped query.
        """
        now = time.time() if now is None else now
        age = max(0.0, now - self.updated_at)
        if self.host == (host or this_host()):
            if not _pid_alive(self.pid):
                return Liveness(False, f"process {self.pid} on this host has exited")
            now_started = process_start(self.pid)
            if self.process_start and now_started and now_started != self.process_start:
                return Liveness(
                    False,
                    f"process {self.pid} on this host has exited; that pid now belongs to "
                    "a process started later",
                )
            return Liveness(True, f"process {self.pid} on this host is alive")
        if age < stale_after:
            return Liveness(
                True,
                f"updated {age:.0f}s ago by {self.host} (pid {self.pid}), within "
                f"{stale_after:.0f}s",
            )
        return Liveness(
            False,
            f"last updated {age:.0f}s ago by {self.host} (pid {self.pid}), older than "
            f"{stale_after:.0f}s: presumed stopped",
        )


def process_start(pid: int) -> str | None:
    """When process ``pid`` started, in the kernel's clock ticks since boot (Linux's
    ``/proc/<pid>/stat``, field 22), as text; ``None`` where that cannot be read. Together
    with the pid it names one process: pids are reused, start times of one pid are not."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            raw = stat.read().decode("ascii", "replace")
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after its last ')'
    fields = raw[raw.rfind(")") + 1 :].split()
    return f"linux:{fields[19]}" if len(fields) > 19 else None


@functools.lru_cache(maxsize=4)
def _start_of(pid: int) -> str | None:
    return process_start(pid)


def own_process_start() -> str | None:
    """This process's start time for its liveness record, read once per pid (a forked
    child has its own)."""
    return _start_of(os.getpid())


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by another user
    return True
