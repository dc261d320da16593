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

// A plain bridge's fast path, for frames straight from RX when no binding asks for any path
// (process_burst): when every frame of `pkts` is one that the general path would only learn
// from and bridge — a single-segment frame of at least an Ethernet header on an L2-group port,
// not to the switch, not ARP, not ND to the port — does to each exactly what eth_input
// (l2_learn) and l2_bridge would, through the same functions, and returns n; else touches
// nothing and returns 0 (the general path sends bridged frames after the rest of the burst, so
// a partial run could reorder a port's output). Adds the taken frames' pkt_len to `bytes`.
uint16_t l2_fast_path(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf* const* pkts,
                      uint16_t n, uint64_t& bytes);

// Refreshes a known (mac, group) on `port`, or reports a new or moved one to the control plane.
void l2_learn(LcoreContext& ctx, const dp::Snapshot& snap, const rte_ether_addr& mac,
              uint16_t group, uint16_t port);

}  // namespace ina::pipeline
