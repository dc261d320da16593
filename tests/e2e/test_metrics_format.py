# SPDX-License-Identifier: Apache-2.0
"""e2e-metrics-format: GET /metrics from a running switch that carried traffic, and the
--stats-file it writes on exit, pass `promtool check metrics` (no errors, no lint warnings) and
follow the naming rules (inaswitch_ prefix, HELP and TYPE for every family, counters end in
_total)."""

import os
import re
import shutil

from testbed import Metrics, check, log, main, run, two_subnets


def promtool(text: str, what: str) -> None:
    p = run(["promtool", "check", "metrics"], input=text, check_rc=False, timeout=30)
    out = (p.stdout + p.stderr).strip()
    if out:
        log(f"promtool on {what} printed:\n{out}")
    check(p.returncode == 0 and not out,
          f"promtool check metrics on {what}: exit {p.returncode}, no warnings")


def naming(text: str, what: str) -> None:
    helps = set(re.findall(r"^# HELP (\S+) ", text, re.M))
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.M))
    check(helps == set(types), f"{what}: every family has both HELP and TYPE")
    check(all(n.startswith("inaswitch_") for n in types), f"{what}: every family is inaswitch_*")
    bad = [n for n, t in types.items() if (t == "counter") != n.endswith("_total")]
    check(not bad, f"{what}: counters and only counters end in _total (offenders: {bad})")
    samples = {s[0] for s in Metrics(text).series}
    check(samples <= set(types), f"{what}: every sample belongs to a declared family")
    empty = sorted(set(types) - samples)
    check(not empty, f"{what}: no family without samples (empty: {empty})")


def test(exe: str) -> None:
    if not shutil.which("promtool"):
        raise SystemExit("promtool not installed (Debian package prometheus): run .ci/setup")
    with two_subnets(exe) as tb:
        stats_file = os.path.join(tb.workdir, "final.prom")
        tb.stop()
        tb.args = ["--stats-file", stats_file]
        tb.start()
        h1, h2 = tb.hosts["h1"], tb.hosts["h2"]
        h1.wait_reachable(h2.ip)
        h1.ping(h2.ip, count=5, interval=0.05)
        h1.ping("10.0.1.1", count=2, interval=0.05)
        # No route: two drops counted by reason (the switch sends no ICMP errors).
        h2.run(["ping", "-n", "-q", "-c", "2", "-i", "0.05", "-W", "1", "10.0.9.9"],
               check_rc=False)

        text = tb.metrics_text()
        promtool(text, "GET /metrics")
        naming(text, "GET /metrics")
        m = Metrics(text)
        check(m.get("inaswitch_drops_total", reason="no_route") >= 2, "no_route drops counted")
        check(m.get("inaswitch_routed_packets_total") >= 10, "routed counted")

        rc = tb.stop()
        check(rc == 0, f"switch exited 0 on SIGTERM (got {rc})")
        check(os.path.exists(stats_file), "--stats-file written on exit")
        with open(stats_file) as f:
            final = f.read()
        promtool(final, "--stats-file")
        naming(final, "--stats-file")
        fm = Metrics(final)
        for name in ("inaswitch_routed_packets_total", "inaswitch_port_rx_packets_total",
                     "inaswitch_icmp_echo_replies_total"):
            check(fm.get(name) >= m.get(name), f"--stats-file {name} >= the last scrape")


if __name__ == "__main__":
    main(test)
