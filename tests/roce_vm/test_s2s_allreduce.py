# SPDX-License-Identifier: Apache-2.0
"""Server-to-server aggregation inside Linux rxe's own RC connections: ina-rdma-root in one qemu
VM, ina-rdma-worker --mode server-to-server in two others (the programs of
roce-vm-rdma-allreduce, unchanged), inaswitch on the host ROUTING between the VMs' subnets
(lab.py, routed) with an `rdma_s2s` job that learns its connections from the RDMA CM REQ/REP
(`learn: true`, docs/rdma.md "Server-to-server mode (as built)").

  1. int32 sum of 1 MiB per worker from host-generated random files: both workers' results are
     bit-exact against the host's own sum (sha256). The switch learned both connections,
     ABSORBED every contribution (ACKing them as the root) and sent one aggregate per chunk on
     the carrier, each acknowledged by the root; the root completed every chunk from fewer
     WRITEs than world x chunks (one aggregate carrying both counts), wrote every result.
  2. The same AllReduce with netem loss on rank 2's link both ways (new data): the workers'
     go-back-N and the switch's (NAKs toward the worker, RNR while a slot is held) recover and
     the result is still bit-exact. In this round the root's guest also drops every ACK of its
     last aggregate (AETH MSN = chunks, a tc u32 rule): the root has it and writes its results,
     but the switch never hears it acknowledged, resends it until the root ends the
     connections, and then releases it at the carrier's DREQ (`carrier_ended_unacked` 1: the
     root's result of that chunk passed the switch), the race that a lossy root link leaves
     to chance (round 4).
  3. The same with the loss on the carrier's (rank 1's) link: its contributions also fix the
     aggregate's RETH and PSNs toward the root.
  4. The same with netem loss on the root's link both ways: the switch's requester leg resends
     aggregates (go-back-N on the root's NAK-sequences and on its ACK timeout), the root's
     result WRITEs are recovered by rxe, and the result is still bit-exact. Every aggregate is
     acknowledged by the root or, its last ACKs lost before the root ended the connections,
     released at the carrier's end (round 2).
  5. `drain: true` set by a config reload while a 4 MiB AllReduce runs (once the switch absorbed
     256 chunks of it): the switch finishes the chunks it holds, then forwards the connections'
     WRITEs and the root's ACKs PSN/MSN-translated; the root reduces the rest itself (it gets
     between chunks and world x chunks WRITEs), the result is bit-exact.
  6. Result replication: a new root with `--results once` and the job reloaded with
     `replicate: true`: the root WRITEs each result once, on the carrier; the switch copies it
     to rank 2 on its connection (PSN, RETH VA and rkey learned from the CM REQ) and forwards
     the root the ACK both workers gave. The workers disconnect as soon as their results are in
     (--linger-ms 0) and rank 2's link delays what it sends by 100 ms, so the carrier's DREQ
     reaches the switch before rank 2's last ACKs (the tail that hung in session 7; the capture
     on the root's tap shows the order). Both results bit-exact; the root completed `chunks`
     result WRITEs instead of world x chunks.
     INA_S2S_REPLICATE_ONLY=N runs this round alone, N times in one lab.
  7. The job REMOVED by a config reload (no drain) while a 4 MiB AllReduce runs, once the
     switch absorbed 256 chunks of it (docs/rdma.md "Leaving a job"): the switch keeps the
     removed job's state by itself, finishes the chunks it holds, then forwards both
     connections PSN/MSN-translated until their DREQs; the result is bit-exact, the root
     reduced the rest itself, the switch counted the translated forwarding under
     leaving_job, no fallback, and once both DREQs passed no job is left leaving.
     INA_S2S_REMOVE_ONLY=N runs this round alone, N times in one lab.
  In each, the programs exit 0, and no guest's rxe counted a retry-exceeded or RNR-exceeded
  error (its hw_counters, before and after).

usage: test_s2s_allreduce.py build/src/worker/rdma/ina-rdma-worker \
           build/src/worker/rdma/ina-rdma-root build/src/app/inaswitch
"""

import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "golden"))

