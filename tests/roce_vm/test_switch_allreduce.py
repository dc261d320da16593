# SPDX-License-Identifier: Apache-2.0
"""RDMA AllReduce in server-to-switch mode against Linux's own RDMA stack: three qemu VMs with
rdma_rxe as workers, inaswitch on the host routing between them (lab.py, routed) with an rdma
job in its config; each VM's ina-rdma-worker holds one RC connection to the switch itself
(connect over the control API, reached from the guest through lab.py's guest_api relay).

  0. The API's refusals reach the worker as text: an unknown job (404), a world that differs
     from the job's (409); exit 1, nothing connected.
  1. A rank alone connects and waits: GET /api/v1/rdma/jobs/{id} shows its QP; when the other
     ranks connect all complete. int32 sum of 1 MiB per worker from host-generated random files,
     bit-exact against the host's own sum (sha256) on every worker.
  2. fp32 sum of 1 MiB per worker from generated data, 3 AllReduces on one connection (the
     session sequence runs on: 1024, 2048 at the later calls' starts), each verified by every
     worker within the summation-order bound (docs/rdma.md) and the same bytes on all.
  3. int32 again with 2 % netem loss both ways on vm0's link: the kernel's go-back-N and the
     switch's recover and the result is still bit-exact; the switch counted retransmissions.
  4. Ordinary RoCE between two of the VMs (ibv_rc_pingpong, 200 round trips) completes while rank 1
     of a job is connected with its window of WRITEs at the switch; then ranks 2 and 3 complete it:
     the switch routes RoCE that is not addressed to it untouched.
  5. Chunks larger than the PMTU (job 11: 4096-byte int32 chunks at PMTU 1024): every
     contribution is a 4-packet WRITE FIRST/MIDDLE/MIDDLE/LAST_WITH_IMM that rxe segments, every
     result a 4-packet WRITE from the switch; 1 MiB per worker bit-exact, the switch counted
     exactly one contribution per chunk and rank and four result packets per result; then the
     same under 2 % netem loss both ways on vm1's link (go-back-N inside messages both ways),
     still bit-exact and still exactly one contribution per chunk and rank.
     INA_SWITCH_MULTI_ONLY=1 runs this round alone; INA_SWITCH_FP32_ONLY=N runs round 2 N times.
  5b. A deterministic job (job 13, fp32, `deterministic: true`): 1 MiB of random fp32 in
     [-1000, 1000) per worker; every worker's result is the exact fixed-point sum computed on
     the host (RN_fp32(sum of round_half_even(x * 2^32) * 2^-32)), bit for bit, clean and again
     with 2 % loss both ways on vm2's link (the chunks arrive in other orders).
     INA_SWITCH_DET_ONLY=1 runs it alone.
  5c. The ranks as Python processes (a bare python3 -S in each guest with inaswitch's RDMA
     module `_rdma`, python/inaswitch/rdma.cc): two int32 AllReduces of 1 MiB on one connection
     each, both bit-exact on every rank, the session sequence running on; close() DELETEs the
     QPs. INA_SWITCH_PY_ONLY=1 runs it alone.
  6. A rank that fails (job 12): vm0 drops every ACK it sends, so the switch's result WRITEs to
     rank 1 go unacknowledged (its slots stay held, the window stalls) until the switch's QP for
     rank 1 runs out of retries (--ack-timeout 14: 8 x 67 ms). The session cannot complete: ranks
     2 and 3 are sent failure notices and end at once (exit 1) naming rank 1 and why, long
     before their deadline; the failure_notices counter moved by 2, and once every rank
     left, GET /api/v1/rdma/jobs/12 still shows last_failed_session {rank 1,
     retry_exceeded}. Rank 1 ends too, at its next WRITE (NAK remote operational error),
     saying the switch ended it.
  7. A rank whose process dies (job 12 again): rank 1 is killed (SIGKILL: its QP destroyed,
     no DELETE) once the first of their many AllReduces is complete at the switch. The
     switch notices by itself (a result it owes rank 1 goes unacknowledged, or, none owed,
     its liveness probe after 1 s of silence does) and ranks 2 and 3 end on the failure
     notice naming rank 1, seconds after the kill; rank 1's dead QP is listed in error until
     an operator DELETEs it.
  8. A rank that dies owing nothing (job 12 again): vm0's WRITEs never reach the switch (tc
     holds every WRITE_ONLY_WITH_IMM it sends), so no chunk completes and no result is owed
     to rank 1 while ranks 2 and 3 hold slots. Rank 1, alive, answers the switch's liveness
     probes (its QP stays ready); killed, it does not, and the probe's retries fail the session:
     ranks 2 and 3 end on the failure notice naming rank 1, with no result ever completed.
  9. A rank that leaves early (job 12 again): rank 1 runs one AllReduce and DELETEs its QP,
     ranks 2 and 3 run two. Their second call's chunks are beyond rank 1's last, which can
     never complete: the session fails (rank_left) and they end on the notice, their first
     call verified; rank 1, done, exits 0.
     INA_SWITCH_FAIL_ONLY=1 runs rounds 6 to 9 alone.
  The switch's per-QP counters (sampled while the workers run: a QP's series goes with its
  DELETE) show the contributions, result WRITEs, ACKs, and the recovery under loss.

usage: test_switch_allreduce.py build/src/worker/rdma/ina-rdma-worker build/src/app/inaswitch \
           build/python/inaswitch/_rdma.cpython-311-x86_64-linux-gnu.so
"""

import array
import hashlib
import json
import os
import random
import re
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from lab import Lab, run_test, check, log, wait_until  # noqa: E402
from test_rdma_allreduce import int32_inputs, stripped  # noqa: E402

