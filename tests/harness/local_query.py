"""A checkpointed query on the local engine (no JVM), run as its own process by the tests.

Input is deterministic: batch b, partition p holds ids [b*1000 + p*rows, ... + rows).
Fault injection comes from TWOPC_FAULTS.
"""

from __future__ import annotations

import argparse
import sys

import pyarrow as pa

import twopc
from twopc.local import LocalStream, foreach_batch


def make_batches(batches: int, partitions: int, rows: int) -> list[list[pa.Table]]:
    return [
        [
            pa.table(
                {
                    "id": pa.array(
                        range(b * 1000 + p * rows, b * 1000 + (p + 1) * rows), pa.int64()
                    ),
                    "payload": pa.array([f"b{b}p{p}"] * rows),
                }
            )
            for p in range(partitions)
        ]
        for b in range(batches)
    ]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rows", type=int, default=50)
    parser.add_argument("--max-attempts", type=int, default=1)
    args = parser.parse_args()
    sink = twopc.create_sink("files", path=args.output)
    stream = LocalStream(args.checkpoint, make_batches(args.batches, args.partitions, args.rows))
    stream.run(foreach_batch(sink, "local-orders", max_attempts=args.max_attempts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
