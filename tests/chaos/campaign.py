"""The campaign's command line: draw N scenarios from consecutive seeds, run, summarize.

    scripts/chaos --runs 1000 [--seed S] [--backend kafka[:atomic]] [--target driver]
                  [--spark-share 0.01] [--json results.json]

Run ``i`` uses seed ``S + i``. Prints one line per run, the mix drawn, a summary table per
backend/mode and kill target, mean seconds per scenario kind, and for every failed run the
command that reproduces it. Exits 1 if any run failed, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path

from tests.chaos.runner import Runner, RunResult
from tests.chaos.scenario import (
    ALL_GROUP_MODES,
    MODES,
    OPT_IN_MODES,
    TARGETS,
    NoScenario,
    Options,
    Scenario,
    draw,
)
from tests.harness.processes import REPO
from tests.harness.services import Services


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    modes = {b: (*m, *OPT_IN_MODES.get(b, ())) for b, m in MODES.items()}
    backends = [*MODES, *(f"{b}:{m}" for b, ms in modes.items() for m in ms), "group"]
    backends += [f"group:{m}" for m in ALL_GROUP_MODES]
    parser = argparse.ArgumentParser(
        prog="scripts/chaos", description="Randomized crash campaign over every backend."
    )
    parser.add_argument("--runs", type=int, default=20, help="number of runs (default 20)")
    parser.add_argument("--seed", type=int, help="seed of the first run (default: random)")
    parser.add_argument(
        "--seeds", help="comma-separated seeds to run instead of --seed/--runs (e.g. CI's set)"
    )
    parser.add_argument(
        "--backend", action="append", default=[], choices=backends, help="repeatable"
    )
    parser.add_argument("--target", action="append", default=[], choices=TARGETS)
    parser.add_argument(
        "--spark-share", type=float, default=0.01, help="share of runs on real Spark"
    )
    parser.add_argument("--json", type=Path, help="write every run's result here")
    parser.add_argument(
        "--workdir", type=Path, default=REPO / ".chaos", help="run directories (kept on failure)"
    )
    parser.add_argument("--max-restarts", type=int, default=6, help="query attempts per run")
    parser.add_argument(
        "--cold-spark",
        action="store_true",
        help="start a Spark driver process per attempt (default: long-lived drivers)",
    )
    parser.add_argument(
        "--iceberg-write-path",
        choices=("python", "spark"),
        default="python",
        help="where Iceberg runs on real Spark write phase 1 (spark: Spark's own writer, the "
        "table created before the query; no worker kills)",
    )
    parser.add_argument(
        "--delta-write-path",
        choices=("python", "spark"),
        default="python",
        help="where Delta runs on real Spark write phase 1 (spark: Spark's own writer, the "
        "table created before the query; no worker kills; groups keep Python tasks)",
    )
    parser.add_argument(
        "--checkpoint-lost",
        type=float,
        default=0.0,
        metavar="SHARE",
        help="share of the local-engine runs whose checkpoint is deleted after the crash, "
        "the query then started on a new one from the offsets its output stores (default 0)",
    )
    parser.add_argument("--sink-factory", default="", help=argparse.SUPPRESS)  # tests only
    parser.add_argument("--list", action="store_true", help="print the scenarios and stop")
    args = parser.parse_args(argv)
    if args.seeds and args.seed is not None:
        parser.error("give --seed (with --runs) or --seeds, not both")
    if args.runs < 1 or not 0.0 <= args.spark_share <= 1.0:
        parser.error("--runs must be positive and --spark-share within [0, 1]")
    if not 0.0 <= args.checkpoint_lost <= 1.0:
        parser.error("--checkpoint-lost must be within [0, 1]")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    options = Options(
        tuple(args.backend),
        tuple(args.target),
        args.spark_share,
        args.iceberg_write_path,
        args.checkpoint_lost,
        args.delta_write_path,
    )
    first = args.seed if args.seed is not None else random.SystemRandom().randrange(10**9)
    seeds = list(range(first, first + args.runs))
    if args.seeds:
        seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
        first = seeds[0]
    try:
        scenarios = [draw(seed, options) for seed in seeds]
    except NoScenario as exc:
        print(f"chaos: {exc}", file=sys.stderr)
        return 2
    shown = args.seeds if args.seeds else f"{first}..{first + args.runs - 1}"
    print(f"chaos: {len(scenarios)} runs, seeds {shown}", flush=True)
    print_mix(scenarios)
    if args.list:
        for scenario in scenarios:
            print(f"seed={scenario.seed} {scenario.describe()}")
        return 0

    runner = Runner(
        args.workdir,
        Services(),
        args.sink_factory,
        args.max_restarts,
        warm=not args.cold_spark,
        iceberg_write_path=args.iceberg_write_path,
        delta_write_path=args.delta_write_path,
    )
    try:
        results, seconds = _campaign(runner, scenarios, options, args, first)
    finally:
        runner.close()
    print_summary(results, seconds)
    failed = [r for r in results if not r.passed]
    for result in failed:
        command = repro(result.scenario, options, args.sink_factory)
        print(f"FAILED seed {result.scenario.seed}: {command}")
    return 1 if failed else 0


def _campaign(
    runner: Runner,
    scenarios: Sequence[Scenario],
    options: Options,
    args: argparse.Namespace,
    first: int,
) -> tuple[list[RunResult], float]:
    started = time.monotonic()
    results: list[RunResult] = []
    for number, scenario in enumerate(scenarios, 1):
        result = runner.run(scenario)
        results.append(result)
        print(run_line(number, len(scenarios), result), flush=True)
        if not result.passed:
            for problem in result.problems:
                print(f"    {problem}", flush=True)
            print(f"    kept: {result.kept}", flush=True)
            print(f"    reproduce: {repro(scenario, options, args.sink_factory)}", flush=True)
        if args.json:
            write_json(args.json, first, options, results, time.monotonic() - started)
    return results, time.monotonic() - started


def repro(scenario: Scenario, options: Options, factory: str) -> str:
    extra = [f"--sink-factory={factory}"] if factory else []
    flags = ["--seed", str(scenario.seed), "--runs", "1", *options.repro_flags(), *extra]
    return shlex.join(["scripts/chaos", *flags])


def run_line(number: int, total: int, result: RunResult) -> str:
    verdict = "PASS" if result.passed else "FAIL"
    if result.passed and not result.injected:
        verdict = "PASS (injection missed)"
    return (
        f"[{number}/{total}] seed={result.scenario.seed} {result.scenario.describe()} "
        f"attempts={result.attempts} {verdict} {result.seconds:.1f}s"
    )


def print_mix(scenarios: Sequence[Scenario]) -> None:
    engines = Counter(s.engine for s in scenarios)
    targets = Counter(f"{s.engine}:{s.service or s.target}" for s in scenarios)
    timings = Counter(s.timing for s in scenarios)
    backends = Counter(s.label for s in scenarios)
    events = Counter(f"{s.engine}:{s.event}" for s in scenarios)
    events.update(f"{s.engine}:pause" for s in scenarios if s.pause_for)
    print("mix: " + _counts(engines) + " | " + _counts(timings), flush=True)
    print("     targets " + _counts(targets), flush=True)
    print("     backends " + _counts(backends), flush=True)
    print("     events " + _counts(events), flush=True)


def _counts(counter: Counter[str]) -> str:
    return ", ".join(f"{k}={n}" for k, n in sorted(counter.items()))


def print_summary(results: Sequence[RunResult], seconds: float) -> None:
    rows: dict[tuple[str, str], list[RunResult]] = defaultdict(list)
    for r in results:
        rows[(r.scenario.label, _target(r.scenario))].append(r)
    header = f"{'backend/mode':<24}{'target':<18}{'runs':>6}{'passed':>8}{'failed':>8}"
    header += f"{'missed':>8}{'mean s':>8}"
    print("\n" + header)
    for (label, target), group in sorted(rows.items()):
        print(_summary_row(label, target, group))
    print(_summary_row("total", "", list(results)))
    kinds: dict[str, list[float]] = defaultdict(list)
    for r in results:
        kinds[f"{r.scenario.engine}:{_target(r.scenario)}:{r.scenario.timing}"].append(r.seconds)
    print("\nmean seconds per run by engine:target:timing")
    for kind, values in sorted(kinds.items()):
        print(f"  {kind:<34}{len(values):>6} runs {sum(values) / len(values):8.2f} s")
    by_event: dict[str, list[RunResult]] = defaultdict(list)
    for r in results:
        by_event[f"{r.scenario.engine}:{r.scenario.event}"].append(r)
        if r.scenario.variant:
            by_event[f"{r.scenario.engine}:{r.scenario.event}:{r.scenario.variant}"].append(r)
        if r.scenario.pause_for:
            by_event[f"{r.scenario.engine}:pause"].append(r)
    print("\nruns by engine:event (passed/runs; a paused run also counts under its event)")
    for kind, group in sorted(by_event.items()):
        print(f"  {kind:<24}{sum(r.passed for r in group):>6}/{len(group)}")
    speculative = [r for r in results if r.scenario.event == "speculate"]
    if speculative:
        seen = sum(1 for r in speculative if r.speculated)
        print(
            f"\nspeculative copies seen in {seen} of {len(speculative)} speculate runs "
            "(none in a restart that had no batch left to run)"
        )
    inside = [
        r for r in results if r.scenario.event == "restore" and r.scenario.variant == "log-inside"
    ]
    if inside:
        refused = sum(1 for r in inside if r.restore_refused)
        print(
            f"restores with the log inside the checkpoint refused in {refused} of "
            f"{len(inside)} (none where the copy was not behind the target)"
        )
    lost = [r for r in results if r.scenario.event == "checkpoint-lost"]
    if lost:
        restarted = [r for r in lost if r.lost == "restarted"]
        print(
            f"checkpoints lost: {len(restarted)} of {len(lost)} runs started a new checkpoint "
            f"from the stored offsets ({sum(r.passed for r in restarted)} passed); "
            f"{sum(1 for r in lost if r.lost == 'refused')} refused a partly committed batch "
            "and ran the old checkpoint again"
        )
    spark = sum(1 for r in results if r.scenario.engine == "spark")
    print(
        f"\n{len(results)} runs ({len(results) - spark} local engine, {spark} Spark) in "
        f"{seconds:.0f} s, {seconds / max(len(results), 1):.2f} s per run; "
        f"{sum(1 for r in results if not r.passed)} failed"
    )


def _target(s: Scenario) -> str:
    return f"service:{s.service}" if s.service else s.target


def _summary_row(label: str, target: str, group: Sequence[RunResult]) -> str:
    passed = sum(1 for r in group if r.passed)
    missed = sum(1 for r in group if not r.injected)
    mean = sum(r.seconds for r in group) / len(group)
    return (
        f"{label:<24}{target:<18}{len(group):>6}{passed:>8}{len(group) - passed:>8}"
        f"{missed:>8}{mean:>8.2f}"
    )


def write_json(
    path: Path, first: int, options: Options, results: Sequence[RunResult], seconds: float
) -> None:
    """The results so far, rewritten after every run (a cut-short campaign keeps them)."""
    document = {
        "first_seed": first,
        "options": {
            "backends": list(options.backends),
            "targets": list(options.targets),
            "spark_share": options.spark_share,
            "iceberg_write_path": options.iceberg_write_path,
            "checkpoint_lost": options.checkpoint_lost,
            "delta_write_path": options.delta_write_path,
        },
        "runs": len(results),
        "passed": sum(1 for r in results if r.passed),
        "failed": sum(1 for r in results if not r.passed),
        "seconds": round(seconds, 1),
        "host": {"cpus": os.cpu_count()},
        "results": [r.to_json() for r in results],
    }
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(document, indent=1))
    tmp.replace(path)
