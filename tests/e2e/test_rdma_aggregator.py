# SPDX-License-Identifier: Apache-2.0
"""e2e-rdma-aggregator: a RoCE server-to-switch job as a VAT aggregator (docs/rdma.md
"Aggregator role"), between real Linux hosts.

h1 (10.0.1.2) holds ranks 1 and 2 of rdma job 7 (two static RC QPs, a standard-library RC peer:
rdma_vat_peer.py ranks); h2 (10.0.2.2) is the job's INA parent (rdma_vat_peer.py parent). For
each chunk both ranks WRITE into the switch; the switch sends one INA contribution to h2 (its
kernel checks the UDP checksum), h2 answers with the INA result (the sum + 1000), and the switch
WRITEs that result to both ranks, which ACK it. h2 ignores the first partial of chunk 1: the
switch sends it again after partial_timeout_ms and the job goes on. Every rank gets every
chunk's parent result; the metrics and GET /api/v1/rdma/jobs/7 count what happened. Once with
one worker lcore, once with two (packets handed to the job's home lcore).

Then the same with the project's host INA root as the parent: ina-ps on h2 (job 7, A-BM {1, 2},
results by unicast to BFR-ids 1 and 2, both the switch's 10.0.2.1): its chunk table takes the
switch's partial as a child switch's contribution and sends the result twice, one copy per
BFR-id; the switch uses the first and counts the second as a duplicate.

Then a second inaswitch as the root: it runs in h2's namespace on h2's link (address
10.0.2.3, job 7 as an INA root with A-BM {1, 2} and workers 1 and 2 = the switch); the ranks get
every chunk's sum through both switches.

Last, multi-packet chunks under ina-ps: 4 KiB chunks at PMTU 1024, each rank's chunk one
four-packet WRITE, four INA contributions up per chunk (one per pmtu segment) and one
four-packet result WRITE down per rank.
"""

import json
import os
import subprocess
import tempfile

from testbed import EAL_ARGS, Host, Port, Testbed, check, log, main, to_yaml, two_subnets, \
    wait_until

CHUNKS = 6
PEER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rdma_vat_peer.py")


def qp(rank: int) -> dict:
    return {"rank": rank, "ip": "10.0.1.2", "qpn": 16 + rank, "psn": 1000 * rank,
            "switch_qpn": 0xFF + rank, "switch_psn": 5000, "result_addr": 0x7F0000000000,
            "result_rkey": 0x1234, "result_length": 1024, "timeout": 14}


def under_emulated_parent(exe: str, rdma: dict, two_lcores: bool) -> None:
    extra: dict = {"rdma": rdma}
    queues = 1
    if two_lcores:
        # Two worker lcores, two RX queues per port: the job's home is lcore 7 mod 2 = 1, the
        # other lcore hands it the ranks' packets and the parent's results it receives.
        extra["eal"] = {"args": ["--lcores", "0@0,1@1,2@1", "--no-huge", "-m", "512",
                                 "--no-pci", "--log-level", "*:warning"]}
        queues = 2
    ports = [Port("p0", ipv4=["10.0.1.1/24"], host=Host("h1", "10.0.1.2/24"), queues=queues),
             Port("p1", ipv4=["10.0.2.1/24"], host=Host("h2", "10.0.2.2/24"), queues=queues)]
    with Testbed(exe, ports, extra=extra, tag="rdmavat2" if two_lcores else "rdmavat") as tb:
        h1, h2 = tb.hosts["h1"], tb.hosts["h2"]
        h1.wait_reachable("10.0.1.1")
        h2.wait_reachable("10.0.2.1")
        parent = h2.popen(["/usr/bin/python3", "-B", PEER, "parent", h2.ip, str(CHUNKS)])
        try:
            ranks = h1.run(["/usr/bin/python3", "-B", PEER, "ranks", h1.dev,
                            tb.port("p0").mac, "10.0.1.1", str(CHUNKS), "1000"], timeout=120)
            out, err = parent.communicate(timeout=40)
        finally:
            if parent.poll() is None:
                parent.kill()
                parent.communicate()
        log(f"ranks: {ranks.stdout.strip()} {ranks.stderr.strip()}")
        log(f"parent: {out.strip()} {err.strip()}")
        r = json.loads(ranks.stdout.strip().splitlines()[-1])
        p = json.loads(out.strip().splitlines()[-1])
        check(not p["bad"], f"every partial as docs/protocol.md states ({p['bad']})")
        check(sorted(p["answered"]) == list(range(CHUNKS)), f"every chunk went up ({p})")
        check(p["resent"] >= 1, f"the unanswered partial came again with the retransmit flag ({p})")
        check("stuck_at" not in r and r["results"] == 2 * CHUNKS and not r["wrong"],
              f"both ranks got every chunk's parent result ({r})")

        m = tb.metrics()
        sent = m.get("inaswitch_rdma_job_parent_total", job="7", event="partial_sent")
        resent = m.get("inaswitch_rdma_job_parent_total", job="7", event="partial_resent")
        result_in = m.get("inaswitch_rdma_job_parent_total", job="7", event="result_in")
        check(sent == CHUNKS and resent >= 1 and result_in == CHUNKS,
              f"parent events: sent {sent}, resent {resent}, results in {result_in}")
        job = tb.api_json("GET", "/api/v1/rdma/jobs/7")
        check(job["role"] == "aggregator" and job["parent"] == "10.0.2.2" and
              job["parent_events"]["result_in"] == CHUNKS,
              f"GET shows the role and the parent link ({job.get('parent_events')})")
        # Every rank acknowledged every result: nothing is held.
        wait_until(lambda: tb.metrics().get("inaswitch_rdma_job_slots_in_use", job="7") == 0,
                   10, "every slot released once the ranks ACKed")
        if two_lcores:
            handed = m.get("inaswitch_rdma_packets_total", reason="handed_off")
            check(len(tb.api_json("GET", "/api/v1/status")["lcores"]) == 2 and handed > 0,
                  f"two worker lcores, {handed:.0f} packets handed to the job's home lcore")


