"""The benchmark's figures, as PNG files under ``docs/`` (matplotlib, Agg backend: no display).

* ``benchmarks-scaling.png``: rows per second of each scaling target against the number of
  partitions (at the main workload's rows) and against the rows (at its partitions), twopc
  and Spark's own writer, the median with the min-max of the repetitions;
* ``benchmarks-long-run.png``: twopc's coordination time per batch and the commit log's
  files over a long query (:mod:`benchmarks.long_run`).

matplotlib comes with the ``bench`` extra (``pip install -e ".[bench]"``, part of ``dev``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

SCALING_PNG = "benchmarks-scaling.png"
LONG_RUN_PNG = "benchmarks-long-run.png"

_SIDES = (("twopc", "twopc", "tab:blue"), ("spark", "Spark's writer", "tab:orange"))


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def scaling_series(payload: dict[str, Any]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """Per scaling target, its results along partitions (at the main rows) and along rows
    (at the main partitions), sorted; the main workload's result belongs to both."""
    config = payload["meta"]["config"]
    rows, partitions = config["rows"], config["partitions"]
    found: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for target in config.get("scaling_targets", ()):
        mine = [r for r in payload["results"] if r["target"] == target]
        along_partitions = sorted(
            (r for r in mine if r["rows"] == rows), key=lambda r: r["partitions"]
        )
        along_rows = sorted(
            (r for r in mine if r["partitions"] == partitions), key=lambda r: r["rows"]
        )
        if len(along_partitions) > 1 or len(along_rows) > 1:
            found[target] = {"partitions": along_partitions, "rows": along_rows}
    return found


def write_scaling(payload: dict[str, Any], path: Path) -> bool:
    """Draw the scaling figure; ``False`` (nothing written) when the run has no scaling."""
    series = scaling_series(payload)
    if not series:
        return False
    plt = _pyplot()
    config = payload["meta"]["config"]
    figure, axes = plt.subplots(
        len(series), 2, figsize=(10, 3.6 * len(series)), squeeze=False, constrained_layout=True
    )
    for row, (target, along) in enumerate(series.items()):
        for column, key in enumerate(("partitions", "rows")):
            ax = axes[row][column]
            results = along[key]
            xs = [r[key] for r in results]
            for side, label, color in _SIDES:
                median = [r[side]["median_rows_per_s"] / 1e6 for r in results]
                low = [
                    m - r[side]["min_rows_per_s"] / 1e6
                    for m, r in zip(median, results, strict=True)
                ]
                high = [
                    r[side]["max_rows_per_s"] / 1e6 - m
                    for m, r in zip(median, results, strict=True)
                ]
                ax.errorbar(
                    xs, median, yerr=[low, high], marker="o", capsize=3, label=label, color=color
                )
            fixed = (
                f"{config['rows']:,} rows"
                if key == "partitions"
                else f"{config['partitions']} partitions"
            )
            ax.set_title(f"{target}: by {key} ({fixed})")
            ax.set_xlabel(key)
            ax.set_ylabel("million rows/s")
            ax.set_xscale("log", base=2 if key == "partitions" else 10)
            ax.minorticks_off()
            ax.set_xticks(xs, [f"{x:,}" if key == "partitions" else _rows_label(x) for x in xs])
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            ax.legend(loc="lower right", fontsize="small")
    meta = payload["meta"]
    figure.suptitle(
        f"Throughput as partitions and rows grow: median and min-max of {config['reps']} runs "
        f"({meta['date'][:10]}, {meta['machine']['cores']} cores, {config['master']})",
        fontsize="medium",
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return True


def _rows_label(rows: int) -> str:
    return f"{rows / 1e6:g}M" if rows >= 1_000_000 else f"{rows:,}"


def write_long_run(result: dict[str, Any], path: Path) -> bool:
    """Draw the long run's coordination time and commit log files per batch."""
    series = result.get("series") or []
    if not series:
        return False
    plt = _pyplot()
    figure, (time_ax, log_ax) = plt.subplots(1, 2, figsize=(10, 3.6), constrained_layout=True)
    batches = [s["batch"] for s in series]
    time_ax.plot(batches, [s["median_ms"] for s in series], color="tab:blue", label="all")
    time_ax.plot(
        batches,
        [s.get("fsync_median_ms", 0.0) for s in series],
        color="tab:gray",
        label="of it fsync waits",
    )
    time_ax.axhline(result["time_limit_ms"], color="tab:red", linestyle="--", label="flat limit")
    time_ax.set_title("twopc's coordination per batch (median)")
    time_ax.set_ylabel("ms")
    time_ax.set_ylim(bottom=0)
    time_ax.legend(loc="upper left", fontsize="small")
    log_ax.plot(batches, [s["log_files"] for s in series], color="tab:green")
    log_ax.set_title(f"commit log files (retention {result['log_retention']} batches)")
    log_ax.set_ylim(bottom=0)
    for ax in (time_ax, log_ax):
        ax.set_xlabel("batch")
        ax.grid(alpha=0.3)
    figure.suptitle(
        f"{result['batches']:,} micro-batches of one query, {result['sink']} sink, "
        f"{result['partitions']} x {result['rows_per_partition']} rows, no Spark",
        fontsize="medium",
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return True
