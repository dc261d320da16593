# SPDX-License-Identifier: Apache-2.0
"""A worker that reconnects alone mid-AllReduce, against Linux rxe (docs/rdma.md "A worker that
reconnects alone"): ina-rdma-root in one qemu VM, ina-rdma-worker ranks 1 and 2 in two others,
inaswitch on the host routing between them with an `rdma_s2s` job learning its connections from
the RDMA CM (`learn: true`). Rank 2 runs with `--reconnect-after N`: once its first N chunks are
written and acknowledged it disconnects and connects again as a RESUMING worker; the root takes
the rank back into the running round and answers (in the CM accept) from which chunk to write
again; rank 1 stays connected throughout.

  1. Through the aggregating switch: rank 1 starts alone and fills its window (WINDOW chunks
     absorbed by the switch, held for rank 2: the test waits for that counter), then rank 2
     starts and reconnects after RESUME_AT chunks. The switch's rule ran: the REP said
     `resumed` (rejoin_resumed 1), the old state left (rejoins 1) and sent the chunks rank 2's
     old connection had not contributed to as partial aggregates (at least WINDOW - RESUME_AT:
     rank 1's chunks RESUME_AT..WINDOW-1), rank 1 was forwarded translated after them, rank
     2's new connection passed untouched. Both results bit-exact (sha256 against the host's
     sum), rank 2 resumed at RESUME_AT, the root reduced exactly world x chunks contributions,
     every result acknowledged once per worker.
  2. The next AllReduce (both ranks at once, no reconnect) runs on the FRESH state the rejoin
     asked for: its `job` series absorbs every contribution and the root gets one aggregate
     per chunk; the old state's series (leaving_job) do not move.
  3. The CARRIER (rank 1, whose connection carries the aggregates) reconnects alone the same
     way, rank 2 filling its window first: the old state's aggregate leg moves to rank 2's
     connection (rejoin_carrier_moved), rank 2's held chunks go there as partial aggregates,
     the complete ones sent on rank 1's old connection and not seen acknowledged there are
     released, not resent (rejoin_carrier_unacked: the root holds them); bit-exact.
  4. Rank 2 again with netem `loss 2%` both ways on its link: the CM exchange, the quiesce, the
     partial aggregates and the resumed connection recover (rxe's go-back-N end to end on the
     resumed connection, the switch's NAKs on the old one); bit-exact.
  5. Rank 2's PROCESS restarts ahead of rank 1 (rank 1's WRITEs dropped in its guest until the
     switch counted rank 2's resumed REP; --restart-at:
     once RESUME_AT chunks are written, acknowledged or not, rank 2 drops its connection,
     registrations and results and connects again knowing nothing, resume-from 0): the switch
     raises the request's resume-from past what it absorbed and holds of rank 2
     (rejoin_resume_raised 1), the root resumes it there and writes it every result: the root
     reduced exactly world x chunks contributions (none twice), bit-exact.
  6. The carrier again, its complete aggregates LOST at the root: from rank 2's full window
     until the switch counted the resumed REP the root's guest drops every aggregate carrying
     both ranks (tc u32 on its ingress), so the root answers the resume lacking all of them
     and the switch sends them again on rank 2's connection (rejoin_carrier_resent RESUME_AT,
     nothing released); the root reduces every chunk once.
  7. Rank 2 reconnects and its PROCESS restarts right after (--reconnect-after and
     --restart-at at the same chunk: nothing written on the resumed connection), the
     aggregates lost at the root as in 6 until both resumed REPs passed, so its first chunks
     are incomplete at the root when the restarted process says 0: the root resumes it where
     it resumed it first (rejoin_resumed 2, nothing raised), no chunk reduced twice.
  8. Rank 2 starts ALONE and resumes before rank 1 ever connected: rank 1's first connection
     joins the session the old state left holding rank 2's chunks for it (rejoin_joined 1), not
     the fresh state's; one aggregate per held chunk, then rank 1 translated; bit-exact.
  9. Result replication (a second root with --results once, the job reloaded with replicate:
     true): rank 2 resumes as in 1; the switch copies the carrier's results onto the
     connections it learned and, from its resumed REP on, onto rank 2's resumed connection
     (result_legs_resumed 1); the root writes only the carrier, what rank 2 lacks again there.
  10. The CARRIER resumes with result replication (a third root, --results once): the root
     writes the results on the carrier's resumed connection and the switch moves the copies'
     source onto it (result_source_moved 1; rank 2's result leg filled up to its last copy and
     translated on from there); the root wrote the carrier alone (CHUNKS results acknowledged,
     the aggregated ACKs of both workers), rank 2 got every result as copies (some twice: the
     carrier's owed results are copied too), bit-exact on both. The carrier leaves once a
     result is in (--reconnect-min-results 1): the root wrote on its old connection, so rank
     2's leg (its ACKs dropped) is behind at the move and the switch fills it.
  10b. The same, but rank 2 LOSES the old source's copies (every result it receives dropped
     in its guest until the move) while the carrier has them: the switch's fill moves rank 2
     past them, and the root owes them again on the carrier's new connection (below the
     carrier's results_from only what its old connection saw acknowledged by every rank is
     delivered): rank 2 gets every result, the carrier some twice.
  11. The CARRIER resumes TWICE in one AllReduce with replication (--reconnect-again-after):
     the state that left at the first resume moves the copies' source again
     (result_source_moved 2); bit-exact on both.
  12. The same reconnect without the switch aggregating (the job removed by a reload: plain
     routing, a third root): the root sums the workers' own WRITEs, rank 2 resumes where it
     said, bit-exact.
     Before the next reload no state of the job is leaving any more (the gauge
     jobs_leaving 0 well within the 10 s leave timeout): the replicating states of rounds 9-11
     ended once the root accepted a later AllReduce's connection, the removed job's (its
     carrier never connected) at once.
  13. The CARRIER resumes TWICE in one AllReduce WITHOUT replication (the job reloaded back to
     aggregation, a fifth root; --reconnect-again-after): the state left at the first resume
     hears the second REQ/REP too (rejoin_resumed 2, rejoins 1), the aggregate leg moved once
     and stays on rank 2's connection; the root takes rank 1 back twice; bit-exact. (It hung
     while the four states of 12 outlived the reload: the state leaving at this round's first
     resume was the fifth leaving one on the root and went unmatched, its aggregates on rank
     2's connection never acknowledged.)
  In each the programs exit 0, every worker's disconnect is clean, and no guest's rxe counted a
  retry-exceeded or RNR-retry-exceeded error (no QP gave up).

usage: test_s2s_rejoin.py build/src/worker/rdma/ina-rdma-worker \
           build/src/worker/rdma/ina-rdma-root build/src/app/inaswitch
"""

