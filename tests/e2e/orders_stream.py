"""The order files of ``write_orders`` as a stream, written through a foreachBatch writer
(``test_spark_files.py``, ``test_stall_spark.py``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

SCHEMA = "id long, customer string, amount double"


def run_orders_stream(
    spark: Any,
    source: Path,
    checkpoint: Path,
    writer: Callable[[Any, int], None],
    partitions: int = 2,
) -> None:
    """Run ``writer`` as the foreachBatch of a stream over the order files in ``source``
    (one file per micro-batch, ``partitions`` partitions by id) until it has read them all."""
    stream = (
        spark.readStream.schema(SCHEMA)
        .option("maxFilesPerTrigger", 1)
        .json(str(source))
        .repartition(partitions, "id")
    )
    query = (
        stream.writeStream.option("checkpointLocation", str(checkpoint))
        .foreachBatch(writer)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
