"""Several targets written by one batch, with one decision: the dual-write problem.

A :class:`SinkGroup` is a sink made of named members, each a sink of its own with its own
projection of the batch (the table gets some columns, the outbox topic others). It goes
where a sink goes (:func:`twopc.foreach_batch`, :func:`twopc.write_batch`, the local
engine): phase 1 runs once per member, every member's prepared work is named in **one**
decision in the group's commit log, and phase 2 commits each member's share. A crash
anywhere is resolved as for one sink: what the decision names is committed in every member,
what no decision names is aborted in every member.

That is all-or-none only if every member can hold prepared work past its task until the
decision: members must commit on the driver (:class:`~twopc.CommitsOnDriver`: the files
sink, SQL ``two_phase``, third-party driver-commit sinks). One member whose batch is a single
transaction that cannot leave its task (Kafka ``atomic``, any :class:`~twopc.LastResource`)
may join as the **last resource**: it runs after the others prepared and their work is
recorded, and its commit is the group's decision. Other members that commit inside their
tasks are refused with an error naming what to use instead (decision 41).

Each member keeps its own sink id, ``<group sink id>.<member name>``: its staging
directories, prepared transactions and markers are its own, so a member's target is
told apart from the same target written by another query.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import pyarrow as pa

from twopc._contract.paths import CommitPath
from twopc._contract.values import (
    Committable,
    Inspection,
    PendingWork,
    RecoveryScope,
    TaskContext,
)
from twopc.errors import ConfigurationError
from twopc.protocol import (
    CommitOutcome,
    CommitsOnDriver,
    LastResource,
    Sink,
    TracksWriters,
    WriterRecord,
)

__all__ = ["Member", "SinkGroup", "member_sink_id"]

_log = logging.getLogger("twopc")

_MEMBER_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")


def member_sink_id(group_sink_id: str, member: str) -> str:
    """The sink id a group's member writes under: ``<group sink id>.<member>``."""
    return f"{group_sink_id}.{member}"


@dataclass(frozen=True)
class Member:
    """One target of a :class:`SinkGroup`: a sink, and the part of the batch it gets.

    ``project`` turns the batch into what this target writes: a function of the batch's
    DataFrame on Spark (``lambda df: df.select("id", "amount")``), of each partition's
    Arrow table on the local engine. ``None`` gives the member the batch as it is. It must
    be deterministic: a replayed batch must project to the same rows."""

    sink: Sink[Any]
    project: Callable[[Any], Any] | None = None

    def projected(self, data: Any) -> Any:
        """``data`` as this member writes it."""
        return data if self.project is None else self.project(data)


