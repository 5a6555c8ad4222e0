"""A checkpointed query on the local engine writing to Postgres or MariaDB, run as its own
process by the crash tests. Input: batch b, partition p holds ids b*1000 + p*rows + i.
Fault injection comes from TWOPC_FAULTS. With ``--new-column-from B`` batches from B on
bring a column ``extra`` (id * 2) that the table lacks (``schema_evolution="add_columns"``).
"""

from __future__ import annotations

import argparse
import sys

import pyarrow as pa
import pyarrow.compute as pc

import twopc
from tests.harness.local_query import make_batches
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
    parser.add_argument("--new-column-from", type=int, default=-1)
    args = parser.parse_args()
    batches = make_batches(args.batches, args.partitions, args.rows)
    if args.new_column_from >= 0:
        batches = [
            [with_extra(t) for t in parts] if b >= args.new_column_from else parts
            for b, parts in enumerate(batches)
        ]
    sink = twopc.create_sink(
        args.backend,
        dsn=args.dsn,
        table=args.table,
        mode=args.mode,
        key_columns=["id"] if args.mode == "upsert" else (),
        transaction_mode=args.transaction_mode,
        schema_evolution="add_columns" if args.new_column_from >= 0 else "none",
    )
    stream = LocalStream(args.checkpoint, batches)
    stream.run(foreach_batch(sink, args.sink_id, commit_log=f"{args.checkpoint}/twopc-log"))
    return 0


def with_extra(table: pa.Table) -> pa.Table:
    doubled = pc.multiply(table.column("id"), 2)
    return table.append_column("extra", doubled)


if __name__ == "__main__":
    sys.exit(main())
