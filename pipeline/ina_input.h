// SPDX-License-Identifier: Apache-2.0
// In-Network Aggregation on the packet path (draft-song-ina-00, docs/protocol.md). IPv4 packets
// that are UDP to the INA port and parse as INA data for a job of this switch go through the
// job's per-lcore chunk table; the table's verdict decides: consumed, routed on untouched,
// forwarded with the fallback flag, rejected, or completed — then this stage writes the partial
// result (aggregator, to the parent) or the result (root, to each worker) into mbufs and hands
// them to routing like any other packet. Everything else passes through to routing unmodified.
#pragma once

#include "pipeline/context.h"

namespace ina::pipeline {

enum class InaEdge : uint8_t {
    route,  // to ipv4_forward: ordinary traffic, untouched INA, fallbacks, emitted packets
    bier,   // to bier_encap_results: a root's result for its workers, to go out over BIER
    drop,   // consumed (absorbed) or dropped; any drop reason already counted
    count
};

// Room the route edge keeps for one packet's emissions (a root's result fan-out).
inline constexpr uint16_t kInaEmitReserve = 1 + dp::kMaxUnicastWorkers;

// Processes packets from the front of `pkts` and returns how many it consumed; it stops early
// when the route edge could not take another packet's emissions, so the caller drains `out`
// and calls again with the rest. Input frames are IPv4 to this switch's MAC.
uint16_t ina_input(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n,
                   EdgeBatches<InaEdge>& out);

}  // namespace ina::pipeline
