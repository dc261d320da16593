// SPDX-License-Identifier: Apache-2.0
// IPv4 routing: header validation, LPM lookup, neighbour resolution, TTL decrement with an
// incremental checksum update (RFC 1624), MAC rewrite and enqueue on the egress port.
#pragma once

#include <rte_ip.h>

#include <bit>
#include <cstddef>
#include <cstring>

#include "net/checksum.h"
#include "pipeline/context.h"

namespace ina::pipeline {

enum class Ipv4Edge : uint8_t {
    local,  // destination is one of the switch's own addresses
    drop,   // reason already counted
    count
};

// What a burst handed to ipv4_forward may hold: any mix of packets with and without the
// classifier's metadata (its header verdict is taken where present), or only packets the
// classifier never saw (a ToR with no feature on the routed path): then every header is checked
// here without the per-packet metadata test. Either is correct for any input, since the
// metadata's verdict is the same check's; `unclassified` is only cheaper.
enum class Ipv4Input : uint8_t { any, unclassified };

void ipv4_forward(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n,
                  EdgeBatches<Ipv4Edge>& out, Ipv4Input input = Ipv4Input::any);

// A plain ToR's fast path, for frames straight from RX when no binding asks for routed packets
// (process_burst): forwards the leading frames of `pkts` for as long as each is one that the
// general path (eth_input, then ipv4_forward) would only forward — a single-segment IPv4 frame
// without options to a routed port's own MAC, sound header, TTL above 1, not martian, a
// forwarding route, a station this lcore's neighbour memo or the gateway's next hop knows, a
// present egress port whose MTU it fits — and does to each exactly what that path would (TTL
// and checksum, both MACs, `routed`, egress). Returns how many it took; it stops at the first
// frame that needs anything else, before touching it, so the rest of the burst takes the general
// path in arrival order and every other outcome keeps its one implementation. Adds the lengths
// (pkt_len) of the frames it took to `bytes`, read while they are at hand (a taken frame may be
// sent and freed before this returns).
uint16_t ipv4_fast_path(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf* const* pkts,
                        uint16_t n, uint64_t& bytes);

// A 16-bit header field in host order. DPDK's rte_be_to_cpu_16 is an asm volatile byte swap on
// x86, which the compiler may neither merge nor drop; the builtin it can.
inline uint16_t ipv4_field16(uint16_t be) {
    if constexpr (std::endian::native == std::endian::little) {
        return __builtin_bswap16(be);
    } else {
        return be;
    }
}

// Decrements the TTL (the caller checked it is at least 1) and patches the header checksum by
// RFC 1624 eqn. 3 on the 16-bit word TTL shares with the protocol, in the raw (memory) order
// net::checksum_update16 takes: HC' = ~(~HC + ~m + m'). The new word is the old one less the
// TTL's unit (no borrow: the TTL was at least 1), so ~m + m' is that constant's complement
// whatever m is, and the update needs neither word: the same result as checksum_update16 with
// one fold (~HC + 0xfffe or 0xfeff is at most 0x1fffd, whose fold fits 16 bits).
inline void ipv4_decrement_ttl(rte_ipv4_hdr* ip) {
    constexpr size_t kTtlWord = offsetof(rte_ipv4_hdr, time_to_live);
    static_assert(offsetof(rte_ipv4_hdr, next_proto_id) == kTtlWord + 1);
    static_assert(offsetof(rte_ipv4_hdr, hdr_checksum) == kTtlWord + 2);
    constexpr uint32_t kTtlUnit = std::endian::native == std::endian::little ? 0x0001 : 0x0100;
    --ip->time_to_live;
    uint32_t sum = static_cast<uint16_t>(~ip->hdr_checksum);
    sum += 0xffff - kTtlUnit;
    sum = (sum & 0xffff) + (sum >> 16);
    ip->hdr_checksum = static_cast<uint16_t>(~sum);
}

// The sum of a 20-byte IPv4 header's five 32-bit halves (at most 35 bits), given as its bytes
// 0..7, 8..15 and 16..19 loaded in host order: its residue mod 0xffff is that of the
// one's-complement sum of the header's 16-bit words.
inline uint64_t ipv4_halves_sum(uint64_t a, uint64_t b, uint32_t c) {
    return (a & 0xffffffff) + (a >> 32) + (b & 0xffffffff) + (b >> 32) + c;
}

// The same from the header in memory, three loads.
inline uint64_t ipv4_header_halves20(const void* ip) {
    const auto* p = static_cast<const uint8_t*>(ip);
    uint64_t a;
    uint64_t b;
    uint32_t c;
    std::memcpy(&a, p, 8);
    std::memcpy(&b, p + 8, 8);
    std::memcpy(&c, p + 16, 4);
    return ipv4_halves_sum(a, b, c);
}

// The folded one's-complement sum (RFC 1071, not inverted) of a 20-byte IPv4 header (no
// options) from three loads, no loop: the checksum of every header the switch writes (~15
// instructions where the generic sum takes ~30).
inline uint16_t ipv4_header_sum20(const void* ip) {
    uint64_t s = ipv4_header_halves20(ip);
    s = (s & 0xffffffff) + (s >> 32);
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    return static_cast<uint16_t>(s);
}

// RFC 1071 check of an IPv4 header whose IHL field gave `ihl` bytes: the one's-complement sum
// of a valid header is 0xffff. The common 20-byte header is summed from three loads (no loop);
// options take the generic path.
inline bool ipv4_header_sum_ok(const rte_ipv4_hdr* ip, uint32_t ihl) {
    if (ihl == sizeof(rte_ipv4_hdr)) [[likely]] {
        // The folded sum is 0xffff exactly when the plain integer sum of the header's 16-bit
        // words is a non-zero multiple of 0xffff (2^16 = 1 mod 0xffff, so folding keeps the
        // residue, and only a zero sum folds to 0). The halves' sum has the same residue and is
        // non-zero (the IHL nibble is 5), so no folding is needed: one remainder by a constant,
        // which the compiler makes a multiply and a compare.
        return ipv4_header_halves20(ip) % 0xffff == 0;
    }
    return net::ones_complement_sum(ip, ihl) == 0xffff;
}

// Validates the IPv4 header of a frame whose Ethernet header is at the mbuf's data offset.
// Returns the reason to drop it, or DropReason::count if it is sound. Inline: the classifier
// runs it once per packet, ipv4_forward only on packets nobody classified.
[[gnu::always_inline]] inline dp::DropReason ipv4_check(const rte_mbuf* m) {
    const uint32_t data_len = rte_pktmbuf_data_len(m);
    if (data_len < sizeof(rte_ether_hdr) + sizeof(rte_ipv4_hdr)) [[unlikely]] {
        return dp::DropReason::ipv4_malformed;
    }
    constexpr uint32_t kL2 = sizeof(rte_ether_hdr);
    const auto* ip = rte_pktmbuf_mtod_offset(m, const rte_ipv4_hdr*, kL2);
    const uint32_t total = ipv4_field16(ip->total_length);
    uint32_t ihl = sizeof(rte_ipv4_hdr);
    if (ip->version_ihl == 0x45) [[likely]] {
        // Version 4 without options: the header is in the segment (checked above), so only the
        // total length remains to check.
        if (total < sizeof(rte_ipv4_hdr) || kL2 + total > rte_pktmbuf_pkt_len(m)) [[unlikely]] {
            return dp::DropReason::ipv4_malformed;
        }
    } else {
        ihl = (ip->version_ihl & 0x0f) * 4u;
        if ((ip->version_ihl >> 4) != 4 || ihl < sizeof(rte_ipv4_hdr) || total < ihl ||
            kL2 + ihl > data_len || kL2 + total > rte_pktmbuf_pkt_len(m)) [[unlikely]] {
            return dp::DropReason::ipv4_malformed;
        }
    }
    const uint64_t ck = m->ol_flags & RTE_MBUF_F_RX_IP_CKSUM_MASK;
    if (ck == RTE_MBUF_F_RX_IP_CKSUM_GOOD) {
        return dp::DropReason::count;
    }
    if (ck == RTE_MBUF_F_RX_IP_CKSUM_BAD || !ipv4_header_sum_ok(ip, ihl)) [[unlikely]] {
        return dp::DropReason::ipv4_bad_checksum;
    }
    return dp::DropReason::count;
}

}  // namespace ina::pipeline
