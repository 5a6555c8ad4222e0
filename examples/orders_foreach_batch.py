"""Orders streamed into Parquet exactly once with ``twopc.foreach_batch``.

    python examples/orders_foreach_batch.py /tmp/orders-fb
    python examples/orders_foreach_batch.py /tmp/orders-fb --remote sc://localhost:15002

The query runs twice over the same checkpoint (the second run finds nothing new); over
Spark Connect, ``checkpoint_location`` tells twopc which query it writes for.
"""

from __future__ import annotations

from pathlib import Path

from _orders import SCHEMA, arguments, report, session, write_orders

import twopc


def main() -> int:
    args = arguments(__doc__.splitlines()[0])
    work = Path(args.workdir)
    expected = write_orders(work / "in", args.files, args.rows)
    output, checkpoint = str(work / "out"), str(work / "checkpoint")
    spark = session(args.remote)
    sink = twopc.create_sink("files", path=output, format="parquet")
    for _ in range(2):
        orders = (
            spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(work / "in"))
        )
        writer = twopc.foreach_batch(sink, sink_id="orders", checkpoint_location=checkpoint)
        query = (
            orders.writeStream.option("checkpointLocation", checkpoint)
            .foreachBatch(writer)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        writer.close()
    return report(work / "out", expected)


if __name__ == "__main__":
    raise SystemExit(main())
