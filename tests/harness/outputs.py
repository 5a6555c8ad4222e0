"""Committed files output as a reader sees it, and what a crash left staged."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow.dataset as ds


def read_ids(output: Path | str, column: str = "id") -> Counter[int]:
    """Committed ids as a pyarrow.dataset reader sees them (hidden files skipped)."""
    if not Path(output).exists():
        return Counter()
    dataset = ds.dataset(str(output), format="parquet", partitioning="hive")
    if not dataset.files:
        return Counter()
    return Counter(dataset.to_table(columns=[column])[column].to_pylist())


def staged_attempts(output: Path | str) -> list[Path]:
    """Attempt directories left in the hidden staging area."""
    staging = Path(output) / "_twopc_staging"
    return sorted(p for p in staging.glob("*/*/*/*") if p.is_dir())
