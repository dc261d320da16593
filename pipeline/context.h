// SPDX-License-Identifier: Apache-2.0
// Per-lcore state every pipeline stage works on. One LcoreContext per worker lcore, written
// only by that lcore (the control plane reads counters and last-seen stamps, never writes).
#pragma once

#include <rte_mbuf.h>
#include <rte_ring.h>

#include <array>
#include <atomic>
#include <cstdint>

#include "dataplane/counters.h"
#include "dataplane/events.h"
#include "dataplane/fdb_cache.h"
#include "dataplane/neighbour_cache.h"
#include "dataplane/snapshot.h"
#include "pipeline/timer_wheel.h"

namespace ina::pipeline {

inline constexpr uint16_t kMaxBurst = 64;
inline constexpr uint16_t kMaxRxQueuesPerLcore = 32;
inline constexpr uint16_t kMaxWorkers = 16;
inline constexpr uint64_t kTimerServiceLoops = 16;  // a power of two

struct RxQueue {
    uint16_t port;
    uint16_t queue;
};

struct TxBuffer {
    uint16_t count = 0;
    // The sum of pkt_len over pkts[0, count), added as each packet is queued (its mbuf is at
    // hand then), so a flush need not read every mbuf again for the port's byte counter. Who
    // empties the buffer (tx_flush) zeroes it with the count.
    uint64_t bytes = 0;
    std::array<rte_mbuf*, kMaxBurst> pkts{};
};

// Direct-mapped memory of recently reported events, so a flood of packets to one unresolved
// address or from one unknown MAC sends one event per interval instead of one per packet.
struct RecentEvents {
    static constexpr size_t kSlots = 256;
    std::array<uint64_t, kSlots> key{};
    std::array<uint64_t, kSlots> tsc{};

    // True (and remembers `k`) if `k` was not reported within `interval` cycles of `now`.
    bool should_report(uint64_t k, uint64_t now, uint64_t interval) {
        size_t slot = (k ^ (k >> 17) ^ (k >> 31)) & (kSlots - 1);
        if (key[slot] == k && now - tsc[slot] < interval) {
            return false;
        }
        key[slot] = k;
        tsc[slot] = now;
        return true;
    }
};

// One attached piece of per-lcore feature state (an INA job's chunk table), in the slot the
// control plane gave it. The state's memory is the control plane's; only this lcore uses it.
struct LcoreContext;
struct FeatureSlot {
    LcoreContext* owner = nullptr;  // the lcore whose slot this is (its ticks get its context)
    uint8_t feature = dp::kFeatureNone;
    uint32_t id = 0;
    void* state = nullptr;
    Timer timer;  // the feature's periodic work on this state (FeatureStage::tick), if any
    uint64_t tick_tsc = 0;
};

struct alignas(64) LcoreContext {
    unsigned lcore_id = 0;
    uint16_t tx_queue = 0;  // this lcore's TX queue id on every port
    uint16_t burst_size = 32;
    uint16_t n_rx = 0;
    std::array<RxQueue, kMaxRxQueuesPerLcore> rx{};

    uint64_t now_tsc = 0;          // stamped once per loop iteration
    uint64_t tsc_hz = 0;
    uint64_t last_rx_tsc = 0;      // read by the control plane for idle-exit
    uint64_t event_interval_tsc = 0;

    std::array<TxBuffer, dp::kMaxPorts> tx{};
    // Ports this lcore may transmit on (configured and started). Stage tests leave it false and
    // inspect `tx` directly instead.
    std::array<bool, dp::kMaxPorts> tx_enabled{};

    rte_ring* events = nullptr;  // SPSC, to the control plane; may be null in stage tests
    RecentEvents recent;

    // Connected destinations' stations this lcore routed to lately (ipv4_forward).
    dp::NeighbourCache neighbours;
    // FDB answers the bridge looked up lately (l2_bridge, l2_learn).
    dp::FdbCache fdb_memo;

    // FDB last-seen TSC stamps indexed by FdbEntry::index (max_fdb_entries long).
    uint64_t* fdb_seen = nullptr;
    uint32_t fdb_seen_len = 0;

    // Steering: an INA chunk belongs to the worker its table's lane_of(seq) names
    // (ina::chunk_place, which also picks the slot index on the owner); packets that arrive
    // elsewhere are handed to their owner over an SPSC ring (handoff[owner]; null for this lcore
    // itself), so everything for one chunk meets in one lcore's state.
    uint16_t worker_index = 0;
    uint16_t n_workers = 1;
    std::array<rte_ring*, kMaxWorkers> handoff{};
    // What a burst hands to each owner, enqueued with one rte_ring_sp_enqueue_burst per owner
    // when the burst ends (the stage's FeatureStage::flush): the ring's producer index moves
    // once per burst, not once per packet.
    struct HandoffBatch {
        uint16_t n = 0;
        std::array<rte_mbuf*, kMaxBurst> pkts{};
    };
    std::array<HandoffBatch, kMaxWorkers> handoff_out{};
    uint32_t handoff_pending = 0;  // a bit per owner whose batch is not empty
    // Whether ina_input fetches the next received frame's body ahead: not while most of what
    // this lcore receives goes to other lcores (input hashed by address), whose cores read
    // those bodies; set from the share the previous burst handed over.
    bool prefetch_received_bodies = true;
    // A bit per feature handle whose stage's flush is due at the end of this burst.
    uint8_t flush_pending = 0;
    static_assert(dp::kMaxFeatures <= 8);

