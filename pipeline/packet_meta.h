// SPDX-License-Identifier: Apache-2.0
// Per-packet metadata the classifier writes once (pipeline/classify.h) and later stages read
// instead of parsing headers again. It lives in an mbuf dynamic field, so it travels with the
// packet (through a hand-off ring, into rte_pktmbuf_copy's copies); a dynamic flag in ol_flags
// says it is valid, and RX, rte_pktmbuf_alloc and a stage that rebuilds a packet all clear
// ol_flags, so stale metadata is never taken for this packet's.
#pragma once

#include <rte_mbuf.h>
#include <rte_mbuf_dyn.h>

#include <cstdint>

namespace ina::pipeline {

inline constexpr uint8_t kMetaFragment = 1;  // a fragment: no L4 header was read
inline constexpr uint8_t kMetaUdpSound = 2;  // UDP whose length agrees with the IP packet
inline constexpr uint8_t kMetaIpv6 = 4;      // IPv6: l3_verdict is ipv6_check's, proto the next header

struct PacketMeta {
    uint16_t l3_offset = 0;  // the IPv4 or IPv6 header, from the start of the frame
    // The L4 header (l3_offset + IHL, or + 40 for IPv6 when the next header is UDP: extension
    // headers are not walked); valid when l3_verdict is sound.
    uint16_t l4_offset = 0;
    uint16_t l4_length = 0;  // UDP: the datagram's length, header included, when kMetaUdpSound
    uint16_t udp_dport = 0;  // UDP destination port, host order; 0 when not read
    uint8_t proto = 0;       // IPv4 protocol or IPv6 next header
    uint8_t feature = 0;     // dp::kFeature* the registration table gave (kFeatureNone: none)
    uint8_t l3_verdict = 0;  // dp::DropReason of the IP header check; DropReason::count: sound
    uint8_t flags = 0;       // kMeta*
};

// Registered by register_mbuf_flags (pipeline/mbuf_chain.h). Until then no packet is classified
// (the flag is 0), and stages parse for themselves.
inline int g_meta_offset = -1;
inline uint64_t g_classified_flag = 0;

inline bool register_packet_meta() {
    static const rte_mbuf_dynfield field = {"inaswitch_packet_meta", sizeof(PacketMeta),
                                            alignof(PacketMeta), 0};
    static const rte_mbuf_dynflag flag = {"inaswitch_classified", 0};
    const int offset = rte_mbuf_dynfield_register(&field);
    const int bit = rte_mbuf_dynflag_register(&flag);
    if (offset < 0 || bit < 0) {
        return false;
    }
    g_meta_offset = offset;
    g_classified_flag = uint64_t{1} << bit;
    return true;
}

// The packet's metadata, for the classifier to fill. Only after register_packet_meta().
inline PacketMeta& meta_of(rte_mbuf* m) {
    return *RTE_MBUF_DYNFIELD(m, g_meta_offset, PacketMeta*);
}

// The packet's metadata if the classifier filled it, else nullptr.
inline const PacketMeta* classified(const rte_mbuf* m) {
    if ((m->ol_flags & g_classified_flag) == 0) {  // always so before registration
        return nullptr;
    }
    return RTE_MBUF_DYNFIELD(m, g_meta_offset, const PacketMeta*);
}

// Stores `pm` as m's metadata and flags m classified: what a stage that checked the frame itself
// (FeatureStage::input_unchecked) does before the frame leaves it unmodified or for another
// lcore. Only after register_packet_meta().
inline void store_meta(rte_mbuf* m, const PacketMeta& pm) {
    m->ol_flags |= g_classified_flag;
    *RTE_MBUF_DYNFIELD(m, g_meta_offset, PacketMeta*) = pm;
}

// The feature handle of a classified packet; kFeatureNone (0) for any other.
inline uint8_t feature_of(const rte_mbuf* m) {
    const PacketMeta* pm = classified(m);
    return pm != nullptr ? pm->feature : 0;
}

}  // namespace ina::pipeline
