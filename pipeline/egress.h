// SPDX-License-Identifier: Apache-2.0
// The egress step: the one call through which every stage (routing, local replies, the bridge,
// ARP, BIER copies, the control plane's packets) hands a packet to a port. A per-packet egress
// feature (ICRC recompute of a rewritten RoCE packet, ECN marking on a congested port) is added
// here, once, and every path gets it.
#pragma once

#include "pipeline/port_tx.h"

namespace ina::pipeline {

// Queues `m` for transmission on `port`; ownership passes to the TX buffer.
inline void egress(LcoreContext& ctx, uint16_t port, rte_mbuf* m) { tx_enqueue(ctx, port, m); }

}  // namespace ina::pipeline