ELEMENTS = 262144  # 1 MiB of int32 / fp32 per worker
WORLD = 3  # the machine's limit of VMs (lab.MAX_VMS)
CHUNK = 1024
WINDOW = 64
TIMEOUT_S = 150
# The lossy session runs on job 7 again after its ranks disconnected: a job whose last QP went
# starts its next session (sequences from 0 again) with fresh slots.
JOB_INT32, JOB_FP32, JOB_BESIDE, JOB_FAIL, JOB_DET = 7, 8, 10, 12, 13
JOB_LOSSY = JOB_INT32
# Round 5: a chunk is four packets at the rxe link's PMTU 1024.
JOB_MULTI, MULTI_CHUNK, MULTI_WINDOW, PMTU = 11, 4096, 16, 1024


def rdma_jobs() -> list[dict]:
    return [{"id": job, "mode": "server-to-switch", "world": WORLD, "op": "sum", "dtype": dtype,
             "chunk_bytes": CHUNK, "window": WINDOW, "pmtu": PMTU}
            for job, dtype in ((JOB_INT32, "int32"), (JOB_FP32, "fp32"), (JOB_BESIDE, "fp32"),
                               (JOB_FAIL, "int32"))] + [
        {"id": JOB_MULTI, "mode": "server-to-switch", "world": WORLD, "op": "sum",
         "dtype": "int32", "chunk_bytes": MULTI_CHUNK, "window": MULTI_WINDOW, "pmtu": PMTU},
        {"id": JOB_DET, "mode": "server-to-switch", "world": WORLD, "op": "sum",
         "dtype": "fp32", "chunk_bytes": CHUNK, "window": WINDOW, "pmtu": PMTU,
         "deterministic": True}]


def switch_config(cfg: dict, lab) -> dict:
    cfg["rdma"] = {"jobs": rdma_jobs()}
    return cfg


def worker_cmd(lab, vm, rank: int, job: int, args: str, world: int = WORLD,
               timeout_s: int = TIMEOUT_S, chunk: int = CHUNK, window: int = WINDOW) -> str:
    return (f"ina-rdma-worker --mode server-to-switch --switch-api {lab.guest_api_url} "
            f"--job {job} --rank {rank} --world {world} --ip {vm.ip} --gid-index {vm.gid_index} "
            f"--chunk-bytes {chunk} --window {window} --timeout-ms {timeout_s * 1000} {args}")


def rdma_job(lab, job: int) -> dict:
    return lab.switch.api_json("GET", f"/api/v1/rdma/jobs/{job}")


def job_qps(lab, job: int) -> list[dict]:
    return rdma_job(lab, job).get("qps", [])


def wait_results(jobs, tag: str, lab=None, job_id: int = 0) -> list[list[dict]]:
    """Waits for guest jobs; each must exit 0; returns each one's result JSON lines. Every end
    is logged before any is checked. With `lab`, the switch's view of job `job_id` (its QPs'
    states and counters) is sampled while the ranks run (a failing rank DELETEs its QP as it
    exits), and a failure logs the last sample with QPs and each guest's view of its link."""
    last_view: list = [None]

    def ended():
        if lab is not None:
            try:
                view = rdma_job(lab, job_id)
                if view.get("qps"):
                    last_view[0] = view
            except Exception as e:  # noqa: BLE001 - a sample missed is no failure
                if last_view[0] is None:  # an earlier sample says more than the error
                    last_view[0] = f"not read: {e}"
        return all(j.done() for j in jobs) or None
    wait_until(ended, TIMEOUT_S + 60, f"{tag}: every rank's end", interval=0.5)
    ends = []
    for rank, job in enumerate(jobs, start=1):
        rc, out = job.wait(10)
        log(f"{tag} rank {rank}: {out.strip()}")
        ends.append((rc, out))
    if lab is not None and any(rc != 0 for rc, _ in ends):
        log(f"switch's job {job_id} as last sampled while the ranks ran: "
            f"{json.dumps(last_view[0])}")
        lab.log_guest_links("after the failure")
    out_all = []
    for rank, (rc, out) in enumerate(ends, start=1):
        check(rc == 0, f"{tag}: rank {rank} completed and verified (exit {rc})")
        out_all.append([json.loads(line) for line in out.splitlines()
                        if line.startswith("{") and '"iteration"' in line])
    return out_all


def fp32_round(lab) -> float:
    """Three fp32 AllReduces on one connection per rank (job 8): every one verified on every
    worker, session sequences 0, 1024, 2048, the same result bytes everywhere. Returns its wall
    time."""
    vms = lab.vms
    t0 = time.monotonic()
    jobs = [vm.start(worker_cmd(lab, vm, rank, JOB_FP32,
                                f"--type fp32 --elements {ELEMENTS} --seed 11 "
                                f"--iterations 3 --output /tmp/fp32.out"))
            for rank, vm in enumerate(vms, start=1)]
    res = wait_results(jobs, "fp32", lab, JOB_FP32)
    wall = time.monotonic() - t0
    chunks = ELEMENTS * 4 // CHUNK
    check(all(len(r) == 3 and [i["first_seq"] for i in r] == [0, chunks, 2 * chunks] and
              all(i["verified"] and i["mismatches"] == 0 for i in r) for r in res),
          "fp32: 3 AllReduces per connection, session sequence 0, 1024, 2048, every "
          "one verified on both workers")
    sums = {vm.run("sha256sum /tmp/fp32.out", check=True)[1].split()[0] for vm in vms}
    check(len(sums) == 1, "fp32: every worker received the same result bytes")
    check(wait_until(lambda: job_qps(lab, JOB_FP32) == [] or None, 30,
                     "job 8's QPs gone after the DELETEs"), "fp32: the DELETEs tore the QPs down")
    return wall


