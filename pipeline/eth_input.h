// SPDX-License-Identifier: Apache-2.0
// First stage: classify frames by destination MAC and ethertype.
#pragma once

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

// Ingress port is m->port. Learns source MACs on L2-group ports.
void eth_input(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n,
               EdgeBatches<EthEdge>& out);

}  // namespace ina::pipeline
