"""The files sink's commit on an S3 API, by bytes per batch: ``commit_by="move"`` (a
server-side copy and a delete per file) against ``commit_by="complete_upload"`` (the
multipart uploads phase 1 left open are completed).

Each run writes one micro-batch of ``--sizes`` megabytes (random float64 values, so Parquet
cannot shrink them; one task, one file rolled at 256 MiB) through the coordinator with the
local engine, and reports phase 1's seconds and the commit's seconds (``commit_seconds`` of
the batch's metrics: decision to done). ``--store`` picks the store by the script that
runs it, whose ``env`` command prints its ``S3_*`` settings: ``services`` (S3Proxy, the
test suite's) or ``seaweedfs`` (``scripts/seaweedfs``, built from source, not in CI).
``S3_ENDPOINT_URL``, ``S3_BUCKET``, ``S3_ACCESS_KEY_ID`` and ``S3_SECRET_ACCESS_KEY`` in the
environment name any other S3 API instead::

    scripts/services start s3
    .venv/bin/python -m benchmarks.object_store_commit --sizes 10,1000 --reps 3
    scripts/seaweedfs start
    .venv/bin/python -m benchmarks.object_store_commit --store seaweedfs

It writes ``results/object_store_commit.json`` (``results/object_store_commit_<store>.json``
for another store; ``--output``). What a store does when an upload completes is its own
business: AWS S3 and SeaweedFS record the parts as the object's pieces, while S3Proxy's
filesystem backend concatenates the part files into the object, so on S3Proxy the complete
path still reads and writes the bytes once (the move path: twice, copy and delete).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import twopc
from twopc import CommitLog
from twopc._internal import Coordinator
from twopc.local import LocalEngine

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
ROWS_PER_MB = 1024 * 1024 // 8


STORES = {"services": "services", "seaweedfs": "seaweedfs"}
"""--store -> the script in scripts/ whose ``env`` prints the store's ``S3_*`` settings."""


def _store(name: str) -> dict[str, str]:
    if os.environ.get("S3_ENDPOINT_URL"):
        return {k: v for k, v in os.environ.items() if k.startswith("S3_")}
    done = subprocess.run(
        [str(REPO / "scripts" / STORES[name]), "env"], capture_output=True, text=True, check=True
    )
    pairs = (line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)
    return {k: v for k, v in pairs if k.startswith("S3_")}


def _batch(megabytes: int, seed: int) -> pa.Table:
    rows = megabytes * ROWS_PER_MB
    values = np.random.default_rng(seed).random(rows)
    return pa.table({"value": pa.array(values)})


def _one_run(store: dict[str, str], commit_by: str, table: pa.Table, log: str) -> dict[str, Any]:
    options = {
        "key": store["S3_ACCESS_KEY_ID"],
        "secret": store["S3_SECRET_ACCESS_KEY"],
        "client_kwargs": {"endpoint_url": store["S3_ENDPOINT_URL"], "region_name": "us-east-1"},
    }
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    sink = twopc.create_sink(
        "files",
        path=f"s3://{store['S3_BUCKET']}/{prefix}",
        format="parquet",
        storage_options=options,
        commit_by=commit_by,
        target_file_size=256 * 1024 * 1024,
        write_options={"compression": "none"},
    )
    coordinator = Coordinator(sink, "bench", CommitLog(log))
    started = time.monotonic()
    metrics = coordinator.run_batch("q", 0, LocalEngine([table], processes=False))
    total = time.monotonic() - started
    import s3fs

    s3fs.S3FileSystem(**options).rm(f"{store['S3_BUCKET']}/{prefix}", recursive=True)
    return {
        "write_seconds": metrics.write_seconds,
        "commit_seconds": metrics.commit_seconds,
        "total_seconds": total,
        "bytes": metrics.bytes,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10,1000", help="megabytes per batch, comma-separated")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--store",
        choices=sorted(STORES),
        default="services",
        help="services: S3Proxy of scripts/services; seaweedfs: scripts/seaweedfs "
        "(S3_ENDPOINT_URL etc. in the environment override both)",
    )
    parser.add_argument("--output", help="default: benchmarks/results/object_store_commit*.json")
    args = parser.parse_args(argv)
    store = _store(args.store)
    suffix = "" if args.store == "services" else f"_{args.store}"
    output = args.output or str(RESULTS / f"object_store_commit{suffix}.json")
    results = []
    for megabytes in (int(s) for s in args.sizes.split(",")):
        table = _batch(megabytes, seed=megabytes)
        for commit_by in ("move", "complete_upload"):
            runs = []
            for _ in range(args.reps):
                with tempfile.TemporaryDirectory() as log:
                    runs.append(_one_run(store, commit_by, table, log))
            commit = [r["commit_seconds"] for r in runs]
            row = {
                "megabytes": megabytes,
                "commit_by": commit_by,
                "bytes": runs[0]["bytes"],
                "commit_seconds": commit,
                "commit_median_seconds": statistics.median(commit),
                "write_median_seconds": statistics.median(r["write_seconds"] for r in runs),
            }
            results.append(row)
            print(
                f"{megabytes:>6} MB  {commit_by:<16} commit median "
                f"{row['commit_median_seconds']:.3f} s  (phase 1 "
                f"{row['write_median_seconds']:.2f} s)",
                flush=True,
            )
    payload = {
        "store": args.store if not os.environ.get("S3_ENDPOINT_URL") else "environment",
        "endpoint": store.get("S3_ENDPOINT_URL"),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "results": results,
    }
    Path(output).write_text(json.dumps(payload, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