# What ranks 2 and 3 end with when rank 1's QP ran out of retries (rounds 6 to 8).
RANK1_FAILED = ("the switch failed job 12's session: rank 1's connection failed (what the switch "
                "sent it went unacknowledged until its retries ran out)")


def kill_worker(vm) -> None:
    """SIGKILLs the guest's ina-rdma-worker: its QP is destroyed, no DELETE comes. (No pkill in
    the guest: its processes by name, from /proc; comm is the name's 15 bytes.)"""
    vm.run("for p in /proc/[0-9]*; do [ \"$(cat $p/comm 2>/dev/null)\" = ina-rdma-worker ] "
           "&& kill -KILL ${p#/proc/}; done; true", check=True)


def check_others_ended(ends, tag: str, seconds: float, since: str, also: str = "",
                       why: str = RANK1_FAILED) -> None:
    """Logs every rank's end; ranks 2 and 3 must have ended (exit 1) on the failure notice
    `why` (and `also`), within a fifth of their deadline `seconds` after `since`."""
    for rank, (rc, out) in enumerate(ends, start=1):
        log(f"{tag}, rank {rank} (exit {rc}): {out.strip()[-400:]}")
    for rank, (rc, out) in enumerate(ends[1:], start=2):
        check(rc == 1 and why in out and also in out,
              f"{tag}: rank {rank} ended on the failure notice naming rank 1 (exit {rc})")
    check(seconds < TIMEOUT_S / 5, f"{tag}: ranks 2 and 3 ended {seconds:.1f}s after {since}, "
          f"not at their {TIMEOUT_S}s deadline")


def failed_rank_round(lab) -> float:
    """Round 6: rank 1 never acknowledges a result; the switch fails the session when its QP
    for rank 1 is out of retries, and ranks 2 and 3 end on the failure notice. Returns how long
    the other ranks took to end."""
    vms = lab.vms
    counters = QpCounters(lab, JOB_FAIL)
    vms[0].drop_sent_roce(0x11)
    seen: list = [None]
    try:
        t0 = time.monotonic()
        jobs = [vm.start(worker_cmd(lab, vm, rank, JOB_FAIL,
                                    f"--type int32 --elements {ELEMENTS} --seed 13 "
                                    "--ack-timeout 14"))
                for rank, vm in enumerate(vms, start=1)]

        def others_ended():
            # The failed session's state lasts until every rank's QP is gone (a new session is
            # fresh): sampled while the ranks run.
            if seen[0] is None:
                failed = rdma_job(lab, JOB_FAIL).get("session_failed")
                if failed:
                    seen[0] = failed
            return all(j.done() for j in jobs[1:]) or None
        wait_until(others_ended, TIMEOUT_S + 60, "ranks 2 and 3 ended", interval=0.05)
        others_s = time.monotonic() - t0
        wait_until(lambda: jobs[0].done() or None, TIMEOUT_S + 60, "rank 1 ended")
    finally:
        dropped = vms[0].drop_sent_roce(None)
    ends = [j.wait(10) for j in jobs]
    log(f"failed session: vm0 dropped {dropped} ACKs; the switch's view {json.dumps(seen[0])}")
    check_others_ended(ends, "failed session", others_s, "their start")
    check(ends[0][0] == 1 and "the switch put this rank's connection of job 12 in error" in
          ends[0][1], "rank 1, whose QP the switch put in error, ended at its next WRITE (the "
          "switch's NAK remote operational error), saying so")
    failure = {"rank": 1, "reason": "retry_exceeded"}
    check(seen[0] in (None, failure),
          f"GET /api/v1/rdma/jobs/{JOB_FAIL}'s session_failed, if sampled in the moment between "
          f"the failure and the ranks' DELETEs, named rank 1 and retry_exceeded: {seen[0]}")
    t = counters.totals()
    log("switch QP counters, failed session: " + json.dumps(t))
    check(t.get("failure_notices") == WORLD - 1,
          f"the switch sent a failure notice to each of the {WORLD - 1} other ranks")
    check(wait_until(lambda: job_qps(lab, JOB_FAIL) == [] or None, 30,
                     "job 12's QPs gone after the DELETEs"), "every rank's DELETE came")
    job = rdma_job(lab, JOB_FAIL)
    failed_sessions = lab.switch.metrics().get("inaswitch_rdma_job_failed_sessions_total",
                                               job=str(JOB_FAIL))
    check(failed_sessions == 1, f"inaswitch_rdma_job_failed_sessions_total counted the failed "
          f"session once ({failed_sessions})")
    check(job.get("session_failed") is None and job.get("last_failed_session") == failure and
          job["results_completed"] == 0,
          "the job's next session starts fresh, and the job still says which rank failed the "
          f"last one and why: {json.dumps(job)[:300]}")
    return others_s


