"""twopc's figures in Spark's own progress reports."""

from __future__ import annotations

from typing import Any

__all__ = ["OBSERVED_NAME", "observe"]

OBSERVED_NAME = "twopc"


def observe(df: Any, name: str = OBSERVED_NAME) -> Any:
    """The streaming DataFrame ``df`` with a row count observed under ``name``.

    Call it on the DataFrame you give to ``writeStream`` (not inside the batch function:
    Spark reports only metrics observed in the streaming query's own plan). Each batch's
    ``query.lastProgress["observedMetrics"]["twopc"]["rows"]`` then shows the rows Spark
    handed to the sink, next to twopc's own figures in the exporters. Works for classic and
    Spark Connect DataFrames, with ``foreachBatch`` and ``format("twopc")``.
    """
    if type(df).__module__.startswith("pyspark.sql.connect"):
        from pyspark.sql.connect import functions as F
    else:
        from pyspark.sql import functions as F  # type: ignore[no-redef]
    return df.observe(name, F.count(F.lit(1)).alias("rows"))
