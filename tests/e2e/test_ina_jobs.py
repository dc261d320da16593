# SPDX-License-Identifier: Apache-2.0
"""e2e-ina-jobs: INA jobs come and go at run time through the control API (R9, R10).

A running switch with no job gets job 5, then job 6 beside it, then loses job 5: each change
answers 200, publishes a new generation, and the per-job slot gauges appear and disappear
with the jobs (the lcore's chunk tables are attached before the snapshot naming the job and
freed only after the lcore acknowledged the detach). An invalid job (window not a power of
two) and a restart-only change are refused with 422 and change nothing. Traffic keeps flowing
between the hosts throughout.
"""

from testbed import check, log, main, to_yaml, two_subnets


def job(job_id: int, abm: str) -> dict:
    return {"job_id": job_id, "role": "aggregator", "bsl": 64, "abm": abm, "op": "sum",
            "elem_type": "fp32", "max_elements": 256, "window": 64, "root": "10.0.2.2"}


def test(exe: str) -> None:
    with two_subnets(exe) as tb:
        h1, h2 = tb.hosts["h1"], tb.hosts["h2"]
        h1.wait_reachable(h2.ip)

        def put(jobs: list[dict], expect: int, **override) -> dict:
            cfg = tb.config_dict()
            cfg["ina"] = {"jobs": jobs}
            cfg.update(override)
            status, text = tb.http("PUT", "/api/v1/config", to_yaml(cfg))
            check(status == expect, f"PUT with jobs {[j['job_id'] for j in jobs]}: HTTP {status}"
                                    f" (expected {expect}): {text.strip()}")
            return tb.metrics()

        def slots(m, job_id: int) -> float | None:
            values = m.by_label("inaswitch_ina_job_slots", "job")
            return values.get(str(job_id))

        g0 = tb.metrics().get("inaswitch_config_generation")
        m = put([job(5, "1-2")], 200)
        check(slots(m, 5) == 2 * 64, f"job 5 has 2 x window slots on its one lcore ({slots(m, 5)})")
        m = put([job(5, "1-2"), job(6, "3-4")], 200)
        check(slots(m, 5) == 128 and slots(m, 6) == 128, "jobs 5 and 6 side by side")
        m = put([job(6, "3-4")], 200)
        check(slots(m, 5) is None, "job 5 is gone from the metrics")
        check(slots(m, 6) == 128, "job 6 untouched by job 5's removal")

        bad = job(7, "1-2")
        bad["window"] = 48
        before = tb.api_json("GET", "/api/v1/config")
        m = put([job(6, "3-4"), bad], 422)
        check(tb.api_json("GET", "/api/v1/config") == before, "an invalid job changes nothing")
        check(slots(m, 7) is None and slots(m, 6) == 128, "job 6 still alone")
        m = put([job(6, "3-4")], 422, mempool={"mbufs": 4095})
        check(tb.api_json("GET", "/api/v1/config") == before, "a restart-only change is refused")

        # The jobs resource: add, list with per-job counters, refuse a bad one, remove.
        status, text = tb.http("POST", "/api/v1/jobs", job(8, "1-4"))
        check(status == 200, f"POST /api/v1/jobs: HTTP {status} {text.strip()}")
        jobs = tb.api_json("GET", "/api/v1/jobs")
        ids = sorted(j["job_id"] for j in jobs)
        check(ids == [6, 8], f"GET /api/v1/jobs lists jobs 6 and 8 ({ids})")
        j8 = next(j for j in jobs if j["job_id"] == 8)
        check(j8["abm"] == "1-4" and j8["stats"]["slots"] == 128 and
              j8["stats"]["contributions"]["completed"] == 0,
              f"job 8 with its config and counters ({j8})")
        status, text = tb.http("POST", "/api/v1/jobs", job(8, "1-4"))
        check(status == 422 and "duplicate INA job_id 8" in text, f"a second job 8 is refused ({status})")
        status, text = tb.http("POST", "/api/v1/jobs", {"job_id": 9, "role": "leaf"})
        check(status == 422 and "api:" in text, f"a malformed job names where ({status} {text.strip()})")
        status, _ = tb.http("DELETE", "/api/v1/jobs?job_id=8")
        check(status == 200, "DELETE /api/v1/jobs?job_id=8")
        status, _ = tb.http("DELETE", "/api/v1/jobs?job_id=8")
        check(status == 404, "deleting it again: 404")
        check(sorted(j["job_id"] for j in tb.api_json("GET", "/api/v1/jobs")) == [6], "job 6 left")

        m = put([], 200)
        check(slots(m, 6) is None, "every job removed")
        check(m.get("inaswitch_config_generation") >= g0 + 6, "one generation per applied change")
        _, received = h1.ping(h2.ip, count=5, interval=0.05)
        check(received == 5, f"traffic still flows ({received}/5)")
        check(tb.alive(), "switch still running")
        log("jobs added, changed and removed at run time")


if __name__ == "__main__":
    main(test)
