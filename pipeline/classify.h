// SPDX-License-Identifier: Apache-2.0
// Classify once: right after eth_input, one pass over a batch of frames fills every frame's
// PacketMeta (pipeline/packet_meta.h): the IPv4 header verdict, L3/L4 offsets, protocol, UDP
// destination port and length, and the feature handle the snapshot's registration table
// (dp::FeatureTable) gives (protocol, port) on this path. Later stages read the metadata instead
// of parsing again: ipv4_forward takes the verdict, a feature stage the offsets and lengths.
// Nothing is dropped or changed here; malformed UDP is counted by reason (udp_malformed).
//
// One walk (issue 10): when the routed IPv4 path has one feature bound and its stage declares
// input_unchecked (FeatureStage), process_burst gives that stage the path's frames unclassified
// and the stage classifies each in its own loop with the code below (classify_ipv4 and the
// registration table through a BindingMemo), so a frame's headers are walked once and the
// fields stay in registers; it stores the metadata (store_meta) of every frame it does not
// consume, so routing and anything after it read the same metadata classify would have stored.
#pragma once

#include <rte_ip.h>
#include <rte_udp.h>

#include "pipeline/context.h"
#include "pipeline/ipv4_forward.h"
#include "pipeline/packet_meta.h"

namespace ina::pipeline {

// The feature the registration table binds a UDP destination port to on one path, remembering
// the last port's answer: the table does not change within a burst, and a burst's datagrams
// mostly share a port, so the scan (~17 instructions) is mostly skipped.
struct BindingMemo {
    const dp::FeatureTable& table;
    uint8_t scope;
    uint32_t port = 0x10000;  // no port: the first lookup scans
    uint8_t feature = dp::kFeatureNone;

    uint8_t feature_for(uint16_t udp_dport) {
        if (udp_dport != port) {
            port = udp_dport;
            feature = table.lookup(dp::kIpProtoUdp, udp_dport, scope);
        }
        return feature;
    }
};

namespace detail {

inline void count_udp_malformed(LcoreContext& ctx, dp::UdpMalformed reason) {
    ++ctx.counters.udp_malformed[static_cast<size_t>(reason)];
}

}  // namespace detail

// The UDP header at pm.l4_offset of an IP packet whose L3 payload (after the IPv4 or IPv6
// header) is `l3_payload` bytes: destination port, and length (kMetaUdpSound when it is what
// the L3 payload leaves: Ethernet padding after the datagram is never payload, and a length
// past the packet reads bytes that are not the datagram's). False, counted, when the header
// is beyond the packet or the gathered head.
[[gnu::always_inline]] inline bool classify_udp(LcoreContext& ctx, PacketMeta& pm,
                                                const rte_mbuf* m, uint16_t l3_payload) {
    if (l3_payload < sizeof(rte_udp_hdr) ||
        pm.l4_offset + sizeof(rte_udp_hdr) > rte_pktmbuf_data_len(m)) [[unlikely]] {
        detail::count_udp_malformed(ctx, dp::UdpMalformed::truncated);
        return false;
    }
    const auto* udp = rte_pktmbuf_mtod_offset(m, const rte_udp_hdr*, pm.l4_offset);
    pm.udp_dport = rte_be_to_cpu_16(udp->dst_port);
    const uint16_t udp_len = rte_be_to_cpu_16(udp->dgram_len);
    if (udp_len < sizeof(rte_udp_hdr)) [[unlikely]] {
        detail::count_udp_malformed(ctx, dp::UdpMalformed::bad_length);
    } else if (udp_len != l3_payload) [[unlikely]] {
        detail::count_udp_malformed(ctx, dp::UdpMalformed::length_mismatch);
    } else {
        pm.flags = static_cast<uint8_t>(pm.flags | kMetaUdpSound);
        pm.l4_length = udp_len;
    }
    return true;
}

// The checks of an IPv4 frame (Ethernet header at the data offset, its first kHeadBytes in the
// first segment): fills `pm` (zeroed, l3_offset the Ethernet header's length; `feature` is
// left alone) with the IPv4 verdict, L4 offset, protocol, and for UDP the port and length, and
// returns true when the frame is a sound, unfragmented IPv4 UDP datagram whose header was read:
// one a (UDP, port) binding may take (its length may still be unsound, flagged). Malformed UDP
// is counted by reason. classify runs it for every IPv4 frame it classifies; a stage with
// input_unchecked for each frame it is given unclassified.
[[gnu::always_inline]] inline bool classify_ipv4(LcoreContext& ctx, PacketMeta& pm,
                                                 const rte_mbuf* m) {
    const dp::DropReason verdict = ipv4_check(m);
    pm.l3_verdict = static_cast<uint8_t>(verdict);
    if (verdict != dp::DropReason::count) [[unlikely]] {
        return false;  // routing drops it by this reason; a bridge forwards it untouched
    }
    const auto* ip = rte_pktmbuf_mtod_offset(m, const rte_ipv4_hdr*, sizeof(rte_ether_hdr));
    const auto ihl = static_cast<uint16_t>((ip->version_ihl & 0x0f) * 4u);
    pm.l4_offset = static_cast<uint16_t>(sizeof(rte_ether_hdr) + ihl);
    pm.proto = ip->next_proto_id;
    if ((ip->fragment_offset & rte_cpu_to_be_16(RTE_IPV4_HDR_MF_FLAG | RTE_IPV4_HDR_OFFSET_MASK)) !=
        0) {
        pm.flags = kMetaFragment;  // a fragment's ports are not the datagram's to classify
        return false;
    }
    if (pm.proto != dp::kIpProtoUdp) {
        return false;
    }
    // ipv4_check found total >= ihl.
    return classify_udp(ctx, pm, m,
                        static_cast<uint16_t>(rte_be_to_cpu_16(ip->total_length) - ihl));
}

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
