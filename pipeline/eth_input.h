// SPDX-License-Identifier: Apache-2.0
// First stage: classify frames by destination MAC and ethertype.
#pragma once

#include <rte_ether.h>

#include <bit>
#include <cstdint>

#include "pipeline/context.h"

namespace ina::pipeline {

enum class EthEdge : uint8_t {
    arp,     // ARP to us or broadcast: answer, learn, or bridge
    ipv4,    // IPv4 to our MAC: route or deliver locally
    bridge,  // frame on an L2-group port not addressed to us
    bier,    // BIER (ethertype 0xAB37) to our MAC: replicate, deliver own bits
    mcast,   // IPv4 multicast on a routed port of a BIER switch: the BFIR of its group, if any
    ipv6,    // IPv6 to our MAC on a port with IPv6 addresses, or ND to one's solicited-node group
    drop,    // reason already counted
    count
};

// True when the frame's first eight bytes `head` start with the MAC of `port_mac_mtu`
// (PortView::mac_and_mtu): one 48-bit compare on a little-endian host.
inline bool head_is_port_mac(uint64_t head, uint64_t port_mac_mtu) {
    static_assert(std::endian::native == std::endian::little,
                  "PortView::mac_and_mtu puts the MAC in the low 48 bits only there");
    return ((head ^ port_mac_mtu) << 16) == 0;
}

// True when a frame arriving on `port` (its view `pv`), destination `dst`, first eight bytes
// `head`, is addressed to the switch: the port's own MAC, or on an L2-group port any member's
// MAC (one router per segment; the scan runs only for group ports and stops at the first
// match). eth_input and l2_fast_path both decide with this one function, so the fast path can
// never bridge a frame eth_input would keep.
inline bool frame_is_to_switch(const dp::Snapshot& snap, const dp::PortView& pv, uint16_t port,
                               uint64_t head, const rte_ether_addr& dst) {
    return head_is_port_mac(head, pv.mac_and_mtu()) ||
           (pv.l2_group != dp::kNoGroup && rte_is_unicast_ether_addr(&dst) &&
            snap.find_in_segment(port, [&](uint16_t p) {
                return head_is_port_mac(head, snap.ports[p].mac_and_mtu());
            }) >= 0);
}

// Ingress port is m->port. Learns source MACs on L2-group ports.
void eth_input(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n,
               EdgeBatches<EthEdge>& out);

}  // namespace ina::pipeline
