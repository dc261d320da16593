# SPDX-License-Identifier: Apache-2.0
"""One Virtual Aggregation Tree with both kinds of workers (docs/rdma.md "Aggregator role"):
two ranks on Linux's own RDMA stack (rdma_rxe in qemu VMs, ina-rdma-worker --mode
server-to-switch) hold RC connections to inaswitch S1, which aggregates them as a VAT aggregator
of INA job 7 under a host INA root (ina-ps); a UDP INA worker (ina-worker) behind the same
switch contributes to the same job. A second inaswitch S0 sits between S1 and the root (it only
routes, but for job 9 in round 5). Every subnet is routed; the root and the UDP worker are
Linux hosts in namespaces of their own:

    rank 1 10.77.1.2 - tap0 - [10.77.1.1]
    rank 2 10.77.2.2 - tap1 - [10.77.2.1]  S1  [10.77.50.1] up0 = up1 [10.77.50.2]  S0
                                               [10.77.51.1] wk0 = wk1 10.77.51.2 ina-worker
                                    S0 [10.77.52.1] rt0 = rt1 10.77.52.2 ina-ps

The root's A-BM is {1, 2, 3}: BFR-ids 1 and 2 are the ranks (the rdma job's `abm`), 3 the UDP
worker. For each chunk the switch sends ONE INA partial (P-BM {1, 2}) up to ina-ps; the UDP
worker's datagram carries P-BM {3}, which shares no bit with the switch's A-BM, so the switch
routes it to the root untouched (a job the INA stage does not aggregate here). ina-ps sends the
result by unicast per BFR-id: 1 and 2 to the switch's address (the first becomes the ranks'
result WRITEs, the second a duplicate), 3 through the switch to the worker (a result of a job
the RoCE feature aggregates, for another host: routed on untouched).

  1. int32 sum of 1 MiB per contributor from host-generated random files: the result on both
     ranks and on the UDP worker is bit-exact against the host's own sum (sha256); the switch
     sent one partial per chunk (inaswitch_rdma_job_parent_total{event=partial_sent}), took one
     result per chunk and counted the second copy of each a duplicate, and routed the UDP
     worker's datagrams without aggregating them.
  2. The same with the UDP worker losing 3 % of its sends and 3 % of the results it receives
     (ina-worker --fault-tx-loss / --fault-rx-loss): it retransmits, ina-ps answers a chunk it
     already completed with the result again, through the switch; bit-exact everywhere.
  3. The same with 2 % netem loss both ways on rank 2's link (its WRITEs and the switch's
     result WRITEs recovered by go-back-N, each chunk still one partial up); bit-exact.
  4. Chunks above the PMTU (job 8: 4096-byte chunks at PMTU 1024): every rank's chunk is one
     4-packet WRITE, the switch sends 4 partials up per chunk (INA seqs 4s..4s+3, which the UDP
     worker's 1 KiB datagrams match), the ranks get each result as one 4-packet WRITE.
  5. Two levels above the ranks (job 9): S0 is an INA aggregator of job 9 with A-BM {1, 2, 3};
     S1's partials (P-BM {1, 2}) and the UDP worker's datagrams (P-BM {3}), both addressed to
     the root, are aggregated on their way, and the root gets one packet per seq holding all
     three BFR-ids (ina-ps: every seq completed, none absorbed); the root's results pass S0
     untouched; bit-exact on all three.
  6. A deterministic tree (job 10, fp32, `deterministic: true` at S1's rdma aggregator and at
     S0, now the job's INA root): S1's partials carry the ranks' exact int64 fixed-point sums,
     S0 quantizes the UDP worker's fp32 and adds them, and every contributor's result is the
     exact fixed-point sum computed on the host (RN_fp32(sum of round_half_even(x * 2^32) *
     2^-32)), bit for bit: RDMA and UDP workers reproducible in one tree.
  7. The same deterministic tree under ina-ps --deterministic as the root (job 11, S0 routing).
  The switch's job counters are read across rounds whose sessions ended (the ranks' DELETEs):
  they do not fall when a session ends.

usage: test_vat_mixed.py build/src/worker/rdma/ina-rdma-worker build/src/worker/ina-worker \
           build/src/worker/ina-ps build/src/app/inaswitch
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from lab import API_PORT, Lab, check, log, run_test, to_yaml, wait_until  # noqa: E402
from test_rdma_allreduce import int32_inputs, stripped  # noqa: E402
from test_switch_allreduce import deterministic_inputs  # noqa: E402

RANKS = 2
ELEMENTS = 262144  # 1 MiB of int32 per contributor
PMTU = 1024        # the rxe links'; an INA seq carries at most PMTU bytes of a chunk


class Shape:
    """An rdma job in the aggregator role: its id (= the INA job's), chunk, window and type. A
    chunk above the PMTU is chunk_bytes / PMTU INA seqs up and one multi-packet WRITE down; the
    UDP worker chunks its tensor as the seqs do."""

    def __init__(self, job: int, chunk_bytes: int, window: int, dtype: str = "int32",
                 deterministic: bool = False, root_at_s0: bool = False):
        self.job, self.chunk_bytes, self.window = job, chunk_bytes, window
        self.dtype, self.deterministic, self.root_at_s0 = dtype, deterministic, root_at_s0
        segment = min(chunk_bytes, PMTU)
        self.ina_window = window * (chunk_bytes // segment)
        self.seqs = ELEMENTS * 4 // segment  # INA packets per contributor, result packets per rank
        self.ina_chunk = segment // 4         # elements per INA seq


ONE_PACKET = Shape(7, 1024, 64)
MULTI_PACKET = Shape(8, 4096, 16)
TWO_LEVELS = Shape(9, 1024, 64)  # S0 aggregates this INA job above the lab's switch
# S0 is this job's deterministic INA root: S1's partials go up as int64 fixed point (512-byte
# fp32 chunks: 1 KiB of int64 in a datagram under the links' 1500-byte MTU).
DETERMINISTIC = Shape(10, 512, 64, "fp32", deterministic=True, root_at_s0=True)
# The same under ina-ps --deterministic (S0 routes job 11).
DETERMINISTIC_PS = Shape(11, 512, 64, "fp32", deterministic=True)
TIMEOUT_S = 150
# S1 (the lab's switch) up0 = up1 S0 rt0 = rt1 ina-ps; S1 wk0 = wk1 ina-worker.
LINKS = ("up", "rt", "wk")
SWITCH_UP, S0_DOWN = "10.77.50.1", "10.77.50.2"
S0_UP, ROOT = "10.77.52.1", "10.77.52.2"
SWITCH_WK, UDP_WORKER = "10.77.51.1", "10.77.51.2"


def link_port(name: str, iface: str, addr: str) -> dict:
    return {"name": name, "devargs": f"net_af_packet_{iface},iface={iface},qdisc_bypass=0",
            "ipv4": [f"{addr}/24"]}


def switch_config(cfg: dict, lab) -> dict:
    """S1: the ranks' ports, the link to S0 (the root's subnet behind it), the UDP worker's."""
    cfg["ports"] += [link_port("up", "up0", SWITCH_UP), link_port("wk", "wk0", SWITCH_WK)]
    cfg["routes"] = [{"prefix": "10.77.52.0/24", "via": S0_DOWN}]
    cfg["rdma"] = {"jobs": [{
        "id": j.job, "mode": "server-to-switch", "world": RANKS, "op": "sum", "dtype": j.dtype,
        "chunk_bytes": j.chunk_bytes, "window": j.window, "pmtu": PMTU, "role": "aggregator",
        "parent": S0_DOWN if j.root_at_s0 else ROOT, "bsl": 64, "abm": f"1-{RANKS}",
        "partial_timeout_ms": 100, **({"deterministic": True} if j.deterministic else {})}
        for j in (ONE_PACKET, MULTI_PACKET, TWO_LEVELS, DETERMINISTIC, DETERMINISTIC_PS)]}
    return cfg


