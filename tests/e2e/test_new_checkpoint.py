"""A new checkpoint with the same ``sink_id``: batch ids start at 0 again, and the new
query's data must be written, never skipped as "already committed" (the trap of markers
keyed by sink and batch id alone).

Both queries read the same input and share one commit log, so every marker, marker offset
and decision of the first query is there when the second starts. A reader of the target
must then see every row twice: once per query. (Files has its own test of this in
``test_spark_files.py``; here it runs beside the others for the same table of results.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.harness.backend_runs import BACKENDS, BackendRun, run_query, write_input

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

BATCHES = [list(range(b * 100, b * 100 + 30)) for b in range(2)]


@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_new_checkpoint_writes_its_batches_again(
    spark: Any,
    tmp_path: Path,
    backend: BackendRun,
) -> None:
    write_input(tmp_path / "in", BATCHES)
    expected = {i for ids in BATCHES for i in ids}

    first = backend.writer()
    run_query(spark, backend, tmp_path / "in", tmp_path / "chk-a", first)
    assert backend.committed() == dict.fromkeys(expected, 1)

    second = backend.writer()
    run_query(spark, backend, tmp_path / "in", tmp_path / "chk-b", second)

    assert [(m.batch_id, m.status) for m in second.metrics] == [
        (0, "committed"),
        (1, "committed"),
    ]
    assert backend.committed() == dict.fromkeys(expected, 2)
    assert backend.leftovers() == []
