"""Runs a checkpointed query with a plugin's sink in its own process, for the crash tests.

``python -m twopc.testing._runner --factory pkg.mod:make_sink --target T --checkpoint C``

Fault injection comes from ``TWOPC_FAULTS``; the process may be killed at any step and
started again with the same arguments, like a Spark driver restarted from its checkpoint.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from twopc.local import LocalStream, foreach_batch

__all__ = ["batch_ids", "default_batch", "load_factory", "main"]


def load_factory(path: str) -> Callable[..., Any]:
    """Import ``module:callable``."""
    module_name, _, attribute = path.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"sink_factory must look like 'package.module:function', not {path!r}")
    factory = getattr(importlib.import_module(module_name), attribute)
    if not callable(factory):
        raise TypeError(f"{path} is not callable")
    return factory  # type: ignore[no-any-return]


def default_batch(ids: list[int]) -> pa.RecordBatch:
    """The kit's rows: an ``id`` and a ``payload`` derived from it."""
    return pa.record_batch(
        {
            "id": pa.array(ids, pa.int64()),
            "payload": pa.array([f"row-{i}" for i in ids], pa.string()),
        }
    )


def batch_ids(batch: int, partition: int, rows: int) -> list[int]:
    start = batch * 100_000 + partition * rows
    return list(range(start, start + rows))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m twopc.testing._runner")
    parser.add_argument("--factory", required=True)
    parser.add_argument("--batch-maker", default="twopc.testing._runner:default_batch")
    parser.add_argument("--target", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--sink-id", default="kit")
    parser.add_argument("--batches", type=int, default=3)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rows", type=int, default=20)
    args = parser.parse_args(argv)
    sink = load_factory(args.factory)(args.target)
    make_batch = load_factory(args.batch_maker)
    batches = [
        [
            pa.Table.from_batches([make_batch(batch_ids(b, p, args.rows))])
            for p in range(args.partitions)
        ]
        for b in range(args.batches)
    ]
    stream = LocalStream(args.checkpoint, batches)
    stream.run(foreach_batch(sink, args.sink_id, commit_log=f"{args.checkpoint}/twopc-log"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
