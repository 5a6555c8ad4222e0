"""Sink factories the conformance kit imports by name (also in its crash subprocesses)."""

from __future__ import annotations

import twopc
from twopc.protocol import Sink


def files_sink(target: str) -> Sink[object]:
    return twopc.create_sink("files", path=target, format="parquet")
