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

// The stage as registered (FeatureStage "ina"): `ina_input`, and its other entries, in
// ina_input.cc: input_unchecked (the routed IPv4 path's frames unclassified while INA is its one
// feature: classify's checks and binding run in the stage's own loop, and only frames it does
// not consume get their metadata stored), input_handed (contributions another lcore handed to
// this one, their chunk's owner: checked and parsed there, their metadata in the mbuf; the
// job's ingress and header checks, the UDP checksum and the aggregation run here — the sender
// read no payload), and flush (the burst's hand-offs, one rte_ring_sp_enqueue_burst per owner;
// what a full ring refuses is dropped as dp::DropReason::ina_handoff_full and stays counted in
// ina_packets on the sender, what it takes counts in ina_handed_off and in ina_packets on the
// owner), and its tick (chunk-table expiry).
FeatureStage ina_stage();

}  // namespace ina::pipeline
