# SPDX-License-Identifier: Apache-2.0
"""The Grafana dashboard (docs/grafana/inaswitch.json) and the alert rules
(docs/prometheus/alerts.yml) query what a live switch exports, as Prometheus stores it.

A switch with an INA job, an RDMA server-to-switch job and a server-to-server job (the first
two deterministic, so the fixed-point series exist) runs in the testbed; Prometheus itself (Debian's `prometheus`)
scrapes it every second with the rules loaded. Asserted: every `inaswitch_*` metric any panel,
template variable or rule names has a series in Prometheus; the switch's INA `job` label is
stored as `exported_job` (what the rules and panels group by); every panel expression and
every rule expression is valid PromQL that Prometheus evaluates; and Prometheus reports every
rule of the file loaded and healthy after evaluating it against the scraped data.

    /usr/bin/python3 test_prometheus.py build/src/app/inaswitch
"""

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from testbed import (Host, Port, Testbed, TestFailure, check, free_tcp_port, log,  # noqa: E402
                     main, wait_until)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DASHBOARD = os.path.join(REPO, "docs", "grafana", "inaswitch.json")
RULES = os.path.join(REPO, "docs", "prometheus", "alerts.yml")
METRIC = re.compile(r"\binaswitch_[a-z0-9_]+")


def dashboard_exprs() -> list[str]:
    with open(DASHBOARD) as f:
        dash = json.load(f)
    exprs = []
    for panel in dash["panels"]:
        exprs += [t["expr"] for t in panel.get("targets", [])]
    for var in dash["templating"]["list"]:
        if var["type"] == "query":
            exprs.append(var["definition"])
    return exprs


def rule_exprs() -> list[str]:
    """The `expr:` values of the rules file (plain or block scalars); no YAML module needed."""
    exprs, current, indent = [], None, 0
    for line in open(RULES):
        stripped = line.strip()
        if current is not None:
            if stripped and (len(line) - len(line.lstrip())) > indent:
                current.append(stripped)
                continue
            exprs.append(" ".join(current))
            current = None
        if stripped.startswith("expr:"):
            value = stripped[len("expr:"):].strip()
            if value in ("|", ">"):
                current, indent = [], len(line) - len(line.lstrip())
            else:
                exprs.append(value)
    if current:
        exprs.append(" ".join(current))
    return exprs


class Prometheus:
    def __init__(self, target: str, workdir: str):
        self.port = free_tcp_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = os.path.join(workdir, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    f"rule_files:\n  - {RULES}\n"
                    "scrape_configs:\n  - job_name: inaswitch\n"
                    f"    static_configs:\n      - targets: ['{target}']\n")
        self.log = open(os.path.join(workdir, "prometheus.log"), "w")
        self.proc = subprocess.Popen(
            ["prometheus", f"--config.file={config}",
             f"--storage.tsdb.path={os.path.join(workdir, 'data')}",
             f"--web.listen-address=127.0.0.1:{self.port}"],
            stdout=self.log, stderr=subprocess.STDOUT)

    def api(self, path: str, **params) -> dict:
        if self.proc.poll() is not None:
            raise TestFailure(f"prometheus exited {self.proc.returncode}")
        url = f"{self.url}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params)
        with urllib.request.urlopen(url, timeout=10) as r:
            return json.load(r)

    def query(self, expr: str) -> dict:
        try:
            return self.api("query", query=expr)
        except urllib.error.HTTPError as e:
            return json.load(e)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.log.close()