import contextlib
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from lab import Lab, run_test, check, log, wait_until  # noqa: E402
from test_rdma_allreduce import (ELEMENTS, TIMEOUT_S, WORLD, allreduce,  # noqa: E402
                                 int32_inputs, json_line, root_cmd, stripped, worker_cmd)
from test_s2s_allreduce import check_rxe_counters, rxe_counters, settled  # noqa: E402

JOB = 7
CHUNK = 1024
WINDOW = 64
CHUNKS = ELEMENTS * 4 // CHUNK
RESUME_AT = 16      # through the switch: inside rank 1's first window
RC_ACKNOWLEDGE = 0x11  # the BTH opcode of an RC ACK (and NAK)
RC_WRITE_ONLY_IMM = 0x0B  # a contribution's, an aggregate's and a result's
# The switch's aggregate leg: its ACK timeout exponent (1.07 s; 8 tries, 8.6 s) outlasts the
# rounds that drop the aggregates at the root until the switch counted the rejoin.
AGGREGATE_TIMEOUT = 18
RESUME_PLAIN = 300  # without aggregation
LEAVE_TIMEOUT_S = 10  # rdma_s2s.leave_timeout_ms, the default (the configs leave it out)
LOSS = "loss 2%"

NAMES = ("absorbed", "aggregates_sent", "aggregates_acked", "forwarded", "rejoins",
         "rejoin_resumed", "rejoin_partial_chunks", "rejoin_held", "rejoin_carrier_moved",
         "rejoin_carrier_unacked", "carrier_ended_unacked", "connections_learned", "icrc_errors",
         "not_contribution", "bad_contributions", "results_replicated", "replicate_failed",
         "result_source_moved", "result_fill_sent", "result_acks_forwarded",
         "result_naks_forwarded",
         "rejoin_resume_raised", "rejoin_carrier_resent", "result_legs_resumed", "rejoin_joined")


def switch_config(cfg: dict, lab, replicate: bool = False) -> dict:
    cfg["rdma_s2s"] = {"jobs": [{"id": JOB, "root": lab.vms[0].ip, "world": WORLD, "op": "sum",
                                 "dtype": "int32", "chunk_bytes": CHUNK, "window": WINDOW,
                                 "learn": True, "replicate": replicate,
                                 "timeout": AGGREGATE_TIMEOUT}]}
    return cfg


def replicating_config(cfg: dict, lab) -> dict:
    return switch_config(cfg, lab, replicate=True)


def plain_config(cfg: dict, _lab) -> dict:
    return cfg  # no rdma_s2s section: RoCE is routed untouched


def counters(lab) -> dict[str, dict[str, float]]:
    """Per label (job: the configured state; leaving_job: states that left, a superseded one
    among them) the job's inaswitch_rdma_s2s_<name>_total, and the lcore fallback count."""
    m = lab.switch.metrics()
    out = {}
    for label in ("job", "leaving_job"):
        out[label] = {n: sum(v for name, labels, v in m.series
                             if name == f"inaswitch_rdma_s2s_{n}_total" and
                             labels.get(label) == str(JOB)) for n in NAMES}
    out["fallback"] = m.by_label("inaswitch_rdma_s2s_packets_total", "reason").get("fallback", 0)
    return out


def jobs_leaving(lab) -> float:
    """The switch's states of server-to-server jobs still leaving (not over)."""
    return sum(v for name, _labels, v in lab.switch.metrics().series
               if name == "inaswitch_rdma_s2s_jobs_leaving")


def diff(after: dict, before: dict, label: str) -> dict[str, float]:
    return {n: after[label][n] - before[label][n] for n in NAMES}


def both(d_job: dict, d_leaving: dict) -> dict[str, float]:
    return {n: d_job[n] + d_leaving[n] for n in NAMES}


def unacked_released(d: dict) -> float:
    """Aggregates on a carrier's old connection released unacknowledged, the root holding them:
    at its resumed REP (rejoin_carrier_unacked) or at its DREQ, their results seen
    (carrier_ended_unacked)."""
    return d["rejoin_carrier_unacked"] + d["carrier_ended_unacked"]


def run_workers(lab, data, tag: str, extra: str, wait_before_second=None,
                rejoining: int = 2, while_running=None, rejoining_first: bool = False) -> list[dict]:
    """Ranks 1 and 2 on the listening root, rank `rejoining` with `extra` and started second
    (first with `rejoining_first`), the second once `wait_before_second()` returned (when
    given), then `while_running()` (when given); both results checked bit-exact."""
    root_vm, workers = lab.vms[0], lab.vms[1:]
    paths, sha = data
    args = [f"--type int32 --chunk-bytes {CHUNK} --window {WINDOW} "
            f"--input /root/{os.path.basename(p)} --output /tmp/{tag}.out" for p in paths]
    args[rejoining - 1] += f" {extra}"
    res = allreduce(root_vm, workers, args, tag,
                    None if wait_before_second is None else lambda _rank: wait_before_second(),
                    order=[rejoining, 3 - rejoining] if rejoining_first else [3 - rejoining, rejoining],
                    while_running=while_running)
    for vm in workers:
        _rc, out = vm.run(f"sha256sum /tmp/{tag}.out", check=True)
        check(out.split()[0] == sha, f"{tag}: {vm.name}'s int32 result bit-exact (sha256 "
              f"{sha[:16]}...)")
    check(all(r["results"] == CHUNKS and r["disconnect_error"] == "" for r in res),
          f"{tag}: every result in on both workers, their disconnects clean")
    return res


