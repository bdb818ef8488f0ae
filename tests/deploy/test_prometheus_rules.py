"""deploy/k8s/base/prometheus-rules.yaml: the alerts use zcbot's real metrics and are documented.

Always: every metric an expression names is one zcbot defines (checked against the source, so a
renamed metric breaks this test, not the alert in production), with labels it has; every alert
has a severity, a summary and a description, and a section in docs/operations.md.
Where promtool exists (Debian package `prometheus`): `promtool check rules` parses every
expression and `promtool test rules` runs tests/deploy/prometheus-rules.test.yaml, which fires
each alert on synthetic series and checks a healthy stack fires none.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

HERE = Path(__file__).resolve().parent

# The metric names of the brief, their kinds and labels.
METRICS: dict[str, tuple[str, set[str]]] = {
    "zcbot_runs_started_total": ("counter", set()),
    "zcbot_runs_finished_total": ("counter", {"status"}),
    "zcbot_run_queue_wait_seconds": ("histogram", set()),
    "zcbot_run_ttft_seconds": ("histogram", set()),
    "zcbot_tool_call_seconds": ("histogram", {"tool"}),
    "zcbot_tool_calls_total": ("counter", {"tool", "outcome"}),
    "zcbot_sse_active_streams": ("gauge", set()),
    "zcbot_executor_sandboxes": ("gauge", set()),
    "zcbot_runner_active_runs": ("gauge", set()),
}
SCRAPE_LABELS = {"instance", "job", "pod", "namespace", "container", "le"}


@pytest.fixture(scope="module")
def rule_doc(repo: Path) -> dict[str, Any]:
    return yaml.safe_load((repo / "deploy" / "k8s" / "base" / "prometheus-rules.yaml").read_text())


@pytest.fixture(scope="module")
def rules(rule_doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [rule for group in rule_doc["spec"]["groups"] for rule in group["rules"]]


def test_metrics_exist_in_the_code(repo: Path) -> None:
    """Each metric is defined by a zcbot service with the kind and labels the alerts assume."""
    sources = "\n".join(p.read_text() for root in ("services", "libs") for p in (repo / root).rglob("*.py"))
    kinds = {"counter": "Counter", "gauge": "Gauge", "histogram": "Histogram"}
    for name, (kind, labels) in METRICS.items():
        m = re.search(rf'{kinds[kind]}\(\s*"{name}"\s*,\s*"[^"]*"\s*(?:,\s*\[([^\]]*)\])?', sources)
        assert m, f"{name} is not defined as a {kinds[kind]} in services/ or libs/"
        defined = set(re.findall(r'"([a-z_]+)"', m.group(1) or ""))
        assert defined == labels, (name, defined)


def test_expressions_use_known_metrics_and_labels(rules: list[dict[str, Any]]) -> None:
    for rule in rules:
        expr = rule["expr"]
        assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}"), rule["alert"]
        names = set(re.findall(r"\bzcbot_[a-z_]+", expr))
        assert names, rule["alert"]
        for name in names:
            base = re.sub(r"_(bucket|sum|count)$", "", name) if name not in METRICS else name
            assert base in METRICS, (rule["alert"], name)
            kind, labels = METRICS[base]
            if name != base:
                assert kind == "histogram", (rule["alert"], name)
        for fn_arg in re.findall(r"histogram_quantile\([^,]+,\s*(.*)", expr, re.S):
            assert "_bucket" in fn_arg, rule["alert"]
        for metric, matchers in re.findall(r"\b(zcbot_[a-z_]+)\{([^}]*)\}", expr):
            base = re.sub(r"_(bucket|sum|count)$", "", metric) if metric not in METRICS else metric
            used = set(re.findall(r"([a-z_]+)\s*(?:=~|!=|!~|=)", matchers))
            assert used <= METRICS[base][1] | SCRAPE_LABELS, (rule["alert"], used)
        for grouping in re.findall(r"\bby\s*\(([^)]*)\)", expr):
            used = {g.strip() for g in grouping.split(",") if g.strip()}
            allowed = set().union(*(METRICS[re.sub(r"_(bucket|sum|count)$", "", n) if n not in METRICS else n][1]
                                    for n in names)) | SCRAPE_LABELS
            assert used <= allowed, (rule["alert"], used)


def test_file_tool_names_are_sandbox_tools(rules: list[dict[str, Any]]) -> None:
    from zcbot_core.tools.sandbox_schemas import SANDBOX_TOOL_NAMES

    for rule in rules:
        for alternatives in re.findall(r'tool=~"([^"]+)"', rule["expr"]):
            assert set(alternatives.split("|")) <= SANDBOX_TOOL_NAMES, rule["alert"]


def test_every_metric_is_alerted_on(rules: list[dict[str, Any]]) -> None:
    used = {re.sub(r"_(bucket|sum|count)$", "", n) if n not in METRICS else n
            for rule in rules for n in re.findall(r"\bzcbot_[a-z_]+", rule["expr"])}
    assert used == set(METRICS)


def test_alerts_are_labelled_annotated_and_documented(repo: Path, rules: list[dict[str, Any]]) -> None:
    docs = (repo / "docs" / "operations.md").read_text()
    names = [rule["alert"] for rule in rules]
    assert len(names) == len(set(names))
    for rule in rules:
        assert rule["labels"]["severity"] in {"critical", "warning"}, rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]
        assert re.search(rf"^#+ .*`?{rule['alert']}`?", docs, re.M), f"{rule['alert']} has no section in docs/operations.md"


def _promtool() -> str:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.skip("promtool not installed (apt-get install prometheus); static checks above still ran")
    return binary


def _rules_file(rule_doc: dict[str, Any], tmp_path: Path) -> Path:
    path = tmp_path / "zcbot-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": rule_doc["spec"]["groups"]}, sort_keys=False))
    return path


def test_promtool_check_rules(rule_doc: dict[str, Any], tmp_path: Path) -> None:
    promtool = _promtool()
    out = subprocess.run([promtool, "check", "rules", str(_rules_file(rule_doc, tmp_path))],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_promtool_unit_tests(rule_doc: dict[str, Any], tmp_path: Path) -> None:
    promtool = _promtool()
    rules_file = _rules_file(rule_doc, tmp_path)
    spec = yaml.safe_load((HERE / "prometheus-rules.test.yaml").read_text())
    spec["rule_files"] = [str(rules_file)]
    alerts = {rule["alert"] for group in rule_doc["spec"]["groups"] for rule in group["rules"]}
    fired = {case["alertname"] for test in spec["tests"] for case in test["alert_rule_test"] if case["exp_alerts"]}
    quiet = {case["alertname"] for test in spec["tests"][:1] for case in test["alert_rule_test"] if not case["exp_alerts"]}
    assert fired == alerts, "every alert fires in some test case"
    assert quiet == alerts, "the first test case (a healthy stack) checks that no alert fires"
    test_file = tmp_path / "zcbot-rules.test.yaml"
    test_file.write_text(yaml.safe_dump(spec, sort_keys=False))
    out = subprocess.run([promtool, "test", "rules", str(test_file)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
