"""One chaos run: fresh namespace, start the query, kill, restart until done, check, clean.

The first attempt carries the injection: ``TWOPC_FAULTS`` (a crash point) or a kill after
the scenario's delay. Later attempts run clean, like an operator restarting the query from
its checkpoint, until one exits 0 (every batch committed) or ``max_restarts`` is reached.
Then the target is read back; the run passes only if every expected id is there exactly
once, nothing is left (prepared transactions, staged files, open Kafka transactions) and
the service answers. A passing run's namespace is dropped; a failing one's is kept.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tests.chaos.lost import LOCAL_TOPIC, lose_checkpoint, produce_input, spark_query_args
from tests.chaos.scenario import SPECULATIVE_MASTER, Scenario
from tests.chaos.warm_spark import HostAttempt, WarmSpark
from tests.harness import procs
from tests.harness.recipe_local_query import run_query
from tests.harness.recipe_spark_query import STOP_AFTER_ENV
from tests.harness.services import Services
from tests.harness.sink_recipe import SinkRecipe
from tests.harness.standalone import standalone_cluster
from tests.harness.targets import DeltaTarget, IcebergTarget, Target, make_target

LOCAL_TIMEOUT = 90.0
SPARK_TIMEOUT = 300.0
FAULT_LOG_LINE = "fault injection:"  # what twopc.faults logs when a rule fires
SPARK_STARTED = '"event": "query-started"'
RESHAPE_REFUSED = "ReplayMismatchError"  # a partly committed batch replayed in a new shape
CHECKPOINT_REFUSED = "put back from an older copy"  # a restored checkpoint with its log inside
FIRST_OFFSETS_LEFT = "STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY"
"""Spark refuses to start a query whose ``offsets`` holds only the hidden temporary file
of a first offset write that a kill interrupted (docs/troubleshooting.md)."""


@dataclass
class RunResult:
    scenario: Scenario
    passed: bool = False
    injected: bool = False
    attempts: int = 0
    first_exit: int | None = None
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)
    kept: str | None = None
    paused: bool = False  # the scenario's service pause happened (a restart ran)
    speculated: bool | None = None  # speculate: a speculative copy was seen to run
    restore_refused: bool = False  # restore (log inside): the older copy was refused
    lost: str = ""  # checkpoint-lost: "restarted" from the stored offsets, or "refused"

    def to_json(self) -> dict[str, Any]:
        return {
            "seed": self.scenario.seed,
            "scenario": self.scenario.to_json(),
            "description": self.scenario.describe(),
            "passed": self.passed,
            "injected": self.injected,
            "attempts": self.attempts,
            "first_exit": self.first_exit,
            "seconds": round(self.seconds, 3),
            "problems": self.problems,
            "kept": self.kept,
            "paused": self.paused,
            "speculated": self.speculated,
            "restore_refused": self.restore_refused,
            "lost": self.lost,
        }


class Runner:
    """Runs scenarios against the services ``scripts/services`` runs.

    Args:
        workdir: run directories (checkpoints, file output, logs) go below it.
        services: the ``scripts/services`` wrapper (kills, restarts, settings).
        factory: ``module:function`` replacing the files sink (a broken one, in tests).
        max_restarts: query attempts per run, the first (injected) one included.
        warm: run Spark attempts in long-lived Spark drivers (``tests.chaos.spark_host``),
            except a first attempt whose driver is the kill target; ``False`` starts a
            process per attempt.
    """

    def __init__(
        self,
        workdir: Path,
        services: Services,
        factory: str = "",
        max_restarts: int = 6,
        *,
        warm: bool = True,
        iceberg_write_path: str = "python",
        delta_write_path: str = "python",
    ) -> None:
        self.workdir = workdir
        self.iceberg_write_path = iceberg_write_path
        self.delta_write_path = delta_write_path
        self.services = services
        self.factory = factory
        self.max_restarts = max_restarts
        self.warm = WarmSpark(workdir) if warm else None
        self._env: dict[str, str] | None = None
        self._cluster = contextlib.ExitStack()
        self._cluster_url: str | None = None

    def close(self) -> None:
        """Stop the long-lived Spark drivers, then the standalone cluster."""
        if self.warm is not None:
            self.warm.close()
        self._cluster.close()
        self._cluster_url = None

    def _resolve(self, master: str) -> tuple[str, bool]:
        """(Spark master URL, speculation on) of a scenario's master: the speculative
        master is a standalone cluster, started on first use and kept for the campaign."""
        if master != SPECULATIVE_MASTER:
            return master, False
        if self._cluster_url is None:
            directory = self.workdir / "standalone"
            self._cluster_url = self._cluster.enter_context(standalone_cluster(directory))
        return self._cluster_url, True

    @property
    def env(self) -> dict[str, str]:
        if self._env is None:
            self._env = self.services.env()
        return self._env

    def run(self, scenario: Scenario) -> RunResult:
        started = time.monotonic()
        result = RunResult(scenario)
        run_dir = self.workdir / f"run-{scenario.seed}-{uuid.uuid4().hex[:6]}"
        run_id = f"chaos-{scenario.seed}-{uuid.uuid4().hex[:8]}"
        # fork_safe: this process forks every local driver, so it never starts deltalake
        target = make_target(scenario.backend, self.env, scenario.mode, fork_safe=True)
        spec: SinkRecipe | None = None
        try:
            self._ensure_up(target)
            spec = target.prepare(run_id, scenario.mode, run_dir, scenario.kafka_partitions)
            if (
                isinstance(target, IcebergTarget)
                and scenario.engine == "spark"
                and self.iceberg_write_path == "spark"
            ):
                spec = target.for_spark_writer(spec)
            if (
                isinstance(target, DeltaTarget)
                and scenario.engine == "spark"
                and self.delta_write_path == "spark"
            ):
                spec = target.for_spark_writer(spec)
            if self.factory and isinstance(spec, SinkRecipe):
                spec = replace(spec, factory=self.factory)
            if scenario.event in ("restore", "checkpoint-lost") and (
                scenario.variant != "log-inside"
            ):
                spec = replace(spec, log_outside=True)  # as docs/operations.md advises
            completed = self._attempts(scenario, target, spec, run_dir, result)
            if scenario.event == "speculate":
                result.speculated = self._speculated(spec, run_dir, result.attempts)
            self._check(scenario, target, spec, completed, result)
        except Exception as exc:  # a broken check or service counts as a failed run
            result.problems.append(f"error: {type(exc).__name__}: {exc}")
        result.passed = not result.problems
        if result.passed and spec is not None:
            try:
                target.cleanup(spec)
            except Exception as exc:
                result.problems.append(f"clean-up failed: {type(exc).__name__}: {exc}")
                result.passed = False
        if result.passed:
            shutil.rmtree(run_dir, ignore_errors=True)
        else:
            run_dir.mkdir(parents=True, exist_ok=True)
            result.kept = str(run_dir)
        result.seconds = time.monotonic() - started
        if result.kept:
            (run_dir / "result.json").write_text(json.dumps(result.to_json(), indent=2))
        return result

    # -- the query attempts ------------------------------------------------------------------

    def _attempts(
        self, scenario: Scenario, target: Target, spec: SinkRecipe, run_dir: Path, result: RunResult
    ) -> bool:
        topic = f"{run_dir.name}-in"  # checkpoint-lost on Spark: the Kafka source's topic
        if scenario.engine == "spark" and scenario.event == "checkpoint-lost":
            produce_input(scenario, self.env["KAFKA_BOOTSTRAP_SERVERS"], topic)
        elif scenario.engine == "spark":
            _write_spark_input(scenario, run_dir / "in")
        # The restarts' shape: the event's (rescale, rename), except right after a refused
        # replay in the new shape, when the operator restarts once as before (the docs' advice).
        renamed = spec.renamed(kafka_mode=scenario.variant == "mode")
        reshaped = (
            renamed if scenario.event == "rename" else spec,
            scenario.partitions_after or scenario.partitions,
        )
        original = (spec, scenario.partitions)
        shape, restored = original, False
        start: dict[int, int] | None = None  # checkpoint-lost: the new checkpoint's start
        for index in range(self.max_restarts):
            first = index == 0
            log = run_dir / f"attempt-{index}.log"
            if first:
                faults = scenario.fault if scenario.timing == "point" else None
            else:
                faults = scenario.restart_faults  # the slow task of "speculate"
            environ: dict[str, str | None] = {"TWOPC_FAULTS": faults}
            if index == 1 and scenario.event == "stop":
                environ[STOP_AFTER_ENV] = f"{scenario.stop_delay:g}"
            attempt = self._start(
                scenario,
                shape[0],
                run_dir,
                log,
                environ,
                partitions=shape[1],
                first=first,
                start=start,
                topic=topic,
            )
            injector = _Injector(self, scenario, target, attempt, log) if first else None
            pauser = (
                _Pauser(self.services, scenario, attempt, log)
                if index == 1 and scenario.pause_for
                else None
            )
            tick = injector.tick if injector else pauser.tick if pauser else lambda: None
            timeout = SPARK_TIMEOUT if scenario.engine == "spark" else LOCAL_TIMEOUT
            try:
                code = attempt.wait(timeout, tick)
            finally:
                attempt.finish()  # nothing of an attempt outlives it, even on an error
                if pauser is not None:
                    result.paused = pauser.finish()
            result.attempts = index + 1
            if code is None:
                result.problems.append(f"attempt {index} timed out after {timeout:.0f}s")
                code = attempt.returncode
            if first:
                result.first_exit = code
                fired = FAULT_LOG_LINE in log.read_text(errors="replace")
                result.injected = injector.hit if injector and injector.delayed else fired
                if scenario.target == "service" and scenario.timing == "point":
                    self.bounce(target, scenario.downtime)
                if scenario.event == "restore" and (run_dir / "chk").exists():
                    shutil.copytree(run_dir / "chk", run_dir / "chk-copy")
                if scenario.event == "checkpoint-lost":
                    lost_topic = topic if scenario.engine == "spark" else LOCAL_TOPIC
                    start = _lose_checkpoint(spec, run_dir / "chk", result, lost_topic)
                    if result.lost == "restarted":
                        continue  # the new checkpoint, even when the first attempt finished
            output = log.read_text(errors="replace")
            refused = code != 0 and RESHAPE_REFUSED in output
            shape = original if refused else reshaped
            if code == 0 and (run_dir / "chk-copy").exists() and not restored:
                # the query finished: put the older checkpoint back and run it again,
                # keeping the newer one as an operator would
                (run_dir / "chk").rename(run_dir / "chk-newer")
                (run_dir / "chk-copy").rename(run_dir / "chk")
                restored = True
                continue
            if code != 0 and CHECKPOINT_REFUSED in output and (run_dir / "chk-newer").exists():
                # the older copy (its log inside) was refused: the runbook's remedy is to
                # put the newer checkpoint back
                result.restore_refused = True
                shutil.rmtree(run_dir / "chk")
                (run_dir / "chk-newer").rename(run_dir / "chk")
                continue
            if code != 0 and FIRST_OFFSETS_LEFT in output and _remove_first_offsets_temp(run_dir):
                continue  # the troubleshooting page's remedy, then the restart
            if code == 0:
                return True
            if scenario.service:
                self._ensure_up(target)
        result.problems.append(f"the query did not complete in {self.max_restarts} attempts")
        return False

    def _start(
        self,
        scenario: Scenario,
        spec: SinkRecipe,
        run_dir: Path,
        log: Path,
        environ: dict[str, str | None],
        *,
        partitions: int,
        first: bool,
        start: dict[int, int] | None = None,
        topic: str = "",
    ) -> procs.Attempt | HostAttempt:
        checkpoint = str(run_dir / "chk")
        master, speculation = self._resolve(scenario.master if first else scenario.restart_master)
        if scenario.engine == "local":
            return procs.fork_driver(
                lambda: run_query(
                    spec,
                    checkpoint,
                    batches=scenario.batches,
                    partitions=scenario.partitions,
                    rows=scenario.rows,
                    max_attempts=scenario.max_attempts,
                    split=partitions,
                    kafka_source=scenario.event == "checkpoint-lost",
                    start=start,
                ),
                log,
                environ,
            )
        if scenario.event == "checkpoint-lost":  # Spark's Kafka source, a process each
            bootstrap = self.env["KAFKA_BOOTSTRAP_SERVERS"]
            args = spark_query_args(
                scenario, spec, checkpoint, bootstrap=bootstrap, topic=topic, start=start
            )
            return procs.spawn(args, log, environ)
        if self.warm is not None and not (first and scenario.target == "driver"):
            stop_after = environ.get(STOP_AFTER_ENV)
            return self.warm.start(
                master,
                spec,
                checkpoint=checkpoint,
                source=str(run_dir / "in"),
                partitions=partitions,
                log=log,
                faults=environ.get("TWOPC_FAULTS"),
                stop_after=float(stop_after) if stop_after else None,
                speculation=speculation,
            )
        args = [
            "-m",
            "tests.harness.recipe_spark_query",
            "--spec",
            spec.dumps(),
            "--checkpoint",
            checkpoint,
            "--input",
            str(run_dir / "in"),
            "--master",
            master,
            "--partitions",
            str(partitions),
            *(["--speculation"] if speculation else []),
        ]
        return procs.spawn(args, log, environ)

    def _speculated(self, spec: SinkRecipe, run_dir: Path, attempts: int) -> bool:
        """Whether a speculative copy ran in a restart: a batch committed by a copy (the
        query's ``batch-done`` lines), or the losing copy's slow-task fault fired (its
        Python worker logs to the standalone cluster's executor logs, naming the sink)."""
        for index in range(1, attempts):
            for line in (run_dir / f"attempt-{index}.log").read_text(errors="replace").splitlines():
                start = line.find('{"event": "batch-done"')
                if start >= 0:
                    with contextlib.suppress(ValueError):
                        if any(a > 0 for a in json.loads(line[start:])["attempts"].values()):
                            return True
        needle = f"attempt=1 at sink {spec.sink_id!r}"
        for stderr in (self.workdir / "standalone").glob("*/app-*/*/stderr"):
            if needle in stderr.read_text(errors="replace"):
                return True
        return False

    def bounce(self, target: Target, downtime: float) -> None:
        """Kill the target's service, leave it down for ``downtime`` seconds, restart it."""
        service = target.service or ""
        self.services.kill(service)
        if target.accepts_connections():
            self.services.restart(service)
            raise ForeignServiceError(
                f"{service} still answers after scripts/services kill: it was not started by "
                "this checkout, so the campaign cannot kill it (set TWOPC_KAFKA_PORT, "
                "TWOPC_POSTGRES_PORT and TWOPC_MYSQL_PORT to free ports)"
            )
        time.sleep(downtime)
        self.services.restart(service)

    def _ensure_up(self, target: Target) -> None:
        if target.service is None:
            return
        try:
            if target.alive():
                return
        except Exception:
            pass
        self.services.start(target.service)

    # -- the checks --------------------------------------------------------------------------

    def _check(
        self,
        scenario: Scenario,
        target: Target,
        spec: SinkRecipe,
        completed: bool,
        result: RunResult,
    ) -> None:
        if target.service is not None:
            try:
                up = target.alive()
            except Exception as exc:
                up, result.problems = False, [*result.problems, f"{exc}"]
            if not up:
                result.problems.append(f"service {target.service} is not back up")
                return
        seen = target.committed(spec)
        expected = scenario.expected_ids()
        duplicates = sorted((i, n) for i, n in seen.items() if n > 1)
        missing = sorted(expected - set(seen))
        unexpected = sorted(set(seen) - expected)
        if duplicates:
            result.problems.append(f"{len(duplicates)} duplicated ids, e.g. {duplicates[:5]}")
        if completed and missing:
            result.problems.append(f"{len(missing)} ids missing, e.g. {missing[:5]}")
        if unexpected:
            result.problems.append(f"{len(unexpected)} unexpected ids, e.g. {unexpected[:5]}")
        left = target.leftovers(spec)
        result.problems.extend(left[:5])
        if len(left) > 5:
            result.problems.append(f"... and {len(left) - 5} more left behind")


class _SinceStart:
    """Seconds since the attempt's start (local engine: the driver process; Spark: the
    moment the query started, once its log says so), or ``None`` before that."""

    def __init__(self, scenario: Scenario, attempt: procs.Attempt | HostAttempt, log: Path):
        self.log = log
        self._origin: float | None = None if scenario.engine == "spark" else attempt.started

    def elapsed(self) -> float | None:
        if self._origin is None:
            if SPARK_STARTED not in self.log.read_text(errors="replace"):
                return None
            self._origin = time.monotonic()
        return time.monotonic() - self._origin


class ForeignServiceError(RuntimeError):
    """The service to kill belongs to another checkout (``scripts/services`` cannot kill it)."""


class _Injector:
    """The delayed kill of a run's first attempt, driven from the wait loop."""

    def __init__(
        self,
        runner: Runner,
        scenario: Scenario,
        target: Target,
        attempt: procs.Attempt | HostAttempt,
        log: Path,
    ) -> None:
        self.runner, self.scenario, self.target = runner, scenario, target
        self.attempt = attempt
        self.delayed = scenario.timing == "delay"
        self.hit = False
        self._clock = _SinceStart(scenario, attempt, log)

    def tick(self) -> None:
        if not self.delayed or self.hit:
            return
        elapsed = self._clock.elapsed()
        if elapsed is None or elapsed < (self.scenario.delay or 0.0):
            return
        target = self.scenario.target
        if target == "driver":
            self.attempt.kill_group()
            self.hit = True
        elif target in ("worker", "executor"):
            pool = (
                procs.executor_jvms(self.attempt.pid)
                if target == "executor"
                else procs.children(self.attempt.pid)
            )
            if pool:
                self.hit = procs.sigkill(pool[self.scenario.victim % len(pool)])
        elif target == "service":
            self.hit = True
            self.runner.bounce(self.target, self.scenario.downtime)


class _Pauser:
    """The scenario's service pause during the first restart: SIGSTOP at ``pause_at``
    seconds (Spark: after the query started), SIGCONT ``pause_for`` seconds later, and
    always SIGCONT when the attempt ends first."""

    def __init__(
        self,
        services: Services,
        scenario: Scenario,
        attempt: procs.Attempt | HostAttempt,
        log: Path,
    ) -> None:
        self.services, self.scenario = services, scenario
        self.service = scenario.own_service or ""
        self._clock = _SinceStart(scenario, attempt, log)
        self._paused_at: float | None = None
        self._done = False

    def tick(self) -> None:
        if self._done:
            return
        if self._paused_at is None:
            elapsed = self._clock.elapsed()
            if elapsed is not None and elapsed >= self.scenario.pause_at:
                self.services.pause(self.service)
                self._paused_at = time.monotonic()
        elif time.monotonic() - self._paused_at >= self.scenario.pause_for:
            self.services.resume(self.service)
            self._done = True

    def finish(self) -> bool:
        """Resume the service if it is still paused; whether it was paused at all."""
        if self._paused_at is not None and not self._done:
            self.services.resume(self.service)
            self._done = True
        return self._paused_at is not None


def _lose_checkpoint(
    spec: Any, checkpoint: Path, result: RunResult, topic: str
) -> dict[int, int] | None:
    """:func:`tests.chaos.lost.lose_checkpoint`; for a run that writes a Delta table, in a
    forked child (it recovers and reads the table with deltalake, which must never start
    in this process: see :class:`tests.harness.targets.DeltaTarget`)."""
    if not _writes_delta(spec):
        return lose_checkpoint(spec, checkpoint, result, topic)

    def lose() -> tuple[dict[int, int] | None, str]:
        start = lose_checkpoint(spec, checkpoint, result, topic)
        return start, result.lost

    start, result.lost = procs.call_in_fork(lose, timeout=SPARK_TIMEOUT)
    return start


def _writes_delta(spec: Any) -> bool:
    members = getattr(spec, "members", None)
    if members is not None:
        return any(m.sink.backend == "delta" for m in members)
    return bool(spec.backend == "delta")


def _remove_first_offsets_temp(run_dir: Path) -> bool:
    """Remove the hidden temporary files a kill left in the checkpoint's ``offsets`` before
    its first offset file was written; whether there were any (nothing else is touched)."""
    offsets = run_dir / "chk" / "offsets"
    if not offsets.is_dir() or any(not p.name.startswith(".") for p in offsets.iterdir()):
        return False
    stale = [p for p in offsets.iterdir() if p.name.endswith((".tmp", ".tmp.crc"))]
    for path in stale:
        path.unlink()
    return bool(stale)


def _write_spark_input(scenario: Scenario, directory: Path) -> None:
    """One JSON lines file per micro-batch (the query reads one file per trigger)."""
    directory.mkdir(parents=True, exist_ok=True)
    for b in range(scenario.batches):
        lines = [
            json.dumps({"id": b * 1000 + i, "payload": f"b{b}"})
            for i in range(scenario.partitions * scenario.rows)
        ]
        (directory / f"batch-{b:05d}.json").write_text("\n".join(lines) + "\n")