def root_round_checks(tag: str, r: dict, resumes: int, written: int = WORLD * CHUNKS) -> None:
    n = WORLD * CHUNKS
    check(r["ok"] and r["chunks"] == CHUNKS and r["contribution_count"] == n and
          r["results_written"] == written and r["resumes"] == resumes and
          r["resent_discarded"] == 0,
          f"{tag}: the root reduced {n} contributions (no resent one discarded), {written} "
          f"results acknowledged, {resumes} rank(s) resumed ({r})")


def rejoin_round(lab, data, tag: str, rejoining: int, loss: str | None = None,
                 other_until_move: str | None = None, lose_aggregates: bool = False,
                 restart: bool = False, again: int = 0, extra_args: str = "") -> dict:
    """Rank `rejoining` reconnects after RESUME_AT chunks through the aggregating switch, the
    other rank having filled its window first (WINDOW chunks absorbed and held: the test waits
    for that counter), `loss` (netem, both ways) on the rejoining rank's link; both results
    bit-exact and the switch's counters of the rule checked. `other_until_move`: "acks", every ACK
    the other rank sends, or "results", every result (copy) it receives, is dropped in its guest
    until the switch moved the copies' source (its counter says so), then they pass again. `lose_aggregates`: from that window on, the root's
    guest drops every aggregate carrying WORLD contributions it receives (the complete ones,
    not the partial ones nor a worker's own WRITEs) until the switch counted the rejoin's last
    resumed REP: for the carrier, the root lacks every complete aggregate sent on its old
    connection when it answers the resume, and the switch sends them again on the moved leg.
    `restart`: the rank's process also restarts right after its reconnect (--restart-at at the
    same chunk: nothing written on the resumed connection), resuming from 0 a second time.
    `again`: the rank reconnects a second time once `again` chunks are written (on its resumed
    connection) and acknowledged. `extra_args`: more of the rejoining worker's arguments.
    Returns the counters' delta, with "workers" (their JSON), "other_dropped" (the other rank's frames
    `other_until_move` dropped) and
    "aggregates_dropped"."""
    other = 3 - rejoining
    before = counters(lab)
    resumed_reps = 2 if restart or again else 1

    def total() -> dict[str, float]:
        # Sums over both labels: the job's state moves from `job` to `leaving_job`.
        now = counters(lab)
        return both(diff(now, before, "job"), diff(now, before, "leaving_job"))

    if loss:
        lab.vms[rejoining].netem(loss, direction="both")
    dropped = {"other": 0, "aggregates": 0}
    dropping = {"other": other_until_move is not None, "aggregates": False}
    if other_until_move == "acks":
        lab.vms[other].drop_sent_roce(RC_ACKNOWLEDGE)
    elif other_until_move == "results":
        lab.vms[other].drop_received_roce(RC_WRITE_ONLY_IMM, imm_count=WORLD)
    elif other_until_move is not None:
        raise ValueError(f"other_until_move: acks or results, not {other_until_move!r}")

    def stop_other_drop() -> int:
        return (lab.vms[other].drop_sent_roce(None) if other_until_move == "acks" else
                lab.vms[other].drop_received_roce(None))

    def window_held() -> None:
        wait_until(lambda: total()["absorbed"] >= WINDOW, TIMEOUT_S,
                   f"{tag}: rank {other}'s first {WINDOW} chunks absorbed, held for rank "
                   f"{rejoining}")
        if lose_aggregates:
            lab.vms[0].drop_received_roce(RC_WRITE_ONLY_IMM, imm_count=WORLD)
            dropping["aggregates"] = True

    def released() -> None:
        # Each rule stays until the switch counted what it provokes, then goes.
        if dropping["other"]:
            wait_until(lambda: total()["result_source_moved"] >= 1, TIMEOUT_S,
                       f"{tag}: the copies' source moved onto rank {rejoining}'s resumed "
                       f"connection")
            dropped["other"] = stop_other_drop()
            dropping["other"] = False
        if dropping["aggregates"]:
            wait_until(lambda: total()["rejoin_resumed"] >= resumed_reps, TIMEOUT_S,
                       f"{tag}: the root's resumed REP(s) of rank {rejoining} seen")
            dropped["aggregates"] = lab.vms[0].drop_received_roce(None)
            dropping["aggregates"] = False

    extra = f"--reconnect-after {RESUME_AT}" + (f" --restart-at {RESUME_AT}" if restart else "")
    extra += f" --reconnect-again-after {again}" if again else ""
    extra += f" {extra_args}" if extra_args else ""
    t0 = time.monotonic()
    try:
        res = run_workers(lab, data, tag.replace(" ", "-").replace("%", ""), extra, window_held,
                          rejoining=rejoining,
                          while_running=released)
    finally:
        if loss:
            lab.vms[rejoining].netem(None)
        if dropping["other"]:
            stop_other_drop()
        if dropping["aggregates"]:
            lab.vms[0].drop_received_roce(None)
    wall = time.monotonic() - t0
    at = RESUME_AT
    w = res[rejoining - 1]
    check(w["reconnected"] and w["resume_chunk"] == (again or RESUME_AT) and
          w["reconnects"] == (2 if again else 1) and w["restarted"] == restart and
          not res[other - 1]["reconnected"],
          f"{tag}: rank {rejoining} reconnected{' and restarted' if restart else ''} and the "
          f"root resumed it at chunk {RESUME_AT}" +
          (" again (where it resumed it first: the process said 0)" if restart else "") +
          (f", then at {again}" if again else ""))
    # The root's ACK of the last partial aggregates may trail the workers' results; a carrier's
    # old aggregates not seen acknowledged are released (at its DREQ, their results seen; at
    # its resumed REP, which says the root has them) or sent again instead.
    wait_until(lambda: total()["aggregates_acked"] + unacked_released(total()) +
               total()["rejoin_carrier_resent"] >= total()["aggregates_sent"] > 0, 10,
               f"{tag}: every aggregate the old state sent acknowledged or released")
    after = counters(lab)
    d = total()
    log(f"switch, {tag}: {d}; fallback {after['fallback']:.0f}; {wall:.1f}s wall; dropped "
        f"in guests: {dropped}")
    partial = d["rejoin_partial_chunks"]
    resent = d["rejoin_carrier_resent"]
    # Under loss the REQ and its REP may be retransmitted: the fresh state hears the REP again.
    check(d["rejoins"] == 1 and (d["rejoin_resumed"] == resumed_reps or
                                 loss and d["rejoin_resumed"] >= resumed_reps),
          f"{tag}: the switch saw the root's REP(s) take rank {rejoining} back (resumed) and "
          f"the old state leave (once)")
    check(d["rejoin_carrier_moved"] == (1 if rejoining == 1 else 0),
          f"{tag}: the aggregate leg moved to rank 2's connection iff the carrier rejoined")
    check(WINDOW - at <= partial <= WINDOW,
          f"{tag}: {partial:.0f} held chunks went to the root as partial aggregates (rank "
          f"{other}'s chunks {at}..{WINDOW - 1} at least)")
    check(d["rejoin_resume_raised"] == 0,
          f"{tag}: the resuming request's resume-from left as the worker said it")
    check(d["aggregates_sent"] == at + resent + partial and
          d["aggregates_acked"] + unacked_released(d) == at + partial,
          f"{tag}: {at} complete aggregates before the rejoin ({resent:.0f} of them sent again "
          f"on the moved leg: the root lacked them) and the {partial:.0f} partial ones, "
          f"acknowledged by the root ({unacked_released(d):.0f} on the carrier's old connection "
          f"not seen acknowledged there that the root had: released, not resent; "
          f"{d['carrier_ended_unacked']:.0f} of them at its DREQ, their results seen)")
    if lose_aggregates:
        check(dropped["aggregates"] >= at,
              f"{tag}: the root's guest dropped {dropped['aggregates']} complete aggregates "
              f"(each of the {at} at least once)")
    if lose_aggregates and rejoining == 1:
        check(resent == at and unacked_released(d) == 0,
              f"{tag}: every one of the {at} complete aggregates the root lacked sent again on "
              f"rank 2's connection, none released")
    check(d["absorbed"] == 2 * at + partial,
          f"{tag}: {d['absorbed']:.0f} contributions absorbed: both ranks' first {at} "
          f"chunks and rank {other}'s partial ones, nothing of the resumed connection")
    check(d["forwarded"] > 0,
          f"{tag}: then {d['forwarded']:.0f} of rank {other}'s packets forwarded translated")
    check(d["connections_learned"] == WORLD,
          f"{tag}: both first connections learned, the resumed one(s) by no state")
    check(d["rejoin_held"] == 0 and d["icrc_errors"] == 0 and d["not_contribution"] == 0 and
          d["bad_contributions"] == 0 and after["fallback"] == before["fallback"],
          f"{tag}: the resumed connection was never held back; no ICRC error, "
          f"non-contribution, bad contribution or fallback")
    d["workers"] = res
    d["other_dropped"] = dropped["other"]
    d["aggregates_dropped"] = dropped["aggregates"]
    return d


