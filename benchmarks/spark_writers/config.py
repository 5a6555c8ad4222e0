"""What one benchmark run measures (sizes, repetitions, targets) and where the services are."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results"
DOCS = REPO / "docs" / "benchmarks.md"

TARGETS = (
    "files",
    "files_python",
    "postgres_append",
    "postgres_upsert",
    "mysql_append",
    "mysql_upsert",
    "kafka_per_partition",
    "kafka_atomic",
)
"""Every throughput target: twopc against Spark's own writer for the same system. ``files``
is the files sink as ``write_path="auto"`` runs it on a local disk, phase 1 in Spark's own
writer; ``files_python`` the same sink with phase 1 in Python tasks (``mapInArrow``)."""

GOALS = {
    "files": 0.9,
    "files_python": 0.9,
    "postgres_append": 2.0,
    "postgres_upsert": 1.5,
    "mysql_append": 1.5,
    "mysql_upsert": 1.5,
    "kafka_per_partition": 0.8,
    "kafka_atomic": 0.8,
}
"""Issue 7's goals: throughput of twopc divided by Spark's writer's, at least this."""

OVERHEAD_GOAL_MS = 100.0
"""Issue 7: twopc may add at most this much to a micro-batch of 1,000 rows."""


@dataclass(frozen=True)
class Endpoints:
    """Connection settings of the real services (from ``scripts/services env``)."""

    kafka_bootstrap: str
    postgres_dsn: str
    mysql_dsn: str

    @classmethod
    def from_services(cls, start: bool) -> Endpoints:
        """Read (and with ``start``, first start) the services of this checkout."""
        script = str(REPO / "scripts" / "services")
        if start:
            subprocess.run([script, "start"], check=True, stdout=subprocess.DEVNULL)
        out = subprocess.run([script, "env"], check=True, capture_output=True, text=True).stdout
        env = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        return cls(
            kafka_bootstrap=os.environ.get(
                "KAFKA_BOOTSTRAP_SERVERS", env["KAFKA_BOOTSTRAP_SERVERS"]
            ),
            postgres_dsn=os.environ.get("POSTGRES_DSN", env["POSTGRES_DSN"]),
            mysql_dsn=os.environ.get("MYSQL_DSN", env["MYSQL_DSN"]),
        )


@dataclass(frozen=True)
class Database:
    """The parts of a ``postgresql://`` or ``mysql://`` URL, for JDBC and the Python drivers."""

    host: str
    port: int
    user: str
    password: str = field(repr=False)
    database: str

    @classmethod
    def parse(cls, dsn: str, default_port: int) -> Database:
        parts = urlsplit(dsn)
        return cls(
            host=parts.hostname or "127.0.0.1",
            port=parts.port or default_port,
            user=unquote(parts.username or ""),
            password=unquote(parts.password or ""),
            database=unquote(parts.path.lstrip("/")),
        )


@dataclass(frozen=True)
class Workload:
    """One data set: rows spread over partitions, and the targets measured on it."""

    rows: int
    partitions: int
    targets: tuple[str, ...]
    label: str

    @property
    def key(self) -> str:
        return f"{self.rows}x{self.partitions}"


@dataclass(frozen=True)
class BenchConfig:
    """Everything the command line chooses."""

    rows: int = 1_000_000
    partitions: int = 2
    reps: int = 5
    targets: tuple[str, ...] = TARGETS
    scaling_partitions: tuple[int, ...] = (1, 2, 4, 8)
    scaling_rows: tuple[int, ...] = (5_000_000, 20_000_000)  # and --rows, the main workload
    scaling_targets: tuple[str, ...] = ("files", "postgres_append")
    overhead_batches: int = 20
    overhead_rows: int = 1_000
    jdbc_batchsize: int = 10_000
    master: str = "local[*]"
    driver_memory: str = "3g"
    work_dir: Path = Path("/tmp/twopc-bench")

    def workloads(self) -> list[Workload]:
        """The main workload first, then the scaling ones (duplicates folded in)."""
        found: dict[tuple[int, int], Workload] = {}

        def add(rows: int, partitions: int, targets: tuple[str, ...], label: str) -> None:
            key = (rows, partitions)
            if key in found:
                old = found[key]
                merged = old.targets + tuple(t for t in targets if t not in old.targets)
                found[key] = Workload(rows, partitions, merged, old.label)
            else:
                found[key] = Workload(rows, partitions, targets, label)

        add(self.rows, self.partitions, self.targets, "main")
        for p in self.scaling_partitions:
            add(self.rows, p, self.scaling_targets, "scaling: partitions")
        for rows in self.scaling_rows:
            add(rows, self.partitions, self.scaling_targets, "scaling: rows")
        return list(found.values())
