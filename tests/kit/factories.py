"""Sink factories the conformance kit imports by name (also in its crash subprocesses)."""

from __future__ import annotations

import functools

import twopc
from tests.harness.services import Services
from twopc.protocol import Sink
from twopc.testing import MemoryDriverSink, MemoryTaskSink


def files_sink(target: str) -> Sink[object]:
    """The files sink as users get it: under Spark, phase 1 runs in Spark's own writer."""
    return twopc.create_sink("files", path=target, format="parquet")


def files_python_sink(target: str) -> Sink[object]:
    """The files sink with phase 1 in Python tasks under Spark too."""
    return twopc.create_sink("files", path=target, format="parquet", write_path="python")


@functools.cache
def _service_env(name: str) -> dict[str, str]:
    """Connection settings of a real service, started if needed (``scripts/services``)."""
    return Services().start(name)


def postgres_dsn() -> str:
    return _service_env("postgres")["POSTGRES_DSN"]


def mysql_dsn() -> str:
    return _service_env("mariadb")["MYSQL_DSN"]


def kafka_bootstrap() -> str:
    return _service_env("kafka")["KAFKA_BOOTSTRAP_SERVERS"]


def postgres_sink(target: str) -> Sink[object]:
    return twopc.create_sink("postgres", dsn=postgres_dsn(), table=target)


def postgres_two_phase_sink(target: str) -> Sink[object]:
    return twopc.create_sink(
        "postgres", dsn=postgres_dsn(), table=target, transaction_mode="two_phase"
    )


def mysql_sink(target: str) -> Sink[object]:
    return twopc.create_sink("mysql", dsn=mysql_dsn(), table=target)


def mysql_two_phase_sink(target: str) -> Sink[object]:
    return twopc.create_sink("mysql", dsn=mysql_dsn(), table=target, transaction_mode="two_phase")


def kafka_sink(target: str) -> Sink[object]:
    return twopc.create_sink(
        "kafka", bootstrap_servers=kafka_bootstrap(), topic=target, operation_timeout_seconds=20
    )


def kafka_atomic_sink(target: str) -> Sink[object]:
    return twopc.create_sink(
        "kafka",
        bootstrap_servers=kafka_bootstrap(),
        topic=target,
        mode="atomic",
        operation_timeout_seconds=20,
    )


def memory_task_sink(target: str) -> Sink[object]:
    """The in-memory reference sink that commits in the task (one process only)."""
    return MemoryTaskSink(target)  # type: ignore[return-value]


def memory_driver_sink(target: str) -> Sink[object]:
    """The in-memory reference sink that commits on the driver (one process only)."""
    return MemoryDriverSink(target)  # type: ignore[return-value]


def iceberg_sink(target: str) -> Sink[object]:
    """An Iceberg table in the embedded catalog (SQLite) of the warehouse ``target``,
    created by the first batch."""
    return twopc.create_sink("iceberg", table="kit.events", warehouse=target, create_table=True)


def delta_sink(target: str) -> Sink[object]:
    """A Delta table at ``target``, created by the first batch's commit."""
    return twopc.create_sink("delta", table_uri=target, create_table=True)


def iceberg_spark_sink(target: str) -> Sink[object]:
    """The same table created before the sink (the kit's columns), so that ``foreach_batch``
    and ``write_batch`` run phase 1 as Spark's own write job (``write_path="auto"``)."""
    import pyarrow as pa

    sink = twopc.create_sink("iceberg", table="kit.events", warehouse=target, create_table=True)
    sink.access.for_data(pa.schema([("id", pa.int64()), ("payload", pa.string())]))  # type: ignore[attr-defined]
    return sink


def delta_spark_sink(target: str) -> Sink[object]:
    """The Delta table created before the sink (the kit's columns, an empty first
    version), so that ``foreach_batch`` and ``write_batch`` run phase 1 as Spark's own
    write job (``write_path="auto"``)."""
    import pyarrow as pa
    from deltalake import DeltaTable, write_deltalake

    try:
        DeltaTable(target)
    except Exception:
        schema = pa.schema([("id", pa.int64()), ("payload", pa.string())])
        write_deltalake(target, schema.empty_table())
    return twopc.create_sink("delta", table_uri=target)