def restart_round(lab, data, tag: str) -> dict:
    """Rank 2's PROCESS restarts ahead of rank 1: rank 1 connects first, its WRITEs dropped in
    its guest until the switch counted rank 2's resumed REP (then rank 1's RC retransmits them),
    so rank 2's first RESUME_AT chunks are absorbed and held at the switch waiting for rank 1's
    (incomplete at the root too) when
    rank 2 drops everything (--restart-at) and comes back resuming from 0. The switch raises the
    request's resume-from past what it absorbed and ACKed of rank 2 (which the root could not
    attribute), the root resumes it there: without the raise it resumes at 0 and chunk 0 gets
    rank 2's data twice (the root stops at a count beyond world). Bit-exact on both workers.
    Returns the counters' delta."""
    root_vm, workers = lab.vms[0], lab.vms[1:]
    paths, sha = data
    before = counters(lab)

    def total() -> dict[str, float]:
        now = counters(lab)
        return both(diff(now, before, "job"), diff(now, before, "leaving_job"))

    args = [f"--type int32 --chunk-bytes {CHUNK} --window {WINDOW} "
            f"--input /root/{os.path.basename(p)} --output /tmp/restart.out" for p in paths]
    args[1] += f" --restart-at {RESUME_AT}"
    workers[0].hold_sent_roce(RC_WRITE_ONLY_IMM)
    dropping = True
    try:
        jobs = [workers[0].start(worker_cmd(root_vm, 1, args[0]))]
        wait_until(lambda: total()["connections_learned"] >= 1, TIMEOUT_S,
                   f"{tag}: rank 1 connected (its REP seen), its WRITEs dropped in its guest")
        jobs.append(workers[1].start(worker_cmd(root_vm, 2, args[1])))
        wait_until(lambda: total()["rejoin_resumed"] >= 1, TIMEOUT_S,
                   f"{tag}: rank 2 restarted and the root took it back")
        # Rank 1's RC timer sends them again (go-back-N from its first).
        dropped = workers[0].hold_sent_roce(None)
        dropping = False
        check(dropped > 0, f"{tag}: {dropped} of rank 1's WRITEs held back until then")
        # Both ranks' ends (and, if one failed, the switch's counters) before any check: a
        # stall shows which side stopped.
        ends = [job.wait(TIMEOUT_S + 30) for job in jobs]
        for rank, (rc, out) in enumerate(ends, start=1):
            log(f"{tag} rank {rank}: {out.strip()}")
        if any(rc != 0 for rc, _out in ends):
            log(f"switch, {tag} (a rank failed): {total()}")
        res = []
        for rank, (rc, out) in enumerate(ends, start=1):
            check(rc == 0, f"{tag}: rank {rank} completed (exit {rc})")
            res.append(json_line(out, "ok"))
    finally:
        if dropping:
            workers[0].hold_sent_roce(None)
    for vm in workers:
        _rc, out = vm.run("sha256sum /tmp/restart.out", check=True)
        check(out.split()[0] == sha, f"{tag}: {vm.name}'s int32 result bit-exact")
    wait_until(lambda: total()["aggregates_acked"] + total()["carrier_ended_unacked"] >=
               total()["aggregates_sent"] > 0, 10,
               f"{tag}: every aggregate the old state sent acknowledged (or released at the "
               f"carrier's end, its result seen)")
    d = total()
    log(f"switch, {tag}: {d}")
    # Its WRITEs that left its VM before it dropped everything (all RESUME_AT, unless the
    # crash caught some unsent): the switch absorbed them, in order, and holds them.
    at = res[1]["resume_chunk"]
    check(res[1]["restarted"] and 0 < at <= RESUME_AT,
          f"{tag}: rank 2's process restarted and the root resumed it at chunk {at}, past what "
          f"the switch absorbed of it ({res[1]})")
    check(d["rejoin_resume_raised"] == 1 and d["rejoins"] == 1 and d["rejoin_resumed"] == 1,
          f"{tag}: the switch raised the resuming request's resume-from (it said 0) and the old "
          f"state left at the resumed REP")
    check(d["absorbed"] == 2 * at and d["aggregates_sent"] == at and
          d["rejoin_partial_chunks"] == 0,
          f"{tag}: rank 2's {at} held chunks completed with rank 1's late ones (one aggregate "
          f"each, none partial), nothing of the restarted process absorbed")
    check(d["icrc_errors"] == 0 and d["bad_contributions"] == 0 and d["not_contribution"] == 0,
          f"{tag}: no ICRC error, bad contribution or non-contribution")
    return d


