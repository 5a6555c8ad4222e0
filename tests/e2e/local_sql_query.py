"""A checkpointed query on the local engine writing to Postgres or MariaDB, run as its own
process by the crash tests. Input: batch b, partition p holds ids b*1000 + p*rows + i.
Fault injection comes from TWOPC_FAULTS.
"""

from __future__ import annotations

import argparse
import sys

import twopc
from tests.e2e.local_query import make_batches
from twopc.local import LocalStream, foreach_batch


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", choices=["postgres", "mysql"], required=True)
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--table", required=True)
    parser.add_argument("--transaction-mode", default="transaction")
    parser.add_argument("--mode", default="append")
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rows", type=int, default=20)
    parser.add_argument("--sink-id", default="sql-orders")
    args = parser.parse_args()
    sink = twopc.create_sink(
        args.backend,
        dsn=args.dsn,
        table=args.table,
        mode=args.mode,
        key_columns=["id"] if args.mode == "upsert" else (),
        transaction_mode=args.transaction_mode,
    )
    stream = LocalStream(args.checkpoint, make_batches(args.batches, args.partitions, args.rows))
    stream.run(foreach_batch(sink, args.sink_id, commit_log=f"{args.checkpoint}/twopc-log"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
