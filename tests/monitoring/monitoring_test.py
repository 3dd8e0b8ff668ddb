"""contrib/monitoring: the alert rules pass promtool, and every metric the Grafana dashboard and
the rules read is one a real sundiald exports (docs/monitoring.md).

The exported names are not listed here: they come from scraping the /metrics of a real
sundiald (the release build's, $SUNDIALD) after it has done enough that every series exists
(a lease has expired, a message is blocked, a request was refused), so a metric renamed in
server/metrics.cc fails this test until the dashboard and the rules follow.
"""

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request

import sys

import pytest
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "replication"))
from cluster_harness import Cluster  # noqa: E402
MONITORING = os.path.join(ROOT, "contrib", "monitoring")
DASHBOARD = os.path.join(MONITORING, "sundial-dashboard.json")
RULES = os.path.join(MONITORING, "sundial-alerts.yml")
RULE_TESTS = os.path.join(MONITORING, "sundial-alerts.test.yml")
BUILD = os.path.join(ROOT, "build", "release")
SUNDIALD = os.environ.get("SUNDIALD") or os.path.join(BUILD, "server", "sundiald")
CLI = os.environ.get("SUNDIAL_CLI") or os.path.join(BUILD, "tools", "sundial")

# Series Prometheus makes itself for every target, and the labels it adds to every series.
PROMETHEUS_SERIES = {"up"}
TARGET_LABELS = {"instance", "job"}

# ---- What a PromQL expression reads -------------------------------------------------------

KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
            "unless", "offset", "inf", "nan"}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHER = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*")')
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)")


class Reads:
    """The metric names, label names and label values one expression reads."""

    def __init__(self):
        self.metrics = set()
        self.labels = {}  # metric -> {label: [(operator, value)]}
        self.grouping = set()  # labels of by/without/on/ignoring/group_*


