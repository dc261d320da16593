// SPDX-License-Identifier: Apache-2.0
#include "pipeline/classify.h"

#include <rte_ip.h>
#include <rte_udp.h>

#include <cstring>

#include "pipeline/ipv4_forward.h"
#include "pipeline/ipv6.h"
#include "pipeline/packet_meta.h"

namespace ina::pipeline {

namespace {

constexpr uint16_t kL2 = sizeof(rte_ether_hdr);

// IPv6: the fused header check, and UDP right after the fixed header (extension headers are
// not walked: such a packet has no L4 fields here). IPv6 UDP to the switch's MAC gets the
// feature bound to its port for IPv6 (dp::kScopeRouted6), by the same table as IPv4; a feature
// whose binding lacks that scope never sees IPv6, and bridged IPv6 gets none (`lookup` false).
void classify_ipv6(LcoreContext& ctx, const dp::FeatureTable& table, bool lookup, PacketMeta& pm,
                   const rte_mbuf* m) {
    pm.flags = kMetaIpv6;
    const dp::DropReason verdict = ipv6_check(m);
    pm.l3_verdict = static_cast<uint8_t>(verdict);
    if (verdict != dp::DropReason::count) [[unlikely]] {
        return;
    }
    const auto* ip = rte_pktmbuf_mtod_offset(m, const rte_ipv6_hdr*, kL2);
    pm.proto = ip->proto;
    if (pm.proto != dp::kIpProtoUdp) {
        return;
    }
    pm.l4_offset = static_cast<uint16_t>(kL2 + sizeof(rte_ipv6_hdr));
    if (classify_udp(ctx, pm, m, rte_be_to_cpu_16(ip->payload_len)) && lookup) {
        pm.feature = table.lookup(dp::kIpProtoUdp, pm.udp_dport, dp::kScopeRouted6);
    }
}

// What one classify call keeps across its frames, in registers: the metadata's place and flag
// (read once: the byte stores into the metadata may alias any global, so the compiler would
// read them again per frame), and the binding the last UDP port found (BindingMemo).
struct Pass {
    bool lookup;
    uint8_t scope;
    int meta_offset;
    uint64_t classified_flag;
    BindingMemo binding;
};

// Fills m's metadata in place and returns its feature handle. (Field by field into the mbuf:
// the 16 bytes built in registers and stored once took ~30 more instructions a packet.)
[[gnu::always_inline]] inline uint8_t classify_one(LcoreContext& ctx, Pass& pass, rte_mbuf* m) {
    const bool lookup = pass.lookup;
    const uint8_t scope = pass.scope;
    m->ol_flags |= pass.classified_flag;
    PacketMeta& pm = *RTE_MBUF_DYNFIELD(m, pass.meta_offset, PacketMeta*);
    pm = PacketMeta{};
    pm.l3_offset = kL2;
    const uint16_t ether_type = rte_pktmbuf_mtod(m, const rte_ether_hdr*)->ether_type;
    if (ether_type == rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV6)) {
        classify_ipv6(ctx, pass.binding.table, scope == dp::kScopeRouted6 && lookup, pm, m);
        return pm.feature;
    }
    if (scope == dp::kScopeBridged && ether_type != rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4)) {
        pm.l3_verdict = static_cast<uint8_t>(dp::DropReason::ipv4_malformed);  // not IPv4 at all
        return dp::kFeatureNone;
    }
    if (!classify_ipv4(ctx, pm, m)) {
        return dp::kFeatureNone;
    }
    // An unsound datagram still reaches the feature bound to its port, flagged: the feature
    // counts it as its own kind of garbage and passes it on unmodified.
    if (lookup) {
        pm.feature = pass.binding.feature_for(pm.udp_dport);
    }
    return pm.feature;
}

template <bool kRecord>
void classify_all(LcoreContext& ctx, Pass pass, rte_mbuf** pkts, uint16_t n, uint8_t* features) {
    for (uint16_t i = 0; i < n; ++i) {
        const uint8_t feature = classify_one(ctx, pass, pkts[i]);
        if constexpr (kRecord) {
            features[i] = feature;
        }
    }
}

}  // namespace

void classify(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n,
              uint8_t scope, uint8_t* features) {
    if (g_classified_flag == 0) [[unlikely]] {
        if (features != nullptr) {
            std::memset(features, dp::kFeatureNone, n);
        }
        return;  // metadata not registered: stages parse for themselves
    }
    const dp::FeatureTable& table = snap.features;
    const Pass pass{(table.scopes & scope) != 0, scope, g_meta_offset, g_classified_flag,
                    BindingMemo{table, scope}};
    if (features != nullptr) {
        classify_all<true>(ctx, pass, pkts, n, features);
    } else {
        classify_all<false>(ctx, pass, pkts, n, nullptr);
    }
}

}  // namespace ina::pipeline