def s0_config(lab, api_host: str) -> str:
    """S0, between S1 and the root: routes jobs 7 and 8 (no INA job of theirs here) and
    aggregates INA job 9 (A-BM {1, 2, 3}: S1's partials and the UDP worker's datagrams, both
    on their way to the root) into one partial per seq to the root."""
    cfg = lab.default_switch_config()
    cfg["ports"] = [link_port("s1", "up1", S0_DOWN), link_port("rt", "rt0", S0_UP)]
    cfg["routes"] = [{"prefix": f"10.77.{n}.0/24", "via": SWITCH_UP} for n in (1, 2, 51)]
    cfg["control"] = {"listen": f"{api_host}:{API_PORT}"}
    cfg["ina"] = {"jobs": [{
        "job_id": TWO_LEVELS.job, "role": "aggregator", "bsl": 64, "abm": f"1-{RANKS + 1}",
        "op": "sum", "elem_type": "int32", "max_elements": TWO_LEVELS.ina_chunk,
        "window": TWO_LEVELS.ina_window, "root": ROOT}, {
        "job_id": DETERMINISTIC.job, "role": "root", "bsl": 64, "abm": f"1-{RANKS + 1}",
        "op": "sum", "elem_type": "fp32", "max_elements": DETERMINISTIC.ina_chunk,
        "window": DETERMINISTIC.ina_window, "root": S0_DOWN, "deterministic": True,
        "workers": [{"bfr_id": 1, "ip": SWITCH_UP}, {"bfr_id": 2, "ip": SWITCH_UP},
                    {"bfr_id": 3, "ip": UDP_WORKER}]}]}
    return "# SPDX-License-Identifier: Apache-2.0\n" + to_yaml(cfg)