def replicate_carrier_round(lab, data, tag: str, lose_copies: bool = False) -> dict:
    """The carrier (rank 1) resumes while the job replicates (the root runs --results once):
    the copies' source moves onto its resumed connection; every result bit-exact on both
    workers (rejoin_round). Rank 2's ACKs are dropped in its guest from the start until the
    switch moved the source, so at the move its leg is behind by every copy of the old source:
    the switch fills it (zero-length WRITEs, duplicates to rxe, resent until answered) before
    copying on. The carrier leaves only once a result is in (--reconnect-min-results 1), so
    the root wrote on its old connection and the switch copied that to rank 2: without it, a
    DREQ that reached the root before the first aggregate left no old copy, and no fill due.
    `lose_copies`: rank 2 LOSES the old source's copies instead (every result it receives
    dropped until the move) while the carrier has them; the fill moves rank 2 past the lost
    PSNs, so only the root can give them back: it owes them again on the carrier's new
    connection (below the carrier's results_from only what its old connection saw acknowledged
    by every rank is delivered), and the carrier takes some twice. Without that rank 2's window
    stalled and the round hung until the root's deadline. Returns the counters' delta."""
    d = rejoin_round(lab, data, tag, 1, other_until_move="results" if lose_copies else "acks",
                     extra_args="--reconnect-min-results 1")
    res = d["workers"]
    what = "received copies" if lose_copies else "ACKs"
    log(f"{tag}: rank 2 took {res[1]['duplicate_results']} result(s) twice, rank 1 "
        f"{res[0]['duplicate_results']}; {d['other_dropped']} of rank 2's {what} dropped before "
        f"the move; {d['result_fill_sent']:.0f} fill packet(s) sent")
    check_source_moves(d, tag, 1)
    check(d["other_dropped"] > 0 and d["result_fill_sent"] > 0,
          f"{tag}: rank 2's leg was filled ({d['result_fill_sent']:.0f} zero-length WRITEs) "
          f"past the old source's copies before the copies of the resumed connection "
          f"({d['other_dropped']} of its {what} dropped)")
    if lose_copies:
        check(res[0]["duplicate_results"] > 0,
              f"{tag}: the root wrote the carrier again what it had "
              f"({res[0]['duplicate_results']} twice): rank 2 lacked them")
    return d


def check_source_moves(d: dict, tag: str, moves: int) -> None:
    """A replicating carrier round's copies: their source moved `moves` times, onto each
    resumed connection of the carrier, no copy failed, and rank 2 got every result as a copy."""
    check(d["result_source_moved"] == moves and d["replicate_failed"] == 0,
          f"{tag}: the copies' source moved {moves} time(s), onto each resumed connection of "
          f"the carrier; no copy failed")
    check(d["results_replicated"] >= CHUNKS,
          f"{tag}: {d['results_replicated']:.0f} copies made: rank 2's every result (it got "
          f"none from the root itself)")


