"""``format("twopc")`` on a PySpark without Arrow writers for streaming data sources
(PySpark 4.0): a data source that Spark still finds under the name ``twopc``, and that
says what is missing when a query uses it, instead of Spark's "Failed to find the data
source: twopc"."""

from __future__ import annotations

import importlib.metadata
from typing import Any, NoReturn

from pyspark.sql.datasource import DataSource

from twopc.errors import ExtraNotInstalledError

__all__ = ["unavailable_data_source"]


def _pyspark_version() -> str:
    try:
        return importlib.metadata.version("pyspark")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def unavailable_data_source(cause: ImportError) -> type[DataSource]:
    """A data source named ``twopc`` whose writers raise :class:`ExtraNotInstalledError`
    with ``cause`` (why the real one could not be imported)."""
    message = (
        f'format("twopc") needs PySpark 4.1 or newer; this is PySpark {_pyspark_version()} '
        f'({cause}). Upgrade: pip install "twopc[spark]" "pyspark>=4.1", or write with '
        "twopc.foreach_batch / twopc.write_batch, which work on PySpark 4.0"
    )

    def refuse(*_: Any, **__: Any) -> NoReturn:
        raise ExtraNotInstalledError(message)

    class UnavailableTwopcDataSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "twopc"

        writer = refuse
        streamWriter = refuse
        reader = refuse
        schema = refuse

    return UnavailableTwopcDataSource
