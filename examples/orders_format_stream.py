"""Orders streamed into Parquet exactly once with ``writeStream.format("twopc")``.

    python examples/orders_format_stream.py /tmp/orders-fmt
    python examples/orders_format_stream.py /tmp/orders-fmt --remote sc://localhost:15002

No function to pass: the sink is chosen by name and configured with the same options as
``twopc.create_sink``. ``twopc.register`` makes the format known to the session (Spark also
finds it by itself where twopc is installed for its Python workers).
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
    twopc.register(spark)
    for _ in range(2):
        orders = (
            spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(work / "in"))
        )
        query = (
            orders.writeStream.format("twopc")
            .option("sink", "files")
            .option("sink_id", "orders")
            .option("path", str(work / "out"))
            .option("format", "parquet")
            .option("checkpointLocation", str(work / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
    return report(work / "out", expected)


if __name__ == "__main__":
    raise SystemExit(main())
