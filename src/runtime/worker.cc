// SPDX-License-Identifier: Apache-2.0
// The worker loop, after DPDK's l3fwd: drain TX on a TSC timer, poll every owned RX queue in
// bursts, run each burst to completion through the pipeline, then report a quiescent state.
// Per iteration (never per packet) it files its RX stall figures: the gap between two polls,
// and the iteration's own time as the switch's or, if the kernel switched it out, the host's.
#include <rte_cycles.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>

#include "pipeline/pipeline.h"
#include "pipeline/egress.h"
#include "pipeline/feature_stages.h"
#include "runtime/dataplane.h"

namespace ina::runtime {

namespace {

// Mbufs the control plane wants sent (ARP requests): this lcore owns the TX queues.
void drain_control_tx(Worker& w) {
    rte_mbuf* pkts[pipeline::kMaxBurst];
    const unsigned n = rte_ring_sc_dequeue_burst(w.control_tx, reinterpret_cast<void**>(pkts),
                                                 pipeline::kMaxBurst, nullptr);
    for (unsigned i = 0; i < n; ++i) {
        pipeline::egress(*w.ctx, pkts[i]->port, pkts[i]);
    }
}

// Attach/detach of per-lcore feature state. Run after the snapshot pointer is loaded: a
// snapshot that names a new job was published after its attach was enqueued, so the attach is
// visible here.
void drain_commands(Worker& w) {
    dp::Command cmds[8];
    unsigned n = 0;
    while ((n = rte_ring_sc_dequeue_burst_elem(w.commands, cmds, sizeof(dp::Command), 8,
                                               nullptr)) != 0) {
        for (unsigned i = 0; i < n; ++i) {
            // The control plane sends an attach only to a free slot it validated; one that
            // fails changes nothing (the packet path then sees the job as not attached).
            pipeline::apply_command(*w.ctx, cmds[i]);
        }
    }
}

}  // namespace

int worker_main(void* arg) {
    auto& dataplane = *static_cast<Dataplane*>(arg);
    const unsigned lcore = rte_lcore_id();
    Worker* self = nullptr;
    for (auto& w : dataplane.workers) {
        if (w.lcore_id == lcore) {
            self = &w;
        }
    }
    if (self == nullptr) {
        return -1;
    }
    Worker& w = *self;
    pipeline::LcoreContext& ctx = *w.ctx;
    rte_rcu_qsbr_thread_online(dataplane.qsbr, lcore);
    SchedWatch& sched = *w.sched;
    sched.attach_calling_thread();

    rte_mbuf* pkts[pipeline::kMaxBurst];
    uint64_t last_drain = rte_rdtsc();
    ctx.last_rx_tsc = last_drain;
    uint32_t idle_loops = 0;
    // Poll gaps in microseconds by a multiply and a shift (no division per loop): 2^32 us per
    // 2^32 * tsc_hz cycles.
    const uint64_t gap_us_mult = (uint64_t{1000000} << 32) / rte_get_tsc_hz();
    uint64_t loop_start = last_drain;
    // The previous iteration's own time and the scheduler sequence at its start (after an idle
    // sleep: the sleep is the loop's own choice). It is classified once this iteration has
    // started, so the sequence is compared over the whole of it, loop back-edge included. Its
    // time is the poll gap this iteration measures (one clock read per iteration), unless an
    // idle sleep ended it: then it was read before the sleep.
    constexpr uint64_t kNoSleep = ~uint64_t{0};
    uint64_t work_before_sleep_us = kNoSleep;
    uint32_t previous_sequence = sched.sequence();

    while (!dataplane.stop.load(std::memory_order_relaxed)) {
        // The snapshot pointer is read once per iteration and dropped before the quiescent
        // report below: that is the whole RCU read-side contract.
        const Published& pub = *dataplane.current();
        const dp::Snapshot& snap = *pub.snapshot;
        ctx.now_tsc = rte_rdtsc();
        const uint64_t gap_us = (ctx.now_tsc - loop_start) * gap_us_mult >> 32;
        ++ctx.counters.poll_gap[dp::poll_gap_bucket(gap_us)];
        loop_start = ctx.now_tsc;
        const uint32_t sequence = sched.sequence();
        const uint64_t previous_work_us =
            work_before_sleep_us == kNoSleep ? gap_us : work_before_sleep_us;
        work_before_sleep_us = kNoSleep;
        ++(sequence == previous_sequence ? ctx.counters.loop_work
                                         : ctx.counters.loop_descheduled)[dp::poll_gap_bucket(previous_work_us)];
        previous_sequence = sequence;
        if (rte_ring_count(w.commands) != 0) [[unlikely]] {
            drain_commands(w);
        }
        // Everything the loop needs from `pub` after the quiescent report is copied now: the
        // control plane may free it the moment this lcore reports.
        const LoopSettings loop = pub.loop;
        ctx.burst_size = loop.burst_size;
        ++ctx.counters.loops;

        if (ctx.now_tsc - last_drain > loop.drain_tsc) {
            pipeline::tx_flush_all(ctx);
            last_drain = ctx.now_tsc;
        }
        if ((ctx.counters.loops & 15) == 0) {
            drain_control_tx(w);
        }
        // Feature timers (chunk-table expiry sweeps): a few loops late is a few microseconds.
        if ((ctx.counters.loops & (pipeline::kTimerServiceLoops - 1)) == 0) {
            pipeline::service_timers(ctx, snap);
        }

        uint32_t received = 0;
        bool saturated = false;  // some queue gave a full burst: more is waiting
        for (uint16_t q = 0; q < ctx.n_rx; ++q) {
            const uint16_t port = ctx.rx[q].port;
            const uint16_t n = rte_eth_rx_burst(port, ctx.rx[q].queue, pkts, ctx.burst_size);
            if (n == 0) {
                continue;
            }
            received += n;
            saturated |= n == ctx.burst_size;
            ++ctx.counters.rx_bursts;
            ++ctx.counters.burst_size[dp::burst_bucket(n)];
            auto& pc = ctx.counters.ports[port];
            pc.rx_packets += n;
            pc.rx_bytes += pipeline::process_rx_burst(ctx, snap, pkts, n);
        }
        // Contributions other lcores received for chunks this lcore owns: already checked
        // and classified there, they enter their feature's stage directly.
        for (rte_ring* r : w.handoff_in) {
            const uint16_t n = static_cast<uint16_t>(rte_ring_sc_dequeue_burst(
                r, reinterpret_cast<void**>(pkts), ctx.burst_size, nullptr));
            if (n != 0) {
                received += n;
                pipeline::process_handoff(ctx, snap, pkts, n);
            }
        }
        rte_rcu_qsbr_quiescent(dataplane.qsbr, lcore);

        // Adaptive TX batching: while queues deliver full bursts, packets leave in full TX
        // bursts (or at the drain timer); once the input has drained, whatever is buffered goes
        // now instead of waiting up to tx_drain_us, so light load gets low latency.
        if (received != 0 && !saturated) {
            pipeline::tx_flush_all(ctx);
            last_drain = ctx.now_tsc;
        }
        // This iteration's own time, an idle sleep after it excluded, is classified at the next
        // one's start: the switch's if the kernel did not switch the thread out before then,
        // else the host's.
        if (received != 0) {
            ++ctx.counters.busy_loops;
            ctx.last_rx_tsc = ctx.now_tsc;
            idle_loops = 0;
        } else if (loop.idle_sleep_us != 0 && ++idle_loops >= loop.idle_loops_before_sleep) {
            // Back-off for shared cores (testbeds running many switches): only when idle, and
            // only after TX is flushed so nothing waits in a buffer while we sleep.
            work_before_sleep_us = (rte_rdtsc() - loop_start) * gap_us_mult >> 32;
            pipeline::tx_flush_all(ctx);
            ++ctx.counters.idle_sleeps;
            rte_delay_us_sleep(loop.idle_sleep_us);
            previous_sequence = sched.sequence();
        }
    }
    drain_control_tx(w);
    pipeline::tx_flush_all(ctx);
    rte_rcu_qsbr_thread_offline(dataplane.qsbr, lcore);
    return 0;
}

}  // namespace ina::runtime
