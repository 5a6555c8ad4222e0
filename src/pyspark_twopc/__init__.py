"""Makes ``format("twopc")`` work without registration: Spark looks up Python data sources
in the installed packages whose names start with ``pyspark_`` and uses their
``DefaultSource``. Nothing else lives here; see :mod:`twopc`.

On PySpark 4.0, which lacks the Arrow writers of streaming data sources, the source found
under ``twopc`` says so when a query uses it (Spark would otherwise skip this package and
report that no source named ``twopc`` exists)."""

from pyspark.sql.datasource import DataSource

try:
    from twopc._engines.datasource import TwopcDataSource
except ImportError as exc:
    from twopc._engines.datasource_unavailable import unavailable_data_source

    DefaultSource: type[DataSource] = unavailable_data_source(exc)
else:
    DefaultSource = TwopcDataSource

__all__ = ["DefaultSource"]
