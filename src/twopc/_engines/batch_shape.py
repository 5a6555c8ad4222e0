"""How a batch is partitioned for its sink before phase 1: one task for a single-task
sink, by key for a sink with partition columns, and at most ``max_tasks`` tasks where the
user asks (:func:`twopc.foreach_batch`'s option; coalesced where that cannot change what a
replay commits)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from twopc._contract.paths import CommitPath
from twopc.errors import ConfigurationError
from twopc.groups import SinkGroup
from twopc.protocol import Sink

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

__all__ = ["arrange_for", "check_max_tasks", "narrows"]


def arrange_for(sink: Sink[Any], df: DataFrame, max_tasks: int | None = None) -> DataFrame:
    """The batch partitioned as the sink needs it: one task for a single-task sink, by its
    partition columns (all rows of a key in one task) where it names any, into at most
    ``max_tasks`` partitions then (hash partitioning: the same rows in each partition on
    every run, whatever the sink's commit path)."""
    if sink.single_task:
        return df.repartition(1)
    if keys := sink.partition_columns():
        if max_tasks is None:
            return df.repartition(*keys)
        shuffle = int(df.sparkSession.conf.get("spark.sql.shuffle.partitions") or max_tasks)
        return df.repartition(min(max_tasks, shuffle), *keys)
    return df


def check_max_tasks(sink: Sink[Any], max_tasks: int | None) -> int | None:
    """The ``max_tasks`` option checked against the sink: a whole number, for a sink (or
    every member of a group) whose tasks can be merged without changing what a replay
    commits. A sink that commits in its tasks skips a replayed partition by its marker, so
    its partitions must hold the same rows on every run; Spark's ``coalesce`` groups them by
    where their data lives, which a restart may change."""
    if max_tasks is None:
        return None
    if isinstance(max_tasks, bool) or not isinstance(max_tasks, int) or max_tasks < 1:
        raise ConfigurationError(
            f"max_tasks must be a whole number of at least 1, not {max_tasks!r}"
        )
    sinks = [m.sink for m in sink.members.values()] if isinstance(sink, SinkGroup) else [sink]
    for each in sinks:
        in_task = CommitPath.of(each) is CommitPath.TASK
        if in_task and not (each.single_task or each.partition_columns()):
            raise ConfigurationError(
                f"max_tasks cannot merge the tasks of {each.describe()}: it commits each "
                "partition in its own task, and a replay after a crash skips the partitions "
                "that committed by their markers, so every partition must hold the same rows "
                "on every run, which Spark's coalesce does not promise. Use the sink's mode "
                "that commits on the driver (the SQL sinks' transaction_mode='two_phase', "
                "the Kafka sink's mode='atomic'), or lower the number of partitions in the "
                "query's own plan (spark.sql.shuffle.partitions, set before the query's "
                "first start)"
            )
    return max_tasks


def narrows(sink: Sink[Any], max_tasks: int | None) -> int | None:
    """``max_tasks`` for the engine to coalesce a sink's batch with, where
    :func:`arrange_for` has not already shaped it."""
    if max_tasks is None or sink.single_task or sink.partition_columns():
        return None
    return max_tasks
