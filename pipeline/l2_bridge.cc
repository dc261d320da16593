// SPDX-License-Identifier: Apache-2.0
#include "pipeline/l2_bridge.h"

#include <cstring>
#include <optional>

#include "pipeline/egress.h"

namespace ina::pipeline {

namespace {

// The FDB's answer for (mac, group), through this lcore's memo of it.
std::optional<dp::FdbEntry> fdb_of(LcoreContext& ctx, const dp::Snapshot& snap,
                                   const rte_ether_addr& mac, uint16_t group) {
    return ctx.fdb_memo.lookup(*snap.tables, mac, group);
}

}  // namespace

void l2_learn(LcoreContext& ctx, const dp::Snapshot& snap, const rte_ether_addr& mac,
              uint16_t group, uint16_t port) {
    const std::optional<dp::FdbEntry> e = fdb_of(ctx, snap, mac, group);
    if (e && e->port == port) [[likely]] {
        if (e->index < ctx.fdb_seen_len) {
            ctx.fdb_seen[e->index] = ctx.now_tsc;
        }
        return;
    }
    uint64_t key = 0;
    std::memcpy(&key, mac.addr_bytes, 6);
    key ^= static_cast<uint64_t>(group) << 48 ^ static_cast<uint64_t>(port) << 56 ^
           static_cast<uint64_t>(dp::EventType::fdb_learn) << 60;
    if (!ctx.recent.should_report(key, ctx.now_tsc, ctx.event_interval_tsc)) {
        return;
    }
    dp::Event ev{};
    ev.type = dp::EventType::fdb_learn;
    ev.port = port;
    ev.group = group;
    std::memcpy(ev.mac, mac.addr_bytes, 6);
    post_event(ctx, ev);
}

void l2_bridge(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n,
               EdgeBatches<BridgeEdge>& out) {
    for (uint16_t i = 0; i < n; ++i) {
        rte_mbuf* m = pkts[i];
        const uint16_t in = m->port;
        const auto group_id = snap.ports[in].l2_group;
        if (group_id == dp::kNoGroup) [[unlikely]] {
            // Only a feature stage could send a routed port's packet here (its `bridge` edge is
            // for bridged input): a stage bug, counted, never an out-of-range group.
            count_drop(ctx, dp::DropReason::stage_contract);
            out.push(BridgeEdge::drop, m);
            continue;
        }
        const auto* eth = rte_pktmbuf_mtod(m, const rte_ether_hdr*);
        const dp::L2Group& group = snap.groups[static_cast<size_t>(group_id)];
        if (!rte_is_multicast_ether_addr(&eth->dst_addr)) {
            const std::optional<dp::FdbEntry> e =
                fdb_of(ctx, snap, eth->dst_addr, static_cast<uint16_t>(group_id));
            if (e) {
                if (e->port == in) {
                    count_drop(ctx, dp::DropReason::l2_same_port);
                    out.push(BridgeEdge::drop, m);
                } else {
                    ++ctx.counters.bridged;
                    egress(ctx, e->port, m);
                }
                continue;
            }
        }
        // Flood: one frame, referenced once per egress port; every TX frees one reference and
        // nobody writes the frame, so no copy is needed. TX frees the whole chain, so every
        // segment of a chained frame takes the extra references.
        const uint16_t copies = static_cast<uint16_t>(group.n_ports - 1);
        if (copies == 0) {
            count_drop(ctx, dp::DropReason::l2_same_port);
            out.push(BridgeEdge::drop, m);
            continue;
        }
        rte_pktmbuf_refcnt_update(m, static_cast<int16_t>(copies - 1));
        ++ctx.counters.flooded;
        for (uint16_t k = 0; k < group.n_ports; ++k) {
            if (group.ports[k] != in) {
                egress(ctx, group.ports[k], m);
            }
        }
    }
}

}  // namespace ina::pipeline
