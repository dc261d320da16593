// SPDX-License-Identifier: Apache-2.0
#include "pipeline/bier_forward.h"

#include <rte_ip.h>
#include <rte_udp.h>

#include <cstring>

#include "net/checksum.h"
#include "pipeline/egress.h"
#include "wire/bier_header.h"

namespace ina::pipeline {

namespace {

constexpr size_t kL2 = sizeof(rte_ether_hdr);

void write_eth(uint8_t* d, const rte_ether_addr& dst, const rte_ether_addr& src, uint16_t type) {
    auto* eth = reinterpret_cast<rte_ether_hdr*>(d);
    eth->dst_addr = dst;
    eth->src_addr = src;
    eth->ether_type = rte_cpu_to_be_16(type);
}

// Whether neighbour k can take a copy now; counts the reason when it cannot.
bool neighbour_ready(LcoreContext& ctx, const dp::Snapshot& snap, const dp::BiftView& t,
                     uint16_t k, uint32_t frame_len) {
    const dp::BierAdjacency& nb = t.neighbours[k];
    if (!nb.resolved) [[unlikely]] {
        request_resolve(ctx, snap, nb.ip, nb.port);
        count_drop(ctx, dp::DropReason::neighbour_unresolved);
        return false;
    }
    if (frame_len - kL2 > snap.ports[nb.port].mtu) [[unlikely]] {
        count_drop(ctx, dp::DropReason::mtu_exceeded);
        return false;
    }
    return true;
}

// One copy per selected neighbour. Headers and payload references are allocated in two bulk
// gets (one mempool cache access each, not two per copy); a single-segment payload is attached
// directly, a chained one cloned segment by segment.
void copy_to_neighbours(LcoreContext& ctx, const dp::Snapshot& snap, const BierSend& p,
                        uint16_t plane, const uint16_t* sel, unsigned n, rte_mbuf* payload) {
    const dp::BiftView& t = *p.bift;
    const auto hdr_len = static_cast<uint16_t>(kL2 + wire::kBierFixedBytes + t.bs_bytes);
    rte_mbuf* hdrs[dp::kMaxBierNeighbours];
    rte_mbuf* bodies[dp::kMaxBierNeighbours];
    if (rte_pktmbuf_alloc_bulk(ctx.pool, hdrs, n) != 0) [[unlikely]] {
        ctx.counters.drops[static_cast<size_t>(dp::DropReason::bier_no_mbuf)] += n;
        return;
    }
    const bool direct_single = payload->nb_segs == 1;
    if (direct_single && rte_pktmbuf_alloc_bulk(ctx.pool, bodies, n) != 0) [[unlikely]] {
        rte_pktmbuf_free_bulk(hdrs, n);
        ctx.counters.drops[static_cast<size_t>(dp::DropReason::bier_no_mbuf)] += n;
        return;
    }
    for (unsigned i = 0; i < n; ++i) {
        const uint16_t k = sel[i];
        rte_mbuf* h = hdrs[i];
        rte_mbuf* body = bodies[i];
        if (direct_single) {
            rte_pktmbuf_attach(body, payload);
        } else {
            body = rte_pktmbuf_clone(payload, ctx.pool);
        }
        // A fresh mbuf's data room (RTE_MBUF_DEFAULT_BUF_SIZE) always holds the largest header
        // (14 + 12 + 512 bytes), so append cannot fail here.
        auto* d = reinterpret_cast<uint8_t*>(rte_pktmbuf_append(h, hdr_len));
        if (body == nullptr || d == nullptr || rte_pktmbuf_chain(h, body) != 0) [[unlikely]] {
            rte_pktmbuf_free(body);
            rte_pktmbuf_free(h);
            count_drop(ctx, dp::DropReason::bier_no_mbuf);
            continue;
        }
        const dp::BierAdjacency& nb = t.neighbours[k];
        write_eth(d, nb.dst_mac, snap.ports[nb.port].mac, wire::kBierEthertype);
        std::memcpy(d + kL2, p.fixed, wire::kBierFixedBytes);
        wire::bits_and_copy(d + kL2 + wire::kBierFixedBytes, p.bitstring, t.fbm_of(plane, k),
                            t.bs_bytes);
        h->port = payload->port;
        ++ctx.counters.bier[t.counter_slot].copies[k];
        egress(ctx, nb.port, h);
    }
    ctx.counters.bier_copies += n;
}

// Delivers the payload (an IPv4 packet) to the station of one own bit. A unicast inner
// destination is the BFIR's placeholder (an INA result goes to every worker): it becomes the
// station's address. A multicast destination (a BIER group) stays, so the host's group socket
// takes it.
void deliver_local(LcoreContext& ctx, const dp::Snapshot& snap, const dp::BierAdjacency& host,
                   uint16_t slot, rte_mbuf* payload) {
    if (!host.resolved) [[unlikely]] {
        request_resolve(ctx, snap, host.ip, host.port);
        count_drop(ctx, dp::DropReason::neighbour_unresolved);
        return;
    }
    rte_mbuf* m = rte_pktmbuf_copy(payload, ctx.pool, 0, UINT32_MAX);
    auto* d = m != nullptr ? reinterpret_cast<uint8_t*>(rte_pktmbuf_prepend(m, kL2)) : nullptr;
    if (d == nullptr) [[unlikely]] {
        rte_pktmbuf_free(m);
        count_drop(ctx, dp::DropReason::bier_no_mbuf);
        return;
    }
    auto* ip = reinterpret_cast<rte_ipv4_hdr*>(d + kL2);
    const uint32_t excess = rte_pktmbuf_pkt_len(m) - kL2 - rte_be_to_cpu_16(ip->total_length);
    if (excess != 0) {
        rte_pktmbuf_trim(m, static_cast<uint16_t>(excess));  // padding of the BIER frame
    }
    const uint32_t dst = rte_be_to_cpu_32(ip->dst_addr);
    if ((dst >> 28) != 0xE) {
        const uint32_t old_dst = ip->dst_addr;
        const uint32_t new_dst = rte_cpu_to_be_32(host.ip);
        ip->dst_addr = new_dst;
        ip->hdr_checksum = net::checksum_update32(ip->hdr_checksum, old_dst, new_dst);
        // TCP and UDP checksums cover a pseudo-header holding the destination, so they change
        // as under NAT (RFC 3022 §4.2). Only a first fragment carries the transport header; its
        // checksum covers the whole datagram, so the same incremental patch is right there.
        const size_t ihl = (ip->version_ihl & 0x0f) * 4u;
        const bool first_fragment = (ip->fragment_offset & rte_cpu_to_be_16(0x1fff)) == 0;
        const uint8_t* l4_end = d + rte_pktmbuf_data_len(m);
        uint8_t* l4 = d + kL2 + ihl;
        if (first_fragment && ip->next_proto_id == IPPROTO_UDP && l4 + 8 <= l4_end) {
            auto* udp = reinterpret_cast<rte_udp_hdr*>(l4);
            if (udp->dgram_cksum != 0) {
                udp->dgram_cksum = net::checksum_update32(udp->dgram_cksum, old_dst, new_dst);
                if (udp->dgram_cksum == 0) {
                    udp->dgram_cksum = 0xffff;  // 0 means "no checksum" in UDP (RFC 768)
                }
            }
        } else if (first_fragment && ip->next_proto_id == IPPROTO_TCP && l4 + 18 <= l4_end) {
            uint16_t cksum;
            std::memcpy(&cksum, l4 + 16, sizeof cksum);
            cksum = net::checksum_update32(cksum, old_dst, new_dst);
            std::memcpy(l4 + 16, &cksum, sizeof cksum);
        }
    }
    write_eth(d, host.dst_mac, snap.ports[host.port].mac, RTE_ETHER_TYPE_IPV4);
    ++ctx.counters.bier[slot].delivered;
    ++ctx.counters.bier_delivered;
    egress(ctx, host.port, m);
}

// The payload of an own bit must be a sound IPv4 header: delivery rewrites it.
bool deliverable(LcoreContext& ctx, const BierSend& p, const rte_mbuf* payload) {
    if (p.proto != wire::bier_proto::kIpv4) {
        count_drop(ctx, dp::DropReason::bier_unsupported_proto);
        return false;
    }
    const size_t len = rte_pktmbuf_data_len(payload);
    const auto* ip = rte_pktmbuf_mtod(payload, const rte_ipv4_hdr*);
    const size_t ihl = len >= sizeof(rte_ipv4_hdr) ? (ip->version_ihl & 0x0f) * 4u : 0;
    const size_t total = len >= sizeof(rte_ipv4_hdr) ? rte_be_to_cpu_16(ip->total_length) : 0;
    if (ihl < sizeof(rte_ipv4_hdr) || (ip->version_ihl >> 4) != 4 || len < ihl || total < ihl ||
        total > rte_pktmbuf_pkt_len(payload)) {
        count_drop(ctx, dp::DropReason::ipv4_malformed);
        return false;
    }
    return true;
}

}  // namespace

void bier_forward(LcoreContext& ctx, const dp::Snapshot& snap, const BierSend& p,
                  rte_mbuf* payload) {
    const dp::BiftView& t = *p.bift;
    const size_t len = t.bs_bytes;
    dp::BierCounters& c = ctx.counters.bier[t.counter_slot];
    // RFC 8279 clears a bit with no neighbour as it meets it; with disjoint F-BMs per plane the
    // effect is that such bits are never copied, so they are only counted.
    c.bits_no_neighbour += wire::bits_popcount_andnot(p.bitstring, t.reachable_mask.data(), len);
    if (p.to_neighbours && t.n_neighbours != 0) {
        const uint16_t plane =
            t.n_planes == 1 ? 0 : static_cast<uint16_t>(p.entropy % t.n_planes);
        const uint32_t frame_len =
            static_cast<uint32_t>(kL2 + wire::kBierFixedBytes + len) + payload->pkt_len;
        uint16_t sel[dp::kMaxBierNeighbours];
        unsigned n = 0;
        for (uint16_t k = 0; k < t.n_neighbours; ++k) {
            if (wire::bits_intersect(p.bitstring, t.fbm_of(plane, k), len) &&
                neighbour_ready(ctx, snap, t, k, frame_len)) {
                sel[n++] = k;
            }
        }
        if (n != 0) {
            copy_to_neighbours(ctx, snap, p, plane, sel, n, payload);
        }
    }
    if (!t.local_bp.empty() && wire::bits_intersect(p.bitstring, t.local_mask.data(), len) &&
        deliverable(ctx, p, payload)) {
        for (size_t i = 0; i < t.local_bp.size(); ++i) {
            if (wire::bits_test_bp(p.bitstring, len, t.local_bp[i])) {
                deliver_local(ctx, snap, t.local_host[i], t.counter_slot, payload);
            }
        }
    }
}

}  // namespace ina::pipeline
