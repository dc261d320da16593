// SPDX-License-Identifier: Apache-2.0
// IPv4 routing: header validation, LPM lookup, neighbour resolution, TTL decrement with an
// incremental checksum update (RFC 1624), MAC rewrite and enqueue on the egress port.
#pragma once

#include <rte_ip.h>

#include "net/checksum.h"
#include "pipeline/context.h"

namespace ina::pipeline {

enum class Ipv4Edge : uint8_t {
    local,  // destination is one of the switch's own addresses
    drop,   // reason already counted
    count
};

void ipv4_forward(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n,
                  EdgeBatches<Ipv4Edge>& out);

// Decrements the TTL (the caller checked it is above 1) and patches the header checksum: TTL
// shares a 16-bit checksum word with the protocol field (RFC 1624).
inline void ipv4_decrement_ttl(rte_ipv4_hdr* ip) {
    const auto old_word = static_cast<uint16_t>(
        rte_cpu_to_be_16(static_cast<uint16_t>(ip->time_to_live << 8 | ip->next_proto_id)));
    --ip->time_to_live;
    const auto new_word = static_cast<uint16_t>(
        rte_cpu_to_be_16(static_cast<uint16_t>(ip->time_to_live << 8 | ip->next_proto_id)));
    ip->hdr_checksum = net::checksum_update16(ip->hdr_checksum, old_word, new_word);
}

// Validates the IPv4 header of a frame whose Ethernet header is at the mbuf's data offset.
// Returns the reason to drop it, or DropReason::count if it is sound.
dp::DropReason ipv4_check(const rte_mbuf* m);

}  // namespace ina::pipeline
