"""SIGKILL at every crash point of the sink's role, then a restart: exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from twopc.faults import ENV_VAR, CrashPoint
from twopc.protocol import CommitsInTask, CommitsOnDriver, Committable, Sink
from twopc.testing._base import NOT_APPLICABLE, SinkChecks, expect, guarantee
from twopc.testing._causes import explain_output, plugin_code
from twopc.testing._runner import batch_ids

__all__ = ["CrashChecks", "crash_points"]

_TASK_POINTS = (
    CrashPoint.BEFORE_BEGIN,
    CrashPoint.AFTER_INVOKE,
    CrashPoint.BEFORE_PRE_COMMIT,
    CrashPoint.AFTER_PRE_COMMIT,
)


_ROLE = {True: "it commits in the task", False: "it commits on the driver"}


def crash_points(sink: Sink[Any]) -> list[CrashPoint]:
    """The crash points that apply to ``sink``'s commit role (``between_members`` applies
    to groups only: :class:`~twopc.testing.GroupMemberChecks` crashes there)."""
    points = list(_TASK_POINTS)
    in_task = isinstance(sink, CommitsInTask)
    if in_task:
        points += [CrashPoint.BEFORE_TASK_COMMIT, CrashPoint.AFTER_TASK_COMMIT]
    points += [CrashPoint.BEFORE_DECISION, CrashPoint.AFTER_DECISION]
    if not in_task and commits_in_steps(sink):
        points.append(CrashPoint.BETWEEN_COMMITS)
    points.append(CrashPoint.AFTER_COMMIT)
    return points


def commits_in_steps(sink: Sink[Any]) -> bool:
    """Whether a driver-commit sink commits a batch of two partitions in more than one
    :meth:`~twopc.CommitsOnDriver.commit` call (``between_commits`` lies between them)."""
    if not isinstance(sink, CommitsOnDriver):
        return False
    pair = [Committable("kit", "q", 0, partition, 0) for partition in (0, 1)]
    return len(sink.commit_units(pair)) > 1


def _why_not(sink: Sink[Any], point: CrashPoint) -> str:
    if point is CrashPoint.BETWEEN_COMMITS and not isinstance(sink, CommitsInTask):
        return "it commits a whole batch in one step"
    return _ROLE[isinstance(sink, CommitsInTask)]


class CrashChecks(SinkChecks):
    """The query runs in its own process with the sink; it is killed at a crash point and
    started again from its checkpoint, like a Spark driver."""

    @guarantee("crash-exactly-once")
    @pytest.mark.parametrize(
        "point",
        [p for p in CrashPoint if not p.in_recovery and not p.in_group_only],
        ids=lambda p: p.value,
    )
    def test_sigkill_at_crash_point_then_restart(
        self, target: str, tmp_path: Path, point: CrashPoint
    ) -> None:
        sink = self.make_sink(target)
        if point not in crash_points(sink):
            pytest.skip(
                f"{NOT_APPLICABLE}crash point {point.value} does not apply to "
                f"{type(sink).__name__} ({_why_not(sink, point)})"
            )
        code = plugin_code(self.sink_factory, [type(sink)])
        batches, partitions, rows = 3, 2, 20
        args = [
            sys.executable,
            "-m",
            "twopc.testing._runner",
            "--factory",
            self.sink_factory,
            "--batch-maker",
            self.batch_maker,
            "--target",
            target,
            "--checkpoint",
            str(tmp_path / "checkpoint"),
            "--batches",
            str(batches),
            "--partitions",
            str(partitions),
            "--rows",
            str(rows),
        ]
        single = sink.single_task
        where = "" if point.on_driver or single else ",partition=1"
        filters = ",rows=10" if point is CrashPoint.AFTER_INVOKE else ""
        first = _run(args, f"{point.value}:kill@batch=1{where}{filters}")
        expected_code = -signal.SIGKILL if point.on_driver else 1
        expect(
            first.returncode == expected_code,
            "crash-exactly-once",
            f"the first run should end by the crash at {point.value} (exit {expected_code}), "
            f"but it exited {first.returncode}:\n{explain_output(first.stderr, code)}",
        )
        second = _run(args, None)
        expect(
            second.returncode == 0,
            "crash-exactly-once",
            f"the restart after a SIGKILL at {point.value} failed (exit {second.returncode}):"
            f"\n{explain_output(second.stderr, code)}",
        )
        expected = [
            i for b in range(batches) for p in range(partitions) for i in batch_ids(b, p, rows)
        ]
        self.exactly(
            self.visible(target),
            expected,
            "crash-exactly-once",
            f"after a SIGKILL at {point.value} and a restart",
        )


def _run(args: list[str], faults: str | None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop(ENV_VAR, None)
    if faults:
        env[ENV_VAR] = faults
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")]))
    return subprocess.run(
        args,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
        start_new_session=True,
    )
