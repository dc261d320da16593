// SPDX-License-Identifier: Apache-2.0
#include "pipeline/icmp6_local.h"

#include <rte_ip.h>

#include <cstring>

#include "pipeline/egress.h"
#include "pipeline/ipv6.h"
#include "pipeline/mbuf_chain.h"

namespace ina::pipeline {

namespace {

constexpr uint32_t kL2 = sizeof(rte_ether_hdr);
constexpr uint32_t kIcmpOff = kL2 + sizeof(rte_ipv6_hdr);

// The link-layer address option of `want` type among the options after an NS/NA body, read
// from the first segment (eth_input gathered kHeadBytes there; ND frames are shorter). False
// when an option has length 0 or overruns the message (RFC 4861 7.1.1: invalid).
bool read_options(const rte_mbuf* m, uint32_t icmp_len, uint8_t want, const uint8_t*& mac) {
    mac = nullptr;
    const uint32_t end = kIcmpOff + icmp_len;
    const uint32_t readable = std::min<uint32_t>(end, rte_pktmbuf_data_len(m));
    for (uint32_t off = kIcmpOff + kNdBodyBytes; off < end;) {
        if (off + 2 > readable) {
            return readable < end;  // options past the gathered head: unread, else truncated
        }
        const uint8_t* opt = rte_pktmbuf_mtod_offset(m, const uint8_t*, off);
        const uint32_t len = uint32_t{opt[1]} * 8;
        if (len == 0 || off + len > end) {
            return false;
        }
        if (opt[0] == want && len >= 8 && off + 8 <= readable) {
            mac = opt + 2;
        }
        off += len;
    }
    return true;
}

void report_neighbour(LcoreContext& ctx, const uint8_t* ip6, const uint8_t* mac, uint16_t port) {
    uint64_t hi;
    uint64_t lo;
    uint64_t mac_bits = 0;
    std::memcpy(&hi, ip6, 8);
    std::memcpy(&lo, ip6 + 8, 8);
    std::memcpy(&mac_bits, mac, 6);
    const uint64_t key = (hi * 0x9E3779B97F4A7C15ull ^ lo ^ mac_bits * 0xC2B2AE3D27D4EB4Full) +
                         (uint64_t{port} << 48) +
                         static_cast<uint64_t>(dp::EventType::neighbour6_seen);
    if (!ctx.recent.should_report(key, ctx.now_tsc, ctx.event_interval_tsc)) {
        return;
    }
    dp::Event ev{};
    ev.type = dp::EventType::neighbour6_seen;
    ev.port = port;
    std::memcpy(ev.mac, mac, 6);
    std::memcpy(ev.ip6, ip6, 16);
    post_event(ctx, ev);
    ++ctx.counters.nd_learned;
}

bool usable_mac(const uint8_t* mac) {
    rte_ether_addr a;
    std::memcpy(a.addr_bytes, mac, 6);
    return rte_is_unicast_ether_addr(&a) && !rte_is_zero_ether_addr(&a);
}

// RFC 4861 7.1.1 / 7.1.2 checks shared by NS and NA; the per-type ones are the caller's.
bool nd_sound(const rte_ipv6_hdr* ip, const uint8_t* icmp, uint32_t icmp_len) {
    return ip->hop_limits == kNdHopLimit && icmp[1] == 0 && icmp_len >= kNdBodyBytes &&
           icmp[8] != 0xff;  // the target is never multicast
}

}  // namespace

void icmp6_local(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n,
                 EdgeBatches<Icmp6Edge>& out) {
    for (uint16_t i = 0; i < n; ++i) {
        rte_mbuf* m = pkts[i];
        auto* eth = rte_pktmbuf_mtod(m, rte_ether_hdr*);
        auto* ip = rte_pktmbuf_mtod_offset(m, rte_ipv6_hdr*, kL2);
        const uint32_t icmp_len = rte_be_to_cpu_16(ip->payload_len);
        // Extension headers before ICMPv6 are not walked: nothing the switch answers uses them.
        if (ip->proto != kIpProtoIcmp6 || icmp_len < 8 ||
            rte_pktmbuf_data_len(m) < kIcmpOff + std::min<uint32_t>(icmp_len, kNdBodyBytes)) {
            count_drop(ctx, dp::DropReason::local_unsupported);
            out.push(Icmp6Edge::drop, m);
            continue;
        }
        if (!sum_ok(m, kIcmpOff, icmp_len,
                    ipv6_pseudo_sum(ip->src_addr, ip->dst_addr, icmp_len, kIpProtoIcmp6))) {
            count_drop(ctx, dp::DropReason::icmp6_bad_checksum);
            out.push(Icmp6Edge::drop, m);
            continue;
        }
        auto* icmp = rte_pktmbuf_mtod_offset(m, uint8_t*, kIcmpOff);
        const uint16_t port = m->port;
        const dp::PortView& pv = snap.ports[port];
        const bool src_unspecified = is_unspecified6(ip->src_addr);
        if (icmp[0] == kIcmp6EchoRequest && icmp[1] == 0 && ip->dst_addr[0] != 0xff &&
            !src_unspecified) {
            // Echo reply in place: swapping the addresses leaves the pseudo-header's sum as it
            // was, so only the type byte changes the checksum (RFC 1624).
            const uint16_t old_word = rte_cpu_to_be_16(uint16_t{kIcmp6EchoRequest} << 8);
            const uint16_t new_word = rte_cpu_to_be_16(uint16_t{kIcmp6EchoReply} << 8);
            icmp[0] = kIcmp6EchoReply;
            uint16_t cksum;
            std::memcpy(&cksum, icmp + 2, 2);
            cksum = net::checksum_update16(cksum, old_word, new_word);
            std::memcpy(icmp + 2, &cksum, 2);
            uint8_t requester[16];
            std::memcpy(requester, ip->src_addr, 16);
            std::memcpy(ip->src_addr, ip->dst_addr, 16);
            std::memcpy(ip->dst_addr, requester, 16);
            ip->hop_limits = 64;
            eth->dst_addr = eth->src_addr;
            eth->src_addr = pv.mac;
            ++ctx.counters.icmp6_echo_replies;
            egress(ctx, port, m);
            continue;
        }
        if (icmp[0] != kNdSolicit && icmp[0] != kNdAdvert) {
            count_drop(ctx, dp::DropReason::local_unsupported);
            out.push(Icmp6Edge::drop, m);
            continue;
        }
        const uint8_t* mac = nullptr;
        const bool solicit = icmp[0] == kNdSolicit;
        if (!nd_sound(ip, icmp, icmp_len) ||
            !read_options(m, icmp_len, solicit ? kNdOptSourceMac : kNdOptTargetMac, mac)) {
            count_drop(ctx, dp::DropReason::nd_invalid);
            out.push(Icmp6Edge::drop, m);
            continue;
        }
        const uint8_t* target = icmp + 8;
        if (!solicit) {
            // RFC 4861 7.1.2: a solicited NA is never to a multicast group. The target is the
            // advertised station; learned when it lies on one of the port's prefixes.
            uint32_t flags_be;
            std::memcpy(&flags_be, icmp + 4, 4);
            if (ip->dst_addr[0] == 0xff && (rte_be_to_cpu_32(flags_be) & kNaSolicited) != 0) {
                count_drop(ctx, dp::DropReason::nd_invalid);
            } else {
                const uint8_t* station = mac != nullptr ? mac : eth->src_addr.addr_bytes;
                if (pv.subnet6_of(target) != nullptr && !pv.owns6(target) && usable_mac(station)) {
                    report_neighbour(ctx, target, station, port);
                }
            }
            out.push(Icmp6Edge::drop, m);  // consumed
            continue;
        }
        // NS. RFC 4861 7.1.1: from the unspecified address (DAD) only to a solicited-node
        // group and without a source link-layer option.
        if (src_unspecified && (ip->dst_addr[0] != 0xff || mac != nullptr)) {
            count_drop(ctx, dp::DropReason::nd_invalid);
            out.push(Icmp6Edge::drop, m);
            continue;
        }
        if (!pv.owns6(target)) {
            count_drop(ctx, dp::DropReason::nd_not_for_us);
            out.push(Icmp6Edge::drop, m);
            continue;
        }
        if (!src_unspecified && mac != nullptr && pv.subnet6_of(ip->src_addr) != nullptr &&
            usable_mac(mac)) {
            report_neighbour(ctx, ip->src_addr, mac, port);
        }
        // The advertisement: to the solicitor (its MAC from the option, else the frame), or to
        // all nodes when it has no address yet (DAD: unsolicited, RFC 4861 7.2.4).
        static constexpr uint8_t kAllNodes[16] = {0xff, 2, 0, 0, 0, 0, 0, 0,
                                                  0,    0, 0, 0, 0, 0, 0, 1};
        NdFrame f;
        f.type = kNdAdvert;
        f.flags = kNaRouter | kNaOverride | (src_unspecified ? 0 : kNaSolicited);
        f.eth_src = pv.mac;
        if (src_unspecified) {
            f.eth_dst = multicast_mac6(kAllNodes);
        } else if (mac != nullptr) {
            std::memcpy(f.eth_dst.addr_bytes, mac, 6);
        } else {
            f.eth_dst = eth->src_addr;
        }
        f.ip_src = target;
        f.ip_dst = src_unspecified ? kAllNodes : ip->src_addr;
        f.target = target;
        if (send_nd_frame(ctx, f, port)) {
            ++ctx.counters.nd_advertisements;
        }
        out.push(Icmp6Edge::drop, m);  // consumed: the advertisement is a frame of its own
    }
}

}  // namespace ina::pipeline
