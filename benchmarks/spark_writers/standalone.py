"""A Spark standalone cluster on this machine, from the pyspark package: a master and
workers, each a JVM of its own, so the benchmark can show nothing in twopc assumes
``local[*]`` (issue 18, item 6).

The pip package of pyspark ships ``sbin/spark-daemon.sh`` but not ``start-master.sh`` or
``start-worker.sh``; those two only call ``spark-daemon.sh start`` with the master's or
worker's class, which is what :func:`cluster` does, with ``SPARK_HOME`` the pyspark
directory. Logs, pid files and the workers' directories live in a temporary directory;
every port is a free one, so a second cluster (or anything else) on the machine does not
collide. The cluster is stopped when the ``with`` block ends, also on an error.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

_log = logging.getLogger("bench")

MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"
HOST = "127.0.0.1"


@dataclass(frozen=True)
class Cluster:
    """A running cluster: the URL for ``SparkSession.builder.master`` and its shape."""

    url: str
    workers: int
    worker_cores: int
    worker_memory: str
    log_dir: Path


def session_conf(running: Cluster) -> dict[str, str]:
    """The Spark settings under which an application takes the whole cluster: one
    executor per worker, with the worker's cores and memory."""
    return {
        "spark.executor.cores": str(running.worker_cores),
        "spark.executor.memory": running.worker_memory,
        "spark.cores.max": str(running.workers * running.worker_cores),
    }


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


@contextmanager
def cluster(workers: int, worker_cores: int, worker_memory: str) -> Iterator[Cluster]:
    """Start a master and ``workers`` workers; stop them (and wait) when the block ends."""
    home = spark_home()
    root = Path(tempfile.mkdtemp(prefix="twopc-standalone-"))
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOG_DIR": str(root / "logs"),
        "SPARK_PID_DIR": str(root / "pids"),
        "SPARK_WORKER_DIR": str(root / "work"),
        "SPARK_IDENT_STRING": f"twopc-bench-{os.getpid()}",
        "SPARK_LOCAL_IP": HOST,
    }
    env.pop("SPARK_NO_DAEMONIZE", None)  # spark-daemon.sh must start them in the background
    daemon = str(home / "sbin" / "spark-daemon.sh")
    port, ui = free_port(), free_port()
    url = f"spark://{HOST}:{port}"
    started: list[tuple[str, int]] = []
    ok = False
    try:
        _daemon(daemon, env, "start", MASTER, 1, "--host", HOST, "--port", str(port),
                "--webui-port", str(ui))  # fmt: skip
        started.append((MASTER, 1))
        for instance in range(1, workers + 1):
            _daemon(daemon, env, "start", WORKER, instance, "--host", HOST,
                    "--webui-port", str(free_port()), "--cores", str(worker_cores),
                    "--memory", worker_memory, url)  # fmt: skip
            started.append((WORKER, instance))
        _wait_for_workers(ui, workers, root / "logs")
        _log.info("standalone cluster %s: %d workers up (logs in %s)", url, workers, root)
        yield Cluster(url, workers, worker_cores, worker_memory, root / "logs")
        ok = True
    finally:
        for name, instance in reversed(started):
            _stop(daemon, env, root / "pids", name, instance)
        if ok:
            shutil.rmtree(root, ignore_errors=True)
        else:
            _log.info("standalone cluster stopped; its logs stay in %s", root / "logs")


def _daemon(daemon: str, env: dict[str, str], action: str, name: str, instance: int,
            *args: str) -> None:  # fmt: skip
    subprocess.run(
        [daemon, action, name, str(instance), *args],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=120,
    )


def _wait_for_workers(ui: int, workers: int, logs: Path, timeout: float = 120.0) -> None:
    """Until the master's status page lists ``workers`` alive workers."""
    deadline = time.monotonic() + timeout
    alive = -1
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://{HOST}:{ui}/json/", timeout=5) as response:
                alive = int(json.load(response).get("aliveworkers", 0))
        except OSError:
            alive = -1  # the master is not up yet
        if alive >= workers:
            return
        time.sleep(1)
    raise RuntimeError(
        f"the standalone cluster has {max(alive, 0)} of {workers} workers after "
        f"{timeout:.0f} s; see the logs in {logs}"
    )


def _stop(daemon: str, env: dict[str, str], pids: Path, name: str, instance: int) -> None:
    """``spark-daemon.sh stop`` (SIGTERM) and wait for the JVM to exit; SIGKILL after 30 s.
    Only the pid this cluster's own pid file names is signalled."""
    files = list(pids.glob(f"spark-*-{name}-{instance}.pid"))
    pid = int(files[0].read_text().strip()) if files else None
    subprocess.run(
        [daemon, "stop", name, str(instance)],
        env=env,
        check=False,
        stdout=subprocess.DEVNULL,
        timeout=60,
    )
    if pid is None:
        return
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.5)
    _log.warning("%s %d did not stop on SIGTERM; killing pid %d", name, instance, pid)
    with suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
