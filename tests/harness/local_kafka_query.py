"""A checkpointed query on the local engine writing to Kafka, run as its own process by
the crash tests. Input: batch b, partition p holds ids b*1000 + p*rows + i (the key).
Fault injection comes from TWOPC_FAULTS.
"""

from __future__ import annotations

import argparse
import sys

import pyarrow as pa

import twopc
from tests.harness.local_query import make_batches
from twopc.local import LocalStream, foreach_batch


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--mode", default="per_partition")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--sink-id", required=True)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rows", type=int, default=20)
    args = parser.parse_args()
    sink = twopc.create_sink(
        "kafka",
        bootstrap_servers=args.bootstrap,
        topic=args.topic,
        mode=args.mode,
        key_column="key",
        operation_timeout_seconds=20,
    )
    batches = [
        [t.append_column("key", pa.compute.cast(t["id"], pa.string())) for t in partitions]
        for partitions in make_batches(args.batches, args.partitions, args.rows)
    ]
    stream = LocalStream(args.checkpoint, batches)
    stream.run(foreach_batch(sink, args.sink_id, commit_log=f"{args.checkpoint}/twopc-log"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
