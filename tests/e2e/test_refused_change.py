# SPDX-License-Identifier: Apache-2.0
"""e2e-refused-change: a change the switch refuses changes nothing that runs.

Job 1 runs. Then, through PUT /api/v1/config:
  1. 65 jobs: refused by validation (at most 64), with the position of the 65th;
  2. job 1 removed and 64 jobs added with an rdma job of 64 static QPs: valid, but the rdma
     job and its QPs need 65 per-lcore states where the feature has 64, found only while the
     change is being applied (the rdma feature's prepare step, after the INA jobs took their
     slots);
  3. more static neighbours than arp.max_neighbours: refused by validation, at the neighbour;
Each answer is 422, and afterwards job 1 still has its chunk tables on every lcore (same slot
capacity), job 2 and the refused jobs have none, the running config is the old one and
`--check-config` rejects the files validation can judge (1 and 3). Before the fix, step 2 detached job 1 (it silently
stopped aggregating) and step 1 left 65 jobs' tables behind in the metrics.
"""

import os
import subprocess

from testbed import check, log, main, to_yaml, two_subnets


def job(job_id: int) -> dict:
    return {"job_id": job_id, "role": "aggregator", "bsl": 64, "abm": "1-2", "op": "sum",
            "elem_type": "int32", "max_elements": 64, "window": 64, "root": "10.0.2.2"}


def test(exe: str) -> None:
    with two_subnets(exe, extra={"ina": {"jobs": [job(1)]}, "arp": {"max_neighbours": 16}}) as tb:
        def jobs_with_tables() -> dict[str, float]:
            return tb.metrics().by_label("inaswitch_ina_job_slots", "job")

        before = jobs_with_tables()
        check(set(before) == {"1"}, f"job 1 has its tables ({before})")
        running = tb.http("GET", "/api/v1/config")[1]
        base = tb.config_dict()

        too_many = dict(base, ina={"jobs": [job(i) for i in range(1, 66)]})
        neighbours = [{"ip": f"10.0.2.{100 + i}", "mac": f"02:00:00:00:09:{i:02x}", "port": "p1"}
                      for i in range(20)]
        too_many_neighbours = dict(base, neighbours=neighbours)
        qps = [{"rank": r, "ip": f"10.0.2.{100 + r}", "qpn": 100 + r, "psn": r,
                "switch_qpn": 0x100 + r, "switch_psn": 1000 + r, "result_addr": 65536,
                "result_rkey": 1, "result_length": 65536} for r in range(1, 65)]
        late = dict(base, ina={"jobs": [job(i) for i in range(2, 66)]},
                    rdma={"jobs": [{"id": 7, "mode": "server-to-switch", "world": 64,
                                    "op": "sum", "dtype": "fp32", "chunk_bytes": 1024,
                                    "window": 64, "pmtu": 1024, "qps": qps}]})
        for name, cfg in (("65 jobs", too_many), ("job 1 out, refused late", late),
                          ("static neighbours beyond max_neighbours", too_many_neighbours)):
            status, body = tb.http("PUT", "/api/v1/config", to_yaml(cfg))
            log(f"PUT {name}: HTTP {status} {' '.join(body.split())[:240]}")
            check(status == 422, f"{name}: refused (HTTP {status})")
            after = jobs_with_tables()
            check(after == before, f"{name}: job 1 keeps its tables, nothing else has any "
                                   f"({after})")
            check(tb.http("GET", "/api/v1/config")[1] == running,
                  f"{name}: the running config is unchanged")
            path = os.path.join(tb.workdir, "refused.yaml")
            with open(path, "w") as f:
                f.write(to_yaml(cfg))
            p = subprocess.run([exe, "--check-config", path], capture_output=True, text=True)
            if name == "65 jobs":
                check(p.returncode == 2 and "at most 64 INA jobs" in p.stderr,
                      f"--check-config refuses it too ({p.returncode}: {p.stderr.strip()[:160]})")
            elif name.startswith("static neighbours"):
                check(p.returncode == 2 and "arp.max_neighbours" in p.stderr,
                      f"--check-config refuses it too ({p.returncode}: {p.stderr.strip()[:160]})")
        status, _ = tb.http("GET", "/metrics")
        check(status == 200, "the switch still answers")


if __name__ == "__main__":
    main(test)
