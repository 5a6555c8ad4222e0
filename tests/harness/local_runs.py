"""Batches through the local engine in this process, for the integration tests of a sink
(``tests/integration/test_delta_sink.py``, ``tests/integration/test_iceberg_sink.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from twopc import Sink, local


def run(
    sink: Sink[Any],
    tmp_path: Path,
    batches: Sequence[Sequence[pa.Table]],
    *,
    name: str = "q",
    sink_id: str = "ev",
) -> list[int]:
    """Write ``batches`` (each a list of partitions) to ``sink`` as the query ``name`` (its
    checkpoint and commit log under ``tmp_path``); the batch ids it wrote."""
    stream = local.LocalStream(str(tmp_path / f"checkpoint-{name}"), batches)
    writer = local.foreach_batch(
        sink, sink_id, commit_log=str(tmp_path / f"log-{name}"), processes=False
    )
    return stream.run(writer)