def killed_rank_round(lab) -> float:
    """Round 7: rank 1 is killed mid-run; ranks 2 and 3 end on the failure notice. Returns the
    seconds from the kill to their end."""
    vms = lab.vms
    before = lab.switch.metrics().get("inaswitch_rdma_job_failed_sessions_total",
                                      job=str(JOB_FAIL))
    jobs = [vm.start(worker_cmd(lab, vm, rank, JOB_FAIL,
                                f"--type int32 --elements {ELEMENTS} --seed 14 "
                                "--iterations 1000 --ack-timeout 14"))
            for rank, vm in enumerate(vms, start=1)]
    # (A guest job's output arrives when it ends: the switch's count says how far they are.)
    chunks = ELEMENTS * 4 // CHUNK
    wait_until(lambda: rdma_job(lab, JOB_FAIL)["results_completed"] >= chunks or None,
               TIMEOUT_S, "the ranks' first AllReduce complete at the switch")
    # (No pkill in the guest: its processes by name, from /proc; comm is the name's 15 bytes.)
    kill_worker(vms[0])
    t_kill = time.monotonic()
    wait_until(lambda: all(j.done() for j in jobs) or None, TIMEOUT_S + 60,
               "every rank ended")
    after_s = time.monotonic() - t_kill
    check_others_ended([j.wait(10) for j in jobs], "killed rank", after_s, "rank 1's kill")
    qps = job_qps(lab, JOB_FAIL)
    check([(q["rank"], q["state"]) for q in qps] == [(1, "error_result")],
          f"the dead rank's QP stays, in error, until it is deleted: {qps}")
    status, body = lab.switch.http("DELETE", f"/api/v1/rdma/jobs/{JOB_FAIL}/connect/1")
    check(status == 204, f"an operator's DELETE removes it ({status} {body})")
    job = rdma_job(lab, JOB_FAIL)
    failed = lab.switch.metrics().get("inaswitch_rdma_job_failed_sessions_total",
                                      job=str(JOB_FAIL))
    check(job.get("qps") == [] and job.get("session_failed") is None and
          job.get("last_failed_session") == {"rank": 1, "reason": "retry_exceeded"} and
          failed == before + 1,
          f"the job is fresh again, its last failed session rank 1's, counted ({failed:.0f})")
    return after_s


def probed_rank_round(lab) -> float:
    """Round 8: rank 1 contributes nothing (its WRITEs held at its egress) and dies; only the
    liveness probe can notice. Returns the seconds from the kill to the others' end."""
    vms = lab.vms
    vms[0].hold_sent_roce(0x0B)
    try:
        jobs = [vm.start(worker_cmd(lab, vm, rank, JOB_FAIL,
                                    f"--type int32 --elements {ELEMENTS} --seed 15 "
                                    "--ack-timeout 14"))
                for rank, vm in enumerate(vms, start=1)]

        def rank1_probed_and_alive():
            qp = {q["rank"]: q for q in job_qps(lab, JOB_FAIL)}.get(1)
            return (qp is not None and qp["state"] == "ready" and
                    qp["counters"]["probes_sent"] >= 1 and
                    qp["counters"]["acks_received"] >= 1 and qp) or None
        qp = wait_until(rank1_probed_and_alive, 60, "rank 1 probed, and answering")
        log(f"probed rank 1 while it lives: {json.dumps(qp['counters'])}")
        kill_worker(vms[0])
        t_kill = time.monotonic()
        wait_until(lambda: all(j.done() for j in jobs[1:]) or None, TIMEOUT_S + 60,
                   "ranks 2 and 3 ended")
        after_s = time.monotonic() - t_kill
    finally:
        vms[0].hold_sent_roce(None)
    # Nothing was owed to rank 1 (no result in anywhere): the probe noticed.
    check_others_ended([j.wait(10) for j in jobs], "probed rank", after_s, "rank 1's kill",
                       also="; 0 of 1024 results in")
    qps = job_qps(lab, JOB_FAIL)
    check([(q["rank"], q["state"]) for q in qps] == [(1, "error_result")] and
          qps[0]["counters"]["probes_sent"] >= 2 and qps[0]["counters"]["results_sent"] == 0,
          f"rank 1's QP failed on a probe, never sent a result: {qps}")
    status, body = lab.switch.http("DELETE", f"/api/v1/rdma/jobs/{JOB_FAIL}/connect/1")
    check(status == 204 and job_qps(lab, JOB_FAIL) == [], f"DELETE of the dead QP ({status})")
    return after_s


def left_rank_round(lab) -> float:
    """Round 9: rank 1 leaves after one call, the others want two. Returns how long the
    others took after rank 1 ended."""
    vms = lab.vms
    jobs = [vm.start(worker_cmd(lab, vm, rank, JOB_FAIL,
                                f"--type int32 --elements {ELEMENTS} --seed 16 "
                                f"--iterations {1 if rank == 1 else 2}"))
            for rank, vm in enumerate(vms, start=1)]
    wait_until(lambda: jobs[0].done() or None, TIMEOUT_S + 60, "rank 1's one call")
    t_left = time.monotonic()
    wait_until(lambda: all(j.done() for j in jobs) or None, TIMEOUT_S + 60, "ranks 2 and 3")
    after_s = time.monotonic() - t_left
    ends = [j.wait(10) for j in jobs]
    check(ends[0][0] == 0 and '"verified": true' in ends[0][1],
          f"rank 1 did its one call and left (exit {ends[0][0]})")
    check_others_ended(ends, "rank left", after_s, "rank 1 ended",
                       why="the switch failed job 12's session: rank 1's connection failed (it "
                           "left the job while the others still needed its contributions)",
                       also='"verified": true')
    check(wait_until(lambda: job_qps(lab, JOB_FAIL) == [] or None, 30, "job 12's QPs gone") and
          rdma_job(lab, JOB_FAIL).get("last_failed_session") == {"rank": 1,
                                                                 "reason": "rank_left"},
          "the job's last failed session: rank 1, rank_left")
    return after_s


