"""Start, stop, kill and restart the real test services through ``scripts/services``.

The fixtures in ``conftest.py`` wrap this; it is also usable on its own::

    services = Services()
    env = services.start("postgres")     # -> {"POSTGRES_DSN": "postgresql://...", ...}
    services.kill("postgres")            # SIGKILL, stays down
    services.restart("postgres")         # back up and accepting connections
    services.pause("kafka")              # SIGSTOP: connections stay open, nothing answers
    services.resume("kafka")             # SIGCONT
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

REPO_DIR = Path(__file__).resolve().parents[2]
SCRIPT = REPO_DIR / "scripts" / "services"

SERVICE_NAMES = ("kafka", "postgres", "mariadb", "registry", "s3", "iceberg-rest")
# the name of the setting ``scripts/services env`` prints for each service
ENV_KEYS = {
    "kafka": "KAFKA_BOOTSTRAP_SERVERS",
    "postgres": "POSTGRES_DSN",
    "mariadb": "MYSQL_DSN",
    "registry": "SCHEMA_REGISTRY_URL",
    "s3": "S3_ENDPOINT_URL",
    "iceberg-rest": "ICEBERG_REST_URI",
}


class ServiceError(RuntimeError):
    """``scripts/services`` failed; the message carries its output (with the log tail)."""


@dataclass(frozen=True)
class MysqlParams:
    """The parts of a ``mysql://user:password@host:port/database`` URL."""

    host: str
    port: int
    user: str
    password: str
    database: str

    def connect_kwargs(self) -> dict[str, Any]:
        """Keyword arguments for ``pymysql.connect``."""
        return {
            "host": self.host,
            "port": self.port,
            "user": self.user,
            "password": self.password,
            "database": self.database,
        }


def parse_mysql_dsn(dsn: str) -> MysqlParams:
    """Split a ``mysql://USER:PASS@HOST:PORT/DB`` URL into pymysql connection parameters."""
    parts = urlsplit(dsn)
    if parts.scheme not in ("mysql", "mariadb"):
        raise ValueError(f"not a mysql:// URL: {dsn!r}")
    return MysqlParams(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 3306,
        user=unquote(parts.username or ""),
        password=unquote(parts.password or ""),
        database=parts.path.lstrip("/"),
    )


class Services:
    """Thin wrapper over ``scripts/services``; every call waits until the command is done."""

    def __init__(
        self, script: Path = SCRIPT, timeout: float = 600.0, env: dict[str, str] | None = None
    ) -> None:
        self.script = script
        self.timeout = timeout
        self.extra_env = dict(env or {})

    def _run(self, *args: str) -> str:
        try:
            proc = subprocess.run(
                [str(self.script), *args],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=self.timeout,
                check=False,
                env={**os.environ, **self.extra_env} if self.extra_env else None,
            )
        except subprocess.TimeoutExpired as exc:
            raise ServiceError(f"scripts/services {' '.join(args)} timed out: {exc}") from exc
        if proc.returncode != 0:
            raise ServiceError(
                f"scripts/services {' '.join(args)} failed (exit {proc.returncode}):\n"
                f"{proc.stdout}{proc.stderr}"
            )
        return proc.stdout

    @staticmethod
    def _check(name: str) -> None:
        if name not in SERVICE_NAMES:
            raise ValueError(f"unknown service {name!r}; expected one of {SERVICE_NAMES}")

    def env(self) -> dict[str, str]:
        """The ``KEY=VALUE`` settings printed by ``scripts/services env``."""
        out: dict[str, str] = {}
        for line in self._run("env").splitlines():
            key, sep, value = line.partition("=")
            if sep:
                out[key.strip()] = value.strip()
        return out

    def start(self, *names: str) -> dict[str, str]:
        """Start (installing if needed) and wait until ready; returns :meth:`env`."""
        for name in names:
            self._check(name)
        self._run("start", *names)
        return self.env()

    def stop(self, *names: str) -> None:
        """Graceful stop (all services when no name is given)."""
        for name in names:
            self._check(name)
        self._run("stop", *names)

    def kill(self, name: str) -> None:
        """SIGKILL the service (like a crash); it stays down until start/restart."""
        self._check(name)
        self._run("kill", name)

    def restart(self, name: str) -> None:
        """Stop (or clean up after a kill) and start again; returns once it is ready."""
        self._check(name)
        self._run("restart", name)

    def pause(self, name: str) -> None:
        """SIGSTOP the service's process tree: it stalls (connections hang), until resume."""
        self._check(name)
        self._run("pause", name)

    def resume(self, name: str) -> None:
        """SIGCONT what :meth:`pause` stopped."""
        self._check(name)
        self._run("resume", name)

    def status(self) -> str:
        return self._run("status")

    def address(self, name: str) -> str:
        """The connection setting of one service (bootstrap servers, DSN or registry URL)."""
        self._check(name)
        return self.env()[ENV_KEYS[name]]


class ServiceControl:
    """Kill/pause/restart services in the middle of a test; remembers what it took down."""

    def __init__(self, services: Services) -> None:
        self._services = services
        self.down: set[str] = set()
        self.paused: set[str] = set()

    def start(self, name: str) -> None:
        self._services.start(name)
        self.down.discard(name)

    def stop(self, name: str) -> None:
        self.down.add(name)
        self._services.stop(name)

    def kill(self, name: str) -> None:
        """SIGKILL the service (``scripts/services kill NAME``); it stays down."""
        self.down.add(name)
        self._services.kill(name)

    def restart(self, name: str) -> None:
        """Start it again (``scripts/services restart NAME``); returns once it is ready."""
        self._services.restart(name)
        self.down.discard(name)

    def pause(self, name: str) -> None:
        """SIGSTOP the service (``scripts/services pause NAME``); it stalls until resumed."""
        self.paused.add(name)
        self._services.pause(name)

    def resume(self, name: str) -> None:
        """SIGCONT it (``scripts/services resume NAME``)."""
        self._services.resume(name)
        self.paused.discard(name)

    def status(self) -> str:
        return self._services.status()

    def env(self) -> dict[str, str]:
        return self._services.env()

    def bring_back(self) -> None:
        for name in sorted(self.paused):
            self._services.resume(name)
        self.paused.clear()
        for name in sorted(self.down):
            self._services.start(name)
        self.down.clear()
