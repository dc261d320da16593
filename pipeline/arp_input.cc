// SPDX-License-Identifier: Apache-2.0
#include "pipeline/arp_input.h"

#include <rte_arp.h>
#include <rte_ether.h>

#include <cstring>

#include "pipeline/egress.h"

namespace ina::pipeline {

int owner_in_segment(const dp::Snapshot& snap, uint16_t port, uint32_t ip) {
    return snap.segment_owner(port, ip);
}

namespace {

void report_sender(LcoreContext& ctx, dp::EventType type, uint32_t ip, const rte_ether_addr& mac,
                   uint16_t port) {
    uint64_t key = static_cast<uint64_t>(ip) | static_cast<uint64_t>(port) << 32 |
                   static_cast<uint64_t>(type) << 48;
    uint64_t mac_bits = 0;
    std::memcpy(&mac_bits, mac.addr_bytes, 6);
    key ^= mac_bits * 0x9E3779B97F4A7C15ull;
    if (!ctx.recent.should_report(key, ctx.now_tsc, ctx.event_interval_tsc)) {
        return;
    }
    dp::Event ev{};
    ev.type = type;
    ev.port = port;
    ev.ip = ip;
    std::memcpy(ev.mac, mac.addr_bytes, 6);
    post_event(ctx, ev);
    ++ctx.counters.arp_learned;
}

}  // namespace

void arp_input(LcoreContext& ctx, const dp::Snapshot& snap, rte_mbuf** pkts, uint16_t n,
               EdgeBatches<ArpEdge>& out) {
    for (uint16_t i = 0; i < n; ++i) {
        rte_mbuf* m = pkts[i];
        const uint16_t port = m->port;
        const bool in_group = snap.ports[port].l2_group != dp::kNoGroup;
        if (rte_pktmbuf_data_len(m) < sizeof(rte_ether_hdr) + sizeof(rte_arp_hdr)) {
            count_drop(ctx, dp::DropReason::arp_malformed);
            out.push(ArpEdge::drop, m);
            continue;
        }
        auto* eth = rte_pktmbuf_mtod(m, rte_ether_hdr*);
        auto* arp = reinterpret_cast<rte_arp_hdr*>(eth + 1);
        const uint16_t op = rte_be_to_cpu_16(arp->arp_opcode);
        if (arp->arp_hardware != rte_cpu_to_be_16(RTE_ARP_HRD_ETHER) ||
            arp->arp_protocol != rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4) || arp->arp_hlen != 6 ||
            arp->arp_plen != 4 || (op != RTE_ARP_OP_REQUEST && op != RTE_ARP_OP_REPLY)) {
            count_drop(ctx, dp::DropReason::arp_malformed);
            out.push(ArpEdge::drop, m);
            continue;
        }
        const uint32_t sip = rte_be_to_cpu_32(arp->arp_data.arp_sip);
        const uint32_t tip = rte_be_to_cpu_32(arp->arp_data.arp_tip);
        const rte_ether_addr sha = arp->arp_data.arp_sha;
        const int owner = owner_in_segment(snap, port, tip);
        // Why the sender may not be learned (count: it may).
        dp::DropReason bad_sender = dp::DropReason::count;
        if (owner_in_segment(snap, port, sip) >= 0) {
            bad_sender = dp::DropReason::arp_address_conflict;  // RFC 5227: someone has our address
        } else if (rte_is_multicast_ether_addr(&sha) || rte_is_zero_ether_addr(&sha)) {
            bad_sender = dp::DropReason::arp_sender_bad_mac;
        } else if (sip == 0) {
            bad_sender = dp::DropReason::arp_sender_unspecified;  // a probe (RFC 5227) if a request
        } else if (!snap.segment_has_subnet(port, sip)) {
            bad_sender = dp::DropReason::arp_sender_off_subnet;
        }
        if (bad_sender == dp::DropReason::count) {
            // An ARP to us creates the entry (RFC 826 merge); others only refresh an entry the
            // control plane already has, so a broadcast storm cannot fill the table.
            report_sender(ctx,
                          owner >= 0 ? dp::EventType::neighbour_seen
                                     : dp::EventType::neighbour_refresh,
                          sip, sha, port);
        }
        if (owner < 0) {
            if (in_group) {
                out.push(ArpEdge::bridge, m);
            } else {
                count_drop(ctx, dp::DropReason::arp_not_for_us);
                out.push(ArpEdge::drop, m);
            }
            continue;
        }
        // A reply to us is consumed: its sender was reported above, or is counted here by why it
        // was not. A request is answered whoever asks (probes, off-subnet hosts, and a host
        // claiming our address, which the reply defends it against); its sender is only learned
        // when valid.
        if (op == RTE_ARP_OP_REPLY) {
            if (bad_sender != dp::DropReason::count) {
                count_drop(ctx, bad_sender);
            }
            out.push(ArpEdge::drop, m);
            continue;
        }
        // Turn the request into the reply in place: no allocation, no copy.
        const rte_ether_addr& own = snap.ports[port].mac;
        arp->arp_opcode = rte_cpu_to_be_16(RTE_ARP_OP_REPLY);
        arp->arp_data.arp_tha = sha;
        arp->arp_data.arp_tip = arp->arp_data.arp_sip;
        arp->arp_data.arp_sha = own;
        arp->arp_data.arp_sip = rte_cpu_to_be_32(tip);
        eth->dst_addr = sha;
        eth->src_addr = own;
        ++ctx.counters.arp_replies;
        egress(ctx, port, m);
    }
}

}  // namespace ina::pipeline
