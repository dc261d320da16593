// SPDX-License-Identifier: Apache-2.0
#include "pipeline/ipv4_forward.h"

#include <rte_ip.h>
#include <rte_lpm.h>

#include <cstring>
#include <optional>

#include "net/checksum.h"
#include "pipeline/mbuf_chain.h"
#include "pipeline/egress.h"
#include "pipeline/packet_meta.h"

namespace ina::pipeline {

namespace {

constexpr size_t kL2 = sizeof(rte_ether_hdr);

bool martian_source(uint32_t a) {
    return a == 0 || (a >> 24) == 127 || (a >> 28) == 0xE || a == 0xFFFFFFFF;
}

bool martian_destination(uint32_t a) {
    // Multicast is never routed: configured groups go to BIER at eth_input (bier_encap).
    return (a >> 24) == 0 || (a >> 24) == 127 || (a >> 28) >= 0xE;
}

}  // namespace


void ipv4_forward(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n,
                  EdgeBatches<Ipv4Edge>& out) {
    // One bulk LPM lookup for the burst: it overlaps the table's cache misses across packets.
    uint32_t dst[kMaxBurst];
    uint32_t hop[kMaxBurst];
    dp::DropReason verdict[kMaxBurst];
    for (uint16_t i = 0; i < n; ++i) {
        // The classifier checked what came from eth_input; the switch's own packets (emitted
        // by a feature) and anything unclassified are checked here.
        const PacketMeta* pm = classified(pkts[i]);
        verdict[i] = pm != nullptr ? static_cast<dp::DropReason>(pm->l3_verdict)
                                   : ipv4_check(pkts[i]);
        const auto* ip = rte_pktmbuf_mtod_offset(pkts[i], const rte_ipv4_hdr*, kL2);
        dst[i] = verdict[i] == dp::DropReason::count ? rte_be_to_cpu_32(ip->dst_addr) : 0;
    }
    rte_lpm_lookup_bulk(snap.lpm, dst, hop, n);

    for (uint16_t i = 0; i < n; ++i) {
        rte_mbuf* m = pkts[i];
        if (verdict[i] != dp::DropReason::count) [[unlikely]] {
            count_drop(ctx, verdict[i]);
            out.push(Ipv4Edge::drop, m);
            continue;
        }
        auto* eth = rte_pktmbuf_mtod(m, rte_ether_hdr*);
        auto* ip = reinterpret_cast<rte_ipv4_hdr*>(eth + 1);
        if (martian_source(rte_be_to_cpu_32(ip->src_addr)) || martian_destination(dst[i]))
            [[unlikely]] {
            count_drop(ctx, dp::DropReason::ipv4_martian);
            out.push(Ipv4Edge::drop, m);
            continue;
        }
        if (!(hop[i] & RTE_LPM_LOOKUP_SUCCESS)) [[unlikely]] {
            count_drop(ctx, dp::DropReason::no_route);
            out.push(Ipv4Edge::drop, m);
            continue;
        }
        const dp::NextHop& nh = snap.nexthops[hop[i] & 0x00ffffff];
        if (nh.kind == dp::NextHopKind::local) {
            out.push(Ipv4Edge::local, m);
            continue;
        }
        if (nh.kind == dp::NextHopKind::broadcast) [[unlikely]] {
            count_drop(ctx, dp::DropReason::ipv4_martian);
            out.push(Ipv4Edge::drop, m);
            continue;
        }
        // The switch's own packets leave with the TTL they were built with (64, like a host's).
        const bool transit = (m->ol_flags & g_originated_flag) == 0;
        if (transit && ip->time_to_live <= 1) [[unlikely]] {
            count_drop(ctx, dp::DropReason::ttl_exceeded);
            out.push(Ipv4Edge::drop, m);
            continue;
        }
        // A gateway's station is a word in its next hop; a connected destination is looked up
        // in the neighbour table (both change in place as neighbours come and go).
        const std::optional<dp::Neighbour> st = snap.station_for(nh, dst[i]);
        if (!st) [[unlikely]] {
            request_resolve(ctx, snap, nh.kind == dp::NextHopKind::gateway ? nh.gateway : dst[i],
                            nh.port);
            count_drop(ctx, dp::DropReason::neighbour_unresolved);
            out.push(Ipv4Edge::drop, m);
            continue;
        }
        if (st->port >= snap.n_ports || !snap.ports[st->port].present) [[unlikely]] {
            // A neighbour learned on a port a config change has since removed.
            count_drop(ctx, dp::DropReason::neighbour_unresolved);
            out.push(Ipv4Edge::drop, m);
            continue;
        }
        if (rte_be_to_cpu_16(ip->total_length) > snap.ports[st->port].mtu) [[unlikely]] {
            count_drop(ctx, dp::DropReason::mtu_exceeded);
            out.push(Ipv4Edge::drop, m);
            continue;
        }
        if (transit) {
            ipv4_decrement_ttl(ip);
        }
        eth->dst_addr = st->mac;
        eth->src_addr = snap.ports[st->port].mac;
        ++ctx.counters.routed;
        egress(ctx, st->port, m);
    }
}

}  // namespace ina::pipeline
