// SPDX-License-Identifier: Apache-2.0
#include "pipeline/local_input.h"

#include <rte_icmp.h>
#include <rte_ip.h>

#include "net/checksum.h"
#include "pipeline/mbuf_chain.h"
#include "pipeline/egress.h"

namespace ina::pipeline {

void local_input(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n,
                 EdgeBatches<LocalEdge>& out) {
    for (uint16_t i = 0; i < n; ++i) {
        rte_mbuf* m = pkts[i];
        auto* eth = rte_pktmbuf_mtod(m, rte_ether_hdr*);
        auto* ip = reinterpret_cast<rte_ipv4_hdr*>(eth + 1);
        const uint32_t ihl = (ip->version_ihl & 0x0f) * 4u;
        const uint32_t total = rte_be_to_cpu_16(ip->total_length);
        const bool fragment = (ip->fragment_offset & rte_cpu_to_be_16(0x3fff)) != 0;
        if (ip->next_proto_id != IPPROTO_ICMP || fragment ||
            total < ihl + sizeof(rte_icmp_hdr) ||
            rte_pktmbuf_pkt_len(m) < sizeof(rte_ether_hdr) + total) {
            count_drop(ctx, dp::DropReason::local_unsupported);
            out.push(LocalEdge::drop, m);
            continue;
        }
        auto* icmp = reinterpret_cast<rte_icmp_hdr*>(reinterpret_cast<uint8_t*>(ip) + ihl);
        if (icmp->icmp_type != RTE_IP_ICMP_ECHO_REQUEST || icmp->icmp_code != 0 ||
            !sum_ok(m, static_cast<uint32_t>(sizeof(rte_ether_hdr) + ihl), total - ihl)) {
            count_drop(ctx, dp::DropReason::local_unsupported);
            out.push(LocalEdge::drop, m);
            continue;
        }
        // Echo reply in place: only the type byte changes in the ICMP message (its header is in
        // the first segment: eth_input gathered the headers there).
        const uint16_t old_word = static_cast<uint16_t>(rte_cpu_to_be_16(
            static_cast<uint16_t>(icmp->icmp_type << 8 | icmp->icmp_code)));
        icmp->icmp_type = RTE_IP_ICMP_ECHO_REPLY;
        const uint16_t new_word = static_cast<uint16_t>(rte_cpu_to_be_16(
            static_cast<uint16_t>(icmp->icmp_type << 8 | icmp->icmp_code)));
        icmp->icmp_cksum = net::checksum_update16(icmp->icmp_cksum, old_word, new_word);
        const rte_be32_t requester = ip->src_addr;
        ip->src_addr = ip->dst_addr;
        ip->dst_addr = requester;
        ip->time_to_live = 64;
        ip->hdr_checksum = 0;
        ip->hdr_checksum = net::internet_checksum(ip, ihl);
        eth->dst_addr = eth->src_addr;
        eth->src_addr = snap.ports[m->port].mac;
        ++ctx.counters.icmp_echo_replies;
        egress(ctx, m->port, m);
    }
}

}  // namespace ina::pipeline
