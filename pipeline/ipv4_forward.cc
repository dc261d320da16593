// SPDX-License-Identifier: Apache-2.0
#include "pipeline/ipv4_forward.h"

#include <rte_ip.h>
#include <rte_lpm.h>

#include <cstring>

#include "net/checksum.h"
#include "pipeline/mbuf_chain.h"
#include "pipeline/port_tx.h"

namespace ina::pipeline {

namespace {

constexpr size_t kL2 = sizeof(rte_ether_hdr);

bool martian_source(uint32_t a) {
    return a == 0 || (a >> 24) == 127 || (a >> 28) == 0xE || a == 0xFFFFFFFF;
}

bool martian_destination(uint32_t a) {
    // Multicast is never routed: configured groups go to BIER at eth_input (bier_encap).
    return (a >> 24) == 0 || (a >> 24) == 127 || (a >> 28) >= 0xE;
}

}  // namespace

namespace {

// RFC 1071 check of an IPv4 header: the one's-complement sum of a valid header is 0xffff. The
// common 20-byte header is summed from three loads (no loop); options take the generic path.
inline bool header_sum_ok(const rte_ipv4_hdr* ip, uint32_t ihl) {
    if (ihl == sizeof(rte_ipv4_hdr)) [[likely]] {
        const auto* p = reinterpret_cast<const uint8_t*>(ip);
        uint64_t a;
        uint64_t b;
        uint32_t c;
        std::memcpy(&a, p, 8);
        std::memcpy(&b, p + 8, 8);
        std::memcpy(&c, p + 16, 4);
        uint64_t s = (a & 0xffffffff) + (a >> 32) + (b & 0xffffffff) + (b >> 32) + c;
        s = (s & 0xffffffff) + (s >> 32);
        s = (s & 0xffff) + (s >> 16);
        s = (s & 0xffff) + (s >> 16);
        s = (s & 0xffff) + (s >> 16);
        return s == 0xffff;
    }
    return net::ones_complement_sum(ip, ihl) == 0xffff;
}

// ipv4_check, inlined into ipv4_forward's per-packet loop.
[[gnu::always_inline]] inline dp::DropReason check(const rte_mbuf* m) {
    const uint32_t data_len = rte_pktmbuf_data_len(m);
    if (data_len < kL2 + sizeof(rte_ipv4_hdr)) [[unlikely]] {
        return dp::DropReason::ipv4_malformed;
    }
    const auto* ip = rte_pktmbuf_mtod_offset(m, const rte_ipv4_hdr*, kL2);
    const uint32_t ihl = (ip->version_ihl & 0x0f) * 4u;
    const uint32_t total = rte_be_to_cpu_16(ip->total_length);
    if ((ip->version_ihl >> 4) != 4 || ihl < sizeof(rte_ipv4_hdr) || total < ihl ||
        kL2 + ihl > data_len || kL2 + total > rte_pktmbuf_pkt_len(m)) [[unlikely]] {
        return dp::DropReason::ipv4_malformed;
    }
    const uint64_t ck = m->ol_flags & RTE_MBUF_F_RX_IP_CKSUM_MASK;
    if (ck == RTE_MBUF_F_RX_IP_CKSUM_GOOD) {
        return dp::DropReason::count;
    }
    if (ck == RTE_MBUF_F_RX_IP_CKSUM_BAD || !header_sum_ok(ip, ihl)) [[unlikely]] {
        return dp::DropReason::ipv4_bad_checksum;
    }
    return dp::DropReason::count;
}

}  // namespace

dp::DropReason ipv4_check(const rte_mbuf* m) { return check(m); }

void ipv4_forward(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n,
                  EdgeBatches<Ipv4Edge>& out) {
    // One bulk LPM lookup for the burst: it overlaps the table's cache misses across packets.
    uint32_t dst[kMaxBurst];
    uint32_t hop[kMaxBurst];
    dp::DropReason verdict[kMaxBurst];
    for (uint16_t i = 0; i < n; ++i) {
        verdict[i] = check(pkts[i]);
        const auto* ip = rte_pktmbuf_mtod_offset(pkts[i], const rte_ipv4_hdr*, kL2);
        dst[i] = verdict[i] == dp::DropReason::count ? rte_be_to_cpu_32(ip->dst_addr) : 0;
    }
    rte_lpm_lookup_bulk(snap.lpm, dst, hop, n);

    for (uint16_t i = 0; i < n; ++i) {
        rte_mbuf* m = pkts[i];
        if (verdict[i] != dp::DropReason::count) [[unlikely]] {
            count_drop(ctx, verdict[i]);
            out.push(Ipv4Edge::drop, m);
            continue;
        }
        auto* eth = rte_pktmbuf_mtod(m, rte_ether_hdr*);
        auto* ip = reinterpret_cast<rte_ipv4_hdr*>(eth + 1);
        if (martian_source(rte_be_to_cpu_32(ip->src_addr)) || martian_destination(dst[i]))
            [[unlikely]] {
            count_drop(ctx, dp::DropReason::ipv4_martian);
            out.push(Ipv4Edge::drop, m);
            continue;
        }
        if (!(hop[i] & RTE_LPM_LOOKUP_SUCCESS)) [[unlikely]] {
            count_drop(ctx, dp::DropReason::no_route);
            out.push(Ipv4Edge::drop, m);
            continue;
        }
        const dp::NextHop& nh = snap.nexthops[hop[i] & 0x00ffffff];
        if (nh.kind == dp::NextHopKind::local) {
            out.push(Ipv4Edge::local, m);
            continue;
        }
        if (nh.kind == dp::NextHopKind::broadcast) [[unlikely]] {
            count_drop(ctx, dp::DropReason::ipv4_martian);
            out.push(Ipv4Edge::drop, m);
            continue;
        }
        // The switch's own packets leave with the TTL they were built with (64, like a host's).
        const bool transit = (m->ol_flags & g_originated_flag) == 0;
        if (transit && ip->time_to_live <= 1) [[unlikely]] {
            count_drop(ctx, dp::DropReason::ttl_exceeded);
            out.push(Ipv4Edge::drop, m);
            continue;
        }
        if (!nh.resolved) [[unlikely]] {
            request_resolve(ctx, snap, nh.kind == dp::NextHopKind::gateway ? nh.gateway : dst[i],
                            nh.port);
            count_drop(ctx, dp::DropReason::neighbour_unresolved);
            out.push(Ipv4Edge::drop, m);
            continue;
        }
        if (rte_be_to_cpu_16(ip->total_length) > snap.ports[nh.out_port].mtu) [[unlikely]] {
            count_drop(ctx, dp::DropReason::mtu_exceeded);
            out.push(Ipv4Edge::drop, m);
            continue;
        }
        if (transit) {
            ipv4_decrement_ttl(ip);
        }
        eth->dst_addr = nh.dst_mac;
        eth->src_addr = snap.ports[nh.out_port].mac;
        ++ctx.counters.routed;
        tx_enqueue(ctx, nh.out_port, m);
    }
}

}  // namespace ina::pipeline
