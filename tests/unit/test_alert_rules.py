"""The shipped dashboard and alerting rules, tested on the figures of real runs.

The runs (:mod:`tests.harness.alert_runs`) write five sink ids through the local engine
and the files sink, with faults injected so that every alert's condition occurs, and scrape
the Prometheus endpoint after every batch. On that timeline:

* every metric, label and label value the dashboard's and the rules' PromQL names is in
  the scrape;
* promtool (``scripts/promtool``: Prometheus v0.316.0, built from the Go module proxy)
  checks the rules file as shipped, parses every panel's query, and runs unit tests whose
  input series are the scrapes: each alert fires for the sink whose fault it is about, at
  the moment it should, and for no other; on a run without faults none fires; and every
  panel shows data.

promtool compares an alert's annotations exactly, and the summary and description hold
the alert's value, so its unit tests load the rules with the annotations cut to
``runbook_url``; expressions, ``for`` and labels are the shipped ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.harness.alert_runs import Scrape, run_scenarios
from tests.harness.promql import (
    OFFSET_MINUTES,
    alert_names,
    dashboard,
    input_series,
    labels_of,
    panel_queries,
    promtool,
    queries,
    rules,
    run_promtool,
    used_names,
    without_texts,
    write_yaml,
)

pytestmark = pytest.mark.unit

HOLD = 60
"""Minutes the last scrape's values are held after the runs (the processes live on)."""


@pytest.fixture(scope="module")
def timelines(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Scrape]]:
    root = tmp_path_factory.mktemp("alerts")
    return {
        "faults": run_scenarios(root / "faults"),
        "clean": run_scenarios(root / "clean", ("clean",)),
    }


@pytest.fixture(scope="module")
def binary() -> str:
    return promtool()


def _samples(timeline: list[Scrape]) -> list[Any]:
    return [s for scrape in timeline for s in scrape.samples]


def test_the_runs_show_each_fault(timelines: dict[str, list[Scrape]]) -> None:
    """The scenarios did what the alerts are about (read from the last scrape)."""
    last = timelines["faults"][-1]
    assert last.values("twopc_batches_total", status="failed") == {
        "clean": 0,
        "failing": 2,
        "stuck": 2,
        "crashed": 0,
        "shared": 1,
    }
    assert last.values("twopc_in_doubt") == {
        "clean": 0,
        "failing": 0,
        "stuck": 2,
        "crashed": 0,
        "shared": 0,
    }
    assert set(last.values("twopc_in_doubt_oldest_timestamp_seconds")) == {"stuck"}
    retries = last.values("twopc_batch_retries_total", phase="commit")
    assert retries["stuck"] == 4 and {v for k, v in retries.items() if k != "stuck"} == {0}
    aborted = last.values("twopc_recovery_actions_total", action="aborted")
    assert aborted["crashed"] == 2 and {v for k, v in aborted.items() if k != "crashed"} == {0}
    conflicts = last.values("twopc_writer_conflicts_total")
    assert conflicts["shared"] == 1 and {v for k, v in conflicts.items() if k != "shared"} == {0}
    assert set(last.values("twopc_last_commit_timestamp_seconds")) == {
        "clean",
        "failing",
        "stuck",
        "crashed",
    }
    assert last.values("twopc_source_lag") == {"clean": 24}
    assert last.values("twopc_batches_total", status="committed")["clean"] == 48


def test_every_name_and_label_the_queries_use_is_scraped(
    timelines: dict[str, list[Scrape]],
) -> None:
    samples = _samples(timelines["faults"])
    scraped = {s.name for s in samples}
    legends = {query: legend for _, query, legend in panel_queries(dashboard())}
    checked = 0
    for query in queries():
        used = used_names(query, legends.get(query, ""))
        assert used.names, f"no twopc metric in {query!r}"
        for name in used.names:
            assert name in scraped, f"{name} (in {query!r}) is not in the scrape"
            checked += 1
        labels = set.union(*(labels_of(samples, name) for name in used.names))
        missing = used.labels - labels
        assert not missing, f"{query!r} uses labels {missing} its metrics do not carry"
        for name, by_label in used.values.items():
            for label, values in by_label.items():
                seen = {s.labels.get(label) for s in samples if s.name == name}
                assert values <= seen, f"{name}{{{label}={values}}} is not in the scrape"
    assert checked > 20


def test_promtool_checks_the_rules_as_shipped(binary: str) -> None:
    from tests.harness.promql import ASSETS

    checked = run_promtool(binary, "check", "rules", ASSETS / "twopc-alerts.yaml")
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alert_names())} rules found" in checked.stdout