def resumed_first_round(lab, data, tag: str) -> dict:
    """Rank 2 starts ALONE and resumes (--reconnect-after RESUME_AT) before rank 1 ever
    connected; rank 1 starts once the switch counted the resumed REP. Rank 1's first connection
    joins the session the old state left holding rank 2's first RESUME_AT chunks for it
    (rejoin_joined 1): they complete with rank 1's (one aggregate each, none partial), then rank
    1 is translated; bit-exact, the root reduced every chunk once. Returns the counters'
    delta."""
    before = counters(lab)

    def total() -> dict[str, float]:
        now = counters(lab)
        return both(diff(now, before, "job"), diff(now, before, "leaving_job"))

    res = run_workers(lab, data, tag.replace(" ", "-"), f"--reconnect-after {RESUME_AT}",
                      lambda: wait_until(lambda: total()["rejoin_resumed"] >= 1, TIMEOUT_S,
                                         f"{tag}: rank 2 resumed before rank 1 connected"),
                      rejoining=2, rejoining_first=True)
    check(res[1]["reconnected"] and res[1]["resume_chunk"] == RESUME_AT,
          f"{tag}: rank 2 reconnected and the root resumed it at chunk {RESUME_AT}")
    wait_until(lambda: total()["aggregates_acked"] + total()["carrier_ended_unacked"] >=
               total()["aggregates_sent"] > 0, 10,
               f"{tag}: every aggregate acknowledged (or released at the carrier's end, its "
               f"result seen)")
    d = total()
    log(f"switch, {tag}: {d}")
    check(d["rejoins"] == 1 and d["rejoin_resumed"] == 1 and d["rejoin_joined"] == 1,
          f"{tag}: rank 1's first connection joined the session the resume left (not the next)")
    check(d["absorbed"] == 2 * RESUME_AT and d["aggregates_sent"] == RESUME_AT and
          d["rejoin_partial_chunks"] == 0 and d["forwarded"] > 0,
          f"{tag}: rank 2's {RESUME_AT} held chunks completed with rank 1's (one aggregate each, "
          f"none partial), then {d['forwarded']:.0f} of rank 1's packets translated")
    check(d["connections_learned"] == WORLD and d["rejoin_held"] == 0 and
          d["icrc_errors"] == 0 and d["bad_contributions"] == 0 and d["not_contribution"] == 0,
          f"{tag}: both first connections learned by the old state, nothing held back, no "
          f"ICRC error, bad contribution or non-contribution")
    return d


AGAIN_AT = 32  # the carrier's second reconnect (it resumed at RESUME_AT)


def replicate_carrier_twice_round(lab, data, tag: str) -> dict:
    """The carrier resumes TWICE in one AllReduce while the job replicates: at RESUME_AT and,
    writing on its resumed connection, again at AGAIN_AT. The state that left at the first
    resume moves the copies' source a second time, onto the newest connection (rank 2's leg
    filled where it was behind); every result bit-exact on both workers. Returns the counters'
    delta."""
    d = rejoin_round(lab, data, tag, 1, again=AGAIN_AT)
    res = d["workers"]
    log(f"{tag}: rank 2 took {res[1]['duplicate_results']} result(s) twice, rank 1 "
        f"{res[0]['duplicate_results']}; {d['result_fill_sent']:.0f} fill packet(s) sent")
    check_source_moves(d, tag, 2)
    return d


def carrier_twice_round(lab, data, tag: str) -> dict:
    """The carrier resumes TWICE in one AllReduce without replication: at RESUME_AT and,
    writing on its resumed connection, again at AGAIN_AT. The state left at the first resume
    hears the second REQ/REP (rejoin_resumed 2) and takes no part in the data: the aggregate leg
    moved once, to rank 2's connection, and stays there; every result bit-exact on both
    workers (rejoin_round's checks). Returns the counters' delta."""
    return rejoin_round(lab, data, tag, 1, again=AGAIN_AT)


# Rounds 6 and 7 (the lost aggregates), also alone with INA_S2S_REJOIN_LOST_ONLY=N.
LOST_PLAN = [("carrier lost", 1, {"lose_aggregates": True}),
             ("restart after rejoin", 2, {"lose_aggregates": True, "restart": True})]


def lost_alone(exes: tuple[str, str, str], times: int) -> None:
    """INA_S2S_REJOIN_LOST_ONLY=N: rounds 6 and 7 alone, N times each in one lab."""
    def rounds(lab, data) -> None:
        root = listening_root(lab, f"--rounds {len(data)}")
        for n, d in enumerate(data):
            tag, rank, kw = LOST_PLAN[n % len(LOST_PLAN)]
            rejoin_round(lab, d, f"{tag} {n // len(LOST_PLAN) + 1} of {times}", rank, **kw)
        for n, r in enumerate(served("lost", root, len(data))):
            tag, _rank, kw = LOST_PLAN[n % len(LOST_PLAN)]
            root_round_checks(tag, r, 2 if kw.get("restart") else 1)

    alone(exes, times * len(LOST_PLAN), 20261500, switch_config, rounds)


def listening_root(lab, args: str):
    """ina-rdma-root with `args` in the first VM, once it listens."""
    root = lab.vms[0].start(root_cmd(lab.vms[0], f"{args} --timeout-ms {TIMEOUT_S * 1000}"))
    lab.vms[0].wait_rdma_cm_listen(timeout=60)
    return root


