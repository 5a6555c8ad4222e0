"""Registering ``format("twopc")`` with a Spark session."""

from __future__ import annotations

from typing import Any

from twopc.errors import ConfigurationError

__all__ = ["register"]


def register(spark: Any) -> None:
    """Register the ``twopc`` data source with ``spark`` (classic or Spark Connect), so
    ``df.writeStream.format("twopc")`` and ``df.write.format("twopc")`` work. Where twopc
    is installed next to Spark's Python workers, Spark finds it by itself (the
    ``pyspark_twopc`` package) and this call is not needed; it is harmless to repeat."""
    try:
        from twopc._engines.datasource import TwopcDataSource
    except ImportError as exc:
        raise ConfigurationError(
            'format("twopc") needs PySpark 4.1 or newer (Arrow data source writers): '
            f'pip install "twopc[spark]" ({exc})'
        ) from exc
    spark.dataSource.register(TwopcDataSource)
