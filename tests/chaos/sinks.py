"""The sink of a chaos run, built the same way by the local query and the Spark query.

A :class:`SinkSpec` is plain data (JSON on the Spark query's command line). ``factory``
replaces the files sink with ``module:function(path)``; the campaign's own test uses it to
run a deliberately broken sink (``tests.kit.broken_sinks``) and see the campaign fail.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import asdict, dataclass
from typing import Any

import twopc


@dataclass(frozen=True)
class SinkSpec:
    backend: str
    mode: str
    sink_id: str
    address: str  # output path, DSN or bootstrap servers
    table: str = ""  # table or topic
    factory: str = ""

    def dumps(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def loads(cls, text: str) -> SinkSpec:
        return cls(**json.loads(text))

    def commit_log(self, checkpoint: str) -> str | None:
        """SQL and Kafka sinks keep their decisions next to the checkpoint."""
        return None if self.backend == "files" else f"{checkpoint}/twopc-log"


def build_sink(spec: SinkSpec) -> twopc.Sink[Any]:
    if spec.factory:
        module, _, function = spec.factory.partition(":")
        sink: twopc.Sink[Any] = getattr(importlib.import_module(module), function)(spec.address)
        return sink
    if spec.backend == "files":
        return twopc.create_sink("files", path=spec.address, format=spec.mode)
    if spec.backend in ("postgres", "mysql"):
        return twopc.create_sink(
            spec.backend,
            dsn=spec.address,
            table=spec.table,
            mode="append",  # append, not upsert: an upsert would hide a duplicate
            transaction_mode=spec.mode,
        )
    if spec.backend == "kafka":
        return twopc.create_sink(
            "kafka",
            bootstrap_servers=spec.address,
            topic=spec.table,
            mode=spec.mode,
            key_column="key",
            operation_timeout_seconds=15,
        )
    raise ValueError(f"unknown backend {spec.backend!r}")
