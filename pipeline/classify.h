// SPDX-License-Identifier: Apache-2.0
// Classify once: right after eth_input, one pass over a batch of frames fills every frame's
// PacketMeta (pipeline/packet_meta.h): the IPv4 header verdict, L3/L4 offsets, protocol, UDP
// destination port and length, and the feature handle the snapshot's registration table
// (dp::FeatureTable) gives (protocol, port) on this path. Later stages read the metadata instead
// of parsing again: ipv4_forward takes the verdict, a feature stage the offsets and lengths.
// Nothing is dropped or changed here; malformed UDP is counted by reason (udp_malformed).
#pragma once

#include "pipeline/context.h"

namespace ina::pipeline {

// `scope` is dp::kScopeRouted for IPv4 frames to the switch (eth_input's ipv4 edge),
// dp::kScopeRouted6 for IPv6 ones (its ipv6 edge), or dp::kScopeBridged for frames the switch
// bridges (any ethertype; only IPv4 gets a feature there). IPv6 frames (any scope) get the IPv6
// verdict, offsets and UDP fields; a feature only with dp::kScopeRouted6.
// Frames passed here must have their first kHeadBytes in the first segment (eth_input did it).
// `features`, when given (n entries), gets each frame's feature handle as it is stored in the
// metadata: the dispatcher groups runs from it without reading the mbufs back (kFeatureNone for
// all when the metadata is not registered).
void classify(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n,
              uint8_t scope, uint8_t* features = nullptr);

}  // namespace ina::pipeline
