// SPDX-License-Identifier: Apache-2.0
// The graph: how the stages' edges connect. A received burst runs to completion here.
//
// With no binding for routed packets (a plain ToR), the burst first meets ipv4_fast_path, which
// forwards its leading run of frames that are only to be routed (─► egress); the rest of the
// burst, from the first frame that needs anything else, enters eth_input below.
//
// eth_input ─┬─ arp ───► arp_input ─┬─ (reply) ────────────────────────────────────► egress
//            │                      └─ bridge ──┐
//            ├─ bridge ─────────────────────────┴─► bridged frames (arrival order)
//            │       ┌──────────────────────────────────┘
//            │       ├─ no binding for bridged frames ───────────────┐
//            │       └─ classify(bridged) ─┬─ no feature ────────────┤
//            │                             └─ stage h ─┬─ pass ──────┤
//            │                                         └─ route ─┐   ▼
//            │                                                   │ l2_bridge ─► egress
//            ├─ ipv4 ──► classify(routed) ─┬─ no feature ────────┤  (FDB port or flood)
//            │                             └─ stage h ─┬─ route ─┤  (passed on, or emitted)
//            │                                         ├─ bridge ──► l2_bridge
//            │                                         ├─ bier ──► bier_encap_results ─┐
//            │                                         └─ drop                         │
//            │                                                   ▼                     │
//            │                                 ipv4_forward ─┬─ (routed) ─► egress     │
//            │                                               └─ local ─► local_input   │
//            │                                                      └─ (reply) ─► egress
//            ├─ ipv6 ──► classify ─► ipv6_forward ─┬─ (routed; NS to resolve) ─► egress
//            │                                     └─ local ─► icmp6_local ─ (NA, echo reply) ─► egress
//            ├─ bier ──► bier_input (BFR/BFER) ─► bier_forward ◄─────────────────────┘
//            ├─ mcast ─► bier_encap_groups (BFIR) ─► bier_forward ─ (copies, own bits) ─► egress
//            └─ drop ──► free (every stage's drop edge ends here, its reason counted)
//
// egress ─► port_tx (per-port TX buffers; rte_eth_tx_burst when full, drained, or on the timer)
//
// Stage h is the FeatureStage registered under the handle the snapshot's registration table gave
// the packet (feature_stages.h; INA today): nothing here names a feature. When every routed IPv4
// binding is one feature's and it has input_unchecked, the ipv4 edge goes to that stage instead
// of classify: it classifies in its own loop (one walk) and routes what is not its own.
// process_handoff: frames another lcore handed over (the chunk's owner is this lcore) go to
// their feature's input_handed, skipping eth_input and classify.
#pragma once

#include "pipeline/context.h"

namespace ina::pipeline {

// All packets arrived on the port in their m->port. On return every mbuf has been enqueued for
// TX or freed.
void process_burst(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n);

// Packets another lcore handed to this one over its hand-off rings (a chunk this lcore owns):
// each goes straight to its feature's input_handed (no eth_input, no classify: the sender did
// both, and the metadata travels in the mbuf), or through process_burst when its feature has
// none. On return every mbuf has been enqueued for TX, freed, or handed on.
void process_handoff(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n);

// process_burst for a burst straight from rte_eth_rx_burst, returning the sum of its frames'
// lengths (pkt_len) for the RX port's byte counter: the fast path adds each length as it reads
// it, so the RX loop makes no pass over the burst of its own.
uint64_t process_rx_burst(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts,
                          uint16_t n);

// Packets a feature originates outside a burst (a timer's retransmissions): complete IPv4 or
// IPv6 frames (IPv6 only from a feature whose binding takes it, dp::kScopeRouted6), routed like
// a stage's `route` edge. On return every mbuf was enqueued for TX or freed.
void route_emitted(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n);

}  // namespace ina::pipeline
