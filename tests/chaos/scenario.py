"""Seed -> scenario: everything a chaos run does is drawn here from ``random.Random(seed)``.

The same seed with the same :class:`Options` always gives the same scenario, so a failing
run is reproduced with ``scripts/chaos --seed N`` (plus the filters it ran with). Runs timed
by a crash point (``TWOPC_FAULTS``) replay identically; runs timed by a random delay draw
the same delay, but what the delay hits depends on the machine's speed.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from twopc.faults import CrashPoint

# backend -> its modes; the service a backend depends on (None: the local filesystem)
MODES: dict[str, tuple[str, ...]] = {
    "files": ("parquet",),
    "s3": ("parquet",),  # the files sink on the S3 API (S3Proxy), completing multipart uploads
    "postgres": ("transaction", "two_phase"),
    "mysql": ("transaction", "two_phase"),
    "kafka": ("per_partition", "atomic"),
    # an Iceberg table, its catalog on SQLite (the embedded default) or on PostgreSQL
    "iceberg": ("sqlite", "postgres"),
    # a Delta table under the run directory, written through deltalake (issue 48)
    "delta": ("append",),
}
OPT_IN_MODES: dict[str, tuple[str, ...]] = {
    # an Iceberg table whose catalog is the REST catalog of scripts/services (its service
    # the REST server): drawn only when named (--backend iceberg:rest), so that every seed's
    # scenario without it stays as it was
    "iceberg": ("rest",),
}
SERVICE: dict[str, str | None] = {
    "files": None,
    "s3": "s3",
    "postgres": "postgres",
    "mysql": "mariadb",
    "kafka": "kafka",
    "iceberg": None,  # modes postgres and rest: the catalog's service (service_of)
    "delta": None,  # the local disk
}
TARGETS = ("driver", "worker", "executor", "service")

TASK_POINTS = (
    CrashPoint.BEFORE_BEGIN,
    CrashPoint.AFTER_INVOKE,
    CrashPoint.BEFORE_PRE_COMMIT,
    CrashPoint.AFTER_PRE_COMMIT,
)
TASK_COMMIT_POINTS = (CrashPoint.BEFORE_TASK_COMMIT, CrashPoint.AFTER_TASK_COMMIT)

# Relative weights of the kill targets, chosen so the mean run stays short: a database
# restarts in 1-3 s, the Kafka broker in 5-10 s, so broker kills are drawn less often.
LOCAL_WEIGHTS: dict[str, dict[str, float]] = {
    "files": {"driver": 0.5, "worker": 0.5},
    "s3": {"driver": 0.35, "worker": 0.35, "service": 0.3},
    "postgres": {"driver": 0.35, "worker": 0.35, "service": 0.3},
    "mysql": {"driver": 0.35, "worker": 0.35, "service": 0.3},
    "kafka": {"driver": 0.45, "worker": 0.45, "service": 0.1},
    "iceberg": {"driver": 0.35, "worker": 0.35, "service": 0.3},  # service: not on SQLite
    "delta": {"driver": 0.5, "worker": 0.5},
}
# Kafka runs cost ~3x a database run (a transactional producer per task), so each Kafka
# mode is drawn a little less often than the others.
COMBO_WEIGHTS = {"kafka": 0.7}
# A delayed kill lands within (this x batches) seconds of the start (local engine: of the
# driver process; Spark: of the query): a clean batch's measured duration on a 2-core
# machine, so most delayed kills land while the query runs.
DELAY_PER_BATCH = {
    "files": 0.07,
    "s3": 0.7,  # measured: 4 batches of 2x20 rows 6.0 s, 1 batch 3.8-4.3 s (load 5-6)
    "postgres": 0.1,
    "mysql": 0.2,
    "kafka": 0.9,
    "iceberg": 0.3,
    "delta": 0.3,
    "spark": 1.0,
}
GROUP_SHARE = 0.25
"""Share of the runs drawn as SQL ``two_phase`` that write a ``twopc.SinkGroup`` of that
sink and a second member instead (``group``, issue 32): ``postgres+mysql``,
``mysql+postgres`` or ``postgres+files``, the first member's service being the one a
``service`` run kills or pauses. Drawn from a stream of its own (``group-SEED``) after
everything else, so every seed drawn before groups joined keeps its scenario unless it is
one of these. ``--backend group`` draws only groups."""
GROUP_MODES = {
    "postgres": ("postgres+mysql", "postgres+files"),
    "mysql": ("mysql+postgres",),
}
DELTA_GROUP_MODES = ("delta+postgres", "delta+kafka")
"""Groups whose first member is a Delta table (issue 48): with PostgreSQL ``two_phase``, and
with Kafka ``atomic`` as the last resource (a Delta table and its outbox topic)."""
ALL_GROUP_MODES = (
    "postgres+mysql",
    "postgres+files",
    "postgres+kafka",
    "mysql+postgres",
    *DELTA_GROUP_MODES,
)
KAFKA_GROUP_SHARE = 1 / 3
"""Share of the PostgreSQL groups that take Kafka ``atomic`` as their last resource
(``postgres+kafka``), drawn after the mode from the same stream, so the groups drawn before
it keep their mode unless they are one of these. Their driver crash points are drawn again
from a stream of their own (``last-resource-SEED``) among the points such a batch passes,
``before_last_resource`` and ``after_last_resource`` included."""
S3_SHARE = 0.3
"""Share of the runs drawn as ``files`` that write to the S3 API instead of the local disk
(when both are allowed). Drawn from a stream of its own (``store-SEED``) after the backend,
so every seed drawn before S3 joined keeps its scenario unless it is one of these."""
SPARK_WEIGHTS = {"driver": 0.4, "worker": 0.3, "executor": 0.3}
POINT_SHARE = 0.6
"""Share of runs timed by a named crash point; the rest are killed after a random delay."""

EVENTS = ("none", "rescale", "rename", "restore", "stop", "speculate", "checkpoint-lost")
"""Operational events between the crash and the restarts (docs/operations.md, 'Outside the
happy path'): the restarts run with another partition count (``rescale``) or another naming
option (``rename``: a Kafka transactional.id prefix, the other SQL transaction mode); the
checkpoint is copied after the crash and put back once the query has finished, then the
query runs again (``restore``); the second attempt is stopped with ``query.stop()`` after a
random delay (``stop``, Spark only); the restarts run with ``spark.speculation=true`` on a
standalone cluster with one slow task per batch, so that a speculative copy runs
(``speculate``, Spark only, two partitions, not Kafka ``atomic`` whose single-task stage Spark
never speculates); the checkpoint is deleted after the crash and the query started on a new
one from the offsets its output stores (``checkpoint-lost``, drawn only with the option
``checkpoint_lost``, local engine: its stream's offsets look like a Kafka source's)."""
EVENT_WEIGHTS = {
    "none": 0.55,
    "rescale": 0.15,
    "rename": 0.1,
    "restore": 0.1,
    "stop": 0.1,
    "speculate": 0.3,  # drawn only on some Spark runs: weighted up to be seen often
}
SPECULATIVE_MASTER = "standalone+speculation"
"""The restarts' master under ``speculate``: the runner's standalone cluster (executors on
two loopback hosts, since Spark never runs a copy on the host of the attempt it copies),
with speculation on."""
SLOW_TASKS = {
    # attempt 0 stalls before it prepares: the copy prepares, reports first and wins
    "attempt0-loses": "after_invoke:sleep=8@partition=1,attempt=0",
    # attempt 0 stalls briefly, the copy prepares and then stalls: attempt 0 wins, and Spark
    # kills the copy holding prepared work
    "copy-loses": (
        "after_invoke:sleep=4@partition=1,attempt=0;after_pre_commit:sleep=20@partition=1,attempt=1"
    ),
}
"""The restarts' fault plans under ``speculate``: partition 1 of every batch is slow."""
ICEBERG_SHARE = 0.5
"""Share of the runs drawn as ``files`` (on the local disk, after the S3 draw) that write an
Iceberg table instead (issue 33), a third of them with the catalog on PostgreSQL. Drawn from
a stream of its own (``iceberg-SEED``) after the backend, so every seed drawn before Iceberg
joined keeps its scenario unless it is one of these. ``--backend iceberg`` draws only
Iceberg runs."""
ICEBERG_POSTGRES_SHARE = 1 / 3
DELTA_SHARE = 0.5
"""Share of the runs still drawn as ``files`` on the local disk after the S3 and Iceberg
draws that write a Delta table instead (issue 48). Drawn from a stream of its own
(``delta-SEED``), so every seed drawn before Delta joined keeps its scenario unless it is
one of these. ``--backend delta`` draws only Delta runs. With ``--backend group`` (groups
only), the same stream makes a Delta group of a share of the groups: the share of the
allowed group modes that are Delta's (2 of 6 with every mode)."""
DELTA_GROUP_SHARE = 1 / 3
"""Share of the Delta runs that write a ``twopc.SinkGroup`` instead, when the filters allow
groups: the Delta table first, then PostgreSQL ``two_phase`` or, half of them, Kafka
``atomic`` as the last resource (``DELTA_GROUP_MODES``). Drawn from a stream of its own
(``delta-group-SEED``) after everything else, which also draws the group's driver crash
point again among the points its batch passes (``between_members``, or the last-resource
points), so a Delta group's other fields are those of the Delta run it replaces. The
group's kill targets and pauses are the Delta run's: no service (the SQL groups kill and
pause theirs)."""
STORE_VARIANTS = ("s3", "iceberg", "delta")
"""Backends drawn as variants of another (``files``; Delta also of a group) rather than in
the first draw, unless the filters leave only them."""
PAUSE_SHARE = 0.12
"""Share of runs on a backend with a service whose first restart sees that service stopped
(SIGSTOP, ``scripts/services pause``) for ``PAUSE_SECONDS`` and resumed: recovery and the
replayed batches meet a stalled server. Drawn from a stream of its own (``pause-SEED``), so
every other field of a seed's scenario stays as it was before pauses were drawn."""
PAUSE_SECONDS = (1.0, 8.0)


@dataclass(frozen=True)
class Options:
    """What narrows the draw: the backends (``kafka`` or ``kafka:atomic``; ``group``, or
    ``group:postgres+kafka`` for groups of those members only), the kill targets and the
    share of runs on real Spark; where an Iceberg or a Delta run on real Spark writes phase
    1 (``python`` tasks, or Spark's own writer: ``spark``, which has no Python worker to
    kill; a Delta group's member keeps Python tasks)."""

    backends: tuple[str, ...] = ()
    targets: tuple[str, ...] = ()
    spark_share: float = 0.01
    iceberg_write_path: str = "python"
    checkpoint_lost: float = 0.0
    """Share of the local-engine runs whose event is ``checkpoint-lost`` (drawn from a
    stream of its own: 0 leaves every seed's scenario as it was)."""
    delta_write_path: str = "python"

    def writes_with_spark(self, backend: str) -> bool:
        """Whether a run of ``backend`` on real Spark writes phase 1 with Spark's writer."""
        paths = {"iceberg": self.iceberg_write_path, "delta": self.delta_write_path}
        return paths.get(backend) == "spark"

    def combos(self) -> list[tuple[str, str]]:
        every = [(b, m) for b, modes in MODES.items() for m in modes]
        if not self.backends:
            return every
        every += [(b, m) for b, modes in OPT_IN_MODES.items() for m in modes]
        backends = [b for b in self.backends if not b.startswith("group")]
        if self.groups_only():
            # the groups' first members: SQL two_phase, or a Delta table
            firsts = {m.split("+")[0] for m in self.group_modes() or ALL_GROUP_MODES}
            backends = [f"{b}:two_phase" if b in GROUP_MODES else b for b in sorted(firsts)]
        wanted = {f if ":" in f else f"{f}:{m}" for f in backends for m in MODES[f.split(":")[0]]}
        return [(b, m) for b, m in every if f"{b}:{m}" in wanted]

    def groups_only(self) -> bool:
        return bool(self.backends) and all(b.startswith("group") for b in self.backends)

    def groups_allowed(self) -> bool:
        return not self.backends or any(b.startswith("group") for b in self.backends)

    def group_modes(self) -> tuple[str, ...]:
        """The group modes ``group:<mode>`` names; ``()`` for any."""
        return tuple(b.partition(":")[2] for b in self.backends if b.startswith("group:"))

    def delta_group_modes(self) -> tuple[str, ...]:
        """The Delta group modes a Delta run may become (none where groups are not drawn)."""
        if not self.groups_allowed():
            return ()
        named = self.group_modes()
        return tuple(m for m in DELTA_GROUP_MODES if not named or m in named)

    def repro_flags(self) -> list[str]:
        """The command-line flags that reproduce this draw (with ``--seed``)."""
        flags = [f"--backend={b}" for b in self.backends]
        flags += [f"--target={t}" for t in self.targets]
        if self.iceberg_write_path != "python":
            flags.append(f"--iceberg-write-path={self.iceberg_write_path}")
        if self.delta_write_path != "python":
            flags.append(f"--delta-write-path={self.delta_write_path}")
        if self.checkpoint_lost:
            flags.append(f"--checkpoint-lost={self.checkpoint_lost:g}")
        return [*flags, f"--spark-share={self.spark_share:g}"]


@dataclass(frozen=True)
class Scenario:
    """One run, fully determined by its seed and the options."""

    seed: int
    backend: str
    mode: str
    engine: str  # "local" (forked local-engine driver) or "spark"
    target: str  # driver | worker | executor | service
    timing: str  # "point" (TWOPC_FAULTS) or "delay" (a kill after `delay` seconds)
    batches: int
    partitions: int
    rows: int
    kafka_partitions: int
    max_attempts: int
    fault: str | None = None
    delay: float | None = None
    downtime: float = 0.0
    victim: int = 0  # which task process / executor JVM to kill, among those alive
    master: str = "local[2]"
    event: str = "none"  # see EVENTS
    partitions_after: int = 0  # the restarts' partition count (rescale); 0: unchanged
    stop_delay: float = 0.0  # seconds into the second attempt when it is stopped
    pause_at: float = 0.0  # seconds into the second attempt when the service is paused
    pause_for: float = 0.0  # seconds it stays paused; 0: no pause
    loser: str = ""  # speculate: which attempt loses, a key of SLOW_TASKS
    variant: str = ""  # rename: "prefix" or "mode" (Kafka); restore: "log-outside"/"log-inside"

    @property
    def service(self) -> str | None:
        return self.own_service if self.target == "service" else None

    @property
    def own_service(self) -> str | None:
        """The service of the run's backend (a group's: its first member's)."""
        return service_of(self.backend, self.mode)

    @property
    def label(self) -> str:
        return f"{self.backend}/{self.mode}"

    def describe(self) -> str:
        what = self.fault if self.timing == "point" else f"after {self.delay:.2f}s"
        where = f"{self.target}={self.service}" if self.service else self.target
        event = ""
        if self.event == "rescale":
            event = f" then rescale to {self.partitions_after}"
        elif self.event == "stop":
            event = f" then stop after {self.stop_delay:.2f}s"
        elif self.event == "speculate":
            event = f" then speculate ({self.loser})"
        elif self.event != "none":
            event = f" then {self.event}" + (f" ({self.variant})" if self.variant else "")
        if self.pause_for:
            service = self.own_service
            event += f" +pause {service} {self.pause_for:.1f}s at {self.pause_at:.2f}s"
        return (
            f"{self.label} {self.engine} {where} {what} "
            f"[{self.batches}x{self.partitions}x{self.rows}]{event}"
        )

    @property
    def restart_master(self) -> str:
        """The master the restarts run on (the first attempt runs on ``master``)."""
        return SPECULATIVE_MASTER if self.event == "speculate" else self.master

    @property
    def restart_faults(self) -> str | None:
        """The fault plan of every restart: the slow task of ``speculate``, else none."""
        return SLOW_TASKS[self.loser] if self.event == "speculate" else None

    def expected_ids(self) -> set[int]:
        return {
            b * 1000 + i for b in range(self.batches) for i in range(self.partitions * self.rows)
        }

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


class NoScenario(ValueError):
    """The filters leave nothing to draw from (e.g. --target=executor without Spark)."""


def draw(seed: int, options: Options) -> Scenario:
    """The scenario of one seed; raises :class:`NoScenario` if the filters exclude all."""
    rng = random.Random(seed)
    combos = options.combos()
    if not combos:
        raise NoScenario(f"no backend matches {options.backends}")
    spark = rng.random() < options.spark_share
    drawn = [c for c in combos if c[0] not in STORE_VARIANTS] or combos  # variants of files
    backend, mode = rng.choices(drawn, [COMBO_WEIGHTS.get(b, 1.0) for b, _ in drawn])[0]
    backend, mode = _store(seed, backend, mode, combos)
    backend, mode = _delta(seed, backend, mode, combos, options)
    writer = options.writes_with_spark(backend)
    weights = _weights(backend, spark, options.targets, mode, writer)
    if not weights:
        if not spark and _weights(backend, True, options.targets, mode, writer):
            spark, weights = True, _weights(backend, True, options.targets, mode, writer)
        else:
            raise NoScenario(f"no kill target of {options.targets} applies to {backend}")
    target = rng.choices(list(weights), list(weights.values()))[0]
    engine = "spark" if spark else "local"
    batches = rng.randint(2, 4)
    partitions = rng.randint(1, 2) if spark else rng.randint(1, 3)
    rows = rng.randint(5, 40)
    kafka_partitions = rng.randint(1, 3)
    max_attempts = 1 if spark else rng.choice((1, 1, 2))
    timing = _timing(rng, engine, target)
    fault = delay = None
    if timing == "point":
        fault = _fault(
            rng,
            backend=backend,
            mode=mode,
            target=target,
            batches=batches,
            partitions=partitions,
            rows=rows,
            max_attempts=max_attempts,
        )
    else:
        window = DELAY_PER_BATCH["spark" if spark else backend] * batches
        delay = round(rng.uniform(0.0, window), 3)
    downtime = round(rng.uniform(0.0, 2.0), 3) if target == "service" else 0.0
    event, partitions_after, stop_delay, loser = _event(
        seed, backend=backend, mode=mode, engine=engine, partitions=partitions, batches=batches
    )
    pause_at, pause_for = _pause(seed, backend, engine, batches)
    variant = _variant(seed, event, backend)
    backend, mode, event = _group(seed, backend, mode, event, options)
    fault = _last_resource_fault(seed, mode, fault, partitions)
    backend, mode, fault = _delta_group(
        seed, backend, mode, fault=fault, partitions=partitions, options=options
    )
    if _checkpoint_lost(seed, engine, target, options.checkpoint_lost):
        event, partitions_after, stop_delay, loser = "checkpoint-lost", 0, 0.0, ""
        variant = _lost_log(backend)
    return Scenario(
        seed=seed,
        backend=backend,
        mode=mode,
        engine=engine,
        target=target,
        timing=timing,
        batches=batches,
        partitions=partitions,
        rows=rows,
        kafka_partitions=kafka_partitions,
        max_attempts=max_attempts,
        fault=fault,
        delay=delay,
        downtime=downtime,
        victim=rng.randint(0, 1),
        master="local-cluster[2,1,1024]" if target == "executor" else "local[2]",
        event=event,
        partitions_after=partitions_after,
        stop_delay=stop_delay,
        pause_at=pause_at,
        pause_for=pause_for,
        loser=loser,
        variant=variant,
    )


def _variant(seed: int, event: str, backend: str) -> str:
    """How a ``rename`` or ``restore`` goes, from a random stream of its own (seeds drawn
    before variants existed keep every other field). ``rename`` of a Kafka sink changes
    its ``transactional_id_prefix`` or its mode (``per_partition`` and ``atomic``);
    ``restore`` keeps the commit log outside the checkpoint, as the runbook advises, or,
    for the sinks that keep it inside by default (SQL, Kafka), inside: then the restart
    from the older copy is refused, and the operator puts the newer checkpoint back."""
    rng = random.Random(f"variant-{seed}")
    if event == "rename" and backend == "kafka":
        return rng.choice(("prefix", "mode"))
    if event == "restore":
        if backend in ("files", "s3"):
            return "log-outside"  # the files sink keeps its log next to the data
        return rng.choice(("log-outside", "log-inside"))
    return ""


def _checkpoint_lost(seed: int, engine: str, target: str, share: float) -> bool:
    """Whether the run's event is ``checkpoint-lost``, from a stream of its own: on the
    local engine, and on Spark where the driver or a Python worker is killed (the Kafka
    source's query runs on ``local[2]``; a killed executor needs ``local-cluster``)."""
    if share <= 0 or (engine == "spark" and target not in ("driver", "worker")):
        return False
    return random.Random(f"lost-{seed}").random() < share


def _lost_log(backend: str) -> str:
    """Where the commit log of a ``checkpoint-lost`` run lives. Inside the checkpoint (and
    lost with it) where that is the sink's default: Kafka and the SQL sinks, whose
    ``two_phase`` batches cut off between two partitions' commits are finished by their
    marker rows, without the log. Beside it for the others (an Iceberg table, a group), as
    docs/operations.md advises; the files sink keeps its log next to its data."""
    if backend in ("kafka", "postgres", "mysql"):
        return "log-inside"
    return "log-outside"


def service_of(backend: str, mode: str) -> str | None:
    """The service a backend depends on; a group's is its first member's; an Iceberg
    table's, its catalog's (its database in mode ``postgres``, the REST server in mode
    ``rest``)."""
    if backend == "group":
        return SERVICE[mode.split("+", maxsplit=1)[0]]
    if backend == "iceberg":
        return {"postgres": "postgres", "rest": "iceberg-rest"}.get(mode)
    return SERVICE[backend]


def _group(
    seed: int, backend: str, mode: str, event: str, options: Options
) -> tuple[str, str, str]:
    """``(backend, mode, event)``: a share of the SQL ``two_phase`` runs become a group
    run (all of them with ``--backend group``). A group has no ``rename`` (the other SQL
    mode commits in its tasks, which a group refuses): it restarts as before instead."""
    if mode != "two_phase" or backend not in GROUP_MODES or not options.groups_allowed():
        return backend, mode, event
    rng = random.Random(f"group-{seed}")
    if not options.groups_only() and rng.random() >= GROUP_SHARE:
        return backend, mode, event
    group_mode = rng.choice(GROUP_MODES[backend])
    if backend == "postgres" and rng.random() < KAFKA_GROUP_SHARE:
        group_mode = "postgres+kafka"
    if options.group_modes() and group_mode not in options.group_modes():
        named = [m for m in options.group_modes() if m.startswith(backend)]
        if not named:  # only groups led by another backend are named (a Delta group)
            return backend, mode, event
        group_mode = rng.choice(named)
    return "group", group_mode, "none" if event == "rename" else event


def _delta(
    seed: int, backend: str, mode: str, combos: Sequence[tuple[str, str]], options: Options
) -> tuple[str, str]:
    """``(backend, mode)``: a Delta table for a share of the runs still ``files`` (after
    ``_store``), or, when only groups are drawn, for a share of the groups (which
    ``_delta_group`` then makes a Delta group)."""
    if ("delta", "append") not in combos:
        return backend, mode
    if backend == "files":
        share = DELTA_SHARE
    elif options.groups_only() and mode == "two_phase":
        allowed = options.group_modes() or ALL_GROUP_MODES
        share = len(options.delta_group_modes()) / len(allowed)
    else:
        return backend, mode
    if random.Random(f"delta-{seed}").random() >= share:
        return backend, mode
    return "delta", "append"


def _delta_group(
    seed: int, backend: str, mode: str, *, fault: str | None, partitions: int, options: Options
) -> tuple[str, str, str | None]:
    """``(backend, mode, fault)``: a share of the Delta runs (all of them when only groups
    are drawn) become a Delta group, with the driver crash point drawn again among the
    points the group's batch passes; task points and the action and filters stay."""
    modes = options.delta_group_modes()
    if backend != "delta" or not modes:
        return backend, mode, fault
    rng = random.Random(f"delta-group-{seed}")
    if not options.groups_only() and rng.random() >= DELTA_GROUP_SHARE:
        return backend, mode, fault
    group_mode = rng.choice(modes)
    if fault is not None:
        name, _, rest = fault.partition(":")
        if CrashPoint(name).on_driver:
            point = rng.choice(_group_driver_points(group_mode, partitions))
            fault = f"{point.value}:{rest}"
    return "group", group_mode, fault


def _group_driver_points(group_mode: str, partitions: int) -> list[CrashPoint]:
    """The driver points a Delta group's batch passes, in protocol order. The Delta table
    commits a batch in one call: ``between_commits`` only where PostgreSQL commits two or
    more partitions; with Kafka as the last resource, one driver member, so no
    ``between_members`` but the last-resource points."""
    if group_mode == "delta+kafka":
        return [
            CrashPoint.BEFORE_DECISION,
            CrashPoint.BEFORE_LAST_RESOURCE,
            CrashPoint.AFTER_LAST_RESOURCE,
            CrashPoint.AFTER_DECISION,
            CrashPoint.AFTER_COMMIT,
        ]
    return [
        CrashPoint.BEFORE_DECISION,
        CrashPoint.AFTER_DECISION,
        *([CrashPoint.BETWEEN_COMMITS] if partitions > 1 else []),
        CrashPoint.BETWEEN_MEMBERS,
        CrashPoint.AFTER_COMMIT,
    ]


def _last_resource_fault(seed: int, mode: str, fault: str | None, partitions: int) -> str | None:
    """A ``postgres+kafka`` group's driver point, drawn again among the points its batch
    passes (``before_last_resource`` and ``after_last_resource`` included); task points
    and the action and filters stay."""
    if mode != "postgres+kafka" or fault is None:
        return fault
    name, _, rest = fault.partition(":")
    if not CrashPoint(name).on_driver:
        return fault
    points = [
        CrashPoint.BEFORE_DECISION,
        CrashPoint.BEFORE_LAST_RESOURCE,
        CrashPoint.AFTER_LAST_RESOURCE,
        CrashPoint.AFTER_DECISION,
        *([CrashPoint.BETWEEN_COMMITS] if partitions > 1 else []),
        CrashPoint.AFTER_COMMIT,
    ]
    return f"{random.Random(f'last-resource-{seed}').choice(points).value}:{rest}"


def _store(
    seed: int, backend: str, mode: str, combos: Sequence[tuple[str, str]]
) -> tuple[str, str]:
    """``(backend, mode)``: ``s3`` for a share of the ``files`` runs, an Iceberg table for a
    share of the rest, when the filters allow them."""
    if backend != "files":
        return backend, mode
    if ("s3", "parquet") in combos and random.Random(f"store-{seed}").random() < S3_SHARE:
        return "s3", mode
    catalogs = [m for b, m in combos if b == "iceberg"]
    rng = random.Random(f"iceberg-{seed}")
    if not catalogs or rng.random() >= ICEBERG_SHARE:
        return backend, mode
    on_postgres = "postgres" in catalogs and rng.random() < ICEBERG_POSTGRES_SHARE
    return "iceberg", "postgres" if on_postgres or catalogs == ["postgres"] else "sqlite"


def _event(
    seed: int, *, backend: str, mode: str, engine: str, partitions: int, batches: int
) -> tuple[str, int, float, str]:
    """The run's operational event, from a random stream of its own, so that adding events
    left every earlier field of a seed's scenario as it was."""
    rng = random.Random(f"event-{seed}")
    allowed = {
        e: w
        for e, w in EVENT_WEIGHTS.items()
        if _event_applies(e, backend, mode, engine, partitions)
    }
    event = rng.choices(list(allowed), list(allowed.values()))[0]
    partitions_after = 0
    if event == "rescale":
        choices = [p for p in range(1, (3 if engine == "spark" else 4) + 1) if p != partitions]
        partitions_after = rng.choice(choices)
    stop_delay = 0.0
    if event == "stop":
        stop_delay = round(rng.uniform(0.0, DELAY_PER_BATCH["spark"] * batches), 3)
    loser = rng.choice(sorted(SLOW_TASKS)) if event == "speculate" else ""
    return event, partitions_after, stop_delay, loser


def _pause(seed: int, backend: str, engine: str, batches: int) -> tuple[float, float]:
    """When the first restart pauses the backend's service, and for how long."""
    rng = random.Random(f"pause-{seed}")
    if SERVICE.get(backend) is None or rng.random() >= PAUSE_SHARE:
        return 0.0, 0.0
    window = DELAY_PER_BATCH["spark" if engine == "spark" else backend] * batches
    return round(rng.uniform(0.0, window), 3), round(rng.uniform(*PAUSE_SECONDS), 3)


def _event_applies(event: str, backend: str, mode: str, engine: str, partitions: int) -> bool:
    if event == "rename":
        # they name nothing after an option
        return backend not in ("files", "s3", "iceberg", "delta")
    if event == "stop":
        return engine == "spark"  # query.stop() is Spark's
    if event == "speculate":
        # a copy needs a finished partition to compare with; a single-task stage has none
        return engine == "spark" and partitions == 2 and mode != "atomic"
    return True


def _weights(
    backend: str,
    spark: bool,
    targets: Sequence[str],
    mode: str = "",
    spark_writer: bool = False,
) -> dict[str, float]:
    table = SPARK_WEIGHTS if spark else LOCAL_WEIGHTS[backend]
    if backend == "iceberg" and mode == "sqlite":
        table = {t: w for t, w in table.items() if t != "service"}  # SQLite: no service
    if spark and spark_writer:
        table = {t: w for t, w in table.items() if t != "worker"}  # Spark's writer: no worker
    return {t: w for t, w in table.items() if not targets or t in targets}


def _timing(rng: random.Random, engine: str, target: str) -> str:
    if target == "executor":
        return "delay"  # an executor JVM has no crash point of its own
    if engine == "spark" and target == "worker":
        return "point"  # Python workers come and go; a crash point finds one reliably
    return "point" if rng.random() < POINT_SHARE else "delay"


def _points(backend: str, mode: str, partitions: int) -> tuple[list[CrashPoint], list[CrashPoint]]:
    """(task points, driver points) that fire for this backend and mode."""
    commits_in_task = backend == "kafka" or mode == "transaction"
    task = list(TASK_POINTS) + (list(TASK_COMMIT_POINTS) if commits_in_task else [])
    driver = [CrashPoint.BEFORE_DECISION, CrashPoint.AFTER_DECISION]
    single = backend == "kafka" and mode == "atomic"
    one_step = backend in ("iceberg", "delta")  # one commit call per batch: no between_commits
    if not commits_in_task and partitions > 1 and not single and not one_step:
        driver.append(CrashPoint.BETWEEN_COMMITS)
    driver.append(CrashPoint.AFTER_COMMIT)
    return task, driver


def _fault(
    rng: random.Random,
    *,
    backend: str,
    mode: str,
    target: str,
    batches: int,
    partitions: int,
    rows: int,
    max_attempts: int,
) -> str:
    task, driver = _points(backend, mode, partitions)
    if target == "driver":
        point, action = rng.choice(driver), rng.choice(("kill", "exit"))
    elif target == "worker":
        point, action = rng.choice(task), rng.choice(("kill", "kill", "exit", "raise"))
    else:  # a service: the query dies at a point, the service is killed while it is down
        point, action = rng.choice(task + driver), "kill"
    filters = [f"batch={rng.randrange(batches)}"]
    if not point.on_driver:
        single = backend == "kafka" and mode == "atomic"  # one task per batch: partition 0
        filters.append(f"partition={0 if single else rng.randrange(partitions)}")
        if max_attempts > 1:
            filters.append("attempt=0")  # the retry inside the same query succeeds
    if point is CrashPoint.AFTER_INVOKE:
        filters.append(f"rows={rng.randint(1, rows)}")
    return f"{point.value}:{action}@{','.join(filters)}"
