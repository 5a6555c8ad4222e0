"""Several full runs of the benchmark in one results file: every run kept, and each ratio's
median and min-max across the runs (issue 47: a goal is judged on the median of at least
three runs, never on one; one run on this machine moves a ratio by up to 0.3).

``combine`` folds the payloads of ``run()`` into one: ``runs`` holds each run as it was
measured (its own ``meta``, load average before it included), ``spread`` one line per
target and workload with the ratio of every run, their median, min and max and the goal
judged on the median, and ``results`` the line of the run whose ratio is the median (the
lower middle one for an even count), so the throughput tables show a run that happened
rather than a mix of runs.
"""

from __future__ import annotations

import statistics
from typing import Any

from benchmarks.spark_writers.config import GOALS, SCALING_GOALS, Goal


def _key(result: dict[str, Any]) -> tuple[str, str, int, int]:
    return (result["workload"], result["target"], result["rows"], result["partitions"])


def goal_of(result: dict[str, Any]) -> Goal | None:
    """The goal a result is judged by: the target's on the main workload, the scaling goal
    (if the target has one) at every other point."""
    if result["workload"] == "main":
        return GOALS[result["target"]]
    return SCALING_GOALS.get(result["target"])


def _middle(values: list[float]) -> int:
    """The index of the median value (the lower middle one for an even count)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    return order[(len(values) - 1) // 2]


def spread(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per target and workload measured in every run: each run's ratio, median, min, max,
    and the goal with met / missed on the median."""
    keys: dict[tuple[str, str, int, int], list[float | None]] = {}
    for index, run in enumerate(runs):
        for result in run["results"]:
            keys.setdefault(_key(result), [None] * len(runs))[index] = result["ratio"]
    lines = []
    for (workload, target, rows, partitions), found in keys.items():
        ratios = [r for r in found if r is not None]
        goal = goal_of({"workload": workload, "target": target})
        median = statistics.median(ratios)
        line: dict[str, Any] = {
            "workload": workload,
            "target": target,
            "rows": rows,
            "partitions": partitions,
            "ratios": found,
            "median": round(median, 3),
            "min": min(ratios),
            "max": max(ratios),
        }
        if goal is not None:
            line.update(
                goal=goal.minimum,
                against=goal.against,
                issue=goal.issue,
                met=median >= goal.minimum,
            )
        lines.append(line)
    return lines


def median_results(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per target and workload, the result of the run whose ratio is the median, with the
    ratios of all runs beside it (``ratio_runs``)."""
    grouped: dict[tuple[str, str, int, int], list[dict[str, Any]]] = {}
    for run in runs:
        for result in run["results"]:
            grouped.setdefault(_key(result), []).append(result)
    chosen = []
    for results in grouped.values():
        ratios = [r["ratio"] for r in results]
        picked = dict(results[_middle(ratios)])
        picked["ratio_runs"] = ratios
        chosen.append(picked)
    return chosen


def _overhead(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The overhead section of the run with the median overhead, every run's beside it."""
    measured = [run["overhead"] for run in runs if run.get("overhead")]
    if not measured:
        return None
    values = [o["overhead_ms"] for o in measured]
    picked = dict(measured[_middle(values)])
    picked["overhead_ms_runs"] = values
    return picked


def combine(runs: list[dict[str, Any]], command: str) -> dict[str, Any]:
    """One payload for ``runs`` (the payloads of ``__main__.run``, in the order run)."""
    if not runs:
        raise ValueError("no runs to combine")
    last = runs[-1]
    meta = {
        **last["meta"],
        "command": command,
        "runs": len(runs),
        "date": runs[0]["meta"]["date"],
        "duration_minutes": round(sum(r["meta"]["duration_minutes"] for r in runs), 1),
        "load_before": runs[0]["meta"]["load_before"],
        "load_before_runs": [r["meta"]["load_before"] for r in runs],
        "load_after": last["meta"]["load_after"],
    }
    lines = spread(runs)
    return {
        "meta": meta,
        "results": median_results(runs),
        "spread": lines,
        "overhead": _overhead(runs),
        "floor": last.get("floor"),
        "summary": [line for line in lines if line["workload"] == "main"],
        "runs": runs,
    }