class SinkGroup(Sink[None], CommitsOnDriver, TracksWriters):
    """Sinks written by one batch with one decision (see the module docs).

    Args:
        members: member name -> :class:`Member` (or a bare sink, which gets the whole
            batch). Names are 1-32 letters, digits, ``_`` or ``-``; the order is the order
            of phase 1 and of the commits, except that a last resource (at most one: a
            Kafka sink in ``atomic`` mode) always runs last. At least two members.

    Example::

        group = twopc.SinkGroup({
            "orders": twopc.Member(orders_table, project=lambda df: df.select("id", "total")),
            "audit": twopc.Member(audit_files, project=lambda df: df.select("id", "event")),
        })
        query = stream.writeStream.foreachBatch(
            twopc.foreach_batch(group, sink_id="orders-with-audit")
        ).start()
    """

    backend_name: ClassVar[str] = "group"

    def __init__(self, members: Mapping[str, Member | Sink[Any]]) -> None:
        if len(members) < 2:
            raise ConfigurationError(
                f"a SinkGroup needs at least two members, got {len(members)}: write a "
                "single target with its sink directly"
            )
        checked: dict[str, Member] = {}
        last: list[str] = []
        for name, member in members.items():
            entry = member if isinstance(member, Member) else Member(member)
            if _check_member(name, entry.sink):
                last.append(name)
            checked[name] = entry
        if len(last) > 1:
            raise ConfigurationError(
                f"group members {', '.join(map(repr, last))} each commit their batch in one "
                "transaction inside a task; a group takes at most one such member (its last "
                "resource, whose commit is the group's decision): write the others in a "
                "query of their own"
            )
        self.last_resource: str | None = last[0] if last else None
        """The member whose one transaction is the group's decision (Kafka ``atomic``), if
        any; it runs after every other member."""
        self.members: dict[str, Member] = {
            name: checked[name] for name in sorted(checked, key=lambda n: n in last)
        }

    # -- the task side belongs to the members ---------------------------------------------

    def begin_transaction(self, ctx: TaskContext) -> None:
        raise ConfigurationError(
            "a SinkGroup runs no tasks of its own (each member's tasks run its own sink): "
            "write it with twopc.foreach_batch, twopc.write_batch or the local engine",
            sink_id=ctx.sink_id,
            batch_id=ctx.batch_id,
        )

    def invoke(self, txn: None, batch: pa.RecordBatch) -> None:
        raise ConfigurationError("a SinkGroup runs no tasks of its own")

    def pre_commit(self, txn: None) -> Committable:
        raise ConfigurationError("a SinkGroup runs no tasks of its own")

    def abort(self, txn: None) -> None:
        return None

    # -- the driver side: every call goes to the members, by their sink ids ---------------

    def member_ids(self, group_sink_id: str) -> dict[str, str]:
        """Member name -> the sink id it writes under."""
        return {name: member_sink_id(group_sink_id, name) for name in self.members}

    def last_resource_id(self, group_sink_id: str) -> str | None:
        """The sink id of the group's last resource, if it has one."""
        if self.last_resource is None:
            return None
        return member_sink_id(group_sink_id, self.last_resource)

    def last_resource_committed(self, last_resource_id: str, query_id: str, batch_id: int) -> bool:
        """Fence the last resource's open transactions, then whether it committed the batch
        (its marker): the outcome of a conditional decision."""
        name = last_resource_id.rpartition(".")[2]
        if name != self.last_resource:
            raise ConfigurationError(
                f"batch {batch_id} of query {query_id} waits on its last resource "
                f"{last_resource_id}, which this group does not have as its last resource "
                f"({self.last_resource or 'none'}): put that member back (same name, same "
                "target) until the batch is finished"
            )
        sink = self.members[name].sink
        assert isinstance(sink, LastResource)
        return sink.fence_and_check(RecoveryScope(last_resource_id, query_id), batch_id)

    def commit(self, committables: Sequence[Committable]) -> list[CommitOutcome]:
        unknown = sorted({c.sink_id for c in committables if self._member_of(c) is None})
        if unknown:
            raise ConfigurationError(
                f"decided work of {', '.join(unknown)} names no member of this group "
                f"({', '.join(self.members)}): the batch was decided with that member, so "
                "put the member back (same name, same target) until the batch is finished"
            )
        outcomes: dict[int, CommitOutcome] = {}
        for member, indexed in self._by_member(committables):
            if not isinstance(member, CommitsOnDriver):
                # the last resource committed in its task: it was the decision
                outcomes.update((i, CommitOutcome.ALREADY_COMMITTED) for i, _ in indexed)
                continue
            found = member.commit([c for _, c in indexed])
            outcomes.update(zip((i for i, _ in indexed), found, strict=True))
        return [outcomes[i] for i in range(len(committables))]

    def commit_units(self, committables: Sequence[Committable]) -> list[list[Committable]]:
        """Each member's committables, split the way that member commits them; work of a
        sink id that names no member goes first, alone, so that :meth:`commit` refuses it."""
        units = [[c] for c in committables if self._member_of(c) is None]
        for member, indexed in self._by_member(committables):
            mine = [c for _, c in indexed]
            if isinstance(member, CommitsOnDriver):
                units += member.commit_units(mine)
            else:
                units += [[c] for c in mine]
        return units

    def forget_markers(self, sink_id: str, query_id: str, before_batch: int) -> int:
        """Each member's markers, under its own sink id."""
        ids = self.member_ids(sink_id)
        return sum(
            member.sink.forget_markers(ids[name], query_id, before_batch)
            for name, member in self.members.items()
        )

    def commits_concurrently(self) -> bool:
        """Whether every member that commits on the driver commits concurrently (the
        driver then commits each member's share side by side, member after member)."""
        return all(
            m.sink.commits_concurrently()
            for m in self.members.values()
            if isinstance(m.sink, CommitsOnDriver)
        )

    def abort_prepared(self, committables: Sequence[Committable]) -> None:
        for member, indexed in self._by_member(committables):
            if isinstance(member, CommitsOnDriver):
                member.abort_prepared([c for _, c in indexed])

    def batch_committed(self, committables: Sequence[Committable]) -> None:
        for member, indexed in self._by_member(committables):
            if isinstance(member, CommitsOnDriver):
                member.batch_committed([c for _, c in indexed])

    def recover(self, sink_id: str) -> list[Committable]:
        """Every driver member's prepared work (a last resource holds none: its open
        transactions are fenced, never listed)."""
        found: list[Committable] = []
        for name, member_id in self.member_ids(sink_id).items():
            sink = self.members[name].sink
            if isinstance(sink, CommitsOnDriver):
                found += sink.recover(member_id)
        return found

    def sweep(self, sink_id: str, keep: Sequence[Committable] = ()) -> int:
        removed = 0
        for name, member_id in self.member_ids(sink_id).items():
            kept = [c for c in keep if c.sink_id == member_id]
            removed += self.members[name].sink.sweep(member_id, kept)
        return removed

    def inspect(self, sink_id: str) -> Inspection:
        pending: list[PendingWork] = []
        notes: list[str] = []
        for name, member_id in self.member_ids(sink_id).items():
            seen = self.members[name].sink.inspect(member_id)
            pending += seen.pending
            notes += [f"member {name!r} ({member_id}): {note}" for note in seen.notes]
        return Inspection(pending=tuple(pending), notes=tuple(notes))

    # -- writers: each member that keeps a registry records the group's queries ----------

    def record_writer(self, record: WriterRecord) -> None:
        """Recorded in every member that keeps writers (SQL), under the member's sink id:
        a second query of the group, or of the member alone, is refused there."""
        for member_id, sink in self._registries(record.sink_id):
            sink.record_writer(replace(record, sink_id=member_id))

    def writers(self, sink_id: str) -> list[WriterRecord]:
        found: dict[str, WriterRecord] = {}
        for member_id, sink in self._registries(sink_id):
            for record in sink.writers(member_id):
                newest = found.get(record.query_id)
                if newest is None or record.updated_at > newest.updated_at:
                    found[record.query_id] = replace(record, sink_id=sink_id)
        return list(found.values())

    def remove_writer(self, sink_id: str, query_id: str) -> None:
        for member_id, sink in self._registries(sink_id):
            sink.remove_writer(member_id, query_id)

    def _registries(self, group_sink_id: str) -> list[tuple[str, TracksWriters]]:
        """(member sink id, member) of every member that keeps a registry of writers."""
        return [
            (member_id, sink)
            for name, member_id in self.member_ids(group_sink_id).items()
            if isinstance(sink := self.members[name].sink, TracksWriters)
        ]

    def naming(self) -> dict[str, Any]:
        return {name: member.sink.naming() for name, member in self.members.items()}

    def describe(self) -> str:
        parts = ", ".join(f"{name}: {m.sink.describe()}" for name, m in self.members.items())
        return f"group({parts})"

    def __repr__(self) -> str:
        return f"SinkGroup({self.describe()})"

    def _member_of(self, committable: Committable) -> str | None:
        """The member that prepared ``committable``, if this group has it."""
        name = _member_name(committable)
        return name if name in self.members else None

    def _by_member(
        self, committables: Sequence[Committable]
    ) -> Iterator[tuple[Sink[Any], list[tuple[int, Committable]]]]:
        """The committables of each member (with their positions), in member order; work
        of a sink id that names no member (a member removed since) is logged and left."""
        by_name: dict[str, list[tuple[int, Committable]]] = {}
        for index, committable in enumerate(committables):
            name = self._member_of(committable)
            if name is None:
                _log.warning(
                    "twopc: %s of batch %d names no member of this group (%s); left alone: "
                    "put the member back to finish or abort it",
                    committable.sink_id,
                    committable.batch_id,
                    ", ".join(self.members),
                )
                continue
            by_name.setdefault(name, []).append((index, committable))
        for name in self.members:
            if name in by_name:
                yield self.members[name].sink, by_name[name]