class Host:
    """A Linux host in a namespace of its own on a link's far end (the lab's namespace holds
    the switch: two addresses there would reach each other without it)."""

    def __init__(self, lab, iface: str, addr: str, gw: str, tag: str):
        self.ns = f"{lab.ns}-{tag}"
        self.addr = addr
        subprocess.run(["ip", "netns", "add", self.ns], check=True)
        lab.ns_run(["ip", "link", "set", iface, "netns", self.ns])
        for cmd in (["ip", "link", "set", "lo", "up"], ["ip", "link", "set", iface, "up"],
                    ["ip", "addr", "add", f"{addr}/24", "dev", iface],
                    ["ip", "route", "add", "default", "via", gw]):
            self.run(cmd)

    def run(self, cmd: list[str], **kw) -> subprocess.CompletedProcess:
        return subprocess.run(["ip", "netns", "exec", self.ns] + cmd, check=True,
                              capture_output=True, text=True, **kw)

    def popen(self, cmd: list[str]) -> subprocess.Popen:
        return subprocess.Popen(["ip", "netns", "exec", self.ns] + cmd, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                start_new_session=True)

    def pings(self, addr: str) -> bool:
        return subprocess.run(["ip", "netns", "exec", self.ns, "ping", "-c", "1", "-W", "1",
                               addr], capture_output=True).returncode == 0

    def udp_bound(self, port: int) -> bool:
        return f":{port} " in self.run(["ss", "-Huln"]).stdout

    def close(self) -> None:
        subprocess.run(["ip", "netns", "del", self.ns], check=False)


def rank_cmd(lab, vm, shape: Shape, rank: int, path: str, out: str) -> str:
    return (f"ina-rdma-worker --mode server-to-switch --switch-api {lab.guest_api_url} "
            f"--job {shape.job} --rank {rank} --world {RANKS} --ip {vm.ip} "
            f"--gid-index {vm.gid_index} --chunk-bytes {shape.chunk_bytes} "
            f"--window {shape.window} --timeout-ms {TIMEOUT_S * 1000} "
            f"--type {shape.dtype} --input /root/{os.path.basename(path)} --output {out}")


def parent_events(lab, job: int) -> dict[str, float]:
    m = lab.switch.metrics()
    return {e: m.get("inaswitch_rdma_job_parent_total", job=str(job), event=e)
            for e in ("partial_sent", "partial_resent", "result_in", "result_duplicate",
                      "result_not_held", "result_bad")}


# What loss costs a QP. Not out_of_sequence: rxe's packets behind an RNR NAK (a full window
# while the root's results come) are dropped as out of sequence on a clean link too.
RECOVERY = ("retransmissions", "duplicates", "naks_sent")