@contextlib.contextmanager
def rejoin_lab(exes: tuple[str, str, str], config, n_data: int, seed: int, prefix: str):
    """A lab of the root and WORLD workers through the switch on `config`, with `n_data` int32
    data sets from `seed` in every guest: yields (lab, data). On a clean exit no guest's rxe gave
    up a QP (retry or RNR-retry exceeded)."""
    worker_exe, root_exe, switch_exe = exes
    scratch = tempfile.mkdtemp(prefix=prefix)
    try:
        data = [int32_inputs(scratch, seed=seed + n) for n in range(n_data)]
        extra = [stripped(worker_exe, scratch), stripped(root_exe, scratch)]
        extra += [(p, f"/root/{os.path.basename(p)}") for paths, _sha in data for p in paths]
        with Lab(1 + WORLD, fabric="inaswitch", switch_exe=switch_exe, routed=True,
                 switch_config=config, extra_files=extra) as lab:
            lab.reach_all()
            rxe_before = [rxe_counters(vm) for vm in lab.vms]
            yield lab, data
            check_rxe_counters(lab, rxe_before)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def alone(exes: tuple[str, str, str], times: int, seed: int, config, rounds) -> None:
    """One lab (the switch on `config`) and `times` data sets from `seed` for `rounds(lab,
    data)`, which runs a round alone that many times; no guest's rxe gives up a QP."""
    with rejoin_lab(exes, config, times, seed, "s2s-rejoin-alone-") as (lab, data):
        rounds(lab, data)


def served(tag: str, root, rounds_n: int) -> list[dict]:
    """The root's JSON round lines once it ended (exit 0, `rounds_n` rounds)."""
    rc, out = root.wait(60)
    log(f"root, {tag}: {out.strip()}")
    check(rc == 0, f"{tag}: ina-rdma-root served its {rounds_n} round(s) (exit {rc})")
    rounds = [json.loads(line) for line in out.splitlines()
              if line.startswith("{") and '"round"' in line]
    check(len(rounds) == rounds_n, f"{tag}: the root reports {rounds_n} round(s)")
    return rounds


def one_round_alone(exes: tuple[str, str, str], times: int, seed: int, config, root_args: str,
                    tag: str, round_fn, resumes: int = 1, written: int = WORLD * CHUNKS) -> None:
    """`round_fn(lab, data, tag)` alone, `times` times in one lab (new data each), the root's
    rounds checked (`resumes` ranks taken back, `written` results acknowledged), for chasing a
    round against rxe."""
    def rounds(lab, data) -> None:
        root = listening_root(lab, f"--rounds {times} {root_args}")
        for n, d in enumerate(data):
            round_fn(lab, d, f"{tag} {n + 1} of {times}")
        for n, r in enumerate(served(tag, root, times)):
            root_round_checks(f"{tag} {n + 1}", r, resumes, written)

    alone(exes, times, seed, config, rounds)


# INA_S2S_REJOIN_<NAME>_ONLY=N runs one round alone N times (LOST: rounds 6 and 7, N each):
# (seed, config, root arguments, tag, round, resumes, results written).
ALONE = {
    "LOSS": (20261200, switch_config, "", f"rejoin {LOSS}",
             lambda lab, d, tag: rejoin_round(lab, d, tag, 2, LOSS), 1, WORLD * CHUNKS),
    "RESTART": (20261400, switch_config, "", "restart", restart_round, 1, WORLD * CHUNKS),
    "CARRIER": (20261300, replicating_config, "--results once", "replicate carrier",
                replicate_carrier_round, 1, CHUNKS),
    "LOST_COPIES": (20261900, replicating_config, "--results once",
                    "replicate carrier lost copies",
                    lambda lab, d, tag: replicate_carrier_round(lab, d, tag, lose_copies=True),
                    1, CHUNKS),
    "TWICE": (20261600, replicating_config, "--results once", "replicate carrier twice",
              replicate_carrier_twice_round, 2, CHUNKS),
    "FIRST": (20261700, switch_config, "", "resumed first", resumed_first_round, 1,
              WORLD * CHUNKS),
    "TWICE_PLAIN": (20261800, switch_config, "", "carrier twice", carrier_twice_round, 2,
                    WORLD * CHUNKS),
}


