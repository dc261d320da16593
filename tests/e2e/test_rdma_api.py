# SPDX-License-Identifier: Apache-2.0
"""e2e-rdma-api: the RoCE server-to-switch connection API (docs/api.md, docs/rdma.md).

A switch with rdma job 7 (world 2) and job 8 (world 64, 60 ranks set up statically: with job 7's
two QPs every per-lcore state the feature may hold is in use): POST /api/v1/rdma/jobs/7/connect answers the
switch's QPN, PSN, the address of the port facing the worker (and its GID), the virtual
contribution area and the PMTU; the same rank again is 409, differing job parameters or a
chunk above the PMTU 409, an unknown job 404, a malformed body 400 (a `source` off the
worker's port or of the other family too), a connect beyond the QP
resources 503. GET /api/v1/rdma/jobs/7 lists the QPs; DELETE tears a rank's QP down (204, then
404) and the rank connects again. Connecting never touches job 8's QPs; GET /api/v1/config
shows the rdma section and PUT back keeps it; a reload of the file keeps the API's QPs while
their job stays the same (the file's own QP for a rank wins; a changed job ends them); /metrics
has per-QP series with labels job and rank.
"""

import json

from testbed import check, main, to_yaml, two_subnets


def connect_body(rank: int, ip: str, **over) -> dict:
    body = {"rank": rank, "qpn": 16 + rank, "psn": 1000 * rank, "ip": ip, "pmtu": 1024,
            "result_addr": 140737488355328, "result_rkey": 4660, "result_length": 65536,
            "chunk_bytes": 1024, "window": 64, "dtype": "fp32", "op": "sum", "world": 2}
    body.update(over)
    return body


