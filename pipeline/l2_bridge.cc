// SPDX-License-Identifier: Apache-2.0
#include "pipeline/l2_bridge.h"

#include <cstring>
#include <optional>

#include "pipeline/egress.h"
#include "pipeline/eth_input.h"

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

namespace {

// Bridges one frame arriving on `in`, a member of `group_id`: to its FDB port, or flooded to
// the group's other ports. Returns false when the frame is to be dropped (reason counted; the
// caller frees it). l2_bridge and l2_fast_path both bridge with this one function.
inline bool bridge_one(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf* m, uint16_t in,
                       int32_t group_id) {
    const auto* eth = rte_pktmbuf_mtod(m, const rte_ether_hdr*);
    const dp::L2Group& group = snap.groups[static_cast<size_t>(group_id)];
    if (!rte_is_multicast_ether_addr(&eth->dst_addr)) {
        const std::optional<dp::FdbEntry> e =
            fdb_of(ctx, snap, eth->dst_addr, static_cast<uint16_t>(group_id));
        if (e) {
            if (e->port == in) {
                count_drop(ctx, dp::DropReason::l2_same_port);
                return false;
            }
            ++ctx.counters.bridged;
            egress(ctx, e->port, m);
            return true;
        }
    }
    // Flood: one frame, referenced once per egress port; every TX frees one reference and
    // nobody writes the frame, so no copy is needed. TX frees the whole chain, so every
    // segment of a chained frame takes the extra references.
    const uint16_t copies = static_cast<uint16_t>(group.n_ports - 1);
    if (copies == 0) {
        count_drop(ctx, dp::DropReason::l2_same_port);
        return false;
    }
    rte_pktmbuf_refcnt_update(m, static_cast<int16_t>(copies - 1));
    ++ctx.counters.flooded;
    for (uint16_t k = 0; k < group.n_ports; ++k) {
        if (group.ports[k] != in) {
            egress(ctx, group.ports[k], m);
        }
    }
    return true;
}

}  // namespace

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
        if (!bridge_one(ctx, snap, m, in, group_id)) {
            out.push(BridgeEdge::drop, m);
        }
    }
}

uint16_t l2_fast_path(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf* const* pkts,
                      uint16_t n, uint64_t& bytes) {
    const uint16_t n_ports = snap.n_ports;
    // First pass, without side effects: is every frame of the burst one the general path would
    // only learn from and bridge? All or nothing: the general path sends the bridge's frames
    // after everything else of the burst (ARP replies, routed frames), so a bridged run taken
    // ahead of frames left to it could put a routed frame behind a bridged one on a shared
    // port (stage FastPath, "IPv4 to the switch, routed to g1").
    for (uint16_t i = 0; i < n; ++i) {
        const rte_mbuf* m = pkts[i];
        const uint16_t in = m->port;
        // eth_input's first checks: a chain (pulled up there), a port beyond the snapshot or
        // a runt take the general path, which counts them.
        if (m->nb_segs != 1 || in >= n_ports ||
            rte_pktmbuf_data_len(m) < sizeof(rte_ether_hdr)) {
            return 0;
        }
        const dp::PortView& pv = snap.ports[in];
        if (pv.l2_group == dp::kNoGroup) {
            return 0;
        }
        const auto* eth = rte_pktmbuf_mtod(m, const rte_ether_hdr*);
        uint64_t head;
        std::memcpy(&head, eth, sizeof head);  // the frame holds an Ethernet header (above)
        // eth_input's `bridge` edge for a group port, and nothing else: not to the switch (any
        // member's MAC), not ARP (to us, broadcast, or bridged through arp_input: all left to
        // the general path), not ND to one of the port's solicited-node groups.
        const uint16_t type = eth->ether_type;  // big-endian, compared as such
        if (frame_is_to_switch(snap, pv, in, head, eth->dst_addr) ||
            type == rte_cpu_to_be_16(RTE_ETHER_TYPE_ARP) ||
            (type == rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV6) &&
             pv.solicited_node_mac6(eth->dst_addr))) {
            return 0;
        }
    }
    // Second pass: eth_input's learning, then l2_bridge's forwarding, per frame. Learning
    // never changes the FDB this lcore reads (it posts an event, refreshes fdb_seen), so
    // learning frame i before bridging it, rather than the whole burst first, changes no
    // lookup; the events and the rate limiter see the same calls in the same order.
    uint64_t taken_bytes = 0;
    for (uint16_t i = 0; i < n; ++i) {
        rte_mbuf* m = pkts[i];
        const uint16_t in = m->port;
        const auto group_id = snap.ports[in].l2_group;
        const auto* eth = rte_pktmbuf_mtod(m, const rte_ether_hdr*);
        if (rte_is_unicast_ether_addr(&eth->src_addr) && !rte_is_zero_ether_addr(&eth->src_addr)) {
            l2_learn(ctx, snap, eth->src_addr, static_cast<uint16_t>(group_id), in);
        }
        taken_bytes += rte_pktmbuf_pkt_len(m);  // before TX may free it
        if (!bridge_one(ctx, snap, m, in, group_id)) {
            rte_pktmbuf_free(m);
        }
    }
    bytes += taken_bytes;
    return n;
}

}  // namespace ina::pipeline
