// SPDX-License-Identifier: Apache-2.0
#include "pipeline/eth_input.h"

#include <rte_ether.h>

#include <cstring>

#include "pipeline/l2_bridge.h"
#include "pipeline/mbuf_chain.h"
#include "wire/bier_header.h"

namespace ina::pipeline {

namespace {

// 01:00:5e with the high bit of the fourth octet clear: an IPv4 group's MAC (RFC 1112).
bool is_ipv4_multicast_mac(const rte_ether_addr& a) {
    return a.addr_bytes[0] == 0x01 && a.addr_bytes[1] == 0x00 && a.addr_bytes[2] == 0x5e &&
           (a.addr_bytes[3] & 0x80) == 0;
}

}  // namespace

void eth_input(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n,
               EdgeBatches<EthEdge>& out) {
    for (uint16_t i = 0; i < n; ++i) {
        rte_mbuf* m = pkts[i];
        if (m->nb_segs > 1 && !pull_up(m, kHeadBytes)) [[unlikely]] {
            count_drop(ctx, dp::DropReason::chain_unreadable);
            out.push(EthEdge::drop, m);
            continue;
        }
        if (m->port >= snap.n_ports || rte_pktmbuf_data_len(m) < sizeof(rte_ether_hdr))
            [[unlikely]] {
            count_drop(ctx, dp::DropReason::runt);
            out.push(EthEdge::drop, m);
            continue;
        }
        const auto* eth = rte_pktmbuf_mtod(m, const rte_ether_hdr*);
        const dp::PortView& pv = snap.ports[m->port];
        const bool in_group = pv.l2_group != dp::kNoGroup;
        // The fast path: IPv4 to a routed port's own MAC (nothing to learn there). Everything
        // else takes the general checks below, which give this case the same edge.
        uint64_t head;
        std::memcpy(&head, eth, sizeof head);  // the frame holds an Ethernet header (above)
        if (!in_group && head_is_port_mac(head, pv.mac_and_mtu()) &&
            eth->ether_type == rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4)) [[likely]] {
            out.push(EthEdge::ipv4, m);
            continue;
        }
        if (in_group && rte_is_unicast_ether_addr(&eth->src_addr) &&
            !rte_is_zero_ether_addr(&eth->src_addr)) {
            l2_learn(ctx, snap, eth->src_addr, static_cast<uint16_t>(pv.l2_group), m->port);
        }
        const uint16_t type = rte_be_to_cpu_16(eth->ether_type);
        if (frame_is_to_switch(snap, pv, m->port, head, eth->dst_addr)) [[likely]] {
            if (type == RTE_ETHER_TYPE_IPV4) [[likely]] {
                out.push(EthEdge::ipv4, m);
            } else if (type == RTE_ETHER_TYPE_ARP) {
                out.push(EthEdge::arp, m);
            } else if (type == wire::kBierEthertype) {
                out.push(EthEdge::bier, m);
            } else if (type == RTE_ETHER_TYPE_IPV6 && pv.n_addrs6 != 0) {
                out.push(EthEdge::ipv6, m);  // a port without IPv6 addresses does no IPv6
            } else {
                count_drop(ctx, dp::DropReason::unsupported_ethertype);
                out.push(EthEdge::drop, m);
            }
        } else if (type == RTE_ETHER_TYPE_ARP && rte_is_broadcast_ether_addr(&eth->dst_addr)) {
            out.push(EthEdge::arp, m);
        } else if (type == RTE_ETHER_TYPE_IPV6 && pv.solicited_node_mac6(eth->dst_addr)) {
            out.push(EthEdge::ipv6, m);  // ND to us: only routed ports have IPv6 addresses
        } else if (in_group) {
            out.push(EthEdge::bridge, m);
        } else if (type == RTE_ETHER_TYPE_IPV4 && !snap.bifts.empty() &&
                   is_ipv4_multicast_mac(eth->dst_addr)) {
            out.push(EthEdge::mcast, m);
        } else {
            count_drop(ctx, dp::DropReason::not_for_us);
            out.push(EthEdge::drop, m);
        }
    }
}

}  // namespace ina::pipeline