import rocecheck  # noqa: E402
from lab import Lab, run_test, check, log, wait_until  # noqa: E402
from pcapio import read_pcap  # noqa: E402
from test_rdma_allreduce import (ELEMENTS, TIMEOUT_S, WORLD, allreduce, int32_inputs,  # noqa: E402
                                 root_cmd, stripped, worker_cmd)

JOB = 7  # test_rdma_allreduce.worker_cmd's default job
CHUNK = 1024  # ina-rdma-worker's default --chunk-bytes: one WRITE ONLY packet per chunk
CHUNKS = ELEMENTS * 4 // CHUNK
LOSS = "loss 2%"
# The drain round: 4 MiB per worker, drain set once the switch absorbed DRAIN_AT chunks of it.
DRAIN_ELEMENTS = 4 * ELEMENTS
DRAIN_AT = 256
REMOVAL_SEED = 77  # the removal round's data (4 MiB per worker, as the drain round's)
# rxe's per-port counters that mean an RC gave up (a failed completion follows). Not among them:
# completer_retry_err, which counts every go-back-N retry (a timeout or a NAK-sequence), the
# recovery itself.
RXE_FATAL = ("retry_exceeded_err", "retry_rnr_exceeded_err")
# Replication round: rank 2's link delays what it sends, so that its last ACKs of the results
# reach the switch after the carrier (rank 1, leaving at once) has sent its DREQ.
LAGGARD_DELAY = "delay 100ms"
OP_ACK, OP_UD_SEND_ONLY, CM_QPN, CM_DREQ = 0x11, 0x64, 1, 0x0015


def switch_config(cfg: dict, lab, drain: bool = False, replicate: bool = False) -> dict:
    cfg["rdma_s2s"] = {"jobs": [{"id": JOB, "root": lab.vms[0].ip, "world": WORLD, "op": "sum",
                                 "dtype": "int32", "chunk_bytes": CHUNK, "window": 64,
                                 "learn": True, "drain": drain, "replicate": replicate}]}
    return cfg


def replicating_config(cfg: dict, lab) -> dict:
    return switch_config(cfg, lab, replicate=True)


def drained_config(cfg: dict, lab) -> dict:
    return switch_config(cfg, lab, drain=True)


def removed_config(cfg: dict, _lab) -> dict:
    return cfg  # no rdma_s2s section at all


def leaving(lab) -> dict[str, float]:
    """The removed job's counters (its leaving_job series) and the jobs_leaving gauge."""
    m = lab.switch.metrics()
    names = ("absorbed", "forwarded", "drain_refused", "aggregates_acked", "icrc_errors",
             "not_contribution", "bad_contributions", "leave_connections_translated",
             "leave_ended_dreq", "leave_ended_timeout", "leave_passed", "duplicates")
    out = {n: m.get(f"inaswitch_rdma_s2s_{n}_total", leaving_job=JOB) for n in names}
    out["slots_in_use"] = m.get("inaswitch_rdma_s2s_slots_in_use", leaving_job=JOB)
    out["jobs_leaving"] = m.get("inaswitch_rdma_s2s_jobs_leaving")
    out["fallback"] = m.by_label("inaswitch_rdma_s2s_packets_total", "reason").get("fallback", 0)
    return out


def reload_mid_allreduce(lab, data: tuple[list[str], str], before: dict, reload_config,
                         tag: str) -> None:
    """A 4 MiB AllReduce on the listening root, the switch reloaded with `reload_config` once it
    absorbed DRAIN_AT chunks of it (counted from `before`); both workers bit-exact."""
    root_vm, workers = lab.vms[0], lab.vms[1:]
    paths, sha = data
    out_path = f"/tmp/{tag.split()[0]}.out"
    jobs = [vm.start(worker_cmd(root_vm, rank, f"--type int32 --chunk-bytes {CHUNK} "
                                f"--input /root/{os.path.basename(p)} --output {out_path}"))
            for rank, (vm, p) in enumerate(zip(workers, paths), start=1)]
    wait_until(lambda: s2s(lab)["absorbed"] - before["absorbed"] >= 2 * DRAIN_AT, TIMEOUT_S,
               f"{tag}: the switch absorbing {DRAIN_AT} chunks")
    lab.reload_switch(reload_config)
    for rank, job in enumerate(jobs, start=1):
        rc, out = job.wait(TIMEOUT_S + 30)
        log(f"{tag} rank {rank}: {out.strip()}")
        check(rc == 0, f"{tag}: rank {rank} completed (exit {rc})")
    for vm in workers:
        _rc, out = vm.run(f"sha256sum {out_path}", check=True)
        check(out.split()[0] == sha, f"{tag}: {vm.name}'s int32 result bit-exact")


