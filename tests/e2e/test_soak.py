# SPDX-License-Identifier: Apache-2.0
"""e2e-soak: everything at once for a while, then the switch is back where it started.

    h1 10.0.1.2 -- p0 10.0.1.1 \\
    h2 10.0.2.2 -- p1 10.0.2.1  \\ [inaswitch: root of job 1 (int32 sum, unicast results) and
    h3 10.0.3.2 -- p2 10.0.3.1  /   job 2 (fp32 sum, results over BIER own bits); BFIR of the
    h4 10.0.4.2 -- p3 10.0.4.1 /    multicast group 239.5.5.5 -> bits {2, 3}]

For INAE2E_SOAK_SECONDS (default 40 in the test suite; docs/operations.md runs it for 600) the
switch carries, all at the same time:
- INA: rounds of 4 ina-workers on job 1 then job 2, each round verified (int32 bit-exact, fp32
  within the documented bound), every round on fresh sequence numbers;
- L3: an iperf3 TCP stream h1 -> h4 and a paced UDP flow h3 -> h2;
- BIER: h1 sends to the group, h2 and h3 (the group's bits) receive through own-bit delivery;
- job churn: an aggregator job added and removed through the API, over and over;
- reloads: POST /api/v1/reload, over and over.
A warm-up round of each first fixes the baseline (what a switch settles at once it has done
everything once). Afterwards, with the load stopped: every INA round verified, every job's
slots back to 0, mbufs in use back to the baseline, RSS and open file descriptors no more than
the baseline plus a small margin, every churn and reload answered 200, the UDP flow and the
group delivered, and the hosts still reach each other.
"""

import json
import os
import subprocess
import threading
import time

from testbed import (Host, Port, Testbed, TestFailure, UdpFlow, check, log, main,
                     wait_until)
from test_allreduce import worker_exe

SOAK_SECONDS = float(os.environ.get("INAE2E_SOAK_SECONDS", "40"))
N = 4
ROOT = "10.0.1.1"
CHUNK = 256
WINDOW = 64
ELEMENTS = 64 * 1024
SLOT_TIMEOUT_MS = 500
GROUP, MCAST_PORT = "239.5.5.5", 9555
HERE = os.path.dirname(os.path.abspath(__file__))
MCAST = os.path.join(HERE, "fig1", "mcast.py")
# What RSS may grow by across the soak: allocator caches that reloads and churn leave warm.
RSS_MARGIN_KB = 16 * 1024
# TCP beside everything else, paced below what af_packet on 2 shared cores carries: an
# unpaced stream fills the switch's RX rings and the UDP flows would lose what a saturated
# link loses, which says nothing about the switch.
# Drop reasons this load explains: workers' retransmissions of chunks already absorbed,
# frames the hosts' kernels send to other MACs or to the switch's own address (IGMP, IPv6).
EXPECTED_DROPS = {"ina_duplicate", "not_for_us", "local_unsupported", "unsupported_ethertype"}
IPERF_RATE = os.environ.get("INAE2E_SOAK_TCP_RATE", "300M")


def root_job(job_id: int, elem_type: str, hosts: list[Host], bier: bool) -> dict:
    job = {"job_id": job_id, "role": "root", "bsl": 64, "abm": f"1-{N}", "op": "sum",
           "elem_type": elem_type, "max_elements": CHUNK, "window": WINDOW,
           "slot_timeout_ms": SLOT_TIMEOUT_MS, "root": ROOT, "on_reject": "drop"}
    if bier:
        job["results"] = "bier"
    else:
        job["workers"] = [{"bfr_id": i + 1, "ip": h.ip} for i, h in enumerate(hosts)]
    return job


CHURN_JOB = {"job_id": 77, "role": "aggregator", "bsl": 64, "abm": "1-2", "op": "sum",
             "elem_type": "int32", "max_elements": CHUNK, "window": 32, "root": ROOT}


def rss_kb(pid: int) -> int:
    """Resident memory outside the EAL's own memory (the --no-huge memfd and its fbarray, or
    hugepage files): the EAL heap keeps every page it ever touched resident, so its share of
    RSS grows with where allocations happened to land; its use is checked with heap_info."""
    total, current = 0, ""
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            first = line.split(maxsplit=1)[0]
            if not first.endswith(":"):
                current = line
            elif first == "Rss:" and not any(k in current for k in EAL_MAPPINGS):
                total += int(line.split()[1])
    return total


EAL_MAPPINGS = ("memfd:nohuge", "fbarray_", "rtemap_")


