// SPDX-License-Identifier: Apache-2.0
#include "pipeline/ipv4_forward.h"

#include <rte_ip.h>
#include <rte_lpm.h>

#include <cstring>

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

    // Each routed packet's station, 0 while unresolved: a gateway's is a word in its next hop;
    // a connected destination's comes from this lcore's memo of the neighbour table, and those
    // not in it from one bulk lookup per burst (a lookup per packet cost ~250 instructions).
    if (snap.tables != nullptr) {
        ctx.neighbours.sync(*snap.tables);
    }
    static_assert(kMaxBurst <= dp::ForwardingTables::kNeighbourBulkMax);
    const dp::NextHop* nhs[kMaxBurst];
    uint64_t station[kMaxBurst];
    uint32_t neighbour_ip[kMaxBurst];
    uint64_t neighbour_word[kMaxBurst];
    uint16_t neighbour_of[kMaxBurst];
    uint16_t n_neighbours = 0;
    for (uint16_t i = 0; i < n; ++i) {
        station[i] = 0;
        nhs[i] = nullptr;
        if (verdict[i] != dp::DropReason::count || !(hop[i] & RTE_LPM_LOOKUP_SUCCESS))
            [[unlikely]] {
            continue;
        }
        const dp::NextHop& nh = snap.nexthops[hop[i] & 0x00ffffff];
        nhs[i] = &nh;
        if (nh.kind == dp::NextHopKind::gateway) {
            station[i] = nh.station_word();
        } else if (nh.kind == dp::NextHopKind::connected) {
            station[i] = ctx.neighbours.get(dst[i]);
            if (station[i] == 0) {
                neighbour_of[n_neighbours] = i;
                neighbour_ip[n_neighbours++] = dst[i];
            }
        }
    }
    if (n_neighbours != 0) {
        snap.tables->neighbour_words(neighbour_ip, n_neighbours, neighbour_word);
        for (uint16_t k = 0; k < n_neighbours; ++k) {
            station[neighbour_of[k]] = neighbour_word[k];
            ctx.neighbours.put(neighbour_ip[k], neighbour_word[k]);
        }
    }

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
        const dp::NextHop& nh = *nhs[i];
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
        if (station[i] == 0) [[unlikely]] {
            request_resolve(ctx, snap, nh.kind == dp::NextHopKind::gateway ? nh.gateway : dst[i],
                            nh.port);
            count_drop(ctx, dp::DropReason::neighbour_unresolved);
            out.push(Ipv4Edge::drop, m);
            continue;
        }
        const uint16_t port = dp::station_port(station[i]);
        if (port >= snap.n_ports || !snap.ports[port].present) [[unlikely]] {
            // A neighbour learned on a port a config change has since removed.
            count_drop(ctx, dp::DropReason::neighbour_unresolved);
            out.push(Ipv4Edge::drop, m);
            continue;
        }
        if (ipv4_field16(ip->total_length) > snap.ports[port].mtu) [[unlikely]] {
            count_drop(ctx, dp::DropReason::mtu_exceeded);
            out.push(Ipv4Edge::drop, m);
            continue;
        }
        if (transit) {
            ipv4_decrement_ttl(ip);
        }
        dp::store_station_mac(eth->dst_addr, station[i]);
        eth->src_addr = snap.ports[port].mac;
        ++ctx.counters.routed;
        egress(ctx, port, m);
    }
}

}  // namespace ina::pipeline
