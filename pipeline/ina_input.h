// SPDX-License-Identifier: Apache-2.0
// In-Network Aggregation on the packet path (draft-song-ina-00, docs/protocol.md), a feature
// stage. IPv4 packets the classifier bound to INA (UDP to the INA port) that parse as INA data
// for a job of this switch go through the job's per-lcore chunk table; the table's verdict
// decides: consumed, routed on untouched, forwarded with the fallback flag, rejected, or
// completed — then this stage writes the partial result (aggregator, to the parent) or the
// result (root, to each worker) into mbufs and hands them to routing like any other packet.
// Everything else passes on unmodified.
#pragma once

#include "pipeline/feature_stages.h"

namespace ina::pipeline {

// Most packets one contribution puts on the edges (a unicast root's result fan-out).
inline constexpr uint16_t kInaEmitReserve = 1 + dp::kMaxUnicastWorkers;

// The INA feature stage (FeatureStage "ina", dp::kFeatureIna): input frames are IPv4 to this
// switch's MAC, classified UDP to the INA port. Untouched packets go to `pass`; partials and
// results to FeatureEdge::route, a root's BIER result to FeatureEdge::bier. Returns how many
// inputs it took: it stops when the edges have no room for one more contribution's emissions.
uint16_t ina_input(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n,
                   FeatureEdge pass, EdgeBatches<FeatureEdge>& out);

// The same stage on the routed IPv4 path's frames unclassified, while INA is the path's one
// feature (FeatureStage::input_unchecked): classify's checks and binding run here, in the
// stage's own loop, and only frames it does not consume get their metadata stored (those not
// INA's go to FeatureEdge::route).
uint16_t ina_input_unchecked(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts,
                             uint16_t n, FeatureEdge pass, EdgeBatches<FeatureEdge>& out);

// Contributions another lcore handed to this one, their chunk's owner (FeatureStage::
// input_handed): checked and parsed there, their metadata in the mbuf. What depends on this
// lcore's table — the job's ingress and header checks, the UDP checksum, the aggregation — runs
// here; the sender read no payload.
uint16_t ina_input_handed(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts,
                          uint16_t n, FeatureEdge pass, EdgeBatches<FeatureEdge>& out);

// Enqueues the burst's hand-offs, one rte_ring_sp_enqueue_burst per owner (FeatureStage::flush).
// What a full ring does not take is dropped and counted (dp::DropReason::ina_handoff_full) and
// stays counted in ina_packets here; what it takes counts in ina_handed_off (its owner counts
// it in ina_packets).
void ina_flush_handoffs(LcoreContext& ctx);

}  // namespace ina::pipeline