def removal_round(lab, data: tuple[list[str], str], tag: str) -> None:
    """Round 7: the job configured afresh, a root for one 4 MiB round, and the job removed from
    the config (no drain) once the switch absorbed DRAIN_AT chunks of it."""
    root_vm = lab.vms[0]
    lab.reload_switch(switch_config)  # a fresh job (an earlier one leaves, or is released)
    wait_until(lambda: lab.switch.metrics().get("inaswitch_rdma_s2s_jobs_leaving") == 0, 30,
               "no earlier job still leaving (its connections ended)")
    root = root_vm.start(root_cmd(root_vm, f"--rounds 1 --timeout-ms {TIMEOUT_S * 1000}"))
    root_vm.wait_rdma_cm_listen(timeout=60)
    chunks = DRAIN_ELEMENTS * 4 // CHUNK
    reload_mid_allreduce(lab, data, s2s(lab), removed_config, tag)
    rc, out = root.wait(60)
    log(f"root, {tag}: {out.strip()}")
    check(rc == 0, f"{tag}: ina-rdma-root served the round (exit {rc})")
    root_round = [json.loads(line) for line in out.splitlines()
                  if line.startswith("{") and '"round"' in line][0]
    check(root_round["ok"] and root_round["contribution_count"] == WORLD * chunks and
          root_round["results_written"] == WORLD * chunks,
          f"{tag}: the root reduced {WORLD * chunks} contributions and wrote every result")
    check(chunks < root_round["contributions"] < WORLD * chunks,
          f"{tag}: the root got {root_round['contributions']} WRITEs for {chunks} chunks: "
          f"aggregates before the removal, the workers' own WRITEs after")
    # The connections end by their DREQs (the root disconnects at the end of its round): the
    # leaving job is then over.
    wait_until(lambda: leaving(lab)["leave_ended_dreq"] == WORLD and
               leaving(lab)["jobs_leaving"] == 0, 30,
               f"{tag}: both connections' DREQs seen, the removed job no longer leaving")
    gone = leaving(lab)
    log(f"switch, {tag}: {gone}")
    check(gone["absorbed"] >= 2 * DRAIN_AT and gone["forwarded"] > 0 and
          gone["leave_connections_translated"] == WORLD,
          f"{tag}: {gone['absorbed']:.0f} contributions absorbed before the removal, "
          f"{gone['forwarded']:.0f} packets forwarded translated after it, on both connections")
    check(gone["slots_in_use"] == 0 and gone["leave_ended_timeout"] == 0 and
          gone["leave_passed"] == 0,
          f"{tag}: every held chunk finished, the connections ended by DREQ, not by the timeout")
    check(gone["icrc_errors"] == 0 and gone["not_contribution"] == 0 and
          gone["bad_contributions"] == 0 and gone["fallback"] == 0,
          f"{tag}: no ICRC error, non-contribution, bad contribution or fallback")


def rxe_counters(vm) -> dict[str, int]:
    """The guest's rxe0 port hw_counters by name."""
    _rc, out = vm.run("cd /sys/class/infiniband/rxe0/ports/1/hw_counters && grep . *",
                      check=True)
    counters = {}
    for line in out.splitlines():
        name, _, value = line.strip().partition(":")
        if value.strip().isdigit():
            counters[name] = int(value)
    return counters