def ranks_under_ina_ps(exe: str, tb, chunk: int, window: int, peer_args: list[str]) -> dict:
    """ina-ps on h2 as job 7's INA root (A-BM {1, 2}, `chunk` elements a seq, `window`; results
    by unicast to BFR-ids 1 and 2, both the switch) while the ranks on h1 run
    (rdma_vat_peer.py ranks ... `peer_args`); their JSON summary."""
    h1, h2 = tb.hosts["h1"], tb.hosts["h2"]
    h1.wait_reachable("10.0.1.1")
    h2.wait_reachable("10.0.2.1")
    ps = h2.popen([os.path.join(os.path.dirname(os.path.abspath(exe)), "..", "worker", "ina-ps"),
                   "--job", "7", "--abm", "1-2", "--bsl", "64", "--type", "fp32",
                   "--chunk", str(chunk), "--window", str(window), "--workers",
                   "1=10.0.2.1,2=10.0.2.1", "--bind", h2.ip])
    try:
        h2.wait_listening(9470, proto="udp")
        ranks = h1.run(["/usr/bin/python3", "-B", PEER, "ranks", h1.dev, tb.port("p0").mac,
                        "10.0.1.1"] + peer_args, timeout=120)
    finally:
        ps.terminate()
        ps_out, ps_err = ps.communicate(timeout=10)
    log(f"ranks: {ranks.stdout.strip()} {ranks.stderr.strip()}")
    log(f"ina-ps: {ps_out.strip()[-400:]} {ps_err.strip()[-400:]}")
    return json.loads(ranks.stdout.strip().splitlines()[-1])


def test(exe: str) -> None:
    rdma = {"jobs": [{"id": 7, "world": 2, "op": "sum", "dtype": "fp32", "chunk_bytes": 64,
                      "window": 4, "pmtu": 1024, "role": "aggregator", "parent": "10.0.2.2",
                      "bsl": 64, "partial_timeout_ms": 300, "qps": [qp(1), qp(2)]}]}
    under_emulated_parent(exe, rdma, two_lcores=False)
    under_emulated_parent(exe, rdma, two_lcores=True)

    with two_subnets(exe, extra={"rdma": rdma}, tag="rdmavatps") as tb:
        r = ranks_under_ina_ps(exe, tb, 16, 4, [str(CHUNKS), "0"])
        check("stuck_at" not in r and r["results"] == 2 * CHUNKS and not r["wrong"],
              f"under ina-ps both ranks got every chunk's sum ({r})")
        # ina-ps sends each result once per BFR-id, both to this switch: the first becomes the
        # ranks' WRITEs, the second is a duplicate while the chunk is held, or late
        # (`result_not_held`) once both ranks' ACKs released it first — a race the load decides.
        def parent(event: str) -> float:
            return tb.metrics().get("inaswitch_rdma_job_parent_total", job="7", event=event)
        wait_until(lambda: parent("result_duplicate") + parent("result_not_held") >= CHUNKS,
                   10, "every chunk's second result copy seen")
        result_in, dup, late = (parent(e) for e in ("result_in", "result_duplicate",
                                                     "result_not_held"))
        check(result_in == CHUNKS and dup + late == CHUNKS,
              f"one result in and one more copy per chunk, a duplicate or late ({result_in}, "
              f"{dup}, {late})")

    under_root_switch(exe, rdma)
    multi_packet_under_ina_ps(exe, rdma)


# Multi-packet chunks (docs/rdma.md "Multi-packet chunks up the tree"): 4 KiB fp32 chunks at
# PMTU 1024, so each rank's chunk is a four-packet WRITE, each chunk goes up as four INA
# contributions (seqs 4s .. 4s + 3, 256 elements each) and comes down as one four-packet WRITE.
MP_ELEMS, MP_PMTU, MP_CHUNKS = 1024, 1024, 5


