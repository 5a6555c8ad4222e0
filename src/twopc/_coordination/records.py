"""What the commit log holds: a batch's decision, its runs, and what one listing of the log
says about a batch. Plain records with their JSON forms; :mod:`commit_log` stores them."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from twopc._contract.paths import CommitPath
from twopc.errors import UnsupportedFormatError
from twopc.progress import SourceOffsets
from twopc.protocol import Committable, Footprint

__all__ = [
    "CONDITIONAL_FORMAT",
    "LOG_FORMAT",
    "BatchRun",
    "BatchState",
    "DecidedProgress",
    "Decision",
    "LogListing",
    "checked_entry",
]

LOG_FORMAT = 2
"""Format 2 records the commit path (``path``); format 1 said ``committed_in_task``."""
CONDITIONAL_FORMAT = 3
"""The format of a decision that holds only if a group's last resource commits
(``last_resource``): a twopc that does not know the condition must not read it as decided."""
_READS = (1, 2, 3)


def checked_entry(raw: bytes, what: str) -> dict[str, Any]:
    """A log entry's JSON body, refused when another twopc version wrote its format."""
    try:
        body = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise UnsupportedFormatError(f"the commit log's {what} is not JSON ({exc})") from exc
    fmt = body.get("format") if isinstance(body, dict) else None
    if not isinstance(body, dict) or fmt not in _READS:
        raise UnsupportedFormatError(
            f"the commit log's {what} has format {fmt!r}; this twopc reads formats "
            f"{', '.join(map(str, _READS))}. It was written by another twopc version: run "
            "that version to finish the query, or upgrade this one"
        )
    return dict(body)


def _path_in(body: dict[str, Any]) -> CommitPath | None:
    """The recorded commit path; format 1 recorded ``committed_in_task`` (or nothing)."""
    if "path" in body:
        return CommitPath(body["path"])
    in_task = body.get("committed_in_task")
    if in_task is None:
        return None
    return CommitPath.TASK if in_task else CommitPath.DRIVER


def _last_resource_in(body: dict[str, Any]) -> str | None:
    """The last resource of a conditional decision (format 3 only)."""
    if body.get("format") != CONDITIONAL_FORMAT:
        return None
    return str(body["last_resource"])


@dataclass(frozen=True)
class DecidedProgress:
    """A decided batch's source offsets: committed in the batch's transaction
    (``in_task``), or to be published to the group after the commit."""

    offsets: SourceOffsets
    in_task: bool
    reporter: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"offsets": self.offsets.to_json(), "in_task": self.in_task, "to": self.reporter}

    @classmethod
    def from_json(cls, body: dict[str, Any]) -> DecidedProgress:
        return cls(SourceOffsets.from_json(body["offsets"]), bool(body["in_task"]), body["to"])


