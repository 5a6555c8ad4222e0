"""Crash matrix for the Kafka sink on a real broker: the query process (local engine, no
JVM) is SIGKILLed at every crash point of each mode, restarted from its checkpoint, and a
read_committed consumer must then see every key exactly once.
"""

from __future__ import annotations

import signal
import uuid
from pathlib import Path

import pytest

from tests.harness.kafka_topics import committed_keys, create_topic
from tests.harness.processes import local_query, run_process
from twopc.faults import CrashPoint

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

BATCHES, PARTITIONS, ROWS, CRASH_BATCH = 3, 2, 20, 1
EXPECTED = {str(b * 1000 + i) for b in range(BATCHES) for i in range(PARTITIONS * ROWS)}

TASK_POINTS = [
    CrashPoint.BEFORE_BEGIN,
    CrashPoint.AFTER_INVOKE,
    CrashPoint.BEFORE_PRE_COMMIT,
    CrashPoint.AFTER_PRE_COMMIT,
    CrashPoint.BEFORE_TASK_COMMIT,
    CrashPoint.AFTER_TASK_COMMIT,
]
DRIVER_POINTS = [CrashPoint.BEFORE_DECISION, CrashPoint.AFTER_DECISION, CrashPoint.AFTER_COMMIT]
CASES = [(mode, p) for mode in ("per_partition", "atomic") for p in [*TASK_POINTS, *DRIVER_POINTS]]


@pytest.mark.parametrize(
    ("mode", "point"),
    [
        # CI runs every other point in each mode, the two modes offset, so every point runs
        # in one mode; --extended runs both
        pytest.param(
            m, p, id=f"{m}-{p.value}", marks=[pytest.mark.extended] if i % 2 != m_i else []
        )
        for m_i, m in enumerate(("per_partition", "atomic"))
        for i, p in enumerate([*TASK_POINTS, *DRIVER_POINTS])
    ],
)
def test_sigkill_at_crash_point_then_restart(
    kafka_bootstrap: str, tmp_path: Path, mode: str, point: CrashPoint
) -> None:
    topic = create_topic(kafka_bootstrap, partitions=3)
    sink_id = f"k-{uuid.uuid4().hex[:8]}"
    args = local_query(
        "local_kafka_query",
        bootstrap=kafka_bootstrap,
        topic=topic,
        mode=mode,
        checkpoint=tmp_path / "chk",
        sink_id=sink_id,
        batches=BATCHES,
        partitions=PARTITIONS,
        rows=ROWS,
    )
    where = "" if point.on_driver or mode == "atomic" else ",partition=1"
    rows = ",rows=10" if point is CrashPoint.AFTER_INVOKE else ""
    first = run_process(args, faults=f"{point.value}:kill@batch={CRASH_BATCH}{where}{rows}")
    assert first.returncode == (-signal.SIGKILL if point.on_driver else 1), first.stderr[-3000:]
    seen = committed_keys(kafka_bootstrap, topic)
    assert all(n == 1 for n in seen.values()), "duplicates after the crash"
    assert set(seen) <= EXPECTED

    second = run_process(args)
    assert second.returncode == 0, second.stderr[-3000:]
    keys = committed_keys(kafka_bootstrap, topic)
    duplicates = {k: n for k, n in keys.items() if n > 1}
    assert not duplicates, f"duplicates: {sorted(duplicates.items())[:10]}"
    assert set(keys) == EXPECTED, f"missing: {sorted(EXPECTED - set(keys))[:10]}"
