"""What the shipped dashboard and alerting rules ask of Prometheus, and the real timeline
they are tested on, as promtool's unit-test input.

:func:`queries` lists every PromQL expression of both files (the dashboard's with its
variables filled in); :func:`used_names` reads the metric names and labels they use;
:func:`input_series` turns the scrapes of :mod:`tests.harness.alert_runs` into promtool's
``input_series``, one scrape a minute.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest

from tests.harness.alert_runs import Scrape

# a dev dependency: the lowest-versions passes (scripts/lowest-versions) install the
# extras only, and skip the tests of the rules file there
yaml = pytest.importorskip("yaml", reason="PyYAML is a dev dependency (pip install -e .[dev])")

__all__ = [
    "ASSETS",
    "OFFSET_MINUTES",
    "REPO",
    "Used",
    "dashboard",
    "input_series",
    "panel_queries",
    "promtool",
    "queries",
    "rules",
    "used_names",
]

REPO = Path(__file__).resolve().parents[2]
ASSETS = Path(str(files("twopc.metrics") / "assets"))
OFFSET_MINUTES = 2
"""The first scrape's minute in promtool's time (none of the series exists before)."""

VARIABLES = {"$sink": ".*", "$__rate_interval": "5m"}
"""What the dashboard's variables stand for when its queries are checked."""

_SELECTOR = re.compile(r"\b(twopc_[a-z_]+)\s*(?:\{([^}]*)\})?")
_MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)")
_LEGEND = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def dashboard() -> dict[str, Any]:
    return dict(json.loads((ASSETS / "twopc-dashboard.json").read_text()))


def rules() -> dict[str, Any]:
    return dict(yaml.safe_load((ASSETS / "twopc-alerts.yaml").read_text()))


def _filled(expr: str) -> str:
    for variable, value in VARIABLES.items():
        expr = expr.replace(variable, value)
    return expr


def panel_queries(board: dict[str, Any]) -> list[tuple[str, str, str]]:
    """``(panel title, query, legend)`` of every panel's targets, variables filled in."""
    return [
        (panel["title"], _filled(target["expr"]), target.get("legendFormat", ""))
        for panel in board["panels"]
        for target in panel.get("targets", [])
    ]


def queries() -> list[str]:
    """Every PromQL expression of the dashboard (its targets and the sink variable's
    ``label_values`` metric) and of the alerting rules."""
    board = dashboard()
    found = [query for _, query, _ in panel_queries(board)]
    for variable in board["templating"]["list"]:
        if variable["type"] == "query":
            inner = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", variable["definition"])
            assert inner, variable["definition"]
            found.append(f"count by ({inner[2]}) ({inner[1]})")
    found += [rule["expr"] for group in rules()["groups"] for rule in group["rules"]]
    return found


@dataclass
class Used:
    """The metric names a query uses, the labels it groups or matches by, the label
    values it matches exactly (name -> label -> values) and the labels its legend shows."""

    names: set[str] = field(default_factory=set)
    labels: set[str] = field(default_factory=set)
    values: dict[str, dict[str, set[str]]] = field(default_factory=dict)


def used_names(query: str, legend: str = "") -> Used:
    used = Used()
    for selector in _SELECTOR.finditer(query):
        name, matchers = selector[1], selector[2] or ""
        used.names.add(name)
        for label, op, value in _MATCHER.findall(matchers):
            used.labels.add(label)
            if op == "=":
                used.values.setdefault(name, {}).setdefault(label, set()).add(value)
    for grouping in _GROUPING.findall(query):
        used.labels.update(label.strip() for label in grouping.split(",") if label.strip())
    used.labels.update(_LEGEND.findall(legend))
    return used


def _series(name: str, labels: dict[str, str]) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def _minute_of(timestamp: float, timeline: Sequence[Scrape]) -> int:
    """The promtool minute of the first scrape taken after ``timestamp``."""
    for index, scrape in enumerate(timeline):
        if scrape.at >= timestamp:
            return OFFSET_MINUTES + index
    return OFFSET_MINUTES + len(timeline) - 1


def input_series(timeline: Sequence[Scrape], hold: int) -> list[dict[str, str]]:
    """promtool's ``input_series``: scrape ``i`` at minute ``OFFSET_MINUTES + i``, the last
    one repeated for ``hold`` more minutes (the processes live on); absent before a
    series' first scrape. Unix times (``*_timestamp_seconds``) become promtool's time of
    the scrape that first showed them."""
    keys: dict[tuple[str, frozenset[tuple[str, str]]], dict[int, float]] = {}
    for index, scrape in enumerate(timeline):
        for sample in scrape.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            value = sample.value
            if sample.name.endswith("_timestamp_seconds"):
                value = 60.0 * _minute_of(value, timeline)
            keys.setdefault(key, {})[index] = value
    found = []
    last = len(timeline) - 1
    for (name, labels), values in sorted(keys.items(), key=lambda item: _series(*_key(item[0]))):
        steps = ["_"] * OFFSET_MINUTES
        steps += [_number(values[i]) if i in values else "_" for i in range(len(timeline))]
        if last in values:
            steps.append(f"{_number(values[last])}x{hold}")
        found.append({"series": _series(name, dict(labels)), "values": " ".join(steps)})
    return found


def _key(key: tuple[str, frozenset[tuple[str, str]]]) -> tuple[str, dict[str, str]]:
    return key[0], dict(key[1])


def _number(value: float) -> str:
    return repr(float(value)) if value != int(value) else str(int(value))


def promtool() -> str:
    """promtool, built by ``scripts/promtool`` (once, cached outside the repository);
    the test skips when Go is not installed, and only then."""
    go = shutil.which("go") or (
        "/usr/local/go/bin/go" if Path("/usr/local/go/bin/go").exists() else None
    )
    if go is None:
        pytest.skip("Go is not installed: scripts/promtool cannot build promtool")
    built = subprocess.run(
        [str(REPO / "scripts" / "promtool"), "--path"],
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    return built.stdout.strip()


def run_promtool(binary: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [binary, *map(str, args)], capture_output=True, text=True, timeout=300, check=False
    )


def write_yaml(path: Path, body: Any) -> Path:
    path.write_text(yaml.safe_dump(body, sort_keys=False, width=1000))
    return path


def alert_names() -> list[str]:
    return [rule["alert"] for group in rules()["groups"] for rule in group["rules"]]


def without_texts(body: dict[str, Any]) -> dict[str, Any]:
    """The rules with each alert's annotations cut to ``runbook_url`` (promtool compares
    annotations exactly, and the summary and description hold the alert's value)."""
    groups = []
    for group in body["groups"]:
        kept = []
        for rule in group["rules"]:
            kept.append(
                {**rule, "annotations": {"runbook_url": rule["annotations"]["runbook_url"]}}
            )
        groups.append({**group, "rules": kept})
    return {**body, "groups": groups}


def labels_of(samples: Iterable[Any], name: str) -> set[str]:
    return {label for s in samples if s.name == name for label in s.labels}