def test(exe: str) -> None:
    full = {"id": 8, "mode": "server-to-switch", "world": 64, "op": "sum", "dtype": "int32",
            "chunk_bytes": 256, "window": 4, "pmtu": 1024,
            "qps": [{"rank": r, "ip": "10.0.2.2", "qpn": 100 + r, "psn": r, "switch_qpn": 0x1000 + r,
                     "switch_psn": r, "result_addr": 0, "result_rkey": 1, "result_length": 4096}
                    for r in range(1, 61)]}
    rdma = {"jobs": [{"id": 7, "mode": "server-to-switch", "world": 2, "op": "sum",
                      "dtype": "fp32", "chunk_bytes": 1024, "window": 64, "pmtu": 1024}, full]}
    with two_subnets(exe, extra={"rdma": rdma}, tag="rdmaapi") as tb:
        h1, h2 = tb.hosts["h1"], tb.hosts["h2"]
        status, text = tb.http("POST", "/api/v1/rdma/jobs/7/connect", connect_body(1, h1.ip))
        check(status == 200, f"rank 1 connects: HTTP {status} {text.strip()}")
        r1 = json.loads(text)
        check(r1["ip"] == "10.0.1.1" and r1["gid"] == "::ffff:10.0.1.1",
              f"the switch's address facing h1 ({r1})")
        check(r1["qpn"] >= 256 and 0 <= r1["psn"] < 1 << 24 and r1["area_length"] == 65536 and
              r1["pmtu"] == 1024 and "area_addr" in r1 and "area_rkey" in r1,
              f"QPN, PSN, area and PMTU answered ({r1})")

        status, text = tb.http("POST", "/api/v1/rdma/jobs/7/connect", connect_body(1, h1.ip))
        check(status == 409 and "already connected" in text, f"rank 1 twice: 409 ({status} {text.strip()})")
        status, text = tb.http("POST", "/api/v1/rdma/jobs/7/connect",
                               connect_body(2, h2.ip, window=32))
        check(status == 409, f"a different window: 409 ({status} {text.strip()})")
        status, text = tb.http("POST", "/api/v1/rdma/jobs/7/connect",
                               connect_body(2, h2.ip, pmtu=512))
        check(status == 409 and "pmtu" in text, f"chunk_bytes above the pmtu: 409 ({status})")
        status, text = tb.http("POST", "/api/v1/rdma/jobs/9/connect", connect_body(2, h2.ip))
        check(status == 404, f"no such job: 404 ({status} {text.strip()})")
        status, text = tb.http("POST", "/api/v1/rdma/jobs/7/connect", {"rank": 2})
        check(status == 400 and "missing key 'qpn'" in text, f"malformed: 400 ({status})")
        status, text = tb.http("POST", "/api/v1/rdma/jobs/7/connect",
                               connect_body(2, "192.0.2.9"))
        check(status == 400, f"a worker on no port's subnet: 400 ({status} {text.strip()})")
        # `source`: an address of the worker's own port, in its family (h1's port's address is
        # the switch's, but not on h2's port).
        status, text = tb.http("POST", "/api/v1/rdma/jobs/7/connect",
                               connect_body(2, h2.ip, source="10.0.1.1"))
        check(status == 400 and "source 10.0.1.1 is no IPv4 address of the port" in text,
              f"a source off the worker's port: 400 ({status} {text.strip()})")
        status, text = tb.http("POST", "/api/v1/rdma/jobs/7/connect",
                               connect_body(2, h2.ip, source="2001:db8::1"))
        check(status == 400 and "source 2001:db8::1 is an IPv6 address" in text,
              f"an IPv6 source for an IPv4 worker: 400 ({status} {text.strip()})")

        status, text = tb.http("POST", "/api/v1/rdma/jobs/7/connect",
                               connect_body(2, h2.ip, source="10.0.2.1"))
        check(status == 200, f"rank 2 connects, naming its port's address: HTTP {status} "
                             f"{text.strip()}")
        r2 = json.loads(text)
        check(r2["ip"] == "10.0.2.1" and r2["qpn"] != r1["qpn"], f"rank 2's own QP ({r2})")

        # Job 8 holds 1 + 60 states, job 7 1 + 2: the feature's 64. One more is refused.
        status, text = tb.http("POST", "/api/v1/rdma/jobs/8/connect",
                               connect_body(61, h2.ip, world=64, dtype="int32", chunk_bytes=256,
                                            window=4))
        check(status == 503, f"beyond the QP resources: 503 ({status} {text.strip()})")

        job = tb.api_json("GET", "/api/v1/rdma/jobs/7")
        ranks = sorted((q["rank"], q["qpn"], q["source"], q["state"]) for q in job["qps"])
        check(ranks == [(1, r1["qpn"], "api", "ready"), (2, r2["qpn"], "api", "ready")],
              f"GET lists both QPs ({ranks})")
        check(len(tb.api_json("GET", "/api/v1/rdma/jobs/8")["qps"]) == 60,
              "job 8 keeps its 60 static QPs")

        status, _ = tb.http("DELETE", "/api/v1/rdma/jobs/7/connect/1")
        check(status == 204, f"DELETE rank 1: 204 ({status})")
        status, _ = tb.http("DELETE", "/api/v1/rdma/jobs/7/connect/1")
        check(status == 404, f"DELETE rank 1 again: 404 ({status})")
        status, text = tb.http("POST", "/api/v1/rdma/jobs/7/connect", connect_body(1, h1.ip))
        check(status == 200, f"rank 1 connects again: HTTP {status} {text.strip()}")

        # The running config shows the rdma section (API QPs included) and PUT back keeps it.
        cfg = tb.api_json("GET", "/api/v1/config")
        jobs = {j["id"]: j for j in cfg["rdma"]["jobs"]}
        check(sorted(q["rank"] for q in jobs[7]["qps"]) == [1, 2] and len(jobs[8]["qps"]) == 60,
              "GET /api/v1/config lists the rdma jobs and their QPs")
        status, text = tb.http("PUT", "/api/v1/config", to_yaml(cfg))
        check(status == 200, f"the running config PUT back: {status} {text.strip()}")
        again = tb.api_json("GET", "/api/v1/rdma/jobs/7")
        check(sorted(q["qpn"] for q in again["qps"]) == sorted([r1["qpn"], r2["qpn"]]),
              "the QPs survive the PUT of the same config")

        check(all(q["source"] == "api" for q in again["qps"]),
              f"the same QPs put back stay connected through the API ({again['qps']})")

        # A reload of the file (which names no QP of job 7) keeps the QPs the API connected:
        # they belong to live connections. The file's change (a route) is applied too.
        def reload_with(job7: dict, routes: list[dict]) -> None:
            jobs = [job7, full]
            tb.extra["rdma"] = {"jobs": jobs}
            tb.write_config(tb.config_yaml(routes=routes))
            r = tb.api_json("POST", "/api/v1/reload")
            check(r["ok"], f"reload applied ({r})")

        job7 = dict(rdma["jobs"][0])
        reload_with(job7, [{"prefix": "198.51.100.0/24", "via": "10.0.2.2"}])
        kept = tb.api_json("GET", "/api/v1/rdma/jobs/7")["qps"]
        check(sorted((q["rank"], q["qpn"], q["source"], q["state"]) for q in kept) ==
              [(1, r1["qpn"], "api", "ready"), (2, r2["qpn"], "api", "ready")],
              f"the API's QPs survive a reload of the file ({kept})")
        check(any(r["prefix"] == "198.51.100.0/24" for r in tb.api_json("GET", "/api/v1/routes")),
              "the file's own change applied with them")

        # The file names rank 1 itself: its QP replaces the API's; rank 2's stays.
        job7["qps"] = [{"rank": 1, "ip": h1.ip, "qpn": 77, "psn": 7, "switch_qpn": 0x2000,
                        "switch_psn": 9, "result_addr": 0, "result_rkey": 1,
                        "result_length": 65536}]
        reload_with(job7, [])
        kept = tb.api_json("GET", "/api/v1/rdma/jobs/7")["qps"]
        check(sorted((q["rank"], q["qpn"], q["source"]) for q in kept) ==
              [(1, 0x2000, "config"), (2, r2["qpn"], "api")],
              f"the file's rank 1 replaces the API's, rank 2 kept ({kept})")

        # Job 7's parameters change: the API's QPs end with the job they were made for.
        job7 = {**job7, "window": 32}
        reload_with(job7, [])
        kept = tb.api_json("GET", "/api/v1/rdma/jobs/7")["qps"]
        check([(q["rank"], q["source"]) for q in kept] == [(1, "config")],
              f"a changed job keeps only what the file names ({kept})")
        check(len(tb.api_json("GET", "/api/v1/rdma/jobs/8")["qps"]) == 60,
              "job 8's static QPs untouched by every reload")

        m = tb.metrics()
        check(m.get("inaswitch_rdma_qp_state", job="7", rank="1", qpn=str(0x2000)) == 0,
              "per-QP state series, ready")
        check(m.get("inaswitch_rdma_qp_packets_in_total", job="8", rank="5") == 0,
              "per-QP counters of the static QPs")


if __name__ == "__main__":
    main(test)
