// SPDX-License-Identifier: Apache-2.0
// BFR / BFER stage: frames of ethertype 0xAB37 addressed to this switch. The BIFT-id selects a
// BIFT, which gives the BitString length (RFC 8296: never inferred from the BSL field, which must
// agree with it); the TTL is decremented once; then bier_forward makes one copy per neighbour and
// delivers the own bits. Malformed headers are counted per BIFT by reason and dropped.
#pragma once

#include "pipeline/context.h"

namespace ina::pipeline {

enum class BierEdge : uint8_t {
    drop,  // consumed (its copies are on their way) or dropped; reasons already counted
    count
};

void bier_input(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n,
                EdgeBatches<BierEdge>& out);

}  // namespace ina::pipeline
