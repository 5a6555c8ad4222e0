"""The Grafana dashboard and the Prometheus alerting rules as shipped: in the package and,
byte for byte, in the docs; importable by Grafana; every alert linked to a runbook section
that exists, and listed on the metrics page with that link.

What the queries ask of the scrape, and what promtool says of them, is in
``test_alert_rules.py``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.harness.promql import ASSETS, REPO, dashboard, rules

pytestmark = pytest.mark.unit

# mkdocs' Markdown, a dev dependency: the lowest-versions passes install the extras only
slugify = pytest.importorskip(
    "markdown.extensions.toc", reason="Markdown comes with the docs tools (the dev extra)"
).slugify

DOCS = REPO / "docs"
DOCS_BASE = "https://twopc.invalid/docs/"
"""The placeholder the rules' runbook links start with (the file's header says so)."""

PANEL_TOPICS = {
    "Batches per minute, by outcome": "twopc_batches_total",
    "Rows per committed batch": "twopc_batch_rows_total",
    "Bytes per committed batch": "twopc_batch_bytes_total",
    "Mean time per phase": "twopc_phase_duration_seconds_sum",
    "95th percentile per phase": "twopc_phase_duration_seconds_bucket",
    "Recovery actions (since the writer's process started)": "twopc_recovery_actions_total",
    "Work in doubt": "twopc_in_doubt",
    "Age of the oldest work in doubt": "twopc_in_doubt_oldest_timestamp_seconds",
    "Consumer group lag": "twopc_source_lag",
}
"""The panels issue 49 asks for, and the metric each reads."""


def test_the_docs_hold_the_package_files_and_the_dashboard_is_generated() -> None:
    checked = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "ops-assets"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stderr
    for name in ("twopc-dashboard.json", "twopc-alerts.yaml"):
        assert (DOCS / "monitoring" / name).read_bytes() == (ASSETS / name).read_bytes()


def test_the_dashboard_imports_with_a_data_source_and_a_sink_variable() -> None:
    board = dashboard()
    (source,) = board["__inputs"]
    assert source["type"] == "datasource" and source["pluginId"] == "prometheus"
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert variables["datasource"]["current"]["value"] == "${" + source["name"] + "}"
    sink = variables["sink"]
    assert sink["type"] == "query" and sink["multi"] and sink["includeAll"]
    assert sink["datasource"]["uid"] == "${datasource}"
    assert board["id"] is None and board["uid"]  # a new dashboard on import, stable uid
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))
    for panel in board["panels"]:
        box = panel["gridPos"]
        assert box["x"] >= 0 and box["x"] + box["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}"
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}"
            assert 'sink=~"$sink"' in target["expr"], (panel["title"], target["expr"])
    titles = {p["title"]: p for p in board["panels"]}
    for title, metric in PANEL_TOPICS.items():
        assert metric in titles[title]["targets"][0]["expr"], title


def _anchors(page: Path) -> set[str]:
    """The heading anchors mkdocs gives a page (its toc extension's slugify)."""
    found = set()
    in_code = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        heading = re.match(r"#{1,6}\s+(.*)", line)
        if heading and not in_code:
            found.add(slugify(heading[1].strip(), "-"))
    return found


def _runbook_page(url: str) -> tuple[Path, str]:
    assert url.startswith(DOCS_BASE), url
    parts = urlsplit(url)
    page = parts.path.removeprefix(urlsplit(DOCS_BASE).path).strip("/")
    return DOCS / f"{page}.md", parts.fragment


def test_every_alert_links_a_runbook_section_that_exists() -> None:
    seen = []
    for group in rules()["groups"]:
        for rule in group["rules"]:
            page, anchor = _runbook_page(rule["annotations"]["runbook_url"])
            assert page.name in ("operations.md", "troubleshooting.md"), rule["alert"]
            assert anchor in _anchors(page), f"{rule['alert']}: no #{anchor} in {page.name}"
            assert rule["alert"] in page.read_text(), f"{page.name} does not name {rule['alert']}"
            seen.append(rule["alert"])
    assert len(seen) == 6


def test_the_anchor_check_finds_a_missing_section() -> None:
    page, _ = _runbook_page(DOCS_BASE + "operations/#work-in-doubt")
    assert "work-in-doubt" in _anchors(page)
    assert "no-such-section" not in _anchors(page)


def test_the_metrics_page_links_every_alert_to_its_runbook_section() -> None:
    text = (DOCS / "metrics.md").read_text()
    for group in rules()["groups"]:
        for rule in group["rules"]:
            page, anchor = _runbook_page(rule["annotations"]["runbook_url"])
            link = f"({page.name}#{anchor})"
            start = f"| `{rule['alert']}` |"
            row = next((line for line in text.splitlines() if line.startswith(start)), "")
            assert link in row, f"{rule['alert']}: no table row linking {link}"


def test_the_metrics_page_shows_the_dashboard() -> None:
    text = (DOCS / "metrics.md").read_text()
    image = re.search(r"!\[[^\]]*\]\(([^)]+\.png)\)", text)
    assert image, "no dashboard picture on the metrics page"
    assert (DOCS / image[1]).is_file()
    assert "not Grafana" in text
    for name in ("twopc-dashboard.json", "twopc-alerts.yaml"):
        assert f"monitoring/{name}" in text
