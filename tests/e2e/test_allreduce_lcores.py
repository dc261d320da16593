# SPDX-License-Identifier: Apache-2.0
"""e2e-allreduce-lcores: chunk steering across two worker lcores.

The switch runs two worker lcores (EAL --lcores 0@0,1@1,2@1: this VM has two CPUs) and every
port has two RX queues (af_packet queue pairs, the kernel's fanout spreading flows), so a
chunk's contributions arrive on both lcores. Chunk seq belongs to the lcore ina::chunk_place names
(its slot index seq mod window, dealt over the lcores: index mod 2); the other
lcore hands the packet over on an SPSC ring. Four workers AllReduce int32 (bit-exact) and the
switch's counters show hand-offs, every chunk completed exactly once, and every slot freed.
"""

import os

from test_allreduce import CHUNK, N, ROOT, check_switch, job, run_allreduce, worker_exe
from testbed import Host, Port, Testbed, check, delta, log, main


def test(switch_exe: str) -> None:
    exe = worker_exe(switch_exe)
    elements = int(os.environ.get("INAE2E_LCORES_ELEMENTS", str(1 << 20)))
    hosts = [Host(f"h{i}", f"10.0.{i}.2/24") for i in range(1, N + 1)]
    ports = [Port(f"p{i - 1}", ipv4=[f"10.0.{i}.1/24"], host=hosts[i - 1], queues=2)
             for i in range(1, N + 1)]
    extra = {"ina": {"jobs": [job(1, "int32", hosts)]},
             "eal": {"args": ["--lcores", "0@0,1@1,2@1", "--no-huge", "-m", "512", "--no-pci",
                              "--log-level", "*:warning"]}}
    with Testbed(switch_exe, ports, extra=extra) as tb:
        status = tb.api_json("GET", "/api/v1/status")
        check(len(status["lcores"]) == 2, f"two worker lcores ({status['lcores']})")
        check(all(p["rx_queues"] == 2 for p in status["ports"]), "two RX queues per port")
        for h in hosts:
            h.wait_reachable(ROOT)
        before = tb.metrics()
        reports = run_allreduce(tb, exe, hosts, 1, "int32", elements, 7,
                                max(60.0, elements / (1 << 20) * 40))
        after = tb.metrics()
        chunks = reports[0]["chunks"]
        handed = delta(after, before, "inaswitch_ina_handed_off_total")
        check(handed > 0, f"{handed:.0f} contributions handed to the lcore owning their chunk")
        per_lcore = after.by_label("inaswitch_lcore_busy_loops_total", "lcore")
        check(len(per_lcore) == 2 and all(v > 0 for v in per_lcore.values()),
              f"both lcores received traffic ({per_lcore})")
        check(delta(after, before, "inaswitch_drops_total", reason="ina_handoff_full") == 0,
              "no hand-off ring overflowed")
        check_switch(tb, before, 1, chunks)
        log(f"{elements} int32 x {N} workers over two lcores, {CHUNK}-element chunks: ok")


if __name__ == "__main__":
    main(test)
