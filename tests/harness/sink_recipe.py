"""The sink of a test query (a chaos run, a crash test), built the same way by the local
query and the Spark query.

A :class:`SinkRecipe` (named so not to be taken for ``twopc.SinkSpec``, the plugin entry
point) is plain data (JSON on the Spark query's command line). ``factory`` replaces the
files sink with ``module:function(path)``; the campaign's own test uses it to run a
deliberately broken sink (``tests.kit.broken_sinks``) and see the campaign fail.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import asdict, dataclass, replace
from typing import Any

import twopc


@dataclass(frozen=True)
class SinkRecipe:
    backend: str
    mode: str
    sink_id: str
    address: str  # output path, DSN, bootstrap servers or Iceberg warehouse
    table: str = ""  # table or topic
    factory: str = ""
    prefix: str = ""  # Kafka transactional_id_prefix ("": the default)
    log_outside: bool = False  # keep the commit log next to, not inside, the checkpoint
    options: str = ""  # files, iceberg: more sink options as a JSON object

    def files_options(self) -> dict[str, Any]:
        """The files sink's options besides path and format. The runs kill and stall Python
        tasks at their crash points, so phase 1 runs in Python tasks unless the options
        name another ``write_path`` (Spark's own writer has no task points)."""
        return {"write_path": "python", **(json.loads(self.options) if self.options else {})}

    def iceberg_options(self) -> dict[str, Any]:
        """The Iceberg sink's options besides table and warehouse: phase 1 in Python tasks
        (the runs kill and stall tasks at their points) unless the options name another
        ``write_path``."""
        return {"write_path": "python", **(json.loads(self.options) if self.options else {})}

    def delta_options(self) -> dict[str, Any]:
        """The Delta sink's options besides table_uri and create_table: phase 1 in Python
        tasks (the runs kill and stall tasks at their points) unless the options name
        another ``write_path``."""
        return {"write_path": "python", **(json.loads(self.options) if self.options else {})}

    def dumps(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def loads(cls, text: str) -> SinkRecipe:
        return cls(**json.loads(text))

    def commit_log(self, checkpoint: str) -> str | None:
        """SQL and Kafka sinks keep their decisions inside the checkpoint, or beside it
        (``log_outside``: what docs/operations.md advises when checkpoints are restored
        from copies); files keep theirs next to the data."""
        if self.backend == "files":
            return None
        return f"{checkpoint}-twopc-log" if self.log_outside else f"{checkpoint}/twopc-log"

    def renamed(self, *, kafka_mode: bool = False) -> SinkRecipe:
        """The same sink with its naming option changed: another Kafka transactional.id
        prefix (or, with ``kafka_mode``, the other Kafka mode), or the other SQL transaction
        mode."""
        if self.backend == "kafka" and kafka_mode:
            return replace(self, mode="atomic" if self.mode == "per_partition" else "per_partition")
        if self.backend == "kafka":
            return replace(self, prefix="twopc-renamed")
        if self.backend in ("postgres", "mysql"):
            return replace(self, mode="two_phase" if self.mode == "transaction" else "transaction")
        return self


def build_sink(spec: SinkRecipe) -> twopc.Sink[Any]:
    if spec.factory:
        module, _, function = spec.factory.partition(":")
        sink: twopc.Sink[Any] = getattr(importlib.import_module(module), function)(spec.address)
        return sink
    if spec.backend == "files":
        return twopc.create_sink(
            "files", path=spec.address, format=spec.mode, **spec.files_options()
        )
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
            **({"transactional_id_prefix": spec.prefix} if spec.prefix else {}),
        )
    if spec.backend == "iceberg":
        # the run's own catalog and warehouse (options: catalog properties of a catalog on
        # PostgreSQL); append, not upsert: an upsert would hide a duplicate
        return twopc.create_sink(
            "iceberg",
            table=spec.table,
            warehouse=spec.address,
            create_table=True,
            **spec.iceberg_options(),
        )
    if spec.backend == "delta":
        # append, not upsert: an upsert would hide a duplicate
        return twopc.create_sink(
            "delta",
            table_uri=spec.address,
            create_table=True,
            **spec.delta_options(),
        )
    raise ValueError(f"unknown backend {spec.backend!r}")
