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

}  // namespace ina::pipeline
