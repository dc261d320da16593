// SPDX-License-Identifier: Apache-2.0
#include "pipeline/bier_input.h"

#include <cstring>

#include "pipeline/bier_forward.h"
#include "pipeline/mbuf_chain.h"
#include "wire/bier_header.h"

namespace ina::pipeline {

namespace {

constexpr size_t kL2 = sizeof(rte_ether_hdr);

}  // namespace

void bier_input(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n,
                EdgeBatches<BierEdge>& out) {
    for (uint16_t i = 0; i < n; ++i) {
        rte_mbuf* m = pkts[i];
        out.push(BierEdge::drop, m);  // every path below ends with this mbuf released
        // eth_input gathered kHeadBytes in the first segment, enough for the BIFT-id.
        const auto bift_id = wire::peek_bift_id(rte_pktmbuf_mtod_offset(m, const uint8_t*, kL2),
                                                rte_pktmbuf_data_len(m) - kL2);
        if (!bift_id) [[unlikely]] {
            count_drop(ctx, dp::DropReason::bier_malformed);
            continue;
        }
        const dp::BiftView* t = snap.bift(*bift_id);
        if (t == nullptr) [[unlikely]] {
            count_drop(ctx, dp::DropReason::bier_unknown_bift);
            continue;
        }
        dp::BierCounters& c = ctx.counters.bier[t->counter_slot];
        // The whole header (its BitString is up to 512 bytes) and the inner IPv4 and transport
        // headers a BFER rewrites must sit in the first segment too.
        if (!pull_up(m, static_cast<uint32_t>(kL2 + wire::kBierFixedBytes + t->bs_bytes +
                                              kHeadBytes))) [[unlikely]] {
            count_drop(ctx, dp::DropReason::chain_unreadable);
            continue;
        }
        const auto* hdr = rte_pktmbuf_mtod_offset(m, const uint8_t*, kL2);
        const size_t avail = rte_pktmbuf_data_len(m) - kL2;
        const auto parsed = wire::parse_bier_header(hdr, avail, t->bsl_bits);
        if (!parsed.packet) [[unlikely]] {
            ++c.malformed[static_cast<size_t>(parsed.error)];
            count_drop(ctx, dp::DropReason::bier_malformed);
            continue;
        }
        ++c.packets;
        const wire::BierParsed& b = *parsed.packet;
        const uint8_t ttl = b.header.ttl;
        // A TTL of 1 or 0 leaves nothing to give a neighbour; own bits are still delivered.
        const bool to_neighbours = ttl > 1;
        if (!to_neighbours && !wire::bits_subset(b.bitstring, t->local_mask.data(), t->bs_bytes)) {
            ++c.ttl_expired;
            count_drop(ctx, dp::DropReason::bier_ttl_expired);
        }
        uint8_t fixed[wire::kBierFixedBytes];
        std::memcpy(fixed, hdr, sizeof fixed);
        wire::bier_set_ttl(fixed, static_cast<uint8_t>(to_neighbours ? ttl - 1 : 0));
        // The BitString stays readable where it is: nothing writes into this buffer, and the
        // mbuf (adjusted to its payload) lives until the clones made below are sent.
        rte_pktmbuf_adj(m, static_cast<uint16_t>(kL2 + b.header_bytes()));
        bier_forward(ctx, snap,
                     BierSend{t, fixed, b.bitstring, b.header.entropy, b.header.proto,
                              to_neighbours},
                     m);
    }
}

}  // namespace ina::pipeline
