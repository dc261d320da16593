// SPDX-License-Identifier: Apache-2.0
// The graph: how the stages' edges connect. A received burst runs to completion here.
//
//   eth_input ─┬─ arp ───► arp_input ──┬─ (reply) ─────────────────────────────► port_tx
//              │                       └─ bridge ──────────────────────────┐
//              ├─ ipv4 ──► ina_input ──┬─ route ─► ipv4_forward ─┬─ (routed) ─► port_tx
//              │            (absorbed, │  (incl. emitted        └─ local ─► local_input ─► port_tx
//              │             consumed) │   partials/results)                  │
//              ├─ bridge ──────────────┼──────────────────────────────────────┴► l2_bridge ─► port_tx
//              └─ drop ─► free ◄───────┘ (every stage's drop edge ends here)
#pragma once

#include "pipeline/context.h"

namespace ina::pipeline {

// All packets arrived on the port in their m->port. On return every mbuf has been enqueued for
// TX or freed.
void process_burst(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n);

}  // namespace ina::pipeline
