"""A Spark standalone cluster on loopback with one worker per "host" (127.0.0.2, 127.0.0.3).

Spark speculates only outside ``local`` mode, and never runs a task's copy on a host that
already runs an attempt of it, so speculation needs executors on two hosts. Two loopback
addresses are two hosts to Spark. The master and workers are started from PySpark's own
``bin/spark-class``; their logs and work directories live under ``directory``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

WORKER_HOSTS = ("127.0.0.2", "127.0.0.3")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def _daemon(args: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [str(_spark_home() / "bin" / "spark-class"), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


@contextlib.contextmanager
def standalone_cluster(
    directory: Path, timeout: float = 90, hosts: tuple[str, ...] = WORKER_HOSTS
) -> Iterator[str]:
    """Start a master and one single-core worker per host of ``hosts`` (loopback
    addresses); yield the master's URL."""
    directory.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SPARK_HOME": str(_spark_home())}
    port = _free_port()
    master_log = directory / "master.log"
    daemons = [
        _daemon(
            [
                "org.apache.spark.deploy.master.Master",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(_free_port()),
            ],
            master_log,
            env,
        )
    ]
    url = f"spark://127.0.0.1:{port}"
    try:
        for host in hosts:
            worker_env = {**env, "SPARK_LOCAL_IP": host, "SPARK_WORKER_DIR": str(directory / host)}
            daemons.append(
                _daemon(
                    [
                        "org.apache.spark.deploy.worker.Worker",
                        "--host",
                        host,
                        "--cores",
                        "1",
                        "--memory",
                        "1g",
                        "--webui-port",
                        "0",
                        url,
                    ],
                    directory / f"worker-{host}.log",
                    worker_env,
                )
            )
        deadline = time.monotonic() + timeout
        while master_log.read_text(errors="replace").count("Registering worker") < len(hosts):
            if time.monotonic() > deadline or any(d.poll() is not None for d in daemons):
                raise RuntimeError(f"the standalone cluster did not start; see {directory}")
            time.sleep(0.5)
        yield url
    finally:
        for daemon in daemons:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait()
