"""A whole DataFrame of orders written exactly once: all rows or none, and a retry with the
same ``write_id`` writes nothing.

    python examples/orders_batch_write.py /tmp/orders-batch
    python examples/orders_batch_write.py /tmp/orders-batch --remote sc://localhost:15002

Once with ``twopc.write_batch`` and once with ``df.write.format("twopc")``, into two
outputs; each write is run twice, as a retried job would.
"""

from __future__ import annotations

from pathlib import Path

from _orders import SCHEMA, arguments, report, session, write_orders

import twopc


def main() -> int:
    args = arguments(__doc__.splitlines()[0])
    work = Path(args.workdir)
    expected = write_orders(work / "in", args.files, args.rows)
    spark = session(args.remote)
    orders = spark.read.schema(SCHEMA).json(str(work / "in"))

    sink = twopc.create_sink("files", path=str(work / "out"), format="parquet")
    for _ in range(2):
        metrics = twopc.write_batch(orders, sink, "daily-orders", write_id="2026-11-25")
        print(f"write_batch: {metrics.status}")

    twopc.register(spark)
    for _ in range(2):
        (
            orders.write.format("twopc")
            .option("sink", "files")
            .option("sink_id", "daily-orders-fmt")
            .option("path", str(work / "out-format"))
            .option("write_id", "2026-11-25")
            .mode("append")
            .save()
        )
    return report(work / "out", expected) or report(work / "out-format", expected)


if __name__ == "__main__":
    raise SystemExit(main())
