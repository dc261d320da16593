// SPDX-License-Identifier: Apache-2.0
// ARP: answers requests for the switch's own addresses in place, reports senders to the control
// plane (which owns the neighbour table), and hands other ARP on L2-group ports to the bridge.
#pragma once

#include "pipeline/context.h"

namespace ina::pipeline {

enum class ArpEdge : uint8_t {
    bridge,  // not for us, arrived on an L2-group port
    drop,    // consumed (a reply to us) or dropped; any drop reason already counted
    count
};

void arp_input(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n,
               EdgeBatches<ArpEdge>& out);

// Port (ingress or a member of its L2 group) that owns `ip`, or -1.
int owner_in_segment(const dp::Snapshot& snap, uint16_t port, uint32_t ip);

}  // namespace ina::pipeline
