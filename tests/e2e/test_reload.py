# SPDX-License-Identifier: Apache-2.0
"""e2e-reload: configuration changes under a steady counted UDP stream lose nothing.

h1 10.0.1.2/24 -- p0 10.0.1.1 [inaswitch] p1 10.0.2.1 -- h2 10.0.2.2/24

A paced UDP stream h1 -> h2 (udpflow.py: sequence numbers, receiver counts every one) runs
first alone (baseline), then while the switch takes, spread over the stream:
  SIGHUP with a changed valid file (static routes, one covering the stream's destination),
  POST /api/v1/reload, POST /api/v1/routes (a /32 for the destination) and DELETE,
  an invalid file by SIGHUP and by POST /api/v1/reload (refused: 422, reloads{failed} + 1,
  GET /api/v1/config unchanged), PUT /api/v1/config with a restart-only change (422),
  PUT of an unparsable document (422), and a valid PUT /api/v1/config.
Both streams must arrive complete: zero lost, zero duplicated.
"""

import os
import signal

from testbed import Metrics, TestFailure, UdpFlow, check, delta, log, main, two_subnets, \
    wait_until

PPS = int(os.environ.get("INAE2E_RELOAD_PPS", "2000"))
SECONDS = float(os.environ.get("INAE2E_RELOAD_SECONDS", "8"))
BASELINE_SECONDS = 3

STATIC_ROUTES = [
    {"prefix": "10.9.0.0/16", "via": "10.0.2.2"},
    {"prefix": "10.0.2.0/28", "via": "10.0.2.2"},  # covers the stream's destination
]


