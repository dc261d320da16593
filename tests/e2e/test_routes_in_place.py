# SPDX-License-Identifier: Apache-2.0
"""e2e-routes-in-place: API route changes go into the published route table in place.

h2 takes an address in 10.60.0.0/16, which the switch reaches only through a static route via
h2 (10.0.2.2). POST /api/v1/routes/batch adds that route among 1,000 others; h1 then pings the
address through the switch, and after the route is deleted it no longer can. No snapshot is
published for any of it (inaswitch_snapshots_published_total stays), every change is counted
in inaswitch_routes_changed_in_place_total and the route table's occupancy, and GET
/api/v1/routes lists what was added. A batch stops at its first refused change with the same
errors the single endpoints give (unknown port, duplicate, no such route) and says how many it
applied; a route that covers a static neighbour still takes the snapshot path.
"""

from testbed import check, delta, log, main, two_subnets

FAR = "10.60.0.5"


def test(exe: str) -> None:
    with two_subnets(exe) as tb:
        h1, h2 = tb.hosts["h1"], tb.hosts["h2"]
        h1.wait_reachable(h2.ip)
        h2.run(["ip", "addr", "add", FAR + "/32", "dev", h2.dev])
        tx, rx = h1.ping(FAR, count=3, interval=0.2)
        check(rx == 0, f"no route to {FAR} yet: no reply ({rx} of {tx})")

        m0 = tb.metrics()
        routes = [{"prefix": f"10.{61 + i // 250}.{i % 250}.0/24", "via": "10.0.2.2"}
                  for i in range(999)] + [{"prefix": "10.60.0.0/16", "via": "10.0.2.2"}]
        r = tb.api_json("POST", "/api/v1/routes/batch", {"add": routes})
        check(r["ok"] and r["applied"] == 1000, f"batch of 1000 adds applied ({r})")
        tx, rx = h1.ping(FAR, count=5, interval=0.2)
        check(rx == tx, f"h1 reaches {FAR} through the in-place route ({rx} of {tx})")
        listed = {x["prefix"] for x in tb.api_json("GET", "/api/v1/routes")}
        check(all(x["prefix"] in listed for x in routes), "GET /api/v1/routes lists all 1000")

        m1 = tb.metrics()
        check(delta(m1, m0, "inaswitch_snapshots_published_total") == 0,
              "no snapshot published for 1000 route adds")
        check(delta(m1, m0, "inaswitch_routes_changed_in_place_total") == 1000,
              "1000 changes counted in place")
        check(delta(m1, m0, "inaswitch_table_entries", table="routes") == 1000,
              "the route table holds 1000 more prefixes")
        check(m1.get("inaswitch_config_generation") >= m0.get("inaswitch_config_generation") + 1000,
              "every change moved the generation")

        # Refusals: the same errors as the single endpoints, and the count of what was applied.
        r = tb.api_json("POST", "/api/v1/routes/batch",
                        {"add": [{"prefix": "10.250.0.0/24", "via": "10.0.2.2"},
                                 {"prefix": "10.251.0.0/24", "port": "p9"},
                                 {"prefix": "10.252.0.0/24", "via": "10.0.2.2"}]}, expect=422)
        check(r["applied"] == 1 and any("unknown port 'p9'" in e for e in r["errors"]),
              f"a batch stops at an unknown port, one applied ({r})")
        r = tb.api_json("POST", "/api/v1/routes", {"prefix": "10.250.0.0/24", "via": "10.0.2.2"},
                        expect=422)
        check(any("duplicate route 10.250.0.0/24" in e for e in r["errors"]),
              f"a duplicate is refused ({r})")
        r = tb.api_json("POST", "/api/v1/routes/batch", {"delete": ["10.250.0.0/24",
                                                                    "10.253.0.0/24"]}, expect=422)
        check(r["applied"] == 1 and any("no route 10.253.0.0/24" in e for e in r["errors"]),
              f"a batch delete stops at a missing route ({r})")
        status, _ = tb.http("POST", "/api/v1/routes/batch", {"add": [{"prefix": "10.1.2.3/24"}]})
        check(status == 400, f"a malformed entry is a 400 ({status})")

        r = tb.api_json("POST", "/api/v1/routes/batch", {"delete": [x["prefix"] for x in routes]})
        check(r["ok"] and r["applied"] == 1000, f"batch of 1000 deletes applied ({r})")
        tx, rx = h1.ping(FAR, count=3, interval=0.2)
        check(rx == 0, f"after the delete {FAR} is unreachable again ({rx} of {tx})")
        m2 = tb.metrics()
        check(delta(m2, m0, "inaswitch_snapshots_published_total") == 0,
              "no snapshot published for the deletes either")
        check(delta(m2, m0, "inaswitch_table_entries", table="routes") == 0,
              "the route table is back to its size")

        # A route covering a static neighbour changes by a snapshot (its host route depends on it).
        tb.api_json("POST", "/api/v1/neighbours",
                    {"ip": "10.0.2.9", "mac": "02:00:00:00:02:09", "port": "p1"})
        p0 = tb.metrics().get("inaswitch_snapshots_published_total")
        tb.api_json("POST", "/api/v1/routes", {"prefix": "10.0.2.8/30", "port": "p1"})
        p1 = tb.metrics().get("inaswitch_snapshots_published_total")
        check(p1 == p0 + 1, f"a route over a static neighbour publishes a snapshot ({p0} -> {p1})")
        tb.api_json("DELETE", "/api/v1/routes?prefix=10.0.2.8/30")
        log("in-place routes: batch add/delete, traffic, refusals and the snapshot path checked")


if __name__ == "__main__":
    main(test)
