// SPDX-License-Identifier: Apache-2.0
#include "pipeline/bier_encap.h"

#include <rte_ip.h>
#include <rte_udp.h>

#include "ina/protocol.h"
#include "pipeline/bier_forward.h"
#include "pipeline/ipv4_forward.h"
#include "wire/bier_header.h"

namespace ina::pipeline {

namespace {

constexpr size_t kL2 = sizeof(rte_ether_hdr);

// Sends `m` (adjusted to the inner IPv4 packet) to every target; the caller frees `m`.
void encapsulate(LcoreContext& ctx, const dp::Snapshot& snap,
                 const std::vector<dp::BierTarget>& targets, uint32_t entropy, rte_mbuf* m) {
    for (const dp::BierTarget& target : targets) {
        const dp::BiftView& t = snap.bifts[target.bift];
        wire::BierHeader h;
        h.bift_id = t.bift_id;
        h.ttl = snap.bier_ttl;
        h.bsl = t.bsl_code;
        h.entropy = entropy & wire::kMaxEntropy;
        h.proto = wire::bier_proto::kIpv4;
        h.bfir_id = snap.bier_bfr_id;
        uint8_t fixed[wire::kBierFixedBytes];
        wire::write_bier_fixed(fixed, sizeof fixed, h);
        ++ctx.counters.bier[t.counter_slot].packets;
        bier_forward(ctx, snap, BierSend{&t, fixed, target.bits.data(), h.entropy, h.proto, true},
                     m);
    }
}

// A flow hash for a multicast packet's entropy: its source and group (as numbers, so the value
// does not depend on the host's byte order). Packets of one flow share it (RFC 8296).
uint32_t flow_entropy(const rte_ipv4_hdr* ip) {
    const uint32_t x = rte_be_to_cpu_32(ip->src_addr) ^
                       (rte_be_to_cpu_32(ip->dst_addr) * 0x9e3779b1u);
    return (x ^ (x >> 15)) & wire::kMaxEntropy;
}

}  // namespace

void bier_encap_results(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n,
                        EdgeBatches<BierEncapEdge>& out) {
    constexpr size_t kIna = kL2 + sizeof(rte_ipv4_hdr) + sizeof(rte_udp_hdr);
    for (uint16_t i = 0; i < n; ++i) {
        rte_mbuf* m = pkts[i];
        out.push(BierEncapEdge::drop, m);
        // ina_input wrote this frame a moment ago (20-byte IPv4 header, UDP, INA header); a
        // result larger than one mbuf continues in further segments.
        const uint32_t ina_len = rte_pktmbuf_pkt_len(m) - static_cast<uint32_t>(kIna);
        const void* ina = ina_len <= ctx.scratch.size()
                              ? rte_pktmbuf_read(m, kIna, ina_len, ctx.scratch.data())
                              : nullptr;
        const auto parsed = ina != nullptr
                                ? proto::parse(static_cast<const uint8_t*>(ina), ina_len)
                                : proto::ParseResult{};
        const dp::InaJobView* job =
            parsed.packet ? snap.ina_job(parsed.packet->header.job_id) : nullptr;
        if (job == nullptr || job->bier_targets.empty()) [[unlikely]] {
            count_drop(ctx, dp::DropReason::ina_no_mbuf);  // cannot happen: ina_input checked
            continue;
        }
        rte_pktmbuf_adj(m, kL2);
        encapsulate(ctx, snap, job->bier_targets, parsed.packet->header.seq, m);
    }
}

void bier_encap_groups(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n,
                       EdgeBatches<BierEncapEdge>& out) {
    for (uint16_t i = 0; i < n; ++i) {
        rte_mbuf* m = pkts[i];
        out.push(BierEncapEdge::drop, m);
        if (const dp::DropReason bad = ipv4_check(m); bad != dp::DropReason::count) {
            count_drop(ctx, bad);
            continue;
        }
        auto* ip = rte_pktmbuf_mtod_offset(m, rte_ipv4_hdr*, kL2);
        const uint32_t dst = rte_be_to_cpu_32(ip->dst_addr);
        if ((dst >> 8) == 0xE00000) {
            // 224.0.0.0/24 (IGMP, routing protocols) is link-local: never routed, never carried.
            count_drop(ctx, dp::DropReason::not_for_us);
            continue;
        }
        const dp::BierGroupView* g = snap.bier_group(dst);
        if (g == nullptr) {
            count_drop(ctx, dp::DropReason::mcast_no_group);
            continue;
        }
        // The BFIR is the group's first-hop router: one IP hop, as routing would count it.
        if (ip->time_to_live <= 1) {
            count_drop(ctx, dp::DropReason::ttl_exceeded);
            continue;
        }
        ipv4_decrement_ttl(ip);
        ++ctx.counters.mcast_encapsulated;
        const uint32_t entropy = flow_entropy(ip);
        rte_pktmbuf_adj(m, kL2);
        // Ethernet padding of a short frame is not part of the packet the BFERs deliver.
        const uint16_t total = rte_be_to_cpu_16(ip->total_length);
        if (rte_pktmbuf_pkt_len(m) > total) {
            rte_pktmbuf_trim(m, static_cast<uint16_t>(rte_pktmbuf_pkt_len(m) - total));
        }
        encapsulate(ctx, snap, g->targets, entropy, m);
    }
}

}  // namespace ina::pipeline
