"""The sink as a member of a :class:`~twopc.SinkGroup`: one decision with the in-memory
reference sink, all or none, across a crash between the members' commits and before the
decision. A sink that commits in its tasks cannot hold prepared work for a group's
decision, and fails the check saying so, unless it is a :class:`~twopc.LastResource`: then
it is checked as the group's last resource, across a crash before and after its commit."""

from __future__ import annotations

import uuid
from collections import Counter
from pathlib import Path

import pyarrow as pa

from twopc._contract.paths import CommitPath
from twopc.errors import ConfigurationError, InjectedFault
from twopc.faults import FaultPlan
from twopc.groups import Member, SinkGroup
from twopc.local import LocalBatchWriter, foreach_batch
from twopc.testing._base import SinkChecks, expect, fail, guarantee
from twopc.testing._memory import MemoryDriverSink, forget_store, memory_store
from twopc.testing._runner import batch_ids

__all__ = ["GroupMemberChecks"]

_KEY = "group-member"
_PARTITIONS, _ROWS = 2, 20


class GroupMemberChecks(SinkChecks):
    """Opt-in: the sink joins a group (``twopc.SinkGroup``) with the in-memory reference
    sink. Not part of :class:`~twopc.testing.SinkConformanceSuite`, since only sinks that
    commit on the driver can join; add it to the test class of such a sink."""

    @guarantee(_KEY)
    def test_a_group_with_the_reference_sink_is_all_or_none(
        self, target: str, tmp_path: Path
    ) -> None:
        sink = self.make_sink(target)
        last = False
        if CommitPath.of(sink) is not CommitPath.DRIVER:
            try:
                group = SinkGroup({"reference": MemoryDriverSink(), "subject": sink})
                last = group.last_resource is not None
            except ConfigurationError as refused:
                fail(
                    _KEY,
                    f"{type(sink).__name__} cannot hold prepared work past its task: it "
                    "commits inside its tasks (twopc.CommitsInTask), before a group's "
                    "decision, so twopc.SinkGroup refuses it "
                    f"({refused.cause_message}). Give the sink a mode that commits on the "
                    "driver (twopc.CommitsOnDriver) to let it join groups, or, if it writes "
                    "a batch in one transaction, the role twopc.LastResource.",
                )
        store = f"kit-group-{uuid.uuid4().hex}"
        try:
            run = _GroupRun(self, target, tmp_path, store)
            if last:
                run.check_last_resource()
            else:
                run.check()
        finally:
            forget_store(store)


class _GroupRun:
    """Three batches of one query through a group of the reference sink (first) and the
    sink under test (second): a clean batch, a crash between the members' commits (the
    subject's share is then committed by recovery, from a fresh coordinator), a crash
    before the decision (nothing of it anywhere, then written once)."""

    def __init__(self, checks: SinkChecks, target: str, tmp_path: Path, store: str) -> None:
        self.checks = checks
        self.target = target
        self.log = str(tmp_path / "group-log")
        self.store = store
        self.query = uuid.uuid4().hex

    def writer(self, faults: str | None = None) -> LocalBatchWriter:
        group = SinkGroup(
            {
                "reference": Member(MemoryDriverSink(self.store)),
                "subject": Member(self.checks.make_sink(self.target)),
            }
        )
        plan = FaultPlan.parse(faults) if faults else None
        return foreach_batch(group, "kit-group", commit_log=self.log, faults=plan, processes=False)

    def batch(self, batch_id: int) -> list[pa.Table]:
        return [
            pa.Table.from_batches([self.checks.make_batch(batch_ids(batch_id, p, _ROWS))])
            for p in range(_PARTITIONS)
        ]

    def ids(self, *batches: int) -> list[int]:
        return [i for b in batches for p in range(_PARTITIONS) for i in batch_ids(b, p, _ROWS)]

    def both_show(self, when: str, *batches: int) -> None:
        expected = self.ids(*batches)
        self.checks.exactly(self.checks.visible(self.target), expected, _KEY, when)
        reference = Counter(memory_store(self.store).visible)
        expect(
            reference == Counter(expected),
            _KEY,
            f"{when}: the reference sink shows {len(reference)} id(s), expected "
            f"{len(expected)}: the group's members disagree",
        )

    def crashed(self, point: str, batch_id: int) -> None:
        writer = self.writer(f"{point}:raise@batch={batch_id}")
        try:
            writer.write(self.query, batch_id, self.batch(batch_id))
        except InjectedFault:
            return
        finally:
            writer.close()
        fail(_KEY, f"the crash point {point} of batch {batch_id} did not fire")

    def check_last_resource(self) -> None:
        """The subject is the group's last resource: a crash before it ran leaves the batch
        nowhere; a crash after it committed is finished in the reference sink."""
        writer = self.writer()
        writer.write(self.query, 0, self.batch(0))
        writer.close()
        self.both_show("after a committed batch of the group", 0)
        self.crashed("before_last_resource", 1)
        self.both_show("after a crash before the last resource ran", 0)
        restarted = self.writer()
        restarted.write(self.query, 1, self.batch(1))
        restarted.close()
        self.both_show("after the batch the last resource never ran was written again", 0, 1)
        self.crashed("after_last_resource", 2)
        again = self.writer()
        again.write(self.query, 2, self.batch(2))  # recovery commits the reference's share
        again.close()
        self.both_show("after recovery finished a batch its last resource committed", 0, 1, 2)

    def check(self) -> None:
        writer = self.writer()
        writer.write(self.query, 0, self.batch(0))
        writer.close()
        self.both_show("after a committed batch of the group", 0)
        self.crashed("between_members", 1)
        restarted = self.writer()
        restarted.write(self.query, 1, self.batch(1))  # recovery first, then a replay
        restarted.close()
        self.both_show("after recovery finished a batch decided before a crash", 0, 1)
        self.crashed("before_decision", 2)
        self.both_show("after a crash before the group's decision", 0, 1)
        again = self.writer()
        again.write(self.query, 2, self.batch(2))
        again.close()
        self.both_show("after the batch crashed before the decision was written again", 0, 1, 2)
