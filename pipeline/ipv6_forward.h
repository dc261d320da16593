// SPDX-License-Identifier: Apache-2.0
// IPv6 routing: header verdict (the classifier's), LPM6 lookup, neighbour resolution by ND (a
// Neighbor Solicitation sent from here, rate-limited per address; the packet is dropped and
// counted meanwhile, as IPv4 does while ARP resolves), hop-limit decrement (at 1: a counted
// drop, hop_limit_exceeded; no ICMPv6 time exceeded is sent, as IPv4 sends no ICMP either),
// MAC rewrite and egress. ND to the switch's solicited-node groups and packets to its own
// addresses leave on the `local` edge.
#pragma once

#include "pipeline/context.h"

namespace ina::pipeline {

enum class Ipv6Edge : uint8_t {
    local,  // to one of the switch's addresses, or ND to its solicited-node groups
    drop,   // reason already counted
    count
};

// Frames are IPv6 (ethertype 0x86DD) with their headers in the first segment (eth_input).
void ipv6_forward(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n,
                  EdgeBatches<Ipv6Edge>& out);

// Sends a Neighbor Solicitation for `target` out of `port` unless one went within the ARP
// request interval (per lcore): the switch's way to resolve an IPv6 next hop.
void nd_solicit(LcoreContext& ctx, const dp::Snapshot& snap, const uint8_t* target,
                uint16_t port);

}  // namespace ina::pipeline