def qp_totals(lab, job: int) -> dict[str, float]:
    """The job's QP recovery and segment counters (QPs that left included: never falling)."""
    m = lab.switch.metrics()
    return {c: m.get(f"inaswitch_rdma_job_qp_{c}_total", job=str(job))
            for c in RECOVERY + ("rnr_naks_sent", "out_of_sequence", "segments",
                                 "results_sent")}


def s0_counts(s0) -> dict[str, float]:
    m = s0.metrics()
    return {"absorbed": m.get("inaswitch_ina_absorbed_total"),
            "partials_sent": m.get("inaswitch_ina_partials_sent_total"),
            "resent": m.get("inaswitch_ina_resent_total"),
            "results_sent": m.get("inaswitch_ina_results_sent_total")}


def a_round(lab, shape: Shape, root: Host, worker: Host, exes: dict, inputs: list[str],
            sha: str, tag: str, scratch: str, faults: list[str],
            lossy_vm=None) -> dict:
    """ina-ps as the root (S0 for a root_at_s0 job), the UDP worker and both ranks reduce
    `inputs`; every result bit-exact. Returns ina-ps's counters (its chunk table's verdicts;
    empty when S0 was the root)."""
    seqs = shape.seqs
    before = parent_events(lab, shape.job)
    qp_before = qp_totals(lab, shape.job)
    unknown_before = lab.switch.metrics().get("inaswitch_ina_unknown_job_total") or 0.0
    ps = None if shape.root_at_s0 else root.popen([
        exes["ps"], "--job", str(shape.job), "--abm", f"1-{RANKS + 1}", "--bsl", "64", "--type",
        shape.dtype, "--chunk", str(shape.ina_chunk), "--window", str(shape.ina_window),
        "--workers", f"1={SWITCH_UP},2={SWITCH_UP},3={UDP_WORKER}", "--bind", ROOT] +
        (["--deterministic"] if shape.deterministic else []))
    out_path = os.path.join(scratch, f"udp-{tag.replace(' ', '-')}.out")
    udp = None
    try:
        if ps is not None:
            wait_until(lambda: root.udp_bound(9470) or None, 30, "ina-ps bound")
        if lossy_vm is not None:
            lossy_vm.netem("loss 2%", direction="both")
        t0 = time.monotonic()
        ranks = [vm.start(rank_cmd(lab, vm, shape, rank, p, "/tmp/vat.out"))
                 for rank, (vm, p) in enumerate(zip(lab.vms, inputs), start=1)]
        udp = worker.popen([exes["worker"], "--job", str(shape.job), "--bfr-id",
                            str(RANKS + 1), "--abm", f"1-{RANKS + 1}", "--root",
                            S0_DOWN if ps is None else ROOT, "--bind",
                            UDP_WORKER, "--type", shape.dtype, "--chunk", str(shape.ina_chunk),
                            "--window", str(shape.ina_window), "--input", inputs[RANKS],
                            "--output", out_path,
                            "--timeout-ms", str(TIMEOUT_S * 1000), "--no-progress"] + faults)
        wait_until(lambda: (all(j.done() for j in ranks) and udp.poll() is not None) or None,
                   TIMEOUT_S + 60, f"{tag}: every contributor's end", interval=0.5)
        wall = time.monotonic() - t0
        ends = [j.wait(10) for j in ranks]
        udp_out, udp_err = udp.communicate(timeout=10)
        for rank, (rc, out) in enumerate(ends, start=1):
            log(f"{tag} rank {rank} (exit {rc}): {out.strip()[-600:]}")
        log(f"{tag} UDP worker (exit {udp.returncode}): {udp_out.strip()[-600:]} "
            f"{udp_err.strip()[-600:]}")
        for rank, (rc, _) in enumerate(ends, start=1):
            check(rc == 0, f"{tag}: rank {rank} completed (exit {rc})")
        check(udp.returncode == 0, f"{tag}: the UDP worker completed (exit {udp.returncode})")
    finally:
        if lossy_vm is not None:
            lossy_vm.netem(None, direction="both")
        for p in (ps, udp):
            if p is not None and p.poll() is None:
                p.terminate()
        ps_out = ""
        if ps is not None:
            ps_out, ps_err = ps.communicate(timeout=10)
            log(f"{tag} ina-ps: {ps_out.strip()[-400:]} {ps_err.strip()[-400:]}")
    root_counts = json.loads(ps_out.strip().splitlines()[-1]) if ps is not None else {}
    for vm in lab.vms:
        _, out = vm.run("sha256sum /tmp/vat.out", check=True)
        check(out.split()[0] == sha, f"{tag}: {vm.name}'s result bit-exact (sha256 {sha[:16]}...)")
    with open(out_path, "rb") as f:
        got = hashlib.sha256(f.read()).hexdigest()
    check(got == sha, f"{tag}: the UDP worker's result bit-exact (sha256 {got[:16]}...)")
    after = parent_events(lab, shape.job)
    delta = {k: after[k] - before[k] for k in after}
    unknown = (lab.switch.metrics().get("inaswitch_ina_unknown_job_total") or 0.0) - unknown_before
    log(f"{tag}: {wall:.2f}s; the switch's parent events {delta}; UDP datagrams of job "
        f"{shape.job} routed on (ina unknown job) {unknown:.0f}")
    # INA seqs: one per chunk, or one per PMTU segment of a chunk above the PMTU.
    check(delta["partial_sent"] == seqs and delta["result_bad"] == 0,
          f"{tag}: one partial per INA seq went up ({delta['partial_sent']:.0f} of {seqs}), "
          "no parent result refused")
    # The root's second copy of a seq's result finds its chunk still held (a duplicate) or,
    # when both ranks acknowledged the first one's WRITEs already, released (not held).
    check(delta["result_in"] == seqs and
          delta["result_duplicate"] + delta["result_not_held"] >= seqs,
          f"{tag}: every seq's result was taken once, the root's second copy of each dropped")
    qp = {k: v - qp_before[k] for k, v in qp_totals(lab, shape.job).items()}
    recovered = sum(qp[c] for c in RECOVERY)
    log(f"{tag}: the ranks' QPs' recovery and segments {qp}")
    if lossy_vm is not None:
        check(recovered > 0, f"{tag}: the loss on {lossy_vm.name}'s link was recovered by RC "
              f"({recovered:.0f} retransmissions, duplicates, NAKs)")
    check(qp["results_sent"] == RANKS * seqs, f"{tag}: {RANKS * seqs} result WRITE packets "
          f"went down, each PMTU segment of each result once to each rank "
          f"({qp['results_sent']:.0f})")
    if shape.chunk_bytes > PMTU:
        check(qp["segments"] >= RANKS * seqs, f"{tag}: every rank's chunk came as a "
              f"{shape.chunk_bytes // PMTU}-packet WRITE ({qp['segments']:.0f} segments)")
    check(unknown >= seqs, f"{tag}: S1 routed the UDP worker's {seqs} contributions on "
          f"toward the root unaggregated ({unknown:.0f})")
    return root_counts


