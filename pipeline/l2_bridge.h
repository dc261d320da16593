// SPDX-License-Identifier: Apache-2.0
// L2 forwarding inside a port group: FDB lookup, flooding of broadcast, multicast and unknown
// unicast, and source learning. The FDB lives in the snapshot; learning posts an event to the
// control plane, which owns the table and its ageing.
#pragma once

#include "pipeline/context.h"

namespace ina::pipeline {

enum class BridgeEdge : uint8_t {
    drop,  // reason already counted
    count
};

// Sends each frame (ingress m->port, a member of an L2 group) to its FDB port or floods it.
void l2_bridge(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n,
               EdgeBatches<BridgeEdge>& out);

// Refreshes a known (mac, group) on `port`, or reports a new or moved one to the control plane.
void l2_learn(LcoreContext& ctx, const dp::Snapshot& snap, const rte_ether_addr& mac,
              uint16_t group, uint16_t port);

}  // namespace ina::pipeline
