// SPDX-License-Identifier: Apache-2.0
// BFIR stage: packets this switch puts on BIER. Two sources, one entry each:
//   - INA results of a root job with `results: bier` (built by ina_input): the BitString is the
//     root's A-BM (draft-song-ina-00), one packet per set; the entropy is the chunk's sequence
//     number, so ECMP spreads a job's chunks over the paths.
//   - IPv4 multicast to a configured BIER group: one packet per set of the group's BFR-ids.
// Each becomes RFC 8296 over Ethernet (Proto IPv4, BFIR-id = bier.bfr_id, TTL = bier.ttl) and goes
// through bier_forward like a received packet.
#pragma once

#include "pipeline/context.h"

namespace ina::pipeline {

enum class BierEncapEdge : uint8_t {
    drop,  // consumed (its copies are on their way) or dropped; reasons already counted
    count
};

// Frames (Ethernet + IPv4 + UDP + INA result) emitted by ina_input for a root with BIER results.
void bier_encap_results(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n,
                        EdgeBatches<BierEncapEdge>& out);

// IPv4 frames to a multicast MAC received on a routed port.
void bier_encap_groups(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n,
                       EdgeBatches<BierEncapEdge>& out);

}  // namespace ina::pipeline
