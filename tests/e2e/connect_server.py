"""A real Spark Connect server on loopback, started from the pyspark package's own
``sbin/start-connect-server.sh`` (in the foreground, in its own process group, so a test can
SIGKILL it like a crashed server and start it again on the same port)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


class ConnectServer:
    """One Connect server (``local[2]``) whose logs live under ``directory``."""

    def __init__(self, directory: Path, *, port: int | None = None) -> None:
        self.directory = directory
        self.port = port or free_port()
        self.url = f"sc://127.0.0.1:{self.port}"
        self._process: subprocess.Popen[bytes] | None = None
        self._starts = 0

    def start(self, timeout: float = 120) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._starts += 1
        log = self.directory / f"server-{self._starts}.log"
        env = {
            **os.environ,
            "SPARK_HOME": str(spark_home()),
            "SPARK_NO_DAEMONIZE": "1",
            "SPARK_LOG_DIR": str(self.directory),
            "SPARK_PID_DIR": str(self.directory),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
        }
        command = [
            str(spark_home() / "sbin" / "start-connect-server.sh"),
            "--master",
            "local[2,3]",
            "--driver-memory",
            "1g",
            "--conf",
            f"spark.connect.grpc.binding.port={self.port}",
            "--conf",
            "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf",
            "spark.ui.enabled=false",
            "--conf",
            "spark.sql.shuffle.partitions=2",
        ]
        with log.open("wb") as out:
            self._process = subprocess.Popen(
                command, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        deadline = time.monotonic() + timeout
        while not self._answers():
            if self._process.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-3000:]
                self.kill()
                raise RuntimeError(f"the Spark Connect server did not start:\n{tail}")
            time.sleep(0.5)

    def _answers(self) -> bool:
        with socket.socket() as s:
            s.settimeout(1)
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    def session(self) -> Any:
        """A new client session (its own session id: no state shared with earlier ones)."""
        from pyspark.sql import SparkSession

        return SparkSession.builder.remote(self.url).create()

    def kill(self) -> None:
        """SIGKILL the server and everything it started (its Python workers)."""
        if self._process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signal.SIGKILL)
        self._process.wait()
        self._process = None
        deadline = time.monotonic() + 30
        while self._answers() and time.monotonic() < deadline:
            time.sleep(0.2)

    def restart(self) -> None:
        self.kill()
        self.start()