def test_promtool_parses_every_panel_query(binary: str, tmp_path: Path) -> None:
    """Each panel's query (its variables filled in) as a recording rule: promtool's
    ``check rules`` parses it with Prometheus's own parser."""
    recorded = [
        {"record": f"twopc_panel:{i}", "expr": query}
        for i, (_, query, _) in enumerate(panel_queries(dashboard()))
    ]
    path = write_yaml(tmp_path / "panels.yaml", {"groups": [{"name": "p", "rules": recorded}]})
    checked = run_promtool(binary, "check", "rules", path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    broken = [{"record": "twopc_panel:broken", "expr": "sum by (sink (twopc_in_doubt)"}]
    path = write_yaml(tmp_path / "broken.yaml", {"groups": [{"name": "p", "rules": broken}]})
    assert run_promtool(binary, "check", "rules", path).returncode != 0  # it does parse


def _expected(fault_minute: int, end_minute: int) -> dict[int, dict[str, set[str]]]:
    """Which sinks each alert fires for: before any fault, right after the faults, and
    long after them (only the state that lasts: work in doubt, no commit)."""
    quiet: dict[str, set[str]] = {alert: set() for alert in alert_names()}
    return {
        OFFSET_MINUTES + 2: quiet,
        fault_minute: {
            **quiet,
            "TwopcBatchesFailing": {"failing", "stuck"},
            "TwopcCommitRetried": {"stuck"},
            "TwopcSecondWriter": {"shared"},
            "TwopcRecoveryAborted": {"crashed"},
        },
        end_minute: {
            **quiet,
            "TwopcInDoubtWorkOld": {"stuck"},
            "TwopcNoCommittedBatch": {"failing", "stuck", "crashed"},
        },
    }


def _alert_tests(expected: dict[int, dict[str, set[str]]]) -> list[dict[str, Any]]:
    severity = {
        rule["alert"]: rule["labels"]["severity"]
        for group in rules()["groups"]
        for rule in group["rules"]
    }
    runbook = {
        rule["alert"]: rule["annotations"]["runbook_url"]
        for group in rules()["groups"]
        for rule in group["rules"]
    }
    return [
        {
            "eval_time": f"{minute}m",
            "alertname": alert,
            "exp_alerts": [
                {
                    "exp_labels": {"severity": severity[alert], "sink": sink},
                    "exp_annotations": {"runbook_url": runbook[alert]},
                }
                for sink in sorted(sinks)
            ],
        }
        for minute, alerts in expected.items()
        for alert, sinks in alerts.items()
    ]


def _panels_with_data(minute: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Each panel's query as an alert that fires when the query returns anything, and
    the test that it fires at ``minute``."""
    checks, tests = [], []
    for i, (title, query, _) in enumerate(panel_queries(dashboard())):
        name = f"Panel{i}"
        checks.append({"alert": name, "expr": f"count({query}) > 0", "labels": {"panel": title}})
        tests.append(
            {
                "eval_time": f"{minute}m",
                "alertname": name,
                "exp_alerts": [{"exp_labels": {"panel": title}}],
            }
        )
    return checks, tests


def test_each_alert_fires_on_its_fault_and_not_on_a_clean_run(
    binary: str, timelines: dict[str, list[Scrape]], tmp_path: Path
) -> None:
    faults, clean = timelines["faults"], timelines["clean"]
    # "shared", the last faulted sink, fails in the scrape where it first appears
    shared_at = next(
        i
        for i, scrape in enumerate(faults)
        if "shared" in {s.labels["sink"] for s in scrape.samples}
    )
    fault_minute = OFFSET_MINUTES + shared_at + 1
    end_minute = OFFSET_MINUTES + len(faults) + 20
    expected = _expected(fault_minute, end_minute)
    rules_file = write_yaml(tmp_path / "rules.yaml", without_texts(rules()))
    # while "clean" still commits: every panel has points
    checks, panel_tests = _panels_with_data(OFFSET_MINUTES + len(faults) - 2)
    panels_file = write_yaml(tmp_path / "panels.yaml", {"groups": [{"name": "p", "rules": checks}]})
    clean_minutes = (OFFSET_MINUTES + 2, OFFSET_MINUTES + len(clean) // 2, end_minute - 10)
    quiet = {minute: {alert: set[str]() for alert in alert_names()} for minute in clean_minutes}
    body = {
        "rule_files": [str(rules_file), str(panels_file)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "name": "faults",
                "interval": "1m",
                "input_series": input_series(faults, HOLD),
                "alert_rule_test": _alert_tests(expected) + panel_tests,
            },
            {
                "name": "clean",
                "interval": "1m",
                "input_series": input_series(clean, HOLD),
                "alert_rule_test": _alert_tests(quiet),
            },
        ],
    }
    tests_file = write_yaml(tmp_path / "tests.yaml", body)
    ran = run_promtool(binary, "test", "rules", tests_file)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "SUCCESS" in ran.stdout


def test_promtool_tests_fail_when_an_alert_is_expected_but_quiet(
    binary: str, timelines: dict[str, list[Scrape]], tmp_path: Path
) -> None:
    """The harness can fail: the clean run with TwopcInDoubtWorkOld expected is refused."""
    rules_file = write_yaml(tmp_path / "rules.yaml", without_texts(rules()))
    wrong = {OFFSET_MINUTES + len(timelines["clean"]): {"TwopcInDoubtWorkOld": {"clean"}}}
    body = {
        "rule_files": [str(rules_file)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": input_series(timelines["clean"], HOLD),
                "alert_rule_test": _alert_tests(wrong),
            }
        ],
    }
    ran = run_promtool(binary, "test", "rules", write_yaml(tmp_path / "tests.yaml", body))
    assert ran.returncode != 0 and "TwopcInDoubtWorkOld" in ran.stdout + ran.stderr
