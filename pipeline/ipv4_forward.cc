// SPDX-License-Identifier: Apache-2.0
#include "pipeline/ipv4_forward.h"

#include <rte_ip.h>
#include <rte_lpm.h>

#include <array>
#include <cstring>

#include "net/checksum.h"
#include "pipeline/mbuf_chain.h"
#include "pipeline/egress.h"
#include "pipeline/packet_meta.h"

namespace ina::pipeline {

namespace {

constexpr size_t kL2 = sizeof(rte_ether_hdr);

// Per first octet of an address: bit 0 when no source may start with it (127/8 loopback,
// 224/4 multicast), bit 1 when no routed destination may (0/8, 127/8, 224/3: multicast is never
// routed, configured groups go to BIER at eth_input). Sources 0.0.0.0 and 255.255.255.255 are
// whole addresses, tested apart.
constexpr std::array<uint8_t, 256> kMartianOctet = [] {
    std::array<uint8_t, 256> t{};
    for (unsigned o = 0; o < 256; ++o) {
        const bool bad_source = o == 127 || (o >> 4) == 0xE;
        const bool bad_destination = o == 0 || o == 127 || (o >> 4) >= 0xE;
        t[o] = static_cast<uint8_t>((bad_source ? 1 : 0) | (bad_destination ? 2 : 0));
    }
    return t;
}();

// Never routed: a loopback, multicast, unspecified or limited-broadcast source, or a
// this-network, loopback, multicast or reserved destination (`dst` in host order). The
// source's first octet straight from the header (no byte swap), one table load per address.
inline bool martian(rte_be32_t src, uint32_t dst) {
    const uint8_t source_octet = reinterpret_cast<const uint8_t*>(&src)[0];
    const unsigned octets = (kMartianOctet[source_octet] | kMartianOctet[dst >> 24] >> 1) & 1u;
    const bool whole_source = src + 1u <= 1u;  // 0.0.0.0 or 255.255.255.255, any order
    return (octets | static_cast<unsigned>(whole_source)) != 0;
}

// The routing step of one sound, non-martian packet with a route whose next hop `nh` forwards
// (connected or gateway), past the TTL check, once its station word is known (0: unresolved).
[[gnu::always_inline]] inline void forward_to_station(LcoreContext& ctx, const dp::Snapshot& snap,
                                                     rte_mbuf* m, rte_ipv4_hdr* ip,
                                                     const dp::NextHop& nh, uint32_t dst,
                                                     uint64_t station, bool transit,
                                                     EdgeBatches<Ipv4Edge>& out,
                                                     uint32_t& routed) {
    if (station == 0) [[unlikely]] {
        request_resolve(ctx, snap, nh.kind == dp::NextHopKind::gateway ? nh.gateway : dst,
                        nh.port);
        count_drop(ctx, dp::DropReason::neighbour_unresolved);
        out.push(Ipv4Edge::drop, m);
        return;
    }
    const uint16_t port = dp::station_port(station);
    if (port >= snap.n_ports || !snap.ports[port].present) [[unlikely]] {
        // A neighbour learned on a port a config change has since removed.
        count_drop(ctx, dp::DropReason::neighbour_unresolved);
        out.push(Ipv4Edge::drop, m);
        return;
    }
    // The port's MAC and MTU in one load (PortView keeps them adjacent).
    const uint64_t mac_mtu = snap.ports[port].mac_and_mtu();
    if (ipv4_field16(ip->total_length) > dp::PortView::mtu_of(mac_mtu)) [[unlikely]] {
        count_drop(ctx, dp::DropReason::mtu_exceeded);
        out.push(Ipv4Edge::drop, m);
        return;
    }
    if (transit) {
        ipv4_decrement_ttl(ip);
    }
    dp::store_station_and_port_macs(rte_pktmbuf_mtod(m, rte_ether_hdr*), station, mac_mtu);
    ++routed;
    egress(ctx, port, m);
}

template <Ipv4Input kInput>
void forward(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n,
             EdgeBatches<Ipv4Edge>& out) {
    // First pass: each header's verdict and destination (0 for an unsound header, so the LPM
    // reads a defined entry), four at a time into the vector LPM lookup as DPDK's l3fwd does.
    // The arrays are padded to whole groups of four; the padding looks up 0.0.0.0.
    constexpr uint16_t kPadded = (kMaxBurst + 3) & ~3;
    alignas(16) uint32_t dst[kPadded];
    alignas(16) uint32_t hop[kPadded];
    dp::DropReason verdict[kMaxBurst];
    for (uint16_t i = 0; i < n; ++i) {
        if constexpr (kInput == Ipv4Input::unclassified) {
            verdict[i] = ipv4_check(pkts[i]);
        } else {
            // The classifier checked what came from eth_input; the switch's own packets
            // (emitted by a feature) and anything unclassified are checked here.
            const PacketMeta* pm = classified(pkts[i]);
            verdict[i] = pm != nullptr ? static_cast<dp::DropReason>(pm->l3_verdict)
                                       : ipv4_check(pkts[i]);
        }
        const auto* ip = rte_pktmbuf_mtod_offset(pkts[i], const rte_ipv4_hdr*, kL2);
        dst[i] = verdict[i] == dp::DropReason::count ? rte_be_to_cpu_32(ip->dst_addr) : 0;
    }
    const uint16_t groups = static_cast<uint16_t>((n + 3) / 4);
    for (uint16_t i = n; i < groups * 4; ++i) {
        dst[i] = 0;
    }
    // A miss reads kNoRoute: next-hop indices are 24 bits, so it is never one.
    constexpr uint32_t kNoRoute = ~uint32_t{0};
    for (uint16_t g = 0; g < groups; ++g) {
        rte_lpm_lookupx4(snap.lpm, _mm_load_si128(reinterpret_cast<const __m128i*>(dst + 4 * g)),
                         hop + 4 * g, kNoRoute);
    }

    // Each routed packet's station: a gateway's is a word in its next hop; a connected
    // destination's comes from this lcore's memo of the neighbour table. At the first packet
    // the memo does not answer, the stations of every connected destination from there to the
    // burst's end are taken at once, the memo's misses in one bulk lookup (a lookup per packet
    // cost ~250 instructions), so packets still leave in arrival order and a burst the memo
    // answers pays for no second pass.
    if (snap.tables != nullptr) {
        ctx.neighbours.sync(*snap.tables);
    }
    uint64_t looked_up[kMaxBurst];
    bool stations_looked_up = false;
    const auto look_up_stations_from = [&](uint16_t first) {
        static_assert(kMaxBurst <= dp::ForwardingTables::kNeighbourBulkMax);
        uint32_t miss_ip[kMaxBurst];
        uint16_t miss_of[kMaxBurst];
        uint16_t n_miss = 0;
        for (uint16_t k = first; k < n; ++k) {
            if (verdict[k] != dp::DropReason::count || hop[k] == kNoRoute ||
                snap.nexthops[hop[k]].kind != dp::NextHopKind::connected) {
                continue;
            }
            looked_up[k] = ctx.neighbours.get(dst[k]);
            if (looked_up[k] == 0) {
                miss_of[n_miss] = k;
                miss_ip[n_miss++] = dst[k];
            }
        }
        if (n_miss != 0) {
            uint64_t word[kMaxBurst];
            snap.tables->neighbour_words(miss_ip, n_miss, word);
            for (uint16_t k = 0; k < n_miss; ++k) {
                looked_up[miss_of[k]] = word[k];
                ctx.neighbours.put(miss_ip[k], word[k]);
            }
        }
    };
    uint32_t routed = 0;
    for (uint16_t i = 0; i < n; ++i) {
        rte_mbuf* m = pkts[i];
        if (verdict[i] != dp::DropReason::count) [[unlikely]] {
            count_drop(ctx, verdict[i]);
            out.push(Ipv4Edge::drop, m);
            continue;
        }
        auto* ip = rte_pktmbuf_mtod_offset(m, rte_ipv4_hdr*, kL2);
        if (martian(ip->src_addr, dst[i])) [[unlikely]] {
            count_drop(ctx, dp::DropReason::ipv4_martian);
            out.push(Ipv4Edge::drop, m);
            continue;
        }
        if (hop[i] == kNoRoute) [[unlikely]] {
            count_drop(ctx, dp::DropReason::no_route);
            out.push(Ipv4Edge::drop, m);
            continue;
        }
        const dp::NextHop& nh = snap.nexthops[hop[i]];
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
        uint64_t station;
        if (nh.kind == dp::NextHopKind::gateway) {
            station = nh.station_word();
        } else if (stations_looked_up) [[unlikely]] {
            station = looked_up[i];
        } else {
            station = ctx.neighbours.get(dst[i]);
            if (station == 0) [[unlikely]] {
                look_up_stations_from(i);
                stations_looked_up = true;
                station = looked_up[i];
            }
        }
        forward_to_station(ctx, snap, m, ip, nh, dst[i], station, transit, out, routed);
    }
    ctx.counters.routed += routed;
}

}  // namespace

uint16_t ipv4_fast_path(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf* const* pkts,
                        uint16_t n, uint64_t& bytes) {
    static_assert(std::endian::native == std::endian::little,
                  "the header words below are tested in little-endian order");
    if (snap.tables != nullptr) {
        ctx.neighbours.sync(*snap.tables);
    }
    // RX_IP_CKSUM_BAD is set in BAD and NONE; GOOD and UNKNOWN (summed here) have it clear. The
    // switch's own packets keep their TTL: the general path's case.
    const uint64_t general_flags = RTE_MBUF_F_RX_IP_CKSUM_BAD | g_originated_flag;
    rte_lpm* const lpm = snap.lpm;
    const uint16_t n_ports = snap.n_ports;
    uint32_t routed = 0;
    uint64_t taken_bytes = 0;
    uint16_t i = 0;
    // The headers a few frames ahead are fetched while this one is routed: a NIC writes frames
    // to memory, not to this core's cache (the pcap PMD's copy leaves them in L1 already).
    constexpr uint16_t kAhead = 4;
    for (uint16_t k = 0; k < kAhead && k < n; ++k) {
        rte_prefetch0(rte_pktmbuf_mtod(pkts[k], void*));
    }
    for (; i < n; ++i) {
        if (i + kAhead < n) {
            rte_prefetch0(rte_pktmbuf_mtod(pkts[i + kAhead], void*));
        }
        rte_mbuf* m = pkts[i];
        const uint16_t in = m->port;
        if (m->nb_segs != 1 || in >= n_ports ||
            rte_pktmbuf_data_len(m) < kL2 + sizeof(rte_ipv4_hdr) ||
            (m->ol_flags & general_flags) != 0) {
            break;
        }
        auto* frame = rte_pktmbuf_mtod(m, uint8_t*);
        // Destination MAC; ethertype and the IPv4 version/IHL octet; the header in three words.
        uint64_t head;
        uint32_t type_ver;
        uint64_t a;
        uint64_t b;
        uint32_t c;
        std::memcpy(&head, frame, sizeof head);
        std::memcpy(&type_ver, frame + 12, sizeof type_ver);
        std::memcpy(&a, frame + kL2, sizeof a);
        std::memcpy(&b, frame + kL2 + 8, sizeof b);
        std::memcpy(&c, frame + kL2 + 16, sizeof c);
        const dp::PortView& pv = snap.ports[in];
        constexpr uint32_t kIpv4NoOptions = 0x450008;  // 08 00 45, as loaded
        if (pv.l2_group != dp::kNoGroup || ((head ^ pv.mac_and_mtu()) << 16) != 0 ||
            (type_ver & 0xffffff) != kIpv4NoOptions) {
            break;
        }
        const uint32_t total = ipv4_field16(static_cast<uint16_t>(a >> 16));
        const auto ttl = static_cast<uint8_t>(b);
        const auto src = static_cast<rte_be32_t>(b >> 32);
        const uint32_t dst = __builtin_bswap32(c);
        const uint32_t length = rte_pktmbuf_pkt_len(m);
        if (total < sizeof(rte_ipv4_hdr) || kL2 + total > length || ttl <= 1 ||
            ((m->ol_flags & RTE_MBUF_F_RX_IP_CKSUM_GOOD) == 0 &&
             ipv4_halves_sum(a, b, c) % 0xffff != 0) ||
            martian(src, dst)) {
            break;
        }
        uint32_t hop;
        if (rte_lpm_lookup(lpm, dst, &hop) != 0) {
            break;
        }
        const dp::NextHop& nh = snap.nexthops[hop];
        uint64_t station;
        if (nh.kind == dp::NextHopKind::connected) {
            station = ctx.neighbours.get(dst);
        } else if (nh.kind == dp::NextHopKind::gateway) {
            station = nh.station_word();
        } else {
            break;
        }
        const uint16_t port = dp::station_port(station);
        if (station == 0 || port >= n_ports || !snap.ports[port].present) {
            break;
        }
        const uint64_t mac_mtu = snap.ports[port].mac_and_mtu();
        if (total > dp::PortView::mtu_of(mac_mtu)) {
            break;
        }
        ipv4_decrement_ttl(reinterpret_cast<rte_ipv4_hdr*>(frame + kL2));
        dp::store_station_and_port_macs(reinterpret_cast<rte_ether_hdr*>(frame), station,
                                        mac_mtu);
        ++routed;
        taken_bytes += length;
        egress(ctx, port, m);
    }
    ctx.counters.routed += routed;
    bytes += taken_bytes;
    return i;
}

void ipv4_forward(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n,
                  EdgeBatches<Ipv4Edge>& out, Ipv4Input input) {
    if (input == Ipv4Input::unclassified) {
        forward<Ipv4Input::unclassified>(ctx, snap, pkts, n, out);
    } else {
        forward<Ipv4Input::any>(ctx, snap, pkts, n, out);
    }
}

}  // namespace ina::pipeline