def test(worker_exe: str, root_exe: str, switch_exe: str) -> None:
    exes = (worker_exe, root_exe, switch_exe)
    for name, (seed, config, root_args, tag, round_fn, resumes, written) in ALONE.items():
        if os.environ.get(f"INA_S2S_REJOIN_{name}_ONLY"):
            one_round_alone(exes, int(os.environ[f"INA_S2S_REJOIN_{name}_ONLY"]), seed, config,
                            root_args, tag, round_fn, resumes, written)
            return
    if os.environ.get("INA_S2S_REJOIN_LOST_ONLY"):
        lost_alone(exes, int(os.environ["INA_S2S_REJOIN_LOST_ONLY"]))
        return
    plan = [("rejoin", 2, {}), ("carrier", 1, {}), (f"rejoin {LOSS}", 2, {"loss": LOSS}),
            ("restart", 2, {})] + LOST_PLAN + [("resumed first", 2, {})]
    with rejoin_lab(exes, switch_config, len(plan) + 6, 20261128, "s2s-rejoin-") as (lab, data):
        root = listening_root(lab, f"--rounds {len(plan) + 1}")

        # 1. Rank 2 reconnects alone through the aggregating switch.
        rejoin_round(lab, data[0], plan[0][0], plan[0][1], **plan[0][2])

        # 2. The next AllReduce on the fresh state.
        before = counters(lab)
        run_workers(lab, data[1], "fresh", "")
        wait_until(lambda: settled(diff(counters(lab), before, "job")) >= CHUNKS, 10,
                   "fresh: every aggregate acknowledged by the root or released at the "
                   "carrier's end")
        after = counters(lab)
        dj, dl = diff(after, before, "job"), diff(after, before, "leaving_job")
        log(f"switch, fresh: job {dj}; leaving_job {dl}")
        check(dj["absorbed"] == WORLD * CHUNKS and settled(dj) == CHUNKS and
              dj["connections_learned"] == WORLD,
              f"fresh: the fresh state learned both connections and absorbed all "
              f"{WORLD * CHUNKS} contributions, one aggregate per chunk acknowledged")
        check(dl["absorbed"] == 0 and dl["forwarded"] == 0,
              "fresh: the old state (leaving_job) took no part")

        # 3. The carrier (rank 1) reconnects alone; 4. rank 2 again, its link lossy.
        # 5. Rank 2's process restarts (nothing kept: the switch and the root say where).
        # 6. The carrier's complete aggregates lost at the root until it resumed: sent again.
        # 7. Rank 2's process restarts right after its reconnect.
        # 8. Rank 2 resumes before rank 1 connected.
        for (tag, rank, kw), d in zip(plan[1:], data[2:]):
            if tag == "restart":
                restart_round(lab, d, tag)
            elif tag == "resumed first":
                resumed_first_round(lab, d, tag)
            else:
                rejoin_round(lab, d, tag, rank, **kw)

        tags = [plan[0][0], "fresh"] + [t for t, _r, _kw in plan[1:]]
        rounds = served("aggregating", root, len(tags))
        for (tag, _rank, kw), r in zip([plan[0], ("fresh", 0, {})] + plan[1:], rounds):
            root_round_checks(tag, r, 0 if tag == "fresh" else 2 if kw.get("restart") else 1)
            if tag == "fresh":
                check(r["contributions"] == CHUNKS, "fresh: one aggregate per chunk")
            else:
                check(r["contributions"] < WORLD * CHUNKS,
                      f"{tag}: {r['contributions']} WRITEs at the root, fewer than "
                      f"{WORLD * CHUNKS}: aggregates before the rejoin")

        # 9. Result replication (root --results once, replicate: true): rank 2 resumes; the
        # switch copies the carrier's results to the connections it learned and, from the
        # resumed REP on, to rank 2's resumed one; the root writes rank 2 nothing itself
        # (what it lacks goes again on the carrier).
        lab.reload_switch(replicating_config)
        root = listening_root(lab, "--rounds 1 --results once")
        d = rejoin_round(lab, data[-4], "replicate", 2)
        log(f"replicate: rank 2 took {d['workers'][1]['duplicate_results']} result(s) "
            f"twice, rank 1 {d['workers'][0]['duplicate_results']}")
        check(d["replicate_failed"] == 0 and d["result_legs_resumed"] == 1 and
              d["results_replicated"] >= CHUNKS,
              f"replicate: rank 2's resumed connection became a copy target; "
              f"{d['results_replicated']:.0f} copies made (rank 2's every result), none "
              f"failed")
        r = served("replicate", root, 1)[0]
        # The root wrote the carrier alone (every result acknowledged by both workers).
        root_round_checks("replicate", r, 1, written=CHUNKS)
        tags.append("replicate")
        rounds.append(r)

        # 10. The carrier resumes while the switch replicates: the copies' source moves.
        # 11. It resumes twice in one AllReduce: the source moves again.
        # 10b. The carrier resumes while rank 2 lost the old source's copies: owed again.
        root = listening_root(lab, "--rounds 3 --results once")
        replicate_carrier_round(lab, data[-3], "replicate carrier")
        replicate_carrier_round(lab, data[-3], "replicate carrier lost copies", lose_copies=True)
        replicate_carrier_twice_round(lab, data[-2], "replicate carrier twice")
        r, r_lost, r2 = served("replicate carrier", root, 3)
        root_round_checks("replicate carrier", r, 1, written=CHUNKS)
        root_round_checks("replicate carrier lost copies", r_lost, 1, written=CHUNKS)
        root_round_checks("replicate carrier twice", r2, 2, written=CHUNKS)
        tags += ["replicate carrier", "replicate carrier lost copies", "replicate carrier twice"]
        rounds += [r, r_lost, r2]

        # 12. Without aggregation: the job removed, RoCE routed untouched.
        lab.reload_switch(plain_config)
        root = listening_root(lab, "--rounds 1")
        before = counters(lab)
        res = run_workers(lab, data[-1], "plain", f"--reconnect-after {RESUME_PLAIN}")
        check(res[1]["reconnected"] and res[1]["resume_chunk"] == RESUME_PLAIN,
              f"plain: rank 2 reconnected and resumed at chunk {RESUME_PLAIN}")
        after = counters(lab)
        d = both(diff(after, before, "job"), diff(after, before, "leaving_job"))
        check(d["absorbed"] == 0 and d["rejoins"] == 0,
              "plain: the switch aggregated nothing")
        r = served("plain", root, 1)[0]
        root_round_checks("plain", r, 1)
        check(r["contributions"] == WORLD * CHUNKS,
              "plain: the root received every worker's own WRITE")
        tags.append("plain")
        rounds.append(r)
        # The states of the earlier AllReduces are over, not waiting for their idle timeout
        # (LEAVE_TIMEOUT_S): otherwise they stay leaving on the root into round 13.
        wait_until(lambda: jobs_leaving(lab) == 0, LEAVE_TIMEOUT_S / 2,
                   "plain: no state of the job leaving any more (the replicating rounds' states "
                   "ended once the root accepted a later AllReduce, the removed job's at once)")

        # 13. The carrier resumes twice in one AllReduce WITHOUT replication (the job reloaded
        # back to plain aggregation): the state left at the first resume follows the second.
        lab.reload_switch(switch_config)
        root = listening_root(lab, "--rounds 1")
        carrier_twice_round(lab, data[-5], "carrier twice")
        r = served("carrier twice", root, 1)[0]
        root_round_checks("carrier twice", r, 2)
        check(r["contributions"] < WORLD * CHUNKS,
              f"carrier twice: {r['contributions']} WRITEs at the root, fewer than "
              f"{WORLD * CHUNKS}: aggregates before the rejoin")
        tags.append("carrier twice")
        rounds.append(r)

        log("timings: boot {:.1f}s; root seconds per round: {}".format(
            lab.timings.get("boot_s", 0),
            ", ".join(f"{t} {r['seconds']:.2f}" for t, r in zip(tags, rounds))))


if __name__ == "__main__":
    sys.exit(run_test("roce-vm-s2s-rejoin", __doc__, test, (3,)))