def s2s(lab) -> dict[str, float]:
    """The job's inaswitch_rdma_s2s_<name>_total counters and its slots gauge, over its states:
    the configured one (label job) and those leaving (leaving_job: replaced by a reload, or
    superseded when a rank reconnected while another's connection was live, e.g. a DREQ lost
    for good under loss: docs/rdma.md "A worker that reconnects alone")."""
    m = lab.switch.metrics()
    names = ("absorbed", "acks_synthesized", "naks_sent", "rnr_naks_sent", "duplicates",
             "aggregates_sent", "retransmits", "root_acks_consumed", "root_naks_consumed",
             "aggregates_acked", "carrier_ended_unacked", "icrc_errors", "not_contribution",
             "bad_contributions", "connections_learned", "connections_ended",
             "connections_replaced", "sessions", "rejoins", "leave_ended_timeout", "forwarded",
             "results_replicated", "replicate_failed", "result_acks_consumed",
             "result_acks_forwarded", "result_naks_forwarded")
    def leaving_part(name: str) -> float:  # absent while no state of the job left
        return sum(v for n, labels, v in m.series
                   if n == name and labels.get("leaving_job") == str(JOB))

    out = {n: m.get(f"inaswitch_rdma_s2s_{n}_total", job=JOB) +
           leaving_part(f"inaswitch_rdma_s2s_{n}_total") for n in names}
    out["slots_in_use"] = (m.get("inaswitch_rdma_s2s_slots_in_use", job=JOB) +
                           leaving_part("inaswitch_rdma_s2s_slots_in_use"))
    out["fallback"] = m.by_label("inaswitch_rdma_s2s_packets_total", "reason").get("fallback", 0)
    return out


def delta(after: dict, before: dict) -> dict:
    return {k: after[k] - before.get(k, 0) for k in after}


def settled(sw: dict) -> float:
    """Aggregates the root acknowledged, or that were unacknowledged when the carrier's
    connection ended though the root had written their chunk's result (its ACKs lost): released
    at the DREQ (docs/rdma.md "Departures")."""
    return sw["aggregates_acked"] + sw["carrier_ended_unacked"]


def round_checks(tag: str, root_round: dict, sw: dict, res: list[dict], sessions: int,
                 lossy: bool, released: int | None) -> None:
    """`released`: how many aggregates the carrier's end released (carrier_ended_unacked),
    None for any (a lossy root link)."""
    n = CHUNKS * WORLD
    check(all(r["chunks"] == CHUNKS and r["results"] == CHUNKS for r in res),
          f"{tag}: one result per chunk on every worker")
    check(root_round["ok"] and root_round["chunks"] == CHUNKS and
          root_round["contribution_count"] == n and root_round["results_written"] == n,
          f"{tag}: the root reduced {n} contributions and completed {n} result WRITEs")
    check(root_round["contributions"] < n,
          f"{tag}: the root received {root_round['contributions']} contribution WRITEs, fewer "
          f"than world x chunks = {n}")
    check(sw["absorbed"] >= n and sw["acks_synthesized"] > 0,
          f"{tag}: the switch absorbed {sw['absorbed']:.0f} contributions (>= {n}) and ACKed "
          f"them as the root ({sw['acks_synthesized']:.0f} ACKs)")
    check(settled(sw) == CHUNKS and sw["aggregates_sent"] >= CHUNKS,
          f"{tag}: {sw['aggregates_sent']:.0f} aggregates sent, one per chunk ({CHUNKS}) "
          f"acknowledged by the root ({sw['aggregates_acked']:.0f}) or released at the "
          f"carrier's end, its result written ({sw['carrier_ended_unacked']:.0f})")
    if released is not None:
        check(sw["carrier_ended_unacked"] == released,
              f"{tag}: {sw['carrier_ended_unacked']:.0f} aggregate(s) released at the carrier's "
              f"end, {released} expected")
    check(root_round["contributions"] == CHUNKS,
          f"{tag}: every chunk reached the root as one aggregate (root WRITEs == {CHUNKS})")
    check(sw["connections_learned"] == WORLD and sw["sessions"] + sw["rejoins"] == sessions,
          f"{tag}: the switch learned {WORLD} connections from the CM REQ/REP; sessions started "
          f"over a used table (or on a fresh state, another rank's DREQ lost): {sessions}")
    if not lossy:
        # Under loss a DREQ can be lost for good (the next AllReduce connects first): that
        # connection ends by the next REQ of its rank instead, checked over all rounds.
        check(sw["connections_ended"] == WORLD,
              f"{tag}: the switch saw the {WORLD} connections end (DREQ)")
    check(sw["icrc_errors"] == 0 and sw["not_contribution"] == 0 and
          sw["bad_contributions"] == 0 and sw["fallback"] == 0,
          f"{tag}: no ICRC error, non-contribution, bad contribution or fallback at the switch")


