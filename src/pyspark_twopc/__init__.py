"""Makes ``format("twopc")`` work without registration: Spark looks up Python data sources
in the installed packages whose names start with ``pyspark_`` and uses their
``DefaultSource``. Nothing else lives here; see :mod:`twopc`."""

from twopc._datasource import TwopcDataSource as DefaultSource

__all__ = ["DefaultSource"]