def test(switch_exe: str) -> None:
    if shutil.which("prometheus") is None:
        raise TestFailure("prometheus is not installed (.ci/setup installs it)")
    hosts = [Host("h1", "10.0.1.2/24"), Host("h2", "10.0.2.2/24")]
    ports = [Port("p0", ipv4=["10.0.1.1/24"], host=hosts[0]),
             Port("p1", ipv4=["10.0.2.1/24"], host=hosts[1])]
    job = {"job_id": 1, "role": "root", "bsl": 64, "abm": "1-2", "op": "sum",
           "elem_type": "fp32", "max_elements": 256, "window": 64, "root": "10.0.1.1",
           "workers": [{"bfr_id": 1, "ip": "10.0.1.2"}, {"bfr_id": 2, "ip": "10.0.2.2"}],
           "deterministic": True}
    # An RDMA server-to-switch job beside it (no QP connected): its job series exist (both
    # deterministic: the fixed-point series too).
    rdma_job = {"id": 7, "mode": "server-to-switch", "world": 2, "op": "sum", "dtype": "fp32",
                "chunk_bytes": 1024, "window": 64, "deterministic": True}
    # And a server-to-server job learning its connections (none come): its series exist.
    s2s_job = {"id": 3, "root": "10.0.2.2", "world": 2, "learn": True}
    panels, rules = dashboard_exprs(), rule_exprs()
    check(len(rules) == 7, f"{len(rules)} rule expressions read from alerts.yml")
    names = sorted({m for e in panels + rules for m in METRIC.findall(e)})
    log(f"{len(panels)} dashboard expressions, {len(rules)} rules, {len(names)} metrics: "
        f"{', '.join(names)}")
    workdir = tempfile.mkdtemp(prefix="inae2e-prom-")
    prom = None
    try:
        with Testbed(switch_exe, ports,
                     extra={"ina": {"jobs": [job]}, "rdma": {"jobs": [rdma_job]},
                            "rdma_s2s": {"jobs": [s2s_job]}}) as tb:
            hosts[0].wait_reachable(hosts[1].ip)  # traffic: port counters move
            prom = Prometheus(tb.api.removeprefix("http://"), workdir)
            wait_until(lambda: any(r["value"][1] == "1" for r in
                                   prom.api("query", query='up{job="inaswitch"}')["data"]
                                   ["result"]),
                       60, "Prometheus to scrape the switch")
            missing = [n for n in names
                       if not prom.api("query", query=f'count({{__name__="{n}"}})')["data"]
                       ["result"]]
            check(not missing, f"all {len(names)} metrics the dashboard and rules query have "
                  f"series in Prometheus" + (f"; missing: {missing}" if missing else ""))
            by_job = prom.api("query", query="count by (exported_job) "
                              "(inaswitch_ina_job_slots_in_use)")["data"]["result"]
            check([r["metric"].get("exported_job") for r in by_job] == ["1"],
                  "the switch's INA job label is stored as exported_job (job 1)")
            bad = []
            for e in panels:
                q = e.replace("$__rate_interval", "1m").replace("$instance", ".*")
                if q.startswith("label_values("):
                    continue  # a Grafana function: its metric was checked above
                r = prom.query(q)
                if r.get("status") != "success":
                    bad.append(f"{q}: {r.get('error')}")
            for e in rules:
                r = prom.query(e)
                if r.get("status") != "success":
                    bad.append(f"{e}: {r.get('error')}")
            check(not bad, f"Prometheus evaluates all {len(panels)} panel and {len(rules)} rule "
                  "expressions" + (f"; errors: {bad}" if bad else ""))

            def rules_evaluated():
                groups = prom.api("rules")["data"]["groups"]
                loaded = [r for g in groups for r in g["rules"]]
                if len(loaded) != len(rules) or \
                        any(r.get("lastEvaluation", "").startswith("0001") for r in loaded):
                    return None
                return loaded
            loaded = wait_until(rules_evaluated, 30, "Prometheus to evaluate every rule")
            unhealthy = [(r["name"], r.get("lastError")) for r in loaded if r["health"] != "ok"]
            check(not unhealthy, f"Prometheus loaded and evaluated all {len(loaded)} rules "
                  f"healthy: {', '.join(r['name'] for r in loaded)}"
                  + (f"; unhealthy: {unhealthy}" if unhealthy else ""))
    finally:
        if prom is not None:
            prom.close()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main(test)