    // Per-lcore feature state by slot (dp::Command attach/detach; the slot is in the snapshot's
    // view, e.g. InaJobView::state_slot): found by index, never by a search.
    std::array<FeatureSlot, dp::kMaxFeatureStates> feature_slots{};
    uint16_t n_attached = 0;
    // Detach commands this lcore has completed, in ring order. Written only by this lcore (a
    // plain release store, no read-modify-write); the control plane frees that many detached
    // states. A counter instead of an acknowledgement message: the worker never waits for room.
    std::atomic<uint64_t> detaches_done{0};
    TimerWheel timers;        // serviced every kTimerServiceLoops loops by the worker
    // The loop's snapshot while the wheel is serviced (service_timers), else nullptr.
    const dp::Snapshot* timer_snapshot = nullptr;
    rte_mempool* pool = nullptr;  // where emitted packets and copies come from

    // The state attached in `slot` if it is (feature, id), else nullptr (not attached yet, or
    // the slot already holds a later attach while an older snapshot still names the old one).
    void* feature_state(uint16_t slot, uint8_t feature, uint32_t id) const {
        if (slot >= feature_slots.size()) {
            return nullptr;
        }
        const FeatureSlot& s = feature_slots[slot];
        return s.feature == feature && s.id == id ? s.state : nullptr;
    }

    dp::LcoreCounters counters;
    // Each feature's own per-lcore counters (its view* piece names the indices), summed at
    // scrape by its control piece.
    static constexpr size_t kFeatureCounters = 16;
    std::array<std::array<uint64_t, kFeatureCounters>, dp::kMaxFeatures> feature_counters{};

    // Room to gather what spans segments of a chained frame (an INA datagram up to a 9 KiB
    // jumbo frame, a result built larger than one mbuf). Valid only within one packet's handling.
    static constexpr size_t kScratchBytes = 16384;
    alignas(64) std::array<uint8_t, kScratchBytes> scratch{};
};

// Posts an event to the control plane; a full ring loses the event and counts it.
inline void post_event(LcoreContext& ctx, const dp::Event& ev) {
    if (ctx.events == nullptr ||
        rte_ring_sp_enqueue_elem(ctx.events, const_cast<dp::Event*>(&ev), sizeof(dp::Event)) != 0) {
        ++ctx.counters.events_lost;
    }
}

// Asks the control plane to resolve `ip` on `port` (ARP), at most once per request interval per
// address, so a flood towards an unresolved next hop costs one event.
inline void request_resolve(LcoreContext& ctx, const dp::Snapshot& snap, uint32_t ip,
                            uint16_t port) {
    const uint64_t key = static_cast<uint64_t>(ip) | static_cast<uint64_t>(port) << 32 |
                         static_cast<uint64_t>(dp::EventType::resolve_request) << 48;
    const uint64_t interval = snap.arp_request_interval_ms * ctx.tsc_hz / 1000;
    if (ctx.recent.should_report(key, ctx.now_tsc, interval)) {
        dp::Event ev{};
        ev.type = dp::EventType::resolve_request;
        ev.ip = ip;
        ev.port = port;
        post_event(ctx, ev);
    }
}

inline void count_drop(LcoreContext& ctx, dp::DropReason reason) {
    ++ctx.counters.drops[static_cast<size_t>(reason)];
}

// A batch per outgoing edge of a stage. Edge is an enum class ending in `count`.
// Capacity contract: every edge holds kCapacity packets. A stage that puts at most one packet on
// its edges per input never fills them from one burst. A stage that may emit more per input
// declares that maximum (FeatureStage::max_emit), takes an input only while room_for(max_emit)
// holds, and returns how many inputs it took; the pipeline drains the batches and runs it again
// on the rest. A push beyond the capacity is a bug, and still never writes out of bounds: the
// mbuf is freed and counted in `overflowed` (dp::DropReason::stage_contract).
template <typename Edge>
struct EdgeBatches {
    static constexpr size_t kEdges = static_cast<size_t>(Edge::count);
    static constexpr uint16_t kCapacity = kMaxBurst;
    std::array<uint16_t, kEdges> n{};
    uint16_t overflowed = 0;
    // Packets ever pushed: never below any n[i] (n only grows here; whoever empties an edge
    // leaves it as is), so total + k <= kCapacity proves room on every edge without the loop.
    uint16_t total = 0;
    std::array<std::array<rte_mbuf*, kCapacity>, kEdges> pkts;

    void push(Edge e, rte_mbuf* m) {
        auto i = static_cast<size_t>(e);
        if (n[i] == kCapacity) [[unlikely]] {
            rte_pktmbuf_free(m);
            ++overflowed;
            return;
        }
        pkts[i][n[i]++] = m;
        ++total;
    }
    // True when every edge can take `k` more packets (checked per input by stages that emit
    // several: the sum first, the edges one by one only when it is not enough).
    bool room_for(uint16_t k) const {
        if (total + k <= kCapacity) [[likely]] {
            return true;
        }
        for (uint16_t used : n) {
            if (used + k > kCapacity) {
                return false;
            }
        }
        return true;
    }
    uint16_t size(Edge e) const { return n[static_cast<size_t>(e)]; }
    rte_mbuf** begin(Edge e) { return pkts[static_cast<size_t>(e)].data(); }
    rte_mbuf* at(Edge e, uint16_t i) const { return pkts[static_cast<size_t>(e)][i]; }
};

}  // namespace ina::pipeline