def multi_packet_under_ina_ps(exe: str, rdma: dict) -> None:
    segments = 4 * MP_ELEMS // MP_PMTU
    job = {**rdma["jobs"][0], "chunk_bytes": 4 * MP_ELEMS, "pmtu": MP_PMTU,
           "qps": [{**q, "result_length": 4 * 4 * MP_ELEMS} for q in rdma["jobs"][0]["qps"]]}
    with two_subnets(exe, extra={"rdma": {"jobs": [job]}}, tag="rdmavatmp") as tb:
        # The INA job is chunked at the pmtu: 256 elements a seq, a window of the rdma job's
        # window x segments.
        r = ranks_under_ina_ps(exe, tb, MP_PMTU // 4, job["window"] * segments,
                               [str(MP_CHUNKS), "0", str(MP_ELEMS), str(MP_PMTU)])
        check(r["packets_per_chunk"] == segments and "stuck_at" not in r and
              r["results"] == 2 * MP_CHUNKS and not r["wrong"],
              f"multi-packet chunks under ina-ps: both ranks got every chunk's sum as one "
              f"{segments}-packet WRITE ({r})")
        m = tb.metrics()
        sent = m.get("inaswitch_rdma_job_parent_total", job="7", event="partial_sent")
        result_in = m.get("inaswitch_rdma_job_parent_total", job="7", event="result_in")
        check(sent == MP_CHUNKS * segments and result_in == MP_CHUNKS * segments,
              f"one INA contribution and one result per pmtu segment ({sent}, {result_in}; "
              f"{MP_CHUNKS * segments} each)")


def root_switch_config(dev: str) -> str:
    """job 7's INA root on h2's link: the RoCE aggregator's partial completes it, the result
    goes by unicast to BFR-ids 1 and 2, both the aggregator's address."""
    cfg = {"version": 1, "eal": {"args": EAL_ARGS},
           "ports": [{"name": "up", "devargs": f"net_af_packet0,iface={dev},qdisc_bypass=1",
                      "ipv4": ["10.0.2.3/24"]}],
           "control": {"listen": ""},
           "ina": {"jobs": [{"job_id": 7, "role": "root", "bsl": 64, "abm": "1-2", "op": "sum",
                             "elem_type": "fp32", "max_elements": 16, "window": 8,
                             "root": "10.0.2.3",
                             "workers": [{"bfr_id": 1, "ip": "10.0.2.1"},
                                         {"bfr_id": 2, "ip": "10.0.2.1"}]}]}}
    return "# SPDX-License-Identifier: Apache-2.0\n" + to_yaml(cfg)


def under_root_switch(exe: str, rdma: dict) -> None:
    rdma = {"jobs": [{**rdma["jobs"][0], "parent": "10.0.2.3"}]}
    with two_subnets(exe, extra={"rdma": rdma}, tag="rdmavatsw") as tb, \
            tempfile.TemporaryDirectory(prefix="inae2e-vatroot-") as work:
        h1, h2 = tb.hosts["h1"], tb.hosts["h2"]
        h1.wait_reachable("10.0.1.1")
        cfg = os.path.join(work, "root.yaml")
        with open(cfg, "w") as f:
            f.write(root_switch_config(h2.dev))
        with open(os.path.join(work, "root.log"), "w") as root_log:
            root = subprocess.Popen(h2.cmd([exe, "-c", cfg, "--file-prefix",
                                            f"inae2e{os.getpid()}vatroot"]),
                                    stdout=root_log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL)
            try:
                # The ranks re-send a WRITE without result every 2 s and the aggregator its
                # partial every 300 ms: the run completes once the root switch is up.
                ranks = h1.run(["/usr/bin/python3", "-B", PEER, "ranks", h1.dev,
                                tb.port("p0").mac, "10.0.1.1", str(CHUNKS), "0"], timeout=120)
            finally:
                root.terminate()
                try:
                    root.wait(10)
                except subprocess.TimeoutExpired:
                    root.kill()
                    root.wait(5)
        with open(os.path.join(work, "root.log")) as f:
            root_text = f.read()
        log(f"ranks: {ranks.stdout.strip()} {ranks.stderr.strip()}")
        r = json.loads(ranks.stdout.strip().splitlines()[-1])
        ok = "stuck_at" not in r and r["results"] == 2 * CHUNKS and not r["wrong"]
        check(ok, f"under an inaswitch root both ranks got every chunk's sum ({r})" +
              ("" if ok else f"\nroot switch log:\n{root_text}"))
        m = tb.metrics()
        result_in = m.get("inaswitch_rdma_job_parent_total", job="7", event="result_in")
        dup = m.get("inaswitch_rdma_job_parent_total", job="7", event="result_duplicate")
        check(result_in == CHUNKS and dup >= CHUNKS,
              f"every chunk's result came from the root switch, its copy for the other BFR-id "
              f"counted a duplicate ({result_in}, {dup})")


if __name__ == "__main__":
    main(test)