def promql_reads(expr):
    """Parses just enough PromQL: selectors `name{matchers}`, functions and aggregations
    (identifiers followed by '('), grouping clauses, keywords, durations and numbers."""
    reads = Reads()
    # Grafana's variables are not PromQL: $__rate_interval in a range, $queue in a string.
    text = expr.replace("$__rate_interval", "5m").replace("$__interval", "1m")
    for clause, labels in _GROUPING.findall(text):
        reads.grouping.update(l.strip() for l in labels.split(",") if l.strip())
    text = _GROUPING.sub(" ", text)
    # Selectors with matchers: read them, then blank them out.
    pos = 0
    stripped = []
    for m in re.finditer(r"([A-Za-z_:][A-Za-z0-9_:]*)?\s*\{([^{}]*)\}", text):
        name, body = m.group(1), m.group(2)
        if name in KEYWORDS:
            name = None
        matchers = [(l, op, json.loads(v)) for l, op, v in _MATCHER.findall(body)]
        metric = name
        for label, op, value in matchers:
            if label == "__name__" and op == "=":
                metric = value
        if metric is None:
            raise ValueError(f"a selector without a metric name: {m.group(0)!r} in {expr!r}")
        reads.metrics.add(metric)
        per = reads.labels.setdefault(metric, {})
        for label, op, value in matchers:
            if label != "__name__":
                per.setdefault(label, []).append((op, value))
        stripped.append(text[pos:m.start()])
        stripped.append(" ")
        pos = m.end()
    stripped.append(text[pos:])
    text = "".join(stripped)
    text = _STRING.sub(" ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries
    for m in _IDENT.finditer(text):
        word = m.group(0)
        following = text[m.end():].lstrip()
        if following.startswith("(") or word.lower() in KEYWORDS:
            continue
        if re.fullmatch(r"\d+[smhdwy]", word) or text[m.start() - 1:m.start()].isdigit():
            continue
        reads.metrics.add(word)
    return reads


def dashboard_exprs(dashboard):
    """(where, PromQL) of every query of the dashboard: panel targets (rows' nested panels too)
    and template variables (label_values(SELECTOR, LABEL) as the selector and its label)."""
    out = []

    def panels(items):
        for p in items:
            yield p
            yield from panels(p.get("panels", []))

    for p in panels(dashboard.get("panels", [])):
        for t in p.get("targets", []):
            out.append((f"panel {p.get('title')!r}", t["expr"]))
    for v in dashboard.get("templating", {}).get("list", []):
        if v.get("type") != "query":
            continue
        query = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        m = re.fullmatch(r"\s*label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\s*\)\s*", query)
        assert m, f"variable {v['name']}: only label_values(selector, label) is checked: {query}"
        out.append((f"variable {v['name']!r}", f"count by ({m.group(2)}) ({m.group(1)})"))
    return out


def rules_exprs(rules):
    return [(f"rule {r.get('alert') or r.get('record')!r}", r["expr"])
            for g in rules["groups"] for r in g["rules"]]


# ---- What a server exports ----------------------------------------------------------------

class Exported:
    def __init__(self, text):
        self.labels = {}  # sample name -> {label: {values}}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            m = re.match(r"([A-Za-z_:][A-Za-z0-9_:]*)(\{(.*)\})? ", line)
            assert m, f"unparsable /metrics line: {line!r}"
            per = self.labels.setdefault(m.group(1), {})
            for label, value in re.findall(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"',
                                           m.group(3) or ""):
                per.setdefault(label, set()).add(value)


def problems(exprs, exported):
    """Every name, label or value the expressions read that the scrape does not have."""
    found = []
    all_labels = set(TARGET_LABELS)
    for per in exported.labels.values():
        all_labels.update(per)
    for where, expr in exprs:
        reads = promql_reads(expr)
        for metric in sorted(reads.metrics):
            if metric in PROMETHEUS_SERIES:
                continue
            if metric not in exported.labels:
                found.append(f"{where}: {metric} is not exported by sundiald ({expr})")
                continue
            for label, matchers in reads.labels.get(metric, {}).items():
                have = exported.labels[metric].get(label)
                if have is None:
                    if label not in TARGET_LABELS:
                        found.append(f"{where}: {metric} has no label {label!r}")
                    continue
                for op, value in matchers:
                    if op == "=" and value not in have:
                        found.append(f"{where}: {metric}{{{label}={value!r}}} never exported "
                                     f"(seen: {sorted(have)})")
                    if op == "=~" and re.fullmatch(r"[A-Za-z0-9_|]+", value):
                        for v in value.split("|"):
                            if v not in have:
                                found.append(f"{where}: {metric}{{{label}=~...{v}...}} never "
                                             f"exported (seen: {sorted(have)})")
        for label in sorted(reads.grouping - all_labels):
            found.append(f"{where}: groups by {label!r}, which no exported series has")
    return found


# ---- A real server ------------------------------------------------------------------------

def wait_for(condition, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def scrape():
    """The /metrics text of a sundiald that has a memory budget, a completed, a failed
    (errored) and an expired message, a blocked one in an exclusive queue, and a refused
    request."""
    for path in (SUNDIALD, CLI):
        if not os.access(path, os.X_OK):
            pytest.fail(f"no {path}: build the release preset (make build)")
    tmp = tempfile.mkdtemp(prefix="sundial-monitoring-")
    ready = os.path.join(tmp, "ready.json")
    log = open(os.path.join(tmp, "sundiald.log"), "wb")
    proc = subprocess.Popen([SUNDIALD, "--data-dir", os.path.join(tmp, "data"), "--port", "0",
                             "--http-port", "0", "--ready-file", ready, "--max-memory", "64M",
                             "--io-threads", "1"], stdout=log, stderr=log)
    try:
        def read_ready():
            assert proc.poll() is None, f"sundiald exited with {proc.returncode}"
            if os.path.exists(ready):
                with open(ready) as f:
                    return json.load(f)
            return None

        info = wait_for(read_ready, what="sundiald's --ready-file")
        addr = f"127.0.0.1:{info['port']}"

        def cli(*args, ok=True):
            r = subprocess.run([CLI, "--addr", addr, *args], capture_output=True, text=True,
                               timeout=30)
            assert (r.returncode == 0) == ok, f"sundial {' '.join(args)}: {r.stderr}"
            return [json.loads(line) for line in r.stdout.splitlines()]

        cli("create-queue", "mon", "--max-attempts", "1")
        for i in range(3):
            cli("enqueue", "mon", "--payload", f"m{i}")
        m = cli("dequeue", "mon")[0]
        cli("complete", "mon", m["id"], str(m["lease_token"]))
        cli("complete", "mon", m["id"], "12345", ok=False)  # a refused request: a code not OK
        m = cli("dequeue", "mon")[0]
        cli("fail", "mon", m["id"], str(m["lease_token"]), "--error", "boom")  # errored
        cli("enqueue", "mon-expiring", "--payload", "abandoned")
        cli("dequeue", "mon-expiring", "--lease-ms", "1")  # expires at once, back to pending
        cli("create-queue", "mon-exclusive", "--type", "exclusive", "--exclusivity-key", "k")
        cli("enqueue", "mon-exclusive", "--meta", "k=a", "--payload", "first")
        cli("enqueue", "mon-exclusive", "--meta", "k=a", "--payload", "second")
        cli("dequeue", "mon-exclusive")  # the second is now blocked behind the first

        url = f"http://127.0.0.1:{info['http_port']}/metrics"

        def expired():
            text = urllib.request.urlopen(url, timeout=10).read().decode()
            return text if 'sundial_lease_expirations_total{queue="mon-expiring"} 1' in text \
                else None

        return wait_for(expired, what="the lease expiration to show in /metrics")
    finally:
        proc.terminate()
        assert proc.wait(60) == 0
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster_scrape():
    """The /metrics texts of a two-node cluster (etcd on loopback): the primary once its
    standby is connected, caught up and published as the synchronous standby, and the
    standby's: every cluster series exists in one of them."""
    if not os.access(SUNDIALD, os.X_OK):
        pytest.fail(f"no {SUNDIALD}: build the release preset (make build)")
    with Cluster(SUNDIALD, nodes=2, ttl_s=2, flags=["--ha-loop-ms", "100"]) as c:
        primary = c.wait_primary()
        standby = c.standbys(primary)[0]

        def settled():
            text = primary.metrics()
            return text if ("sundial_replication_sync_standby_connected 1" in text and
                            f'sundial_replication_lag_records{{standby="{standby.name}"}}'
                            in text) else None

        primary_text = wait_for(settled, what="the primary's synchronous standby")
        standby_text = wait_for(lambda: (lambda t: t if "sundial_standby_connected 1" in t
                                         else None)(standby.metrics()),
                                what="the standby connected")
        return primary_text + standby_text


def load_dashboard():
    with open(DASHBOARD) as f:
        return json.load(f)


def load_rules():
    with open(RULES) as f:
        return yaml.safe_load(f)


# ---- The tests ----------------------------------------------------------------------------

def test_promtool_accepts_the_rules():
    r = subprocess.run(["promtool", "check", "rules", RULES], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "SUCCESS" in r.stdout


def test_each_alert_fires_on_its_unit_test_series_and_only_there():
    r = subprocess.run(["promtool", "test", "rules", os.path.basename(RULE_TESTS)],
                       cwd=MONITORING, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def test_every_alert_has_a_unit_test():
    with open(RULE_TESTS) as f:
        tests = yaml.safe_load(f)
    tested = {a["alertname"] for t in tests["tests"] for a in t.get("alert_rule_test", [])
              if a.get("exp_alerts")}
    alerts = {r["alert"] for g in load_rules()["groups"] for r in g["rules"] if "alert" in r}
    assert alerts - tested == set()


def test_the_exported_series_include_what_the_scenario_makes(scrape):
    exported = Exported(scrape)
    assert exported.labels["sundial_messages_blocked"]["queue"] >= {"mon-exclusive"}
    assert 'sundial_messages_blocked{queue="mon-exclusive"} 1' in scrape
    assert 'sundial_messages{queue="mon",state="errored"} 1' in scrape
    assert "sundial_memory_budget_bytes 67108864" in scrape


def test_the_dashboard_reads_only_what_sundiald_exports(scrape, cluster_scrape):
    exprs = dashboard_exprs(load_dashboard())
    assert len(exprs) > 20
    assert problems(exprs, Exported(scrape + cluster_scrape)) == []


def test_the_rules_read_only_what_sundiald_exports(scrape, cluster_scrape):
    exprs = rules_exprs(load_rules())
    assert len(exprs) >= 13
    assert problems(exprs, Exported(scrape + cluster_scrape)) == []


def test_a_cluster_exports_the_role_epoch_and_replication_series(scrape, cluster_scrape):
    standalone = Exported(scrape)
    assert 'sundial_role{role="standalone"} 1' in scrape
    assert "sundial_epoch 0" in scrape
    assert "sundial_cluster_info" not in standalone.labels
    cluster = Exported(cluster_scrape)
    assert cluster.labels["sundial_role"]["role"] == {"standalone", "primary", "standby",
                                                      "unknown"}
    for name in ["sundial_cluster_info", "sundial_etcd_reachable", "sundial_promotions_total",
                 "sundial_replication_lag_records", "sundial_replication_lag_seconds",
                 "sundial_replication_standby_connected", "sundial_replication_sync_standby",
                 "sundial_replication_sync_standby_connected", "sundial_standby_connected",
                 "sundial_standby_lag_records"]:
        assert name in cluster.labels, name
    assert 'sundial_role{role="primary"} 1' in cluster_scrape
    assert 'sundial_role{role="standby"} 1' in cluster_scrape


def test_a_metric_sundiald_does_not_export_is_caught(scrape, cluster_scrape):
    exported = Exported(scrape + cluster_scrape)
    dashboard = load_dashboard()
    dashboard["panels"].append({"title": "bogus", "targets": [
        {"expr": 'sum(rate(sundial_messages_totl{op="enqueue"}[5m]))'},
        {"expr": 'sundial_messages{state="stuck"}'},
        {"expr": 'sum by (tenant) (sundial_messages)'},
        {"expr": 'sundial_wal_failed{shard="1"}'}]})
    found = problems(dashboard_exprs(dashboard), exported)
    assert len(found) == 4, found
    assert "sundial_messages_totl is not exported" in found[0]
    assert "'stuck'" in found[1]
    assert "'tenant'" in found[2]
    assert "no label 'shard'" in found[3]


def test_the_expression_reader_finds_every_metric_and_nothing_else():
    reads = promql_reads(
        'histogram_quantile(0.99, sum by (op, le) (rate(sundial_request_duration_seconds_bucket'
        '{instance=~"$instance"}[$__rate_interval]))) / on (instance) group_left '
        'sundial_memory_bytes > bool 0.5 and sundial_wal_failed offset 5m or vector(1e3)')
    assert reads.metrics == {"sundial_request_duration_seconds_bucket", "sundial_memory_bytes",
                             "sundial_wal_failed"}
    assert reads.grouping == {"op", "le", "instance"}
    assert reads.labels["sundial_request_duration_seconds_bucket"] == {
        "instance": [("=~", "$instance")]}


def test_the_dashboard_imports_cleanly():
    """What Grafana's import and file provisioning need: a uid, panels with unique ids that do
    not overlap, every query on the dashboard's data source variable."""
    d = load_dashboard()
    assert d["uid"] and d["title"] and d["schemaVersion"] >= 36
    assert "__inputs" not in d  # a ${datasource} variable works for both import and provisioning
    variables = {v["name"]: v for v in d["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    cells = set()
    for p in d["panels"]:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"panel {p['title']!r} overlaps another"
                cells.add((x, y))
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p.get("description"), f"panel {p['title']!r} has no description"
        for t in p["targets"]:
            assert t["datasource"] == p["datasource"]


def test_the_dashboard_covers_what_operators_watch():
    reads = set()
    for _, expr in dashboard_exprs(load_dashboard()):
        reads |= promql_reads(expr).metrics
    for metric in ["sundial_messages", "sundial_messages_total", "sundial_messages_blocked",
                   "sundial_oldest_pending_age_seconds", "sundial_wal_fsync_duration_seconds_bucket",
                   "sundial_wal_failed", "sundial_memory_bytes", "sundial_memory_budget_bytes",
                   "sundial_connections", "sundial_operations_total", "sundial_role",
                   "sundial_epoch", "sundial_replication_lag_records",
                   "sundial_replication_sync_standby", "sundial_standby_connected"]:
        assert metric in reads, metric
