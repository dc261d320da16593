// SPDX-License-Identifier: Apache-2.0
// IPv6 on the packet path, shared by the classifier and the IPv6 stages: the fused header
// check, the ICMPv6 pseudo-header sum, and the Neighbor Discovery frames the switch builds
// (RFC 4861: a Neighbor Solicitation to resolve a next hop, an Advertisement to answer one).
#pragma once

#include <rte_ether.h>
#include <rte_ip.h>

#include <cstdint>
#include <cstring>

#include "net/checksum.h"
#include "pipeline/context.h"
#include "pipeline/egress.h"
#include "pipeline/originate.h"

namespace ina::pipeline {

inline constexpr uint8_t kIpProtoIcmp6 = 58;
inline constexpr uint8_t kIcmp6EchoRequest = 128;
inline constexpr uint8_t kIcmp6EchoReply = 129;
inline constexpr uint8_t kNdSolicit = 135;
inline constexpr uint8_t kNdAdvert = 136;
inline constexpr uint8_t kNdOptSourceMac = 1;
inline constexpr uint8_t kNdOptTargetMac = 2;
inline constexpr uint8_t kNdHopLimit = 255;  // RFC 4861: ND is never forwarded
inline constexpr uint32_t kNaRouter = 0x80000000u;
inline constexpr uint32_t kNaSolicited = 0x40000000u;
inline constexpr uint32_t kNaOverride = 0x20000000u;
// ICMPv6 header (4) + reserved/flags (4) + target (16): an NS or NA without options.
inline constexpr uint32_t kNdBodyBytes = 24;
// Ethernet + IPv6 + ND body + one link-layer address option (8): every frame built here.
inline constexpr size_t kNdFrameBytes = sizeof(rte_ether_hdr) + sizeof(rte_ipv6_hdr) + kNdBodyBytes + 8;

// Validates the IPv6 header of a frame whose Ethernet header is at the data offset: version 6,
// the fixed header in the first segment, the payload inside the frame. DropReason::count if
// sound. The hop limit is routing's to check (a packet to the switch may arrive with 1).
[[gnu::always_inline]] inline dp::DropReason ipv6_check(const rte_mbuf* m) {
    constexpr uint32_t kL2 = sizeof(rte_ether_hdr);
    if (rte_pktmbuf_data_len(m) < kL2 + sizeof(rte_ipv6_hdr)) [[unlikely]] {
        return dp::DropReason::ipv6_malformed;
    }
    const auto* ip = rte_pktmbuf_mtod_offset(m, const rte_ipv6_hdr*, kL2);
    if ((rte_be_to_cpu_32(ip->vtc_flow) >> 28) != 6) [[unlikely]] {
        return dp::DropReason::ipv6_malformed;
    }
    if (kL2 + sizeof(rte_ipv6_hdr) + rte_be_to_cpu_16(ip->payload_len) > rte_pktmbuf_pkt_len(m))
        [[unlikely]] {
        return dp::DropReason::ipv6_bad_length;
    }
    return dp::DropReason::count;
}

// The folded one's-complement sum of the IPv6 pseudo-header (RFC 8200 8.1) of an upper-layer
// packet of `len` bytes with next header `proto`.
inline uint16_t ipv6_pseudo_sum(const uint8_t* src, const uint8_t* dst, uint32_t len,
                                uint8_t proto) {
    const uint8_t tail[8] = {static_cast<uint8_t>(len >> 24), static_cast<uint8_t>(len >> 16),
                             static_cast<uint8_t>(len >> 8),  static_cast<uint8_t>(len),
                             0, 0, 0, proto};
    uint32_t s = net::ones_complement_sum(src, 16);
    s += net::ones_complement_sum(dst, 16);
    s += net::ones_complement_sum(tail, 8);
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    return static_cast<uint16_t>(s);
}

inline bool is_unspecified6(const uint8_t* a) {
    static constexpr uint8_t kZero[16] = {};
    return std::memcmp(a, kZero, 16) == 0;
}

// ff02::1:ffXX:XXXX for `ip6` (RFC 4291 2.7.1), and its MAC 33:33:ff:XX:XX:XX (RFC 2464 7).
inline void solicited_node_of(const uint8_t* ip6, uint8_t* group) {
    static constexpr uint8_t kPrefix[13] = {0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff};
    std::memcpy(group, kPrefix, 13);
    std::memcpy(group + 13, ip6 + 13, 3);
}
inline rte_ether_addr multicast_mac6(const uint8_t* group) {
    return rte_ether_addr{{0x33, 0x33, group[12], group[13], group[14], group[15]}};
}

// What one ND frame carries.
struct NdFrame {
    uint8_t type = kNdSolicit;  // kNdSolicit or kNdAdvert
    uint32_t flags = 0;         // NA: kNa* bits
    rte_ether_addr eth_src{};
    rte_ether_addr eth_dst{};
    const uint8_t* ip_src = nullptr;
    const uint8_t* ip_dst = nullptr;
    const uint8_t* target = nullptr;
    // The one option: source (NS) or target (NA) link-layer address, always eth_src.
};

// Writes `f` as a complete frame (hop limit 255, ICMPv6 checksum set) into `buf`, which has
// room for kNdFrameBytes; returns the frame's length.
inline size_t build_nd_frame(const NdFrame& f, uint8_t* buf) {
    auto* eth = reinterpret_cast<rte_ether_hdr*>(buf);
    eth->dst_addr = f.eth_dst;
    eth->src_addr = f.eth_src;
    eth->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV6);
    auto* ip = reinterpret_cast<rte_ipv6_hdr*>(eth + 1);
    constexpr uint32_t kLen = kNdBodyBytes + 8;
    ip->vtc_flow = rte_cpu_to_be_32(6u << 28);
    ip->payload_len = rte_cpu_to_be_16(kLen);
    ip->proto = kIpProtoIcmp6;
    ip->hop_limits = kNdHopLimit;
    std::memcpy(ip->src_addr, f.ip_src, 16);
    std::memcpy(ip->dst_addr, f.ip_dst, 16);
    uint8_t* icmp = reinterpret_cast<uint8_t*>(ip + 1);
    icmp[0] = f.type;
    icmp[1] = 0;
    icmp[2] = 0;
    icmp[3] = 0;
    const uint32_t flags_be = rte_cpu_to_be_32(f.flags);
    std::memcpy(icmp + 4, &flags_be, 4);
    std::memcpy(icmp + 8, f.target, 16);
    icmp[24] = f.type == kNdSolicit ? kNdOptSourceMac : kNdOptTargetMac;
    icmp[25] = 1;  // in units of 8 octets
    std::memcpy(icmp + 26, f.eth_src.addr_bytes, 6);
    const uint32_t sum = uint32_t{ipv6_pseudo_sum(ip->src_addr, ip->dst_addr, kLen,
                                                  kIpProtoIcmp6)};
    const uint16_t cksum = static_cast<uint16_t>(~net::ones_complement_sum(icmp, kLen, sum));
    std::memcpy(icmp + 2, &cksum, 2);
    return kNdFrameBytes;
}

// Builds `f` and sends it out of `port` in a fresh mbuf (marked originated); false, counted as
// nd_no_mbuf, when the lcore has no pool or the pool is dry.
inline bool send_nd_frame(LcoreContext& ctx, const NdFrame& f, uint16_t port) {
    uint8_t frame[kNdFrameBytes];
    const size_t len = build_nd_frame(f, frame);
    rte_mbuf* m = ctx.pool != nullptr ? originated_frame(ctx.pool, frame, len, port) : nullptr;
    if (m == nullptr) [[unlikely]] {
        count_drop(ctx, dp::DropReason::nd_no_mbuf);
        return false;
    }
    egress(ctx, port, m);
    return true;
}

}  // namespace ina::pipeline