@dataclass(frozen=True)
class Decision:
    """The coordinator's durable decision to commit one batch."""

    sink_id: str
    query_id: str
    batch_id: int
    committables: tuple[Committable, ...]
    decided_at: float = 0.0
    path: CommitPath | None = None
    """How the batch commits: the driver commits the committables, or the tasks committed
    before the decision was written (``None``: a log of a version that did not say; the
    sink's role decides then)."""
    progress: DecidedProgress | None = None
    """The batch's source offsets and where they are published (queries that report
    their progress)."""
    last_resource: str | None = None
    """For a group with a last resource (Kafka ``atomic``): the member sink id whose one
    transaction decides. The record is written before that transaction runs and names the
    other members' work; the batch is decided only if the last resource committed it, which
    recovery asks the member (:meth:`~twopc.LastResource.fence_and_check`)."""
    source_offsets: SourceOffsets | None = None
    """The source offsets the batch ends at (``None``: the source is not Kafka, or an
    older twopc decided it). Recorded once; the committables read back carry them."""

    def to_bytes(self) -> bytes:
        body: dict[str, Any] = {
            "format": LOG_FORMAT if self.last_resource is None else CONDITIONAL_FORMAT,
            "sink_id": self.sink_id,
            "query_id": self.query_id,
            "batch_id": self.batch_id,
            "decided_at": self.decided_at,
            # the offsets once for the batch, not in each committable
            "committables": [c.with_source_offsets(None).to_json() for c in self.committables],
        }
        if self.source_offsets is not None:
            body["source_offsets"] = self.source_offsets.to_json()
        if self.path is not None:
            body["path"] = str(self.path)
        if self.progress is not None:
            body["progress"] = self.progress.to_json()
        if self.last_resource is not None:
            body["last_resource"] = self.last_resource
        return json.dumps(body, sort_keys=True, indent=1).encode()

    @classmethod
    def from_bytes(cls, raw: bytes) -> Decision:
        body = checked_entry(raw, "decision")
        try:
            offsets = (
                SourceOffsets.from_json(body["source_offsets"])
                if body.get("source_offsets")
                else None
            )
            return cls(
                sink_id=str(body["sink_id"]),
                query_id=str(body["query_id"]),
                batch_id=int(body["batch_id"]),
                committables=tuple(
                    Committable.from_json(c).with_source_offsets(offsets)
                    for c in body["committables"]
                ),
                decided_at=float(body.get("decided_at", 0.0)),
                path=_path_in(body),
                progress=DecidedProgress.from_json(body["progress"])
                if body.get("progress")
                else None,
                last_resource=_last_resource_in(body),
                source_offsets=offsets,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise UnsupportedFormatError(
                f"a decision in the commit log is incomplete ({exc!r})"
            ) from exc

    def contains(self, committable: Committable) -> bool:
        """Whether exactly this attempt's committable is part of the decision (of this
        sink: a group's decision holds each member's, under the member's sink id)."""
        return any(
            c.partition == committable.partition
            and c.attempt == committable.attempt
            and c.sink_id == committable.sink_id
            for c in self.committables
        )


@dataclass(frozen=True)
class BatchRun:
    """One run of a batch's phase 1, recorded before any task starts.

    ``input`` fingerprints the batch's input as the checkpoint plans it (``None`` when the
    engine cannot tell); ``path`` is how that run commits, so a restart in another mode
    still finishes and cleans up the old way.
    """

    footprint: Footprint
    input: str | None = None
    path: CommitPath = CommitPath.DRIVER
    started_at: float = 0.0

    @property
    def commits_in_task(self) -> bool:
        """Whether the run's tasks commit themselves (some may have, before a crash)."""
        return self.path is CommitPath.TASK

    def same_shape(self, other: BatchRun) -> bool:
        """Same naming, input and partition count (an unknown count, 0, matches only an
        unknown one): a replay that per-partition markers can skip partition by partition."""
        return (self.footprint, self.input) == (other.footprint, other.input)

    def to_json(self) -> dict[str, Any]:
        return {
            "footprint": self.footprint.to_json(),
            "input": self.input,
            "path": str(self.path),
            "started_at": self.started_at,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BatchRun:
        return cls(
            footprint=Footprint.from_json(data["footprint"]),
            input=data.get("input"),
            path=_path_in(data) or CommitPath.DRIVER,
            started_at=float(data.get("started_at", 0.0)),
        )


@dataclass(frozen=True)
class BatchState:
    """What the log says about one batch, read with one listing of the query's directory:
    its decision, whether phase 2 finished, its runs, the query's newest decision, the
    query's batches that were finished then (for the log's retention) and those decided."""

    decision: Decision | None
    done: bool
    runs: list[BatchRun]
    newest_decided: int | None
    finished: tuple[int, ...] = ()
    decided: tuple[int, ...] = ()


@dataclass(frozen=True)
class LogListing:
    """The log's entries as one pass over it saw them (:meth:`CommitLog.listing`): the file
    names in each query's directory, hidden ones left out."""

    names: Mapping[str, frozenset[str]]
