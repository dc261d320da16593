// SPDX-License-Identifier: Apache-2.0
// process_burst end to end: every mbuf of a mixed burst ends up queued for TX or freed.
#include "pipeline/pipeline.h"

#include <rte_arp.h>
#include <rte_icmp.h>
#include <rte_ip.h>
#include <rte_mempool.h>

#include "stage_util.h"

namespace ina::test {
namespace {

constexpr rte_ether_addr kClient{{0x02, 0x77, 0x00, 0x00, 0x00, 0x01}};

class Pipeline : public StageTest {
protected:
    Bytes udp_to(uint16_t in, uint32_t src, uint32_t dst, uint8_t ttl = 64) {
        return eth_frame(port_mac(in), kClient, RTE_ETHER_TYPE_IPV4,
                         ipv4_packet(src, dst, IPPROTO_UDP,
                                     udp_datagram(src, dst, 4000, 5000, payload_of(40)), ttl));
    }
    Bytes arp_request(const rte_ether_addr& sha, uint32_t sip, uint32_t tip) {
        return eth_frame(kBroadcast, sha, RTE_ETHER_TYPE_ARP,
                         arp_payload(RTE_ARP_OP_REQUEST, sha, sip, kZeroMac, tip));
    }
    void run(std::vector<rte_mbuf*> in) {
        pipeline::process_burst(*ctx, *snap, in.data(), static_cast<uint16_t>(in.size()));
    }
    void free_all_tx() {
        for (uint16_t p = 0; p < dp::kMaxPorts; ++p) {
            free_mbufs(take_tx(p));
        }
    }
};

TEST_F(Pipeline, MixedBurstEndToEnd) {
    Bytes bad_ck = udp_to(kR0, ip4("10.0.1.9"), ip4("192.168.1.1"));
    bad_ck[kEthLen + 10] ^= 0x5a;
    std::vector<rte_mbuf*> in = {
        /* 0 */ mbuf(arp_request(kClient, ip4("10.0.1.9"), ip4("10.0.1.1")), kR0),  // reply r0
        /* 1 */ mbuf(udp_to(kR0, ip4("10.0.1.9"), ip4("192.168.1.9")), kR0),         // -> r1
        /* 2 */ mbuf(eth_frame(port_mac(kR1), kClient, RTE_ETHER_TYPE_IPV4,
                               ipv4_packet(ip4("10.0.2.9"), ip4("10.0.2.1"), IPPROTO_ICMP,
                                           icmp_echo(8, 1, 1, payload_of(32)))),
                     kR1),                                                             // echo r1
        /* 3 */ mbuf(eth_frame(kStranger, kClient, 0x88b5, payload_of(50)), kG0),     // flood
        /* 4 */ mbuf(Bytes(10, 0xab), kR0),                                            // runt
        /* 5 */ mbuf(udp_to(kR0, ip4("10.0.1.9"), ip4("192.168.1.9")), kR1),         // not us
        /* 6 */ mbuf(udp_to(kR0, ip4("10.0.1.9"), ip4("10.99.1.1")), kR0),           // unresolved
        /* 7 */ mbuf(udp_to(kR0, ip4("10.0.1.9"), ip4("10.0.1.1")), kR0),            // local UDP
        /* 8 */ mbuf(arp_request(kHostA, ip4("10.0.10.30"), ip4("10.0.10.40")), kG1), // ARP flood
        /* 9 */ mbuf(arp_request(kClient, ip4("10.0.1.9"), ip4("10.0.1.77")), kR0),  // ARP not us
        /* 10 */ mbuf(eth_frame(kHostA, kHostB, 0x88b5, payload_of(70)), kG0),        // -> g1
        /* 11 */ mbuf(bad_ck, kR0),                                                    // bad ck
        /* 12 */ mbuf(udp_to(kR0, ip4("10.0.1.9"), ip4("192.168.5.3"), 1), kR0),     // ttl
        /* 13 */ mbuf(udp_to(kR1, ip4("10.0.2.9"), ip4("10.0.10.20")), kR1),         // -> g1
    };
    const auto orig = in;
    ASSERT_EQ(in_use(), in.size());
    run(in);

    // Where everything went.
    ASSERT_EQ(tx_count(kR0), 1);
    EXPECT_EQ(ctx->tx[kR0].pkts[0], orig[0]);
    ASSERT_EQ(tx_count(kR1), 2);
    EXPECT_EQ(ctx->tx[kR1].pkts[0], orig[1]);  // routed stage runs before local
    EXPECT_EQ(ctx->tx[kR1].pkts[1], orig[2]);
    ASSERT_EQ(tx_count(kG0), 1);
    EXPECT_EQ(ctx->tx[kG0].pkts[0], orig[8]);
    ASSERT_EQ(tx_count(kG1), 3);
    EXPECT_EQ(ctx->tx[kG1].pkts[0], orig[13]);  // routed first, then the bridge
    EXPECT_EQ(ctx->tx[kG1].pkts[1], orig[3]);
    EXPECT_EQ(ctx->tx[kG1].pkts[2], orig[10]);
    ASSERT_EQ(tx_count(kG2), 2);
    EXPECT_EQ(ctx->tx[kG2].pkts[0], orig[3]);
    EXPECT_EQ(ctx->tx[kG2].pkts[1], orig[8]);
    EXPECT_EQ(total_tx(), 9u);
    EXPECT_EQ(rte_mbuf_refcnt_read(orig[3]), 2);
    EXPECT_EQ(rte_mbuf_refcnt_read(orig[8]), 2);

    // What was counted.
    const auto& c = ctx->counters;
    EXPECT_EQ(c.arp_replies, 1u);
    EXPECT_EQ(c.routed, 2u);
    EXPECT_EQ(c.icmp_echo_replies, 1u);
    EXPECT_EQ(c.flooded, 2u);
    EXPECT_EQ(c.bridged, 1u);
    EXPECT_EQ(drops(dp::DropReason::runt), 1u);
    EXPECT_EQ(drops(dp::DropReason::not_for_us), 1u);
    EXPECT_EQ(drops(dp::DropReason::neighbour_unresolved), 1u);
    EXPECT_EQ(drops(dp::DropReason::local_unsupported), 1u);
    EXPECT_EQ(drops(dp::DropReason::arp_not_for_us), 1u);
    EXPECT_EQ(drops(dp::DropReason::ipv4_bad_checksum), 1u);
    EXPECT_EQ(drops(dp::DropReason::ttl_exceeded), 1u);
    EXPECT_EQ(total_drops(), 7u);

    // What the control plane heard.
    int learn = 0, seen = 0, refresh = 0, resolve = 0;
    for (const auto& ev : events()) {
        switch (ev.type) {
            case dp::EventType::fdb_learn:
                ++learn;
                break;
            case dp::EventType::neighbour_seen:
                ++seen;
                EXPECT_EQ(ev.ip, ip4("10.0.1.9"));
                break;
            case dp::EventType::neighbour_refresh:
                ++refresh;
                break;
                break;
            case dp::EventType::resolve_request:
                ++resolve;
                EXPECT_EQ(ev.ip, ip4("10.0.2.50"));
                break;
            case dp::EventType::neighbour6_seen:
                ADD_FAILURE() << "no IPv6 in this burst";
                break;
        }
    }
    EXPECT_EQ(learn, 1) << "kClient is new on g0; kHostB (g0) and kHostA (g1) are known";
    EXPECT_EQ(seen, 1);
    EXPECT_EQ(refresh, 2);  // the LAN ARP (10.0.10.30) and the ARP for 10.0.1.77
    EXPECT_EQ(resolve, 1);

    // Drops were freed at once; the rest are freed by TX.
    EXPECT_EQ(in_use(), 7u);
    free_all_tx();
    EXPECT_EQ(in_use(), 0u) << "no mbuf leaked";
}

TEST_F(Pipeline, ManyBurstsLeaveNothingBehind) {
    // 200 bursts of up to 64 packets cycling through every path; TX is drained after each.
    const std::vector<Bytes> kinds = {
        arp_request(kClient, ip4("10.0.1.9"), ip4("10.0.1.1")),
        udp_to(kR0, ip4("10.0.1.9"), ip4("192.168.1.9")),
        eth_frame(port_mac(kR1), kClient, RTE_ETHER_TYPE_IPV4,
                  ipv4_packet(ip4("10.0.2.9"), ip4("10.0.2.1"), IPPROTO_ICMP,
                              icmp_echo(8, 1, 1, payload_of(32)))),
        eth_frame(kBroadcast, kHostB, 0x88b5, payload_of(50)),
        Bytes(5, 1),
        udp_to(kR0, ip4("10.0.1.9"), ip4("8.8.8.8")),
        udp_to(kR0, ip4("10.0.1.9"), ip4("10.99.1.1")),
        eth_frame(kHostA, kHostB, 0x88b5, payload_of(70)),
        arp_request(kHostA, ip4("10.0.10.30"), ip4("10.0.10.40")),
        eth_frame(kHostC, kStranger, 0x88b5, payload_of(70)),
    };
    const std::vector<uint16_t> in_port = {kR0, kR0, kR1, kG0, kR0, kR0, kR0, kG0, kG2, kH0};
    for (int burst = 0; burst < 200; ++burst) {
        const auto n = static_cast<uint16_t>(1 + (burst * 37) % pipeline::kMaxBurst);
        std::vector<rte_mbuf*> in;
        for (uint16_t i = 0; i < n; ++i) {
            const size_t k = (static_cast<size_t>(burst) * 7 + i) % kinds.size();
            in.push_back(mbuf(kinds[k], in_port[k]));
        }
        run(in);
        for (uint16_t p = 0; p < dp::kMaxPorts; ++p) {
            ASSERT_LE(tx_count(p), pipeline::kMaxBurst);
        }
        free_all_tx();
        ASSERT_EQ(in_use(), 0u) << "burst " << burst;
        events();
    }
    const auto& c = ctx->counters;
    EXPECT_GT(c.arp_replies, 0u);
    EXPECT_GT(c.routed, 0u);
    EXPECT_GT(c.icmp_echo_replies, 0u);
    EXPECT_GT(c.flooded, 0u);
    EXPECT_GT(c.bridged, 0u);
    EXPECT_EQ(c.drops[static_cast<size_t>(dp::DropReason::tx_full)], 0u);
}

TEST_F(Pipeline, EmptyBurstIsANoOp) {
    pipeline::process_burst(*ctx, *snap, nullptr, 0);
    EXPECT_EQ(total_tx(), 0u);
    EXPECT_EQ(total_drops(), 0u);
}

TEST_F(Pipeline, BridgeKeepsArrivalOrderAcrossArpAndOtherFrames) {
    // An ARP that arp_input hands to the bridge must not fall behind later frames of the burst
    // (802.1D: no reordering between the same pair of stations).
    std::vector<rte_mbuf*> in = {
        mbuf(eth_frame(kBroadcast, kHostA, 0x88b5, payload_of(50)), kG0),
        mbuf(arp_request(kHostA, ip4("10.0.10.30"), ip4("10.0.10.40")), kG0),
        mbuf(eth_frame(kBroadcast, kHostA, 0x88b5, payload_of(60)), kG0),
        mbuf(arp_request(kHostA, ip4("10.0.10.30"), ip4("10.0.10.41")), kG0),
        mbuf(eth_frame(kBroadcast, kHostA, 0x88b5, payload_of(70)), kG0),
    };
    const auto orig = in;
    run(in);
    const auto out = take_tx(kG1);
    ASSERT_EQ(out.size(), orig.size());
    for (size_t i = 0; i < orig.size(); ++i) {
        EXPECT_EQ(out[i], orig[i]) << "frame " << i << " left out of order";
    }
    free_mbufs(out);
    free_all_tx();
    EXPECT_EQ(in_use(), 0u);
}

TEST_F(Pipeline, FullBurstOfFloodsStaysWithinTheBuffers) {
    // 64 broadcasts from g0: each of g1 and g2 receives 64 references. With TX disabled
    // (stage-test mode) a full buffer is dropped as tx_full; either way every reference is
    // accounted for and released exactly once.
    std::vector<rte_mbuf*> in;
    for (int i = 0; i < pipeline::kMaxBurst; ++i) {
        in.push_back(mbuf(eth_frame(kBroadcast, kHostB, 0x88b5, payload_of(46)), kG0));
    }
    run(in);
    EXPECT_EQ(ctx->counters.flooded, 64u);
    EXPECT_EQ(tx_count(kG1) + ctx->counters.ports[kG1].tx_dropped, 64u);
    EXPECT_EQ(tx_count(kG2) + ctx->counters.ports[kG2].tx_dropped, 64u);
    free_all_tx();
    EXPECT_EQ(in_use(), 0u);
}

}  // namespace
}  // namespace ina::test