def eal_heap_bytes(tb: Testbed) -> int:
    """Bytes allocated from the EAL heap (DPDK telemetry /eal/heap_info)."""
    out = subprocess.run(["dpdk-telemetry.py", "-f", tb.file_prefix],
                         input="/eal/heap_info,0\n", capture_output=True, text=True,
                         timeout=20).stdout
    for line in out.splitlines():
        if "/eal/heap_info" in line:
            start = line.index("{")
            return int(json.loads(line[start:])["/eal/heap_info"]["Alloc_size"])
    raise TestFailure(f"no /eal/heap_info from dpdk-telemetry.py: {out[-300:]}")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


class Soak:
    """The background load; every loop ends at `deadline` and records what it saw."""

    def __init__(self, tb: Testbed, worker: str, hosts: list[Host]):
        self.tb, self.worker, self.hosts = tb, worker, hosts
        self.errors: list[str] = []
        self.rounds = 0
        self.next_seq = 0
        self.churns = 0
        self.churns_raced = 0
        self.reloads = 0
        self.lock = threading.Lock()

    def fail(self, what: str) -> None:
        with self.lock:
            self.errors.append(what)

    def allreduce_round(self) -> None:
        """One verified AllReduce of job 1 (int32) and one of job 2 (fp32, BIER results)."""
        chunks = -(-ELEMENTS // CHUNK)
        for job_id, elem_type in ((1, "int32"), (2, "fp32")):
            first = self.next_seq
            self.next_seq += chunks
            procs = [h.popen([self.worker, "--job", str(job_id), "--bfr-id", str(i + 1), "--abm",
                              f"1-{N}", "--root", ROOT, "--bind", h.ip, "--type", elem_type,
                              "--elements", str(ELEMENTS), "--chunk", str(CHUNK), "--window",
                              str(WINDOW), "--first-seq", str(first), "--seed",
                              str(1000 + self.rounds), "--timeout-ms", "60000"])
                     for i, h in enumerate(self.hosts)]
            for i, p in enumerate(procs):
                try:
                    out, err = p.communicate(timeout=90)
                except Exception:
                    p.kill()
                    p.wait(5)
                    self.fail(f"round {self.rounds} job {job_id}: worker {i + 1} hung")
                    continue
                lines = out.strip().splitlines()
                report = json.loads(lines[-1]) if lines else {}
                if p.returncode != 0 or report.get("ok") is not True:
                    self.fail(f"round {self.rounds} job {job_id}: worker {i + 1} exit "
                              f"{p.returncode}: {out[-300:]} {err[-300:]}")
        self.rounds += 1

    def ina_loop(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            self.allreduce_round()

    def churn_once(self) -> None:
        status, text = self.tb.http("POST", "/api/v1/jobs", CHURN_JOB, timeout=10)
        if status != 200:
            self.fail(f"churn: POST job 77 answered {status} {text.strip()[:200]}")
            return
        status, text = self.tb.http("DELETE", "/api/v1/jobs?job_id=77", timeout=10)
        if status == 404 and "no job 77" in text:
            # A reload in between replaced the running config with the file's, which has no
            # job 77: the reload removed it (and its tables) first.
            self.churns_raced += 1
            return
        if status != 200:
            self.fail(f"churn: DELETE job 77 answered {status} {text.strip()[:200]}")
            return
        self.churns += 1

    def churn_loop(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            self.churn_once()

    def reload_once(self) -> None:
        status, text = self.tb.http("POST", "/api/v1/reload", timeout=10)
        if status != 200:
            import subprocess as sp
            heap = sp.run(["dpdk-telemetry.py", "-f", self.tb.file_prefix], input="/eal/heap_info,0\n", capture_output=True, text=True).stdout
            self.fail(f"reload answered {status} {text.strip()[:200]} {heap[-600:]}")
            return
        self.reloads += 1

    def reload_loop(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            self.reload_once()
            # A reload republishes everything; pace them so INA and forwarding see each
            # snapshot for a while (this is load shaping, not synchronisation).
            time.sleep(0.2)


def group_receiver(h: Host, seconds: float):
    return h.popen(["/usr/bin/python3", MCAST, "recv", "--group", GROUP, "--port",
                    str(MCAST_PORT), "--iface-addr", h.ip, "--timeout", str(seconds + 30)],
                   stdin=subprocess.PIPE)


def test(switch_exe: str) -> None:
    worker = worker_exe(switch_exe)
    hosts = [Host(f"h{i}", f"10.0.{i}.2/24") for i in range(1, N + 1)]
    ports = [Port(f"p{i - 1}", ipv4=[f"10.0.{i}.1/24"], host=hosts[i - 1])
             for i in range(1, N + 1)]
    bier = {"bfr_id": 50, "bifts": [{"bsl": 64, "local": [
        {"bfr_id": i + 1, "host": h.ip} for i, h in enumerate(hosts)]}],
        "groups": [{"group": GROUP, "bfr_ids": "2-3"}]}
    extra = {"ina": {"jobs": [root_job(1, "int32", hosts, bier=False),
                              root_job(2, "fp32", hosts, bier=True)]},
             "bier": bier}
    with Testbed(switch_exe, ports, extra=extra) as tb:
        for a in hosts:
            for b in hosts:
                if a is not b:
                    a.wait_reachable(b.ip)
            a.wait_reachable(ROOT)
        pid = tb.proc.pid
        soak = Soak(tb, worker, hosts)

        # Warm-up: everything once, then the baseline.
        soak.allreduce_round()
        soak.churn_once()
        soak.reload_once()
        check(not soak.errors, f"warm-up round clean ({soak.errors})")
        for job in ("1", "2"):
            tb.wait_metric("inaswitch_ina_job_slots_in_use", lambda v: v == 0,
                           timeout=SLOT_TIMEOUT_MS / 1000 + 10, job=job)
        base = tb.metrics()
        base_mbufs = base.get("inaswitch_mempool_mbufs_in_use")
        base_rss, base_fds, base_heap = rss_kb(pid), open_fds(pid), eal_heap_bytes(tb)
        log(f"baseline: {base_mbufs:.0f} mbufs in use, EAL heap {base_heap >> 10} kB in use, "
            f"RSS outside it {base_rss} kB, {base_fds} fds")

        # The load.
        h1, h2, h3, h4 = hosts
        iperf_port = 5201
        server = h4.popen(["iperf3", "-s", "-1", "-B", h4.ip, "-p", str(iperf_port)])
        h4.wait_listening(iperf_port)
        receivers = {h.name: group_receiver(h, SOAK_SECONDS) for h in (h2, h3)}
        for name, r in receivers.items():
            check(r.stdout.readline().strip() == "ready", f"{name} joined {GROUP}")
        udp_count = int(SOAK_SECONDS * 2000)
        flow = None
        try:
            flow = UdpFlow(h3, h2, count=udp_count, rate=2000, port=9000, idle=3)
            client = h1.popen(["iperf3", "-c", h4.ip, "-B", h1.ip, "-p", str(iperf_port), "-t",
                               str(int(SOAK_SECONDS)), "-b", IPERF_RATE, "-J"])
            mcast_count = int(SOAK_SECONDS * 500)
            sender = h1.popen(["/usr/bin/python3", MCAST, "send", "--group", GROUP, "--port",
                               str(MCAST_PORT), "--iface-addr", h1.ip, "--count",
                               str(mcast_count), "--rate", "500"])
            deadline = time.monotonic() + SOAK_SECONDS
            threads = [threading.Thread(target=f, args=(deadline,), daemon=True)
                       for f in (soak.ina_loop, soak.churn_loop, soak.reload_loop)]
            for t in threads:
                t.start()
            # The switch must stay up and answer scrapes throughout.
            scrapes = 0
            while time.monotonic() < deadline:
                if not tb.alive():
                    raise TestFailure(f"switch died during the soak:\n{tb.switch_log()[-3000:]}")
                tb.metrics()
                scrapes += 1
                time.sleep(1)
            for t in threads:
                t.join(timeout=180)
                check(not t.is_alive(), "every load loop ended after the deadline")
            out, err = client.communicate(timeout=60)
            iperf = json.loads(out)
            sent_bytes = iperf["end"]["sum_sent"]["bytes"]
            check(client.returncode == 0 and sent_bytes > 0,
                  f"iperf3 TCP h1 -> h4: {sent_bytes / 1e6:.1f} MB in {SOAK_SECONDS:.0f} s")
            out, err = sender.communicate(timeout=60)
            sent = json.loads(out)["sent"]
            check(sent == mcast_count, f"h1 sent {sent} datagrams to {GROUP}")
            udp_report = flow.result()
            flow = None
        except BaseException:
            for p in receivers.values():
                if p.poll() is None:
                    p.kill()
                    p.wait(5)
            raise
        finally:
            if flow is not None:
                flow.kill()
            if server.poll() is None:
                server.kill()
                server.wait(5)
        after = tb.metrics()
        drops = {k: v - base.by_label("inaswitch_drops_total", "reason").get(k, 0)
                 for k, v in after.by_label("inaswitch_drops_total", "reason").items()}
        log(f"drops during the soak: { {k: v for k, v in drops.items() if v} }")
        missed = {k: v - base.by_label("inaswitch_port_hw_rx_missed_total", "port").get(k, 0)
                  for k, v in after.by_label("inaswitch_port_hw_rx_missed_total", "port").items()}
        log(f"RX missed by the ports (the switch's worker had no CPU to poll): {missed}; "
            f"group datagrams encapsulated: "
            f"{after.get('inaswitch_bier_mcast_encapsulated_total') - base.get('inaswitch_bier_mcast_encapsulated_total'):.0f}")
        check(not soak.errors, "no load loop saw an error:\n  " + "\n  ".join(soak.errors))
        # On 2 shared cores the switch's af_packet sockets overflow in the kernel whenever its
        # worker loses the CPU (net_af_packet does not report those as missed), so what the
        # hosts send is not all what the switch receives. What the switch received it must
        # deliver: every group datagram it encapsulated reaches both members, once.
        encapsulated = (after.get("inaswitch_bier_mcast_encapsulated_total") -
                        base.get("inaswitch_bier_mcast_encapsulated_total"))
        for name, r in receivers.items():
            out, _ = r.communicate(input="", timeout=30)
            got = json.loads(out.strip().splitlines()[-1])
            check(got["distinct"] == encapsulated and got["received"] == got["distinct"] and
                  encapsulated >= mcast_count // 2,
                  f"{name}: {got['distinct']} distinct group datagrams ({got['received']} "
                  f"received) == {encapsulated:.0f} encapsulated by the switch, of {mcast_count} "
                  f"sent")
        check(udp_report["unique"] >= udp_count // 2 and udp_report["duplicates"] == 0,
              f"UDP h3 -> h2: {udp_report['unique']} of {udp_count} received, "
              f"{udp_report['duplicates']} duplicates")
        unexpected = {k: v for k, v in drops.items() if v and k not in EXPECTED_DROPS}
        check(not unexpected, f"no drop for a reason the load does not explain ({unexpected})")
        log(f"soak: {soak.rounds} INA rounds (2 jobs each, verified), {soak.churns} job "
            f"add/remove pairs ({soak.churns_raced} removed by a reload), {soak.reloads} reloads, {scrapes} scrapes in {SOAK_SECONDS:.0f} s")
        check(soak.rounds >= 2 and soak.churns >= 10 and soak.reloads >= 10,
              "the soak did real work in every loop")

        # Back to baseline.
        for job in ("1", "2"):
            tb.wait_metric("inaswitch_ina_job_slots_in_use", lambda v: v == 0,
                           timeout=SLOT_TIMEOUT_MS / 1000 + 10, job=job)
        check(not any(lbl.get("job") == "77" for _, lbl, _ in tb.metrics().nonzero()),
              "the churned job left nothing behind in the metrics")
        def mbufs_back() -> bool:
            return tb.metrics().get("inaswitch_mempool_mbufs_in_use") <= base_mbufs
        try:
            wait_until(mbufs_back, 10, f"mbufs in use back to the baseline {base_mbufs:.0f}")
        except TestFailure:
            m = tb.metrics()
            raise TestFailure(f"mbufs in use {m.get('inaswitch_mempool_mbufs_in_use'):.0f} > "
                              f"baseline {base_mbufs:.0f} 10 s after the load stopped; slots in "
                              f"use {m.by_label('inaswitch_ina_job_slots_in_use', 'job')}")
        # Retired snapshots are freed on the control plane's tick once the workers pass a
        # quiescent state: wait for the heap to come back, then compare.
        def heap_back() -> bool:
            return eal_heap_bytes(tb) <= base_heap
        try:
            wait_until(heap_back, 10, "EAL heap back to the baseline", interval=0.5)
        except TestFailure:
            raise TestFailure(f"EAL heap {eal_heap_bytes(tb)} bytes in use > baseline "
                              f"{base_heap} 10 s after the load stopped") from None
        rss, fds = rss_kb(pid), open_fds(pid)
        mbufs = tb.metrics().get("inaswitch_mempool_mbufs_in_use")
        log(f"after: {mbufs:.0f} mbufs in use, EAL heap back to {eal_heap_bytes(tb) >> 10} kB, "
            f"RSS outside it {rss} kB (+{rss - base_rss}), {fds} fds")
        check(rss <= base_rss + RSS_MARGIN_KB,
              f"RSS {rss} kB within {RSS_MARGIN_KB} kB of the baseline {base_rss} kB")
        check(fds <= base_fds, f"open fds {fds} <= baseline {base_fds}")
        for a in hosts:
            for b in hosts:
                if a is not b:
                    a.wait_reachable(b.ip)
        check(tb.alive(), "the switch is still running")


if __name__ == "__main__":
    main(test)
