"""How a batch is partitioned for its sink before phase 1: one task for a single-task
sink (coalesced, no shuffle), by key for a sink with partition columns, and at most
``max_tasks`` tasks where the user asks (:func:`twopc.foreach_batch`'s option: coalesced
where the commit is the driver's, hashed by key or by the rows' values where a replay must
see the same rows in each partition)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from twopc._contract.paths import CommitPath
from twopc.errors import ConfigurationError
from twopc.protocol import Sink

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["Narrowing", "arrange_for", "check_max_tasks", "narrows"]


def arrange_for(sink: Sink[Any], df: DataFrame, max_tasks: int | None = None) -> DataFrame:
    """The batch partitioned as the sink needs it: one task for a single-task sink
    (coalesced), by its partition columns (all rows of a key in one task) where it names
    any, into at most ``max_tasks`` partitions then (hash partitioning: the same rows in
    each partition on every run, whatever the sink's commit path)."""
    if sink.single_task:
        # coalesce, not repartition: no shuffle. The batch's last stage runs in the one
        # task, which streams its rows to the sink as they are computed; a shuffle first
        # ran the stage in parallel, wrote every row to shuffle files and read them back
        # (Kafka atomic, 1M rows in 2 partitions: 5.3 s with the shuffle, 2.6 s without)
        return df.coalesce(1)
    if keys := sink.partition_columns():
        if max_tasks is None:
            return df.repartition(*keys)
        shuffle = int(df.sparkSession.conf.get("spark.sql.shuffle.partitions") or max_tasks)
        return df.repartition(min(max_tasks, shuffle), *keys)
    return df


def check_max_tasks(max_tasks: int | None) -> int | None:
    """The ``max_tasks`` option: a whole number of at least 1, or ``None``."""
    if max_tasks is None:
        return None
    if isinstance(max_tasks, bool) or not isinstance(max_tasks, int) or max_tasks < 1:
        raise ConfigurationError(
            f"max_tasks must be a whole number of at least 1, not {max_tasks!r}"
        )
    return max_tasks


@dataclass(frozen=True)
class Narrowing:
    """How the engine fits a wider batch into ``tasks`` partitions: coalesced (no
    shuffle), or, for a sink that commits in its tasks, hashed by the rows' values (a
    shuffle): such a sink's replay skips the partitions that committed by their markers,
    so each partition must hold the same rows on every run, which hash partitioning
    promises and ``coalesce``, which groups partitions by where their data lives, does
    not."""

    tasks: int
    by_rows: bool = False


def narrows(sink: Sink[Any], max_tasks: int | None) -> Narrowing | None:
    """How the engine narrows a sink's batch with ``max_tasks``, where :func:`arrange_for`
    has not already shaped it (one task, or partitioned by key)."""
    if max_tasks is None or sink.single_task or sink.partition_columns():
        return None
    return Narrowing(max_tasks, by_rows=CommitPath.of(sink) is CommitPath.TASK)