class QpCounters:
    """A job's QP counters (inaswitch_rdma_job_qp_<name>_total{job}): its live QPs' and those
    of QPs that left (a worker's DELETE takes its QP's own series away), so they are read once,
    after the workers ended, without racing a DELETE; totals() is what moved since the
    constructor read them (a job id may serve an earlier round)."""

    LINE = re.compile(r'^inaswitch_rdma_job_qp_(\w+)_total\{job="(\d+)"\} ([0-9.eE+-]+)$')

    def __init__(self, lab, job: int):
        self.lab = lab
        self.job = job
        self.before = self.read()

    def read(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for line in self.lab.switch.metrics_text().splitlines():
            m = self.LINE.match(line)
            if m and int(m.group(2)) == self.job:
                out[m.group(1)] = float(m.group(3))
        return out

    def watch(self, jobs, what: str) -> None:
        """Waits until every guest job has ended."""
        wait_until(lambda: all(j.done() for j in jobs) or None, TIMEOUT_S + 60, what)

    def totals(self) -> dict[str, float]:
        return {k: v - self.before.get(k, 0.0) for k, v in self.read().items()}


def deterministic_inputs(d: str, seed: int) -> tuple[list[str], str]:
    """Random fp32 tensors in [-1000, 1000) for ranks 1..WORLD and the sha256 of their
    deterministic sum (job 13, 32 fraction bits): RN_fp32(sum of round_half_even(x * 2^32) *
    2^-32), computed exactly here (every product and sum below 2^53 is an exact double, and
    Python's round() of a float is half to even; array('f') rounds a double to nearest even)."""
    rng = random.Random(seed)
    paths, total = [], [0] * ELEMENTS
    floats = array.array("f", bytes(4 * ELEMENTS))  # the fp32 sum in rank order, for contrast
    for rank in range(1, WORLD + 1):
        a = array.array("f", (rng.uniform(-1000.0, 1000.0) for _ in range(ELEMENTS)))
        path = os.path.join(d, f"fp32-det-{seed}-rank{rank}.bin")
        with open(path, "wb") as f:
            f.write(a.tobytes())
        paths.append(path)
        total = [t + round(x * 2.0 ** 32) for t, x in zip(total, a)]
        floats = array.array("f", (s + x for s, x in zip(floats, a)))
    result = array.array("f", (s * 2.0 ** -32 for s in total))
    differ = sum(1 for x, y in zip(result, floats) if x != y)
    check(differ > 0, f"the deterministic sum differs from the float sum in {differ} elements: "
          "a switch adding floats could not pass this round")
    return paths, hashlib.sha256(result.tobytes()).hexdigest()


def deterministic_round(lab, inputs: list[str], sha: str, tag: str, lossy_vm=None) -> float:
    """Job 13 (`deterministic: true`): the ranks' fp32 `inputs`; every worker's result is the
    exact fixed-point sum (`sha`), bit for bit, whatever order the chunks arrived in (with
    `lossy_vm`, 2 % loss both ways on its link reorders them). Returns the wall time."""
    vms = lab.vms
    if lossy_vm is not None:
        lossy_vm.netem("loss 2%", direction="both")
    t0 = time.monotonic()
    jobs = [vm.start(worker_cmd(lab, vm, rank, JOB_DET,
                                f"--type fp32 --input /root/{os.path.basename(p)} "
                                "--output /tmp/det.out"))
            for rank, (vm, p) in enumerate(zip(vms, inputs), start=1)]
    wait_results(jobs, tag, lab, JOB_DET)
    wall = time.monotonic() - t0
    if lossy_vm is not None:
        lossy_vm.netem(None, direction="both")
    for vm in vms:
        _, out = vm.run("sha256sum /tmp/det.out", check=True)
        check(out.split()[0] == sha, f"{vm.name}: {tag}: the exact fixed-point sum, bit for bit "
              f"(sha256 {sha[:16]}...)")
    det = rdma_job(lab, JOB_DET).get("deterministic")
    check(isinstance(det, dict) and det.get("fraction_bits") == 32 and det.get("nan") == 0,
          f"{tag}: GET /api/v1/rdma/jobs/13 shows the job deterministic with fp32's 32 fraction "
          f"bits and its quantizer counts ({det})")
    return wall


# The bare interpreter a guest runs inaswitch's RDMA module under: the host's python3.11, the
# encodings package (the only part of the standard library a `-S` start imports that is not
# frozen into the binary) and os.py (the landmark by which it finds its prefix).
PYTHON = "/usr/bin/python3.11"
PYLIB = "/usr/lib/python3.11"
GUEST_SCRIPT = os.path.join(HERE, "guest_rdma_allreduce.py")


def python_extras(rdma_module: str) -> list:
    files = [(PYTHON, "/usr/local/bin/python3"), (f"{PYLIB}/os.py", f"{PYLIB}/os.py"),
             (rdma_module, f"/root/py/{os.path.basename(rdma_module)}"),
             (GUEST_SCRIPT, "/root/rdma_allreduce.py")]
    files += [(f"{PYLIB}/encodings/{m}.py", f"{PYLIB}/encodings/{m}.py")
              for m in ("__init__", "aliases", "utf_8")]
    return files


def python_round(lab, inputs: list[str], sha: str) -> float:
    """Round 5c: the ranks are Python processes (inaswitch's `_rdma` module, python/inaswitch
    rdma.cc) on job 7: two AllReduces of the int32 `inputs` on one connection each, both
    bit-exact (`sha`) on every rank, the second continuing the session sequence. Returns the
    wall time."""
    vms = lab.vms
    t0 = time.monotonic()
    jobs = [vm.start(
        f"PYTHONHOME=/usr python3 -S /root/rdma_allreduce.py api={lab.guest_api_url} "
        f"job={JOB_INT32} rank={rank} world={WORLD} ip={vm.ip} gid={vm.gid_index} dtype=int32 "
        f"chunk={CHUNK} window={WINDOW} timeout_ms={TIMEOUT_S * 1000} calls=2 "
        f"input=/root/{os.path.basename(p)} output=/tmp/py.out")
        for rank, (vm, p) in enumerate(zip(vms, inputs), start=1)]
    wait_until(lambda: all(j.done() for j in jobs) or None, TIMEOUT_S + 60,
               "the Python ranks' end", interval=0.5)
    wall = time.monotonic() - t0
    chunks = ELEMENTS * 4 // CHUNK
    for rank, (vm, job) in enumerate(zip(vms, jobs), start=1):
        rc, out = job.wait(10)
        log(f"python rank {rank}: {out.strip()}")
        check(rc == 0 and f"call 1 chunks {chunks} results {chunks} next_seq {2 * chunks}"
              in out and "close ''" in out,
              f"python rank {rank}: two AllReduces on one connection through inaswitch.rdma's "
              f"module, the session sequence run on to {2 * chunks}, a clean close (exit {rc})")
        _, sums = vm.run("sha256sum /tmp/py.out0 /tmp/py.out1", check=True)
        check([line.split()[0] for line in sums.splitlines()] == [sha, sha],
              f"{vm.name}: both Python AllReduces bit-exact (sha256 {sha[:16]}...)")
    check(wait_until(lambda: job_qps(lab, JOB_INT32) == [] or None, 30,
                     "job 7's QPs gone after the Python ranks closed"),
          "the Python ranks' close() DELETEd their QPs")
    return wall


def multi_packet_round(lab, inputs: list[str], sha: str, tag: str, lossy_vm=None,
                       cmd=None) -> float:
    """Round 5: job 11's 4096-byte chunks at PMTU 1024 (multi-packet WRITEs both ways), the
    int32 `inputs` bit-exact (`sha`) on every worker; with `lossy_vm`, 2 % loss both ways on its
    link. `cmd(vm, rank, args)`: the worker's command line (default: connected through the
    API). Returns the wall time."""
    if cmd is None:
        def cmd(vm, rank, args):
            return worker_cmd(lab, vm, rank, JOB_MULTI, args, chunk=MULTI_CHUNK,
                              window=MULTI_WINDOW)
    vms = lab.vms
    if lossy_vm is not None:
        lossy_vm.netem("loss 2%", direction="both")
    t0 = time.monotonic()
    counters = QpCounters(lab, JOB_MULTI)
    jobs = [vm.start(cmd(vm, rank, f"--type int32 --input /root/{os.path.basename(p)} "
                                   "--output /tmp/multi.out"))
            for rank, (vm, p) in enumerate(zip(vms, inputs), start=1)]
    counters.watch(jobs, f"the {tag} AllReduce")
    res = wait_results(jobs, tag)
    wall = time.monotonic() - t0
    if lossy_vm is not None:
        lossy_vm.netem(None, direction="both")
    for vm in vms:
        rc, out = vm.run("sha256sum /tmp/multi.out", check=True)
        check(out.split()[0] == sha, f"{vm.name}: {tag} bit-exact (sha256 {sha[:16]}...)")
    chunks = ELEMENTS * 4 // MULTI_CHUNK
    packets = MULTI_CHUNK // PMTU
    check(all(r[0]["chunks"] == chunks and r[0]["results"] == chunks for r in res),
          f"{tag}: {chunks} chunks of {MULTI_CHUNK} bytes, one result each, on every worker")
    t = counters.totals()
    log(f"switch QP counters, {tag}: " + json.dumps(t))
    n = WORLD * chunks
    check(t.get("contributions") == n and t.get("bad_contributions", 0) == 0 and
          t.get("invalid_requests", 0) == 0 and t.get("icrc_errors", 0) == 0,
          f"{tag}: the switch added exactly {n} contributions (one per chunk and rank, "
          "none twice), no sequence error, no bad ICRC")
    check(t.get("segments") == n * packets,
          f"{tag}: each contribution arrived as {packets} packets taken once "
          f"({n * packets} segments)")
    if lossy_vm is None:
        check(t.get("results_sent") == n * packets and t.get("retransmissions", 0) == 0,
              f"{tag}: each result left as one {packets}-packet WRITE per rank "
              f"({n * packets} result packets)")
    else:
        check(t.get("results_sent") == n * packets and
              t.get("retransmissions", 0) + t.get("duplicates", 0) + t.get("naks_sent", 0) > 0,
              f"{tag}: {n * packets} result packets first sent, and the recovery counted "
              "(retransmissions, duplicates or NAKs)")
    return wall


def test(worker_exe: str, switch_exe: str, rdma_module: str) -> None:
    scratch = tempfile.mkdtemp(prefix="switch-allreduce-")
    try:
        inputs, int32_sha = int32_inputs(scratch, WORLD, 20261124, ELEMENTS)
        lossy_inputs, lossy_sha = int32_inputs(scratch, WORLD, 7, ELEMENTS)
        # Files are named by seed, so every round's inputs are apart.
        multi_inputs, multi_sha = int32_inputs(scratch, WORLD, 4096, ELEMENTS)
        multi_lossy_inputs, multi_lossy_sha = int32_inputs(scratch, WORLD, 4097, ELEMENTS)
        det_inputs, det_sha = deterministic_inputs(scratch, 1313)
        extra = [stripped(worker_exe, scratch)]
        extra += [(p, f"/root/{os.path.basename(p)}")
                  for p in inputs + lossy_inputs + multi_inputs + multi_lossy_inputs +
                  det_inputs]
        extra += python_extras(rdma_module)
        with Lab(WORLD, fabric="inaswitch", switch_exe=switch_exe, routed=True, guest_api=True,
                 switch_config=switch_config, extra_files=extra) as lab:
            vms = lab.vms
            lab.reach_all()
            multi_guest, multi_lossy_guest = multi_inputs, multi_lossy_inputs
            if os.environ.get("INA_SWITCH_FP32_ONLY"):
                for i in range(int(os.environ["INA_SWITCH_FP32_ONLY"])):
                    log(f"fp32 round {i + 1}: {fp32_round(lab):.2f}s")
                return
            if os.environ.get("INA_SWITCH_FAIL_ONLY"):
                log(f"failed session: the others ended after {failed_rank_round(lab):.2f}s")
                log(f"killed rank: the others ended {killed_rank_round(lab):.2f}s after it")
                log(f"probed rank: the others ended {probed_rank_round(lab):.2f}s after it")
                log(f"rank left: the others ended {left_rank_round(lab):.2f}s after it")
                return
            if os.environ.get("INA_SWITCH_PY_ONLY"):
                python_round(lab, inputs, int32_sha)
                return
            if os.environ.get("INA_SWITCH_DET_ONLY"):
                deterministic_round(lab, det_inputs, det_sha, "fp32 deterministic")
                deterministic_round(lab, det_inputs, det_sha, "fp32 deterministic under 2 % loss",
                                    lossy_vm=vms[2])
                return
            if os.environ.get("INA_SWITCH_MULTI_ONLY"):
                multi_wall = multi_packet_round(lab, multi_guest, multi_sha, "int32 4 KiB chunks")
                lossy_multi_wall = multi_packet_round(lab, multi_lossy_guest, multi_lossy_sha,
                                                      "int32 4 KiB chunks under 2 % loss",
                                                      lossy_vm=vms[1])
                log(f"timings: int32 4 KiB chunks {multi_wall:.2f}s; under loss "
                    f"{lossy_multi_wall:.2f}s")
                return

            # 0. refusals carry the switch's text; nothing stays connected.
            rc, out = vms[0].run(worker_cmd(lab, vms[0], 1, 99, "--elements 1024",
                                            timeout_s=30), timeout=60)
            log(f"unknown job: {out.strip()}")
            check(rc == 1 and "HTTP 404" in out, "a connect to an unknown job fails with the "
                  "switch's 404 text (exit 1)")
            rc, out = vms[0].run(worker_cmd(lab, vms[0], 1, JOB_INT32, "--elements 1024",
                                            world=3, timeout_s=30), timeout=60)
            log(f"world 3 for a world-2 job: {out.strip()}")
            check(rc == 1 and "HTTP 409" in out, "a connect whose world differs from the job's "
                  "fails with the switch's 409 text (exit 1)")
            check(job_qps(lab, JOB_INT32) == [], "the refused connects left no QP")

            # 1. int32, bit-exact; rank 1 connects first and waits for the others.
            t0 = time.monotonic()
            clean = QpCounters(lab, JOB_INT32)
            jobs = [vms[0].start(worker_cmd(
                lab, vms[0], 1, JOB_INT32,
                f"--type int32 --input /root/{os.path.basename(inputs[0])} --output /tmp/int32.out"))]
            qps = wait_until(lambda: job_qps(lab, JOB_INT32) or None, 60,
                             "rank 1's QP in GET /api/v1/rdma/jobs/7")
            log(f"job {JOB_INT32} with rank 1 alone: {json.dumps(qps)}")
            check(len(qps) == 1 and qps[0].get("rank") == 1,
                  "GET /api/v1/rdma/jobs/7 shows rank 1's QP while it waits for the others")
            check(qps[0].get("timeout") == 17 and qps[0].get("retry_cnt") == 7,
                  "the switch's result WRITEs to rank 1 run with the ACK timeout the worker "
                  "asked for (--ack-timeout's default 17, as rdma_cm gives RoCE) and retry 7")
            check(not jobs[0].done(), "rank 1 waits for the other ranks (no result without them)")
            jobs += [vm.start(worker_cmd(
                lab, vm, rank, JOB_INT32,
                f"--type int32 --input /root/{os.path.basename(p)} --output /tmp/int32.out"))
                for rank, (vm, p) in enumerate(zip(vms[1:], inputs[1:]), start=2)]
            clean.watch(jobs, "the int32 AllReduce")
            res = wait_results(jobs, "int32")
            int32_wall = time.monotonic() - t0
            for vm in vms:
                rc, out = vm.run("sha256sum /tmp/int32.out", check=True)
                check(out.split()[0] == int32_sha,
                      f"{vm.name}: int32 result bit-exact (sha256 {int32_sha[:16]}...)")
            check(all(r[0]["chunks"] == ELEMENTS * 4 // CHUNK and r[0]["results"] == r[0]["chunks"]
                      and r[0]["disconnect_error"] == "" for r in res),
                  "int32: one result per chunk on every worker, and a clean DELETE")
            check(wait_until(lambda: job_qps(lab, JOB_INT32) == [] or None, 30,
                             "job 7's QPs gone after the DELETEs"), "the DELETEs tore the QPs down")

            # 2. fp32, three AllReduces on one connection each.
            fp32_wall = fp32_round(lab)
            chunks = ELEMENTS * 4 // CHUNK
            t = clean.totals()
            log("switch QP counters, int32 without loss: " + json.dumps(t))
            n = WORLD * chunks
            check(t.get("contributions") == n and t.get("results_sent") == n and
                  t.get("acks_sent", 0) > 0 and t.get("acks_received", 0) > 0,
                  f"the switch's QPs counted {n} contributions and {n} result WRITEs, ACKs sent "
                  "and received")
            job = rdma_job(lab, JOB_INT32)
            check(job.get("qps") == [] and job["results_completed"] == 0 and
                  job["results_released"] == 0,
                  "job 7's aggregation state is fresh once its last rank disconnected (its next "
                  f"session starts at sequence 0): {json.dumps(job)[:200]}")

            # 3. int32 with 2 % loss both ways on vm0's link, a new session on job 7.
            vms[0].netem("loss 2%", direction="both")
            t0 = time.monotonic()
            lossy = QpCounters(lab, JOB_LOSSY)
            jobs = [vm.start(worker_cmd(
                lab, vm, rank, JOB_LOSSY,
                f"--type int32 --input /root/{os.path.basename(p)} --output /tmp/lossy.out"))
                for rank, (vm, p) in enumerate(zip(vms, lossy_inputs), start=1)]
            lossy.watch(jobs, "the int32 AllReduce under loss")
            wait_results(jobs, "int32 under loss")
            lossy_wall = time.monotonic() - t0
            vms[0].netem(None, direction="both")
            for vm in vms:
                rc, out = vm.run("sha256sum /tmp/lossy.out", check=True)
                check(out.split()[0] == lossy_sha,
                      f"{vm.name}: int32 under 2 % loss bit-exact (sha256 {lossy_sha[:16]}...)")
            t = lossy.totals()
            log("switch QP counters, int32 under 2 % loss: " + json.dumps(t))
            check(t.get("contributions") == n and
                  t.get("retransmissions", 0) + t.get("duplicates", 0) + t.get("naks_sent", 0) > 0,
                  f"under loss the switch still added exactly {n} contributions and counted the "
                  "recovery (retransmissions, duplicates or NAKs)")

            # 4. ordinary RoCE between the VMs while a job's connection is live: rank 1 connects
            # and has its window of WRITEs at the switch (no result without the others), the VMs
            # ping-pong over RC through the same switch, then ranks 2 and 3 complete the AllReduce.
            first = vms[0].start(worker_cmd(lab, vms[0], 1, JOB_BESIDE,
                                            f"--type fp32 --elements {ELEMENTS} --seed 12"))
            wait_until(lambda: job_qps(lab, JOB_BESIDE) or None, 60, "rank 1's QP of job 10")
            server = vms[0].start(f"ibv_rc_pingpong -d rxe0 -g {vms[0].gid_index} -n 200")
            vms[0].wait_tcp_listen(timeout=60)
            rc, out_c = vms[1].run(f"ibv_rc_pingpong -d rxe0 -g {vms[1].gid_index} -n 200 "
                                   f"{vms[0].ip}", timeout=TIMEOUT_S)
            rc_s, out_s = server.wait(60)
            check(rc == 0 and rc_s == 0 and "200 iters" in out_c,
                  "ibv_rc_pingpong between the VMs completes through the switch while a job's "
                  f"connection is live (exits {rc}/{rc_s})\n{out_c}\n{out_s}")
            check(not first.done() and len(job_qps(lab, JOB_BESIDE)) == 1,
                  "rank 1 was connected and waiting throughout")
            others = [vm.start(worker_cmd(lab, vm, rank, JOB_BESIDE,
                                          f"--type fp32 --elements {ELEMENTS} --seed 12"))
                      for rank, vm in enumerate(vms[1:], start=2)]
            wait_results([first] + others, "fp32 around pingpong")

            passed = lab.switch.metrics().get("inaswitch_rdma_packets_total", reason="passed")
            log(f"RoCE packets not for the switch passed on: {passed:.0f}")
            check(passed >= 400, "the switch passed the pingpong's RoCE packets on untouched "
                  "(inaswitch_rdma_packets_total{reason=passed})")

            # 5. chunks larger than the PMTU, clean and under loss.
            multi_wall = multi_packet_round(lab, multi_guest, multi_sha, "int32 4 KiB chunks")
            lossy_multi_wall = multi_packet_round(lab, multi_lossy_guest, multi_lossy_sha,
                                                  "int32 4 KiB chunks under 2 % loss",
                                                  lossy_vm=vms[1])
            # 5b. a deterministic job: the same bits clean and with the chunks reordered.
            det_wall = deterministic_round(lab, det_inputs, det_sha, "fp32 deterministic")
            det_lossy_wall = deterministic_round(lab, det_inputs, det_sha,
                                                 "fp32 deterministic under 2 % loss",
                                                 lossy_vm=vms[2])
            # 5c. the ranks as Python processes through inaswitch.rdma's module.
            py_wall = python_round(lab, inputs, int32_sha)
            # 6. a rank that fails: the others end on the switch's failure notice.
            failed_s = failed_rank_round(lab)
            # 7. a rank whose process dies: the switch notices, the others end.
            killed_s = killed_rank_round(lab)
            # 8. a rank that dies owing nothing: the liveness probe notices.
            probed_s = probed_rank_round(lab)
            # 9. a rank that leaves early: the first chunk beyond its last fails the session.
            left_s = left_rank_round(lab)
            log(f"timings: boot {lab.timings.get('boot_s', 0):.1f}s; int32 1 MiB x {WORLD}: "
                f"{int32_wall:.2f}s wall; fp32 x 3: {fp32_wall:.2f}s; int32 under 2 % loss: "
                f"{lossy_wall:.2f}s; int32 4 KiB chunks: {multi_wall:.2f}s; under loss: "
                f"{lossy_multi_wall:.2f}s; Python ranks x 2 {py_wall:.2f}s; "
                f"fp32 deterministic {det_wall:.2f}s, under loss "
                f"{det_lossy_wall:.2f}s; a failed session's other ranks ended after "
                f"{failed_s:.2f}s, {killed_s:.2f}s after a kill, {probed_s:.2f}s after a kill "
                f"noticed by the probe, {left_s:.2f}s after a rank left")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(run_test("roce-vm-switch-allreduce", __doc__, test, (3,)))