def test(exe: str) -> None:
    with two_subnets(exe) as tb:
        h1, h2 = tb.hosts["h1"], tb.hosts["h2"]
        h1.wait_reachable(h2.ip)
        h2.wait_reachable(h1.ip)

        def reloads(m: Metrics, result: str) -> float:
            return m.get("inaswitch_config_reloads_total", result=result)

        def generation() -> float:
            return tb.metrics().get("inaswitch_config_generation")

        # -- baseline: the same stream without reloads ------------------------------------
        base_n = int(PPS * BASELINE_SECONDS)
        m0 = tb.metrics()
        base = UdpFlow(h1, h2, base_n, PPS, port=9001).result()
        m1 = tb.metrics()
        log(f"baseline: {base['sent']} sent at {PPS} pps, {base['unique']} received, "
            f"{base['missing']} lost, {base['duplicates']} duplicated, {base['reordered']} "
            f"reordered, {base['send_retries']} send retries")
        check(base["missing"] == 0 and base["duplicates"] == 0,
              f"baseline at {PPS} pps: no loss, no duplicates (lost {base['missing']}, first "
              f"{base['first_missing'][:5]}); if this fails the environment, not the reloads, "
              "loses packets: lower INAE2E_RELOAD_PPS")
        check(delta(m1, m0, "inaswitch_routed_packets_total") >= base_n,
              f"baseline: routed >= {base_n}")

        # -- the stream with reloads ----------------------------------------------------------
        n = int(PPS * SECONDS)
        m_start = tb.metrics()
        gen_start = m_start.get("inaswitch_config_generation")
        routed_start = m_start.get("inaswitch_routed_packets_total")
        good_file = tb.config_yaml(routes=STATIC_ROUTES)
        # An invalid file: a route through a port that does not exist, on a known line.
        bad_file = tb.config_yaml(routes=STATIC_ROUTES + [{"prefix": "10.7.0.0/16",
                                                           "port": "p9"}])
        bad_line_no = next(i for i, line in enumerate(bad_file.splitlines(), 1)
                           if "10.7.0.0/16" in line)
        applied = 0
        refused = 0

        def sighup_ok() -> None:
            nonlocal applied
            ok0 = reloads(tb.metrics(), "ok")
            tb.write_config(good_file)
            tb.signal(signal.SIGHUP)
            tb.wait_metric("inaswitch_config_reloads_total", lambda v: v == ok0 + 1,
                           result="ok")
            routes = tb.api_json("GET", "/api/v1/routes")
            check([r["prefix"] for r in routes] == [r["prefix"] for r in STATIC_ROUTES],
                  f"SIGHUP applied the file's routes (GET /api/v1/routes: {routes})")
            applied += 1

        def post_reload() -> None:
            nonlocal applied
            g0 = generation()
            r = tb.api_json("POST", "/api/v1/reload")
            check(r["ok"] and r["generation"] > g0, f"POST /api/v1/reload: 200 ok, "
                                                     f"generation {g0:.0f} -> {r['generation']}")
            applied += 1

        def route_add() -> None:
            nonlocal applied
            r = tb.api_json("POST", "/api/v1/routes", {"prefix": "10.0.2.2/32", "port": "p1"})
            check(r["ok"], "POST /api/v1/routes 10.0.2.2/32 (the stream's destination): ok")
            prefixes = [x["prefix"] for x in tb.api_json("GET", "/api/v1/routes")]
            check("10.0.2.2/32" in prefixes, "GET /api/v1/routes shows 10.0.2.2/32")
            applied += 1

        def route_delete() -> None:
            nonlocal applied
            r = tb.api_json("DELETE", "/api/v1/routes?prefix=10.0.2.2/32")
            check(r["ok"], "DELETE /api/v1/routes?prefix=10.0.2.2/32: ok")
            prefixes = [x["prefix"] for x in tb.api_json("GET", "/api/v1/routes")]
            check("10.0.2.2/32" not in prefixes, "GET /api/v1/routes no longer shows it")
            tb.api_json("DELETE", "/api/v1/routes?prefix=10.0.2.2/32", expect=404)
            applied += 1

        def refused_change(what: str, action, expect_in_errors: str) -> None:
            """Runs `action`, which must be refused, and checks nothing that runs changed."""
            nonlocal refused
            before_cfg = tb.api_json("GET", "/api/v1/config")
            m = tb.metrics()
            g0, failed0 = m.get("inaswitch_config_generation"), reloads(m, "failed")
            errors = action()
            if errors is not None:
                check(any(expect_in_errors in e for e in errors),
                      f"{what}: the errors say {expect_in_errors!r} (got {errors})")
            tb.wait_metric("inaswitch_config_reloads_total", lambda v: v == failed0 + 1,
                           result="failed")
            check(generation() == g0, f"{what}: generation unchanged ({g0:.0f})")
            check(tb.api_json("GET", "/api/v1/config") == before_cfg,
                  f"{what}: GET /api/v1/config unchanged")
            refused += 1

        def sighup_invalid() -> None:
            tb.write_config(bad_file)
            tb.signal(signal.SIGHUP)
            return None

        def post_invalid():
            tb.write_config(bad_file)
            r = tb.api_json("POST", "/api/v1/reload", expect=422)
            check(r["ok"] is False, "POST /api/v1/reload of an invalid file: 422")
            return r["errors"]

        def put_restart_only():
            text = tb.config_yaml(routes=STATIC_ROUTES) + "mempool:\n  mbufs: 4095\n"
            r = tb.api_json("PUT", "/api/v1/config", text, expect=422)
            return r["errors"]

        def put_valid() -> None:
            nonlocal applied
            tb.write_config(good_file)  # the file is the source for later reloads again
            g0 = generation()
            text = tb.config_yaml(routes=STATIC_ROUTES[:1])
            r = tb.api_json("PUT", "/api/v1/config", text)
            check(r["ok"] and r["generation"] > g0, "PUT /api/v1/config (valid): 200 ok")
            routes = [x["prefix"] for x in tb.api_json("GET", "/api/v1/routes")]
            check(routes == ["10.9.0.0/16"], f"PUT applied its routes ({routes})")
            status = tb.api_json("GET", "/api/v1/status")
            check(status["config_file"] == tb.config_path,
                  "PUT keeps the file as the reload source")
            applied += 1

        def put_unparsable() -> None:
            nonlocal refused
            status, text = tb.http("PUT", "/api/v1/config", "version: [1\nports: {")
            check(status == 422 and ":" in text, f"PUT of unparsable YAML: 422 ({text.strip()})")
            refused += 1

        ops = [
            ("SIGHUP, valid file with 2 more routes", sighup_ok),
            ("POST /api/v1/reload", post_reload),
            ("POST /api/v1/routes", route_add),
            ("DELETE /api/v1/routes", route_delete),
            ("SIGHUP, invalid file", lambda: refused_change(
                "SIGHUP with an invalid file", sighup_invalid, "")),
            ("POST /api/v1/reload, invalid file", lambda: refused_change(
                "POST /api/v1/reload of an invalid file", post_invalid,
                f"{tb.config_path}:{bad_line_no}:5: unknown port 'p9'")),
            ("PUT /api/v1/config, restart-only change", lambda: refused_change(
                "PUT with a mempool change", put_restart_only, "needs a restart")),
            ("PUT /api/v1/config, unparsable", put_unparsable),
            ("PUT /api/v1/config, valid", put_valid),
            ("SIGHUP, valid file again", sighup_ok),
        ]

        flow = UdpFlow(h1, h2, n, PPS, port=9002)
        try:
            for k, (name, op) in enumerate(ops, 1):
                # Spread the operations over the stream: op k once k/(len+1) of it was routed.
                target = routed_start + k * n / (len(ops) + 1)
                wait_until(lambda: tb.metrics().get("inaswitch_routed_packets_total") >= target,
                           SECONDS + 20, f"{k}/{len(ops) + 1} of the stream routed")
                if not flow.sending():
                    raise TestFailure(f"the stream ended before '{name}'; reloads must happen "
                                      "under traffic")
                log(f"-- under traffic: {name}")
                op()
            check(flow.sending(), "every reload happened while the stream was still running")
        finally:
            res = flow.result()
        m_end = tb.metrics()
        log(f"with reloads: {res['sent']} sent at {PPS} pps over "
            f"{res['end'] - res['start']:.1f}s, {res['unique']} received, {res['missing']} lost, "
            f"{res['duplicates']} duplicated, {res['reordered']} reordered")
        check(res["missing"] == 0, f"zero loss across {applied} applied and {refused} refused "
                                   f"changes (lost {res['missing']}: {res['first_missing'][:10]})")
        check(res["duplicates"] == 0, "no duplicates")
        gen_end = m_end.get("inaswitch_config_generation")
        check(gen_end >= gen_start + applied,
              f"config_generation {gen_start:.0f} -> {gen_end:.0f} (>= +{applied})")
        failed = delta(m_end, m_start, "inaswitch_config_reloads_total", result="failed")
        check(failed == refused,
              f"config_reloads_total{{result=failed}} moved by {failed:.0f} (expected {refused})")
        check(delta(m_end, m_start, "inaswitch_config_reloads_total", result="ok") == applied,
              f"config_reloads_total{{result=ok}} moved by {applied}")
        for reason in ("no_route", "neighbour_unresolved", "tx_full"):
            v = delta(m_end, m_start, "inaswitch_drops_total", reason=reason)
            check(v == 0, f"no {reason} drops during the reloads (got {v:.0f})")
        check(tb.alive(), "switch still running")
        if "reload refused" not in tb.switch_log():
            raise TestFailure("the switch did not log the refused SIGHUP reload")
        log("switch log shows the refused SIGHUP reload")


if __name__ == "__main__":
    main(test)