def int32_round(root_vm, workers, inputs: list[str], sha: str, tag: str,
                extra: str = "") -> tuple[list[dict], float]:
    """One int32 AllReduce of the host-generated `inputs` on the listening root, every worker's
    result checked bit-exact against `sha`; (the workers' JSON results, wall seconds). `extra`:
    more ina-rdma-worker options."""
    t0 = time.monotonic()
    res = allreduce(root_vm, workers,
                    [f"--type int32 --chunk-bytes {CHUNK} --input /root/{os.path.basename(p)} "
                     f"--output /tmp/int32.out {extra}" for p in inputs], f"int32 {tag}")
    wall = time.monotonic() - t0
    for vm in workers:
        _rc, out = vm.run("sha256sum /tmp/int32.out", check=True)
        check(out.split()[0] == sha, f"{tag}: {vm.name}'s int32 result bit-exact (sha256 "
              f"{sha[:16]}...)")
    return res, wall


def guest_rdma_state(vm) -> str:
    """What a guest's rxe says about its QPs and itself: for a failure's log."""
    _rc, out = vm.run("rdma -d res show qp; rdma res show cq; "
                      "cd /sys/class/infiniband/rxe0/ports/1/hw_counters && grep . *; "
                      "dmesg | tail -n 20", timeout=60)
    return out


def tail_order(root_pcap: str, root_ip: str, carrier_ip: str) -> tuple[int | None, int | None]:
    """On the root's tap: the indices of the carrier's DREQ toward the root and of the last ACK
    toward the root on the carrier (the switch's aggregated ACK); None for one not seen."""
    dreq = last_ack = None
    for n, raw in enumerate(read_pcap(root_pcap)):
        f = rocecheck.parse(raw)
        if f is None or f.ip_dst != root_ip or f.ip_src != carrier_ip:
            continue
        if f.opcode == OP_ACK:
            last_ack = n
        elif f.opcode == OP_UD_SEND_ONLY and f.dest_qp == CM_QPN and dreq is None:
            mad = raw[f.bth_offset + 12 + 8:]  # after the BTH and the DETH
            if int.from_bytes(mad[16:18], "big") == CM_DREQ:
                dreq = n
    return dreq, last_ack


