// SPDX-License-Identifier: Apache-2.0
#include "pipeline/ipv6_forward.h"

#include <rte_ip.h>

#include <cstring>

#include "pipeline/egress.h"
#include "pipeline/ipv6.h"
#include "pipeline/packet_meta.h"

namespace ina::pipeline {

namespace {

constexpr size_t kL2 = sizeof(rte_ether_hdr);

bool is_loopback6(const uint8_t* a) {
    static constexpr uint8_t kLoopback[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    return std::memcmp(a, kLoopback, 16) == 0;
}
bool is_link_local6(const uint8_t* a) { return a[0] == 0xfe && (a[1] & 0xc0) == 0x80; }

uint64_t address_key(const uint8_t* a) {
    uint64_t hi;
    uint64_t lo;
    std::memcpy(&hi, a, 8);
    std::memcpy(&lo, a + 8, 8);
    return hi * 0x9E3779B97F4A7C15ull ^ lo;
}

}  // namespace

void nd_solicit(LcoreContext& ctx, const dp::Snapshot& snap, const uint8_t* target,
                uint16_t port) {
    if (port >= snap.n_ports) [[unlikely]] {
        return;
    }
    const dp::PortView& pv = snap.ports[port];
    if (!pv.present || pv.n_addrs6 == 0) [[unlikely]] {
        return;  // no address to solicit from: the route's port has no IPv6 (config allows it)
    }
    const uint64_t key = address_key(target) ^ (uint64_t{port} << 48) ^ 0x6e64;  // "nd"
    const uint64_t interval = snap.arp_request_interval_ms * ctx.tsc_hz / 1000;
    if (!ctx.recent.should_report(key, ctx.now_tsc, interval)) {
        return;
    }
    // From the port's address on the target's prefix (the host answers to it), else its first.
    const net::Ipv6Prefix* own = pv.subnet6_of(target);
    const uint8_t* src = (own != nullptr ? own : &pv.addrs6[0])->addr.bytes.data();
    uint8_t group[16];
    solicited_node_of(target, group);
    NdFrame f;
    f.type = kNdSolicit;
    f.eth_src = pv.mac;
    f.eth_dst = multicast_mac6(group);
    f.ip_src = src;
    f.ip_dst = group;
    f.target = target;
    if (send_nd_frame(ctx, f, port)) {
        ++ctx.counters.nd_solicitations;
    }
}

void ipv6_forward(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n,
                  EdgeBatches<Ipv6Edge>& out) {
    for (uint16_t i = 0; i < n; ++i) {
        rte_mbuf* m = pkts[i];
        const PacketMeta* pm = classified(m);
        const dp::DropReason verdict =
            pm != nullptr ? static_cast<dp::DropReason>(pm->l3_verdict) : ipv6_check(m);
        if (verdict != dp::DropReason::count) [[unlikely]] {
            count_drop(ctx, verdict);
            out.push(Ipv6Edge::drop, m);
            continue;
        }
        auto* eth = rte_pktmbuf_mtod(m, rte_ether_hdr*);
        auto* ip = rte_pktmbuf_mtod_offset(m, rte_ipv6_hdr*, kL2);
        const uint8_t* dst = ip->dst_addr;
        if (dst[0] == 0xff) {
            // Multicast: only ND to a solicited-node group of the ingress port is the switch's.
            if (snap.ports[m->port].solicited_node6(dst)) {
                out.push(Ipv6Edge::local, m);
            } else {
                count_drop(ctx, dp::DropReason::not_for_us);
                out.push(Ipv6Edge::drop, m);
            }
            continue;
        }
        const uint8_t* src = ip->src_addr;
        const dp::NextHop6* nh = snap.route6(dst);
        if (nh != nullptr && nh->kind == dp::NextHopKind::local) {
            // Unicast to us: ND with an unspecified source (DAD) is the local stage's to judge.
            if (src[0] == 0xff || is_loopback6(src)) [[unlikely]] {
                count_drop(ctx, dp::DropReason::ipv6_martian);
                out.push(Ipv6Edge::drop, m);
                continue;
            }
            out.push(Ipv6Edge::local, m);
            continue;
        }
        if (src[0] == 0xff || is_loopback6(src) || is_unspecified6(src) || is_link_local6(src) ||
            is_unspecified6(dst) || is_loopback6(dst) || is_link_local6(dst)) [[unlikely]] {
            count_drop(ctx, dp::DropReason::ipv6_martian);  // RFC 4291 2.5: never routed
            out.push(Ipv6Edge::drop, m);
            continue;
        }
        if (nh == nullptr) [[unlikely]] {
            count_drop(ctx, dp::DropReason::no_route);
            out.push(Ipv6Edge::drop, m);
            continue;
        }
        const bool transit = (m->ol_flags & g_originated_flag) == 0;
        if (transit && ip->hop_limits <= 1) [[unlikely]] {
            count_drop(ctx, dp::DropReason::hop_limit_exceeded);
            out.push(Ipv6Edge::drop, m);
            continue;
        }
        const uint8_t* next = nh->kind == dp::NextHopKind::gateway ? nh->gateway.data() : dst;
        const std::optional<dp::Neighbour> st = snap.tables->neighbour6(next);
        if (!st) [[unlikely]] {
            nd_solicit(ctx, snap, next, nh->port);
            count_drop(ctx, dp::DropReason::neighbour_unresolved);
            out.push(Ipv6Edge::drop, m);
            continue;
        }
        if (st->port >= snap.n_ports || !snap.ports[st->port].present) [[unlikely]] {
            count_drop(ctx, dp::DropReason::neighbour_unresolved);
            out.push(Ipv6Edge::drop, m);
            continue;
        }
        if (sizeof(rte_ipv6_hdr) + rte_be_to_cpu_16(ip->payload_len) > snap.ports[st->port].mtu)
            [[unlikely]] {
            count_drop(ctx, dp::DropReason::mtu_exceeded);
            out.push(Ipv6Edge::drop, m);
            continue;
        }
        if (transit) {
            --ip->hop_limits;  // no header checksum in IPv6
        }
        eth->dst_addr = st->mac;
        eth->src_addr = snap.ports[st->port].mac;
        ++ctx.counters.routed6;
        egress(ctx, st->port, m);
    }
}

}  // namespace ina::pipeline