def test(rdma_worker_exe: str, worker_exe: str, ps_exe: str, switch_exe: str) -> None:
    scratch = tempfile.mkdtemp(prefix="vat-mixed-")
    hosts: list[Host] = []
    try:
        clean_inputs, clean_sha = int32_inputs(scratch, RANKS + 1, 5150, ELEMENTS)
        lossy_inputs, lossy_sha = int32_inputs(scratch, RANKS + 1, 5151, ELEMENTS)
        rank_lossy_inputs, rank_lossy_sha = int32_inputs(scratch, RANKS + 1, 5152, ELEMENTS)
        multi_inputs, multi_sha = int32_inputs(scratch, RANKS + 1, 5153, ELEMENTS)
        deep_inputs, deep_sha = int32_inputs(scratch, RANKS + 1, 5154, ELEMENTS)
        # RANKS + 1 contributors of ELEMENTS fp32 each, as that module's WORLD and ELEMENTS.
        det_inputs, det_sha = deterministic_inputs(scratch, 5155)
        extra = [stripped(rdma_worker_exe, scratch)]
        extra += [(p, f"/root/{os.path.basename(p)}")
                  for p in clean_inputs[:RANKS] + lossy_inputs[:RANKS] +
                  rank_lossy_inputs[:RANKS] + multi_inputs[:RANKS] + deep_inputs[:RANKS] +
                  det_inputs[:RANKS]]
        exes = {"worker": worker_exe, "ps": ps_exe}
        with Lab(RANKS, fabric="inaswitch", switch_exe=switch_exe, routed=True, guest_api=True,
                 switch_config=switch_config, extra_files=extra, links=list(LINKS)) as lab:
            s0 = lab.add_switch(switch_exe, s0_config(lab, lab.add_switch_host()), "s0")
            root = Host(lab, "rt1", ROOT, S0_UP, "root")
            hosts.append(root)
            worker = Host(lab, "wk1", UDP_WORKER, SWITCH_WK, "wk")
            hosts.append(worker)
            lab.reach_all()
            # The switch routes between them (a ping answered once its ARP entries are in).
            wait_until(lambda: worker.pings(ROOT) or None, 30, "the UDP worker reaches the root")
            a_round(lab, ONE_PACKET, root, worker, exes, clean_inputs, clean_sha, "clean",
                    scratch, [])
            a_round(lab, ONE_PACKET, root, worker, exes, lossy_inputs, lossy_sha,
                    "UDP worker lossy", scratch,
                    ["--fault-tx-loss", "0.03", "--fault-rx-loss", "0.03"])
            a_round(lab, ONE_PACKET, root, worker, exes, rank_lossy_inputs, rank_lossy_sha,
                    "rank 2 lossy", scratch, [], lossy_vm=lab.vms[1])
            a_round(lab, MULTI_PACKET, root, worker, exes, multi_inputs, multi_sha,
                    "4 KiB chunks", scratch, [])
            # 5. S0 aggregates job 9 above S1: the root gets one packet per seq with all bits.
            s0_before = s0_counts(s0)
            ps = a_round(lab, TWO_LEVELS, root, worker, exes, deep_inputs, deep_sha,
                         "two levels", scratch, [])
            s0_delta = {k: v - s0_before[k] for k, v in s0_counts(s0).items()}
            log(f"two levels: S0's INA counters {s0_delta}; the root's verdicts {ps}")
            seqs = TWO_LEVELS.seqs
            check(s0_delta["absorbed"] >= 2 * seqs and s0_delta["partials_sent"] == seqs,
                  f"two levels: S0 aggregated S1's partial and the UDP worker's datagram of "
                  f"every seq into one partial each ({s0_delta})")
            check(ps["completed"] == seqs and ps["absorbed"] == 0,
                  f"two levels: the root completed every seq on one packet holding all three "
                  f"BFR-ids (completed {ps['completed']}, absorbed {ps['absorbed']})")
            # 6. A deterministic tree: S0 the job's INA root (exact fixed point), S1's partials
            # int64, the UDP worker's fp32 quantized at S0; the exact sum everywhere, bit for bit.
            s0_before = s0_counts(s0)
            a_round(lab, DETERMINISTIC, root, worker, exes, det_inputs, det_sha,
                    "deterministic", scratch, [])
            s0_delta = {k: v - s0_before[k] for k, v in s0_counts(s0).items()}
            seqs = DETERMINISTIC.seqs
            log(f"deterministic: S0's INA counters {s0_delta}")
            check(s0_delta["absorbed"] >= 2 * seqs and s0_delta["results_sent"] >= 3 * seqs,
                  f"deterministic: S0 as the root took S1's int64 partial and the UDP worker's "
                  f"datagram of every seq and sent the result to all three BFR-ids "
                  f"({s0_delta})")
            # 7. The same tree under ina-ps --deterministic (the host root), S0 routing.
            ps = a_round(lab, DETERMINISTIC_PS, root, worker, exes, det_inputs, det_sha,
                         "deterministic under ina-ps", scratch, [])
            check(ps["completed"] == DETERMINISTIC_PS.seqs and ps["mismatched"] == 0 and
                  ps["fixed_saturated"] == 0 and ps["fixed_nan"] == 0,
                  f"deterministic under ina-ps: it took every seq, S1's int64 partials and the "
                  f"UDP worker's fp32 alike, none refused ({ps})")
    finally:
        for h in hosts:
            h.close()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(run_test("roce-vm-vat-mixed", __doc__, test, (4,)))