def replicate_round(lab, data: tuple[list[str], str], tag: str) -> None:
    """Round 6, result replication: a new root with --results once, the job reloaded with
    replicate: true; both workers bit-exact, the root completed chunks result WRITEs, the switch
    made the copies and aggregated the ACKs. Every frame on the taps is captured (RoCE headers
    and the CM's MADs); if the root does not finish, the switch's counters, every guest's rxe
    state and the capture's paths are logged before the failure (INA_ROCE_VM_KEEP=1 keeps them)."""
    root_vm, workers = lab.vms[0], lab.vms[1:]
    lab.reload_switch(replicating_config)
    root = root_vm.start(root_cmd(root_vm, f"--rounds 1 --results once "
                                           f"--timeout-ms {TIMEOUT_S * 1000}"))
    root_vm.wait_rdma_cm_listen(timeout=60)
    rep_before = s2s(lab)
    paths, sha = data
    cap = lab.capture("udp port 4791", tag=tag.replace(" ", "-"))
    laggard = workers[1]
    laggard.netem(LAGGARD_DELAY)
    try:
        # The workers leave as soon as their results are in (--linger-ms 0), before the root
        # has heard every ACK, and rank 2's ACKs come late: the carrier's DREQ passes the switch
        # before them. The tail that hung against rxe in session 7 (docs/rdma.md,
        # "Departures"): the switch must still tell the root, on the carrier, what they got.
        res, _wall = int32_round(root_vm, workers, paths, sha, tag, extra="--linger-ms 0")
        if not root_vm._wait_for(lambda: root.rc is not None, 60):
            log(f"{tag}: the root did not end within 60 s of the workers; switch: "
                f"{delta(s2s(lab), rep_before)}; lcore reasons: "
                f"{lab.switch.metrics().by_label('inaswitch_rdma_s2s_packets_total', 'reason')}")
            for vm in lab.vms:
                log(f"{vm.name} rdma state:\n{guest_rdma_state(vm)}")
            log(f"{tag}: captures {cap.stop()}")
        rc, out = root.wait(5)
    finally:
        laggard.netem(None)
        pcaps = cap.stop()
    log(f"root, {tag}: {out.strip()}")
    dreq, last_ack = tail_order(pcaps[root_vm.name], root_vm.ip, workers[0].ip)
    check(dreq is not None and last_ack is not None and dreq < last_ack,
          f"{tag}: the carrier's DREQ passed toward the root (frame {dreq}) before the root's "
          f"last aggregated ACK (frame {last_ack}): the tail crossed the carrier's departure")
    check(rc == 0, f"{tag}: ina-rdma-root --results once served the round (exit {rc})")
    rep_round = [json.loads(line) for line in out.splitlines()
                 if line.startswith("{") and '"round"' in line][0]
    rep = delta(s2s(lab), rep_before)
    log(f"switch, {tag}: {rep}")
    check(all(r["chunks"] == CHUNKS and r["results"] == CHUNKS for r in res),
          f"{tag}: one result per chunk on every worker")
    check(rep_round["ok"] and rep_round["results"] == "once" and
          rep_round["results_written"] == CHUNKS,
          f"{tag}: the root completed {rep_round['results_written']} result WRITEs "
          f"= chunks ({CHUNKS}), not world x chunks ({WORLD * CHUNKS})")
    check(rep["results_replicated"] >= (WORLD - 1) * CHUNKS and rep["replicate_failed"] == 0,
          f"{tag}: the switch made {rep['results_replicated']:.0f} copies (>= "
          f"{(WORLD - 1) * CHUNKS}), none failed")
    check(rep["result_acks_consumed"] >= WORLD and rep["result_acks_forwarded"] > 0,
          f"{tag}: {rep['result_acks_consumed']:.0f} worker ACKs consumed, "
          f"{rep['result_acks_forwarded']:.0f} aggregated ACKs sent to the root")


def worker_link_recovered(tag: str, d: dict) -> None:
    check(d["naks_sent"] + d["duplicates"] + d["rnr_naks_sent"] > 0,
          f"{tag}: the switch recovered the worker's losses as its responder (NAKs "
          f"{d['naks_sent']:.0f}, duplicates {d['duplicates']:.0f}, RNR NAKs "
          f"{d['rnr_naks_sent']:.0f})")


def root_link_recovered(tag: str, d: dict) -> None:
    check(d["retransmits"] > 0 and d["root_naks_consumed"] > 0,
          f"{tag}: the switch's requester leg recovered: {d['retransmits']:.0f} aggregates "
          f"resent (go-back-N on {d['root_naks_consumed']:.0f} root NAK-sequences, and on its "
          f"ACK timeout)")


def round_alone(exes: tuple[str, str, str], times: int, name: str, seed: int, elements: int,
                first_config, one_round) -> None:
    """One round alone, `times` times in one lab (INA_S2S_REPLICATE_ONLY / INA_S2S_REMOVE_ONLY):
    for chasing it against rxe without the rounds before it. `one_round(lab, data, tag)`."""
    worker_exe, root_exe, switch_exe = exes
    scratch = tempfile.mkdtemp(prefix=f"s2s-{name}-")
    try:
        data = int32_inputs(scratch, seed=seed, elements=elements)
        extra = [stripped(worker_exe, scratch), stripped(root_exe, scratch)]
        extra += [(p, f"/root/{os.path.basename(p)}") for p in data[0]]
        with Lab(1 + WORLD, fabric="inaswitch", switch_exe=switch_exe, routed=True,
                 switch_config=first_config, extra_files=extra) as lab:
            lab.reach_all()
            rxe_before = [rxe_counters(vm) for vm in lab.vms]
            for n in range(times):
                t0 = time.monotonic()
                one_round(lab, data, f"{name} {n + 1} of {times}")
                log(f"{name} {n + 1} of {times}: passed in {time.monotonic() - t0:.1f}s")
            check_rxe_counters(lab, rxe_before)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def check_rxe_counters(lab, rxe_before: list[dict[str, int]]) -> None:
    for vm, start in zip(lab.vms, rxe_before):
        now = rxe_counters(vm)
        fatal = {k: now.get(k, 0) - start.get(k, 0) for k in RXE_FATAL}
        log(f"{vm.name} rxe0: " + ", ".join(f"{k} {now[k] - start.get(k, 0)}"
                                           for k in sorted(now)))
        check(not any(fatal.values()), f"{vm.name}: rxe counted no retry-exceeded error ({fatal})")


