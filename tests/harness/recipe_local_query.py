"""The local-engine query a chaos run kills: a :class:`~twopc.local.LocalStream` of
``batches`` micro-batches of ``partitions`` x ``rows`` rows (ids ``b*1000 + p*rows + i``),
written through ``twopc.local.foreach_batch``. Fault injection comes from ``TWOPC_FAULTS``.

The runner forks it (the driver is the forked process, its tasks are forked from it);
``python -m tests.harness.recipe_local_query SPEC_JSON CHECKPOINT BATCHES PARTITIONS ROWS
ATTEMPTS`` runs it by hand.
"""

from __future__ import annotations

import sys

import pyarrow as pa
import pyarrow.compute as pc

from tests.harness.group_recipe import GroupRecipe, build, recipe_of, writes_kafka
from tests.harness.local_query import make_batches
from tests.harness.sink_recipe import SinkRecipe
from twopc.local import LocalStream, foreach_batch


def input_batches(
    kafka: bool, batches: int, partitions: int, rows: int, split: int = 0
) -> list[list[pa.Table]]:
    """The input; for a query that writes Kafka, records get the id as their key.
    ``split`` re-splits every batch's rows into that many partitions (by id): the same
    rows, another partition count."""
    data = make_batches(batches, partitions, rows)
    if split and split != partitions:
        data = [_resplit(pa.concat_tables(b), split) for b in data]
    if not kafka:
        return data
    return [[t.append_column("key", pc.cast(t["id"], pa.string())) for t in b] for b in data]


def _resplit(table: pa.Table, count: int) -> list[pa.Table]:
    remainder = pc.remainder(table["id"], count)
    return [table.filter(pc.equal(remainder, p)) for p in range(count)]


KAFKA_TOPIC = "chaos-in"
"""The topic a ``kafka_source`` run's offsets name."""


def run_query(
    spec: SinkRecipe | GroupRecipe,
    checkpoint: str,
    *,
    batches: int,
    partitions: int,
    rows: int,
    max_attempts: int,
    split: int = 0,
    kafka_source: bool = False,
    start: dict[int, int] | None = None,
) -> None:
    """Run the query. ``kafka_source``: its offsets look like a Kafka source's (partition
    ``p`` of every batch is partition ``p`` of :data:`KAFKA_TOPIC`), so the output stores
    them; ``start``: a new checkpoint's starting offsets, the end of a batch, from which the
    query reads the batches after it."""
    data = input_batches(writes_kafka(spec), batches, partitions, rows, split)
    if start:
        done = min(start.values()) // rows  # every partition of a batch holds `rows` rows
        data = data[done:]
    stream = (
        LocalStream(checkpoint, data, kafka_topic=KAFKA_TOPIC, starting_offsets=start)
        if kafka_source
        else LocalStream(checkpoint, data)
    )
    writer = foreach_batch(
        build(spec),
        spec.sink_id,
        commit_log=spec.commit_log(checkpoint),
        max_attempts=max_attempts,
    )
    stream.run(writer)


if __name__ == "__main__":
    spec_json, checkpoint, *numbers = sys.argv[1:]
    b, p, r, a = (int(n) for n in numbers)
    run_query(recipe_of(spec_json), checkpoint, batches=b, partitions=p, rows=r, max_attempts=a)
