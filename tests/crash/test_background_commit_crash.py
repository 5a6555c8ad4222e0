"""The driver SIGKILLed while a batch's commit runs in the background
(``foreach_batch(..., background_commit=True)``), after Spark recorded the batch as done:
Spark never runs that batch again, so only twopc's decision brings it back. The restarted
query's first batch recovers it (commits the decided batch) before writing its own; the
target then holds every id once and nothing a crash leaves.

Real Spark, the query in a process of its own (``tests.harness.entry_query``): the
commit of batch 1 is stalled in its thread (``after_decision:sleep``, which fires in the
commit's thread in this mode) until Spark's commit log holds batch 1, then the process
group is SIGKILLed.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from tests.harness.backend_cases import ROWS_PER_FILE, add_input
from tests.harness.entry_runs import command, kill_when, run
from tests.harness.exactly_once import assert_exactly_once
from tests.harness.sink_recipe import SinkRecipe
from tests.harness.targets import FilesTarget, IcebergTarget, Target

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

CRASH_BATCH = 1
TABLE = "db.events"


def _iceberg(tmp_path: Path) -> tuple[SinkRecipe, Target]:
    """An Iceberg table written by Spark's write path (it exists before the query)."""
    pytest.importorskip("pyiceberg")
    from twopc_iceberg import IcebergSink

    warehouse = tmp_path / "wh"
    options = json.dumps({"write_path": "spark"})
    spec = SinkRecipe(
        "iceberg", "", f"bg-{uuid.uuid4().hex[:8]}", str(warehouse), TABLE, options=options
    )
    schema = pa.schema([("id", pa.int64()), ("payload", pa.string()), ("slowed", pa.string())])
    IcebergSink(TABLE, warehouse=str(warehouse), create_table=True).access.for_data(schema)
    return spec, IcebergTarget({})


def _files(tmp_path: Path) -> tuple[SinkRecipe, Target]:
    """Parquet files written by Spark's own writer."""
    options = json.dumps({"write_path": "spark"})
    spec = SinkRecipe(
        "files", "parquet", f"bg-{uuid.uuid4().hex[:8]}", str(tmp_path / "out"), options=options
    )
    return spec, FilesTarget()


@pytest.mark.parametrize("make", [_iceberg, _files], ids=["iceberg", "files"])
def test_driver_killed_while_the_commit_runs_in_the_background(
    make: object, tmp_path: Path
) -> None:
    spec, target = make(tmp_path)  # type: ignore[operator]
    source = tmp_path / "in"
    expected = set().union(*(add_input(source, b) for b in range(3)))
    checkpoint = tmp_path / "chk"
    stalled = f"after_decision:sleep=120@batch={CRASH_BATCH}"
    args = [*command("foreach", spec, source, checkpoint, faults=stalled), "--background-commit"]
    recorded = checkpoint / "commits" / str(CRASH_BATCH)
    kill_when(args, tmp_path, recorded.exists, f"Spark recorded batch {CRASH_BATCH}")
    # Spark counts batch 1 done; the target holds batch 0 only, batch 1 decided in the log
    assert set(target.committed(spec)) == set(range(ROWS_PER_FILE))

    rerun = run([*command("foreach", spec, source, checkpoint), "--background-commit"])
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert_exactly_once(target.committed(spec), expected)
    assert target.leftovers(spec) == []