def _member_name(committable: Committable) -> str:
    """The member name in a committable's sink id (``<group>.<member>``)."""
    return committable.sink_id.rpartition(".")[2]


def _check_member(name: str, sink: Sink[Any]) -> bool:
    """A member that can join a group: a named sink that holds prepared work past its task,
    or a last resource (then ``True``)."""
    if not isinstance(name, str) or not _MEMBER_NAME.match(name):
        raise ConfigurationError(
            f"group member name {name!r}: use 1-32 letters, digits, '_' or '-' (it becomes "
            "part of the member's sink id)"
        )
    if isinstance(sink, SinkGroup):
        raise ConfigurationError(f"group member {name!r} is a group itself: list its members")
    if not isinstance(sink, Sink):
        raise ConfigurationError(
            f"group member {name!r} is a {type(sink).__name__}, not a twopc sink "
            "(twopc.create_sink(...) makes one)"
        )
    try:
        path = CommitPath.of(sink)  # the coordinator's own rule for where a sink commits
    except ConfigurationError as exc:
        raise ConfigurationError(f"group member {name!r}: {exc.cause_message}") from None
    if path is CommitPath.DRIVER:
        return False
    if _last_resource_refusal(sink) is None:
        return True
    raise ConfigurationError(
        f"group member {name!r} ({sink.describe()}) commits inside its tasks, before the "
        "group's decision, so the group could not take its batch back if another member "
        f"failed: {_instead(sink)}"
    )


def _last_resource_refusal(sink: Sink[Any]) -> str | None:
    """Why an in-task sink cannot be a group's last resource, or ``None`` when it can."""
    if not isinstance(sink, LastResource):
        return "it is no twopc.LastResource"
    if not sink.single_task:
        return "it writes a batch in several tasks"
    return sink.last_resource_refusal()


def _instead(sink: Sink[Any]) -> str:
    """What to use instead of an in-task member."""
    backend = sink.backend_name
    if backend in ("postgres", "mysql"):
        return "use transaction_mode='two_phase', whose prepared transactions wait for it"
    if backend == "kafka":
        return (
            "a Kafka transaction cannot outlive its producer (librdkafka has no KIP-939), so "
            "Kafka cannot hold prepared work for a group; one Kafka member in mode='atomic' "
            "(one transaction per batch) may join as the group's last resource, whose commit "
            "is the group's decision"
        )
    why = _last_resource_refusal(sink)
    return (
        "use a mode of the sink that commits on the driver (twopc.CommitsOnDriver); it "
        f"cannot be the group's last resource either: {why}"
    )
