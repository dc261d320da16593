// SPDX-License-Identifier: Apache-2.0
// Packets addressed to the switch itself: ICMP echo is answered in place; anything else is
// counted and dropped until a local service (INA, RoCE) claims it.
#pragma once

#include "pipeline/context.h"

namespace ina::pipeline {

enum class LocalEdge : uint8_t {
    drop,  // reason already counted
    count
};

// Input frames have passed ipv4_check.
void local_input(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n,
                 EdgeBatches<LocalEdge>& out);

}  // namespace ina::pipeline
