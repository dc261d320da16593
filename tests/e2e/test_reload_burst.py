# SPDX-License-Identifier: Apache-2.0
"""e2e-reload-burst: back-to-back configuration changes must all be applied.

Thirty POST /api/v1/routes then thirty DELETEs from four concurrent clients, each sending its
next change as soon as the previous one was answered, under a counted UDP stream. Every change must answer 200, the generation must move
by 60, and the stream must arrive complete.

Every forwarding snapshot owns an LPM whose first-level table alone is 64 MB; the control
plane frees retired snapshots before building a new one and, if memory is still short, waits out
the RCU grace period and retries, so a burst of changes never runs out of EAL memory.
"""

import os
from concurrent.futures import ThreadPoolExecutor

from testbed import UdpFlow, check, log, main, two_subnets

CHANGES = 30
CLIENTS = 4
PPS = int(os.environ.get("INAE2E_RELOAD_PPS", "2000"))


def test(exe: str) -> None:
    with two_subnets(exe) as tb:
        h1, h2 = tb.hosts["h1"], tb.hosts["h2"]
        h1.wait_reachable(h2.ip)
        h2.wait_reachable(h1.ip)
        gen0 = tb.metrics().get("inaswitch_config_generation")
        flow = UdpFlow(h1, h2, PPS * 4, PPS, port=9003)
        failures = []

        def change(method: str, i: int) -> None:
            prefix = f"10.{100 + i}.0.0/16"
            if method == "POST":
                status, body = tb.http("POST", "/api/v1/routes",
                                       {"prefix": prefix, "via": "10.0.2.2"})
            else:
                status, body = tb.http("DELETE", f"/api/v1/routes?prefix={prefix}")
            if status != 200:
                failures.append(f"{method} {prefix}: {status} {' '.join(body.split())}")

        try:
            # CLIENTS clients at once, each sending its next change as soon as the previous one
            # was answered: all adds, then all deletes.
            for method in ("POST", "DELETE"):
                with ThreadPoolExecutor(CLIENTS) as pool:
                    list(pool.map(lambda i, m=method: change(m, i), range(CHANGES)))
        finally:
            res = flow.result()
        log(f"stream: {res['sent']} sent at {PPS} pps, {res['unique']} received, "
            f"{res['missing']} lost")
        for f in sorted(set(" ".join(x.split()[:1] + x.split()[2:]) for x in failures))[:5]:
            log(f"refused: {f}")
        check(not failures, f"all {2 * CHANGES} back-to-back changes applied "
                            f"({len(failures)} refused)")
        gen = tb.metrics().get("inaswitch_config_generation")
        check(gen >= gen0 + 2 * CHANGES, f"generation {gen0:.0f} -> {gen:.0f}")
        check(tb.api_json("GET", "/api/v1/routes") == [], "no routes left")
        check(res["missing"] == 0, f"stream complete ({res['missing']} lost)")


if __name__ == "__main__":
    main(test)
