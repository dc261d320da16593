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

void count_udp_malformed(LcoreContext& ctx, dp::UdpMalformed reason) {
    ++ctx.counters.udp_malformed[static_cast<size_t>(reason)];
}

// The UDP header at pm.l4_offset of an IP packet whose L3 payload (after the IPv4 or IPv6
// header) is `l3_payload` bytes: destination port, and length (kMetaUdpSound when it is what
// the L3 payload leaves: Ethernet padding after the datagram is never payload, and a length
// past the packet reads bytes that are not the datagram's). False, counted, when the header
// is beyond the packet or the gathered head.
[[gnu::always_inline]] inline bool classify_udp(LcoreContext& ctx, PacketMeta& pm,
                                                const rte_mbuf* m, uint16_t l3_payload) {
    if (l3_payload < sizeof(rte_udp_hdr) ||
        pm.l4_offset + sizeof(rte_udp_hdr) > rte_pktmbuf_data_len(m)) [[unlikely]] {
        count_udp_malformed(ctx, dp::UdpMalformed::truncated);
        return false;
    }
    const auto* udp = rte_pktmbuf_mtod_offset(m, const rte_udp_hdr*, pm.l4_offset);
    pm.udp_dport = rte_be_to_cpu_16(udp->dst_port);
    const uint16_t udp_len = rte_be_to_cpu_16(udp->dgram_len);
    if (udp_len < sizeof(rte_udp_hdr)) [[unlikely]] {
        count_udp_malformed(ctx, dp::UdpMalformed::bad_length);
    } else if (udp_len != l3_payload) [[unlikely]] {
        count_udp_malformed(ctx, dp::UdpMalformed::length_mismatch);
    } else {
        pm.flags = static_cast<uint8_t>(pm.flags | kMetaUdpSound);
        pm.l4_length = udp_len;
    }
    return true;
}

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
// read them again per frame), and the binding the last UDP port found (the table does not
// change within a call, and a burst's datagrams mostly share a port: the scan is skipped).
struct Pass {
    const dp::FeatureTable& table;
    bool lookup;
    uint8_t scope;
    int meta_offset;
    uint64_t classified_flag;
    uint32_t memo_port = 0x10000;  // no port: the first lookup scans
    uint8_t memo_feature = dp::kFeatureNone;
};

// Fills m's metadata in place and returns its feature handle. (Field by field into the mbuf:
// the 16 bytes built in registers and stored once took ~30 more instructions a packet.)
[[gnu::always_inline]] inline uint8_t classify_one(LcoreContext& ctx, Pass& pass, rte_mbuf* m) {
    const dp::FeatureTable& table = pass.table;
    const bool lookup = pass.lookup;
    const uint8_t scope = pass.scope;
    m->ol_flags |= pass.classified_flag;
    PacketMeta& pm = *RTE_MBUF_DYNFIELD(m, pass.meta_offset, PacketMeta*);
    pm = PacketMeta{};
    pm.l3_offset = kL2;
    const uint16_t ether_type = rte_pktmbuf_mtod(m, const rte_ether_hdr*)->ether_type;
    if (ether_type == rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV6)) {
        classify_ipv6(ctx, table, scope == dp::kScopeRouted6 && lookup, pm, m);
        return pm.feature;
    }
    if (scope == dp::kScopeBridged && ether_type != rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4)) {
        pm.l3_verdict = static_cast<uint8_t>(dp::DropReason::ipv4_malformed);  // not IPv4 at all
        return dp::kFeatureNone;
    }
    const dp::DropReason verdict = ipv4_check(m);
    pm.l3_verdict = static_cast<uint8_t>(verdict);
    if (verdict != dp::DropReason::count) [[unlikely]] {
        // Routing drops it by this reason; a bridge forwards it untouched.
        return dp::kFeatureNone;
    }
    const auto* ip = rte_pktmbuf_mtod_offset(m, const rte_ipv4_hdr*, kL2);
    const auto ihl = static_cast<uint16_t>((ip->version_ihl & 0x0f) * 4u);
    pm.l4_offset = static_cast<uint16_t>(kL2 + ihl);
    pm.proto = ip->next_proto_id;
    if ((ip->fragment_offset & rte_cpu_to_be_16(RTE_IPV4_HDR_MF_FLAG | RTE_IPV4_HDR_OFFSET_MASK)) !=
        0) {
        pm.flags = kMetaFragment;  // a fragment's ports are not the datagram's to classify
        return dp::kFeatureNone;
    }
    if (pm.proto != dp::kIpProtoUdp) {
        return dp::kFeatureNone;
    }
    // ipv4_check found total >= ihl.
    if (!classify_udp(ctx, pm, m,
                      static_cast<uint16_t>(rte_be_to_cpu_16(ip->total_length) - ihl)))
        [[unlikely]] {
        return dp::kFeatureNone;
    }
    // An unsound datagram still reaches the feature bound to its port, flagged: the feature
    // counts it as its own kind of garbage and passes it on unmodified.
    if (lookup) {
        const uint16_t port = pm.udp_dport;
        if (port != pass.memo_port) {
            pass.memo_port = port;
            pass.memo_feature = table.lookup(dp::kIpProtoUdp, port, scope);
        }
        pm.feature = pass.memo_feature;
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
    const Pass pass{table, (table.scopes & scope) != 0, scope, g_meta_offset, g_classified_flag};
    if (features != nullptr) {
        classify_all<true>(ctx, pass, pkts, n, features);
    } else {
        classify_all<false>(ctx, pass, pkts, n, nullptr);
    }
}

}  // namespace ina::pipeline