def test(worker_exe: str, root_exe: str, switch_exe: str) -> None:
    exes = (worker_exe, root_exe, switch_exe)
    if os.environ.get("INA_S2S_REPLICATE_ONLY"):
        round_alone(exes, int(os.environ["INA_S2S_REPLICATE_ONLY"]), "replicate", 20261129,
                    ELEMENTS, replicating_config, replicate_round)
        return
    if os.environ.get("INA_S2S_REMOVE_ONLY"):
        round_alone(exes, int(os.environ["INA_S2S_REMOVE_ONLY"]), "removal", REMOVAL_SEED,
                    DRAIN_ELEMENTS, switch_config, removal_round)
        return
    scratch = tempfile.mkdtemp(prefix="s2s-allreduce-")
    # (tag, the VM whose link is lossy (index in lab.vms: 0 the root, 1 the carrier rank 1, 2
    # rank 2), what shows the recovery, how many aggregates the carrier's end releases: None
    # for any); each round new data and, after the first, a new session over the used slots.
    # In round 2 the root's guest drops its ACKs of the last aggregate: 1 released.
    rounds_plan = [("clean", None, None, 0),
                   (f"rank 2 {LOSS}, the root's last ACK dropped", 2, worker_link_recovered, 1),
                   (f"carrier rank 1 {LOSS}", 1, worker_link_recovered, 0),
                   (f"root {LOSS}", 0, root_link_recovered, None)]
    try:
        data = [int32_inputs(scratch, seed=20261124 + n) for n in range(len(rounds_plan) + 1)]
        drain_paths, drain_sha = int32_inputs(scratch, seed=99, elements=DRAIN_ELEMENTS)
        removal_data = int32_inputs(scratch, seed=REMOVAL_SEED, elements=DRAIN_ELEMENTS)
        extra = [stripped(worker_exe, scratch), stripped(root_exe, scratch)]
        extra += [(p, f"/root/{os.path.basename(p)}")
                  for paths in [d[0] for d in data] + [drain_paths, removal_data[0]]
                  for p in paths]
        with Lab(1 + WORLD, fabric="inaswitch", switch_exe=switch_exe, routed=True,
                 switch_config=switch_config, extra_files=extra) as lab:
            root_vm, workers = lab.vms[0], lab.vms[1:]
            lab.reach_all()
            rxe_before = [rxe_counters(vm) for vm in lab.vms]
            root = root_vm.start(root_cmd(root_vm, f"--rounds {len(rounds_plan) + 1} "
                                                   f"--timeout-ms {TIMEOUT_S * 1000}"))
            root_vm.wait_rdma_cm_listen(timeout=60)
            check(not root.done(), "ina-rdma-root listens with rdma_cm")

            done = []  # (tag, workers' results, wall seconds, switch counter delta)
            before = s2s(lab)
            for (tag, lossy, _recovered, released), (paths, sha) in zip(rounds_plan, data):
                if lossy is not None:
                    lab.vms[lossy].netem(LOSS, direction="both")
                if released == 1:
                    root_vm.drop_sent_roce(OP_ACK, aeth_msn=CHUNKS)
                res, wall = int32_round(root_vm, workers, paths, sha, tag)
                if lossy is not None:
                    lab.vms[lossy].netem(None)
                if released == 1:
                    dropped = root_vm.drop_sent_roce(None)
                    log(f"{tag}: the root's guest dropped {dropped} ACK(s) of the last aggregate")
                    check(dropped >= 1, f"{tag}: the root's ACK of the last aggregate dropped "
                          f"({dropped} times)")
                # The root's last ACKs may be lost (round 4: a lossy root link) and its QPs gone
                # before the switch's ACK timeout resends the aggregate (1023 of 1024 in
                # session 9 and in session 14's CI rehearsal): the carrier's DREQ, which passed
                # the switch before the workers ended, releases it, the root's result of it
                # seen. Waited for (a DREQ lost is retried by the CM), never tolerated.
                wait_until(lambda: settled(delta(s2s(lab), before)) >= CHUNKS, 10,
                           f"{tag}: every aggregate acknowledged by the root or released at the "
                           f"carrier's end")
                after = s2s(lab)
                done.append((tag, res, wall, delta(after, before)))
                log(f"switch, {tag}: {done[-1][3]}")
                before = after

            # 5. drain: true while an AllReduce runs (a config reload that keeps the job's
            # state): the switch finishes the chunks it holds, then forwards the rest of the
            # connections' WRITEs PSN-translated; the root reduces them itself.
            reload_mid_allreduce(lab, (drain_paths, drain_sha), before, drained_config, "drain")
            final = s2s(lab)
            drained = delta(final, before)
            log(f"switch, drain: {drained}")

            rc, out = root.wait(60)
            log(f"root: {out.strip()}")
            check(rc == 0, f"ina-rdma-root served every AllReduce (exit {rc})")
            rounds = [json.loads(line) for line in out.splitlines()
                      if line.startswith("{") and '"round"' in line]
            check(len(rounds) == len(rounds_plan) + 1,
                  f"the root reports {len(rounds_plan) + 1} rounds")
            for n, ((tag, res, _wall, d), root_round) in enumerate(zip(done, rounds)):
                # The first session starts on a fresh table (nothing to empty, not counted);
                # every later one's first REQ, with no connection live, empties the used slots.
                round_checks(tag, root_round, d, res, sessions=0 if n == 0 else 1,
                             lossy=rounds_plan[n][1] is not None, released=rounds_plan[n][3])
                recovered = rounds_plan[n][2]
                if recovered is not None:
                    recovered(tag, d)
            drain_round, drain_chunks = rounds[-1], DRAIN_ELEMENTS * 4 // CHUNK
            check(drain_round["ok"] and drain_round["contribution_count"] == WORLD * drain_chunks
                  and drain_round["results_written"] == WORLD * drain_chunks,
                  f"drain: the root reduced {WORLD * drain_chunks} contributions and wrote "
                  f"every result")
            check(drained["forwarded"] > 0 and drained["absorbed"] >= 2 * DRAIN_AT and
                  drain_chunks < drain_round["contributions"] < WORLD * drain_chunks,
                  f"drain: {drained['absorbed']:.0f} contributions absorbed before, "
                  f"{drained['forwarded']:.0f} packets forwarded translated after; the root got "
                  f"{drain_round['contributions']} WRITEs for {drain_chunks} chunks")
            check(drained["icrc_errors"] == 0 and drained["fallback"] == 0,
                  "drain: no ICRC error, no fallback")
            check(final["slots_in_use"] == 0, "every slot released at the end")
            check(final["connections_ended"] + final["connections_replaced"] +
                  final["leave_ended_timeout"] == final["connections_learned"],
                  f"every learned connection ended, by DREQ "
                  f"({final['connections_ended']:.0f}), by the next REQ of its rank "
                  f"({final['connections_replaced']:.0f}) or, left with a superseded state, "
                  f"by its timeout ({final['leave_ended_timeout']:.0f}), of "
                  f"{final['connections_learned']:.0f}")

            # 6. Result replication: the root writes each result once (on the carrier), the
            # switch (the job reloaded with replicate: true: a new state) copies it to rank 2.
            replicate_round(lab, data[-1], "replicate")

            # 7. The job removed (no drain) while an AllReduce runs: the switch keeps its state
            # by itself, finishing what it holds, then translating until the DREQs.
            removal_round(lab, removal_data, "removal")

            check_rxe_counters(lab, rxe_before)
            check(all(r.get("ok", False) for _tag, res, _w, _d in done for r in res),
                  "every worker reported ok")
            log(f"timings: boot {lab.timings.get('boot_s', 0):.1f}s; int32 1 MiB x {WORLD}: " +
                "; ".join(f"{tag} {wall:.2f}s wall, root {r['seconds']:.2f}s"
                          for (tag, _res, wall, _d), r in zip(done, rounds)))
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(run_test("roce-vm-s2s-allreduce", __doc__, test, (3,)))
