// SPDX-License-Identifier: Apache-2.0
// IPv4 routing: header validation, LPM lookup, neighbour resolution, TTL decrement with an
// incremental checksum update (RFC 1624), MAC rewrite and enqueue on the egress port.
#pragma once

#include "pipeline/context.h"

namespace ina::pipeline {

enum class Ipv4Edge : uint8_t {
    local,  // destination is one of the switch's own addresses
    drop,   // reason already counted
    count
};

void ipv4_forward(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n,
                  EdgeBatches<Ipv4Edge>& out);

// Validates the IPv4 header of a frame whose Ethernet header is at the mbuf's data offset.
// Returns the reason to drop it, or DropReason::count if it is sound.
dp::DropReason ipv4_check(const rte_mbuf* m);

}  // namespace ina::pipeline
