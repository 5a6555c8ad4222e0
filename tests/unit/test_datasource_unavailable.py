"""``format("twopc")`` on a PySpark without Arrow writers for streaming data sources
(PySpark 4.0): Spark still finds a data source named ``twopc``, and a query that uses it
is told that it needs PySpark 4.1, not that no source named ``twopc`` exists.

No Spark session: the data source is looked at as Spark's lookup of Python data sources
does (a ``pyspark_*`` module's ``DefaultSource``, a ``DataSource`` subclass, under its
``name()``), shipped as Spark ships it (cloudpickled), and its writers called as Spark's
planner worker calls them.
"""

from __future__ import annotations

import pkgutil
import re
from collections.abc import Callable
from typing import Any

import pytest
from pyspark import __version__ as pyspark_version
from pyspark.serializers import CPickleSerializer
from pyspark.sql.datasource import DataSource

from twopc._engines.datasource_unavailable import unavailable_data_source
from twopc.errors import ExtraNotInstalledError

pytestmark = pytest.mark.unit

PYSPARK = tuple(int(part) for part in pyspark_version.split(".")[:2])
OPTIONS = {"sink": "files", "sink_id": "orders", "path": "/nowhere/out"}


def _shipped(source: type[DataSource]) -> type[DataSource]:
    """``source`` as Spark ships it: pickled by the lookup, unpickled where a write is
    planned."""
    serializer = CPickleSerializer()
    shipped: type[DataSource] = serializer.loads(serializer.dumps(source))
    return shipped


def _uses(source: DataSource) -> dict[str, Callable[[], Any]]:
    return {
        "writer": lambda: source.writer(None, False),  # type: ignore[arg-type]
        "streamWriter": lambda: source.streamWriter(None, False),  # type: ignore[arg-type]
        "reader": lambda: source.reader(None),  # type: ignore[arg-type]
        "schema": source.schema,
    }


def test_the_stand_in_is_named_twopc_and_every_use_says_what_is_missing() -> None:
    cause = ImportError("cannot import name 'DataSourceStreamArrowWriter'")
    source = _shipped(unavailable_data_source(cause))

    assert issubclass(source, DataSource)
    assert source.name() == "twopc"
    instance = source(OPTIONS)
    for use, call in _uses(instance).items():
        with pytest.raises(ExtraNotInstalledError) as refused:
            call()
        message = str(refused.value)
        assert message.startswith(
            f'format("twopc") needs PySpark 4.1 or newer; this is PySpark {pyspark_version} '
        ), use
        assert "cannot import name 'DataSourceStreamArrowWriter'" in message, use
        assert '"pyspark>=4.1"' in message, use
        assert "twopc.foreach_batch / twopc.write_batch" in message, use


@pytest.mark.skipif(PYSPARK >= (4, 1), reason='PySpark 4.1 and newer run format("twopc")')
def test_format_twopc_on_pyspark_4_0_says_it_needs_4_1() -> None:
    import pyspark_twopc

    with pytest.raises(ImportError, match="DataSourceStreamArrowWriter"):
        import twopc._engines.datasource  # noqa: F401
    # what Spark's lookup finds: a pyspark_* module whose DefaultSource is a data source
    assert "pyspark_twopc" in {module.name for module in pkgutil.iter_modules()}
    source = _shipped(pyspark_twopc.DefaultSource)
    assert issubclass(source, DataSource)
    assert source.name() == "twopc"
    expected = re.escape(
        f'format("twopc") needs PySpark 4.1 or newer; this is PySpark {pyspark_version} '
    )
    # a batch write (df.write) and a streaming one (df.writeStream)
    for use in ("writer", "streamWriter"):
        with pytest.raises(ExtraNotInstalledError, match=expected):
            _uses(source(OPTIONS))[use]()
