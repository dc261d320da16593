// SPDX-License-Identifier: Apache-2.0
// arp_input: replies in place, neighbour reports, bridging and malformed ARP.
#include "pipeline/arp_input.h"

#include <rte_arp.h>

#include "stage_util.h"

namespace ina::test {
namespace {

using pipeline::ArpEdge;
using pipeline::EdgeBatches;

constexpr rte_ether_addr kAsker{{0x02, 0x11, 0x22, 0x33, 0x44, 0x55}};

class ArpInput : public StageTest {
protected:
    Bytes request(uint32_t sip, uint32_t tip, const rte_ether_addr& sha = kAsker,
                  const rte_ether_addr& dst = kBroadcast) {
        return eth_frame(dst, sha, RTE_ETHER_TYPE_ARP,
                         arp_payload(RTE_ARP_OP_REQUEST, sha, sip, kZeroMac, tip));
    }
    Bytes reply(uint32_t sip, const rte_ether_addr& sha, uint32_t tip, uint16_t port) {
        return eth_frame(port_mac(port), sha, RTE_ETHER_TYPE_ARP,
                         arp_payload(RTE_ARP_OP_REPLY, sha, sip, port_mac(port), tip));
    }
    // Runs frames through arp_input; leaves the output in `out`.
    void run(std::vector<rte_mbuf*> in) {
        pipeline::arp_input(*ctx, *snap, in.data(), static_cast<uint16_t>(in.size()), out);
    }
    EdgeBatches<ArpEdge> out;

    void TearDown() override {
        free_all(out);
        StageTest::TearDown();
    }
};

TEST_F(ArpInput, RequestForOwnAddressIsAnsweredInPlace) {
    rte_mbuf* m = mbuf(request(ip4("10.0.1.9"), ip4("10.0.1.1")), kR0);
    const uint32_t len = rte_pktmbuf_pkt_len(m);
    run({m});
    EXPECT_EQ(out.size(ArpEdge::drop), 0);
    EXPECT_EQ(out.size(ArpEdge::bridge), 0);
    ASSERT_EQ(tx_count(kR0), 1);
    EXPECT_EQ(total_tx(), 1u);
    EXPECT_EQ(ctx->tx[kR0].pkts[0], m) << "the request mbuf itself becomes the reply";
    EXPECT_EQ(rte_pktmbuf_pkt_len(m), len);
    EXPECT_EQ(ctx->counters.arp_replies, 1u);
    EXPECT_EQ(total_drops(), 0u);

    const Bytes f = bytes_of(m);
    const auto* eth = reinterpret_cast<const rte_ether_hdr*>(f.data());
    EXPECT_TRUE(same_mac(eth->dst_addr, kAsker)) << mac_str(eth->dst_addr);
    EXPECT_TRUE(same_mac(eth->src_addr, port_mac(kR0))) << mac_str(eth->src_addr);
    EXPECT_EQ(get16(&f[12]), RTE_ETHER_TYPE_ARP);
    const uint8_t* a = &f[kEthLen];
    EXPECT_EQ(get16(&a[0]), 1) << "hardware type Ethernet";
    EXPECT_EQ(get16(&a[2]), 0x0800) << "protocol IPv4";
    EXPECT_EQ(a[4], 6);
    EXPECT_EQ(a[5], 4);
    EXPECT_EQ(get16(&a[6]), RTE_ARP_OP_REPLY);
    EXPECT_TRUE(std::equal(a + 8, a + 14, port_mac(kR0).addr_bytes)) << "sender MAC is ours";
    EXPECT_EQ(get32(&a[14]), ip4("10.0.1.1")) << "sender IP is the requested address";
    EXPECT_TRUE(std::equal(a + 18, a + 24, kAsker.addr_bytes)) << "target MAC is the asker";
    EXPECT_EQ(get32(&a[24]), ip4("10.0.1.9")) << "target IP is the asker's";

    // The asker is on our subnet and asked us: reported as a neighbour.
    auto ev = events();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].type, dp::EventType::neighbour_seen);
    EXPECT_EQ(ev[0].ip, ip4("10.0.1.9"));
    EXPECT_EQ(ev[0].port, kR0);
    EXPECT_TRUE(std::equal(ev[0].mac, ev[0].mac + 6, kAsker.addr_bytes));
    EXPECT_EQ(ctx->counters.arp_learned, 1u);
}

TEST_F(ArpInput, ReplyUsesTheIngressPortsOverriddenMacAndSecondaryAddress) {
    rte_mbuf* m = mbuf(request(ip4("10.0.3.9"), ip4("10.0.3.1"), kAsker, port_mac(kR1)), kR1);
    run({m});
    ASSERT_EQ(tx_count(kR1), 1);
    const Bytes f = bytes_of(m);
    EXPECT_TRUE(std::equal(&f[6], &f[12], port_mac(kR1).addr_bytes));
    EXPECT_TRUE(std::equal(&f[kEthLen + 8], &f[kEthLen + 14], port_mac(kR1).addr_bytes));
    EXPECT_EQ(get32(&f[kEthLen + 14]), ip4("10.0.3.1"));
}

TEST_F(ArpInput, RequestOnGroupPortForAnAddressOfTheGroupIsAnswered) {
    // 10.0.10.1 lives on g0; asked on g2 (same group), the switch answers from g2.
    rte_mbuf* m = mbuf(request(ip4("10.0.10.30"), ip4("10.0.10.1")), kG2);
    run({m});
    ASSERT_EQ(tx_count(kG2), 1);
    EXPECT_EQ(out.size(ArpEdge::bridge), 0);
    const Bytes f = bytes_of(m);
    EXPECT_EQ(get16(&f[kEthLen + 6]), RTE_ARP_OP_REPLY);
    EXPECT_EQ(get32(&f[kEthLen + 14]), ip4("10.0.10.1"));
    EXPECT_TRUE(std::equal(&f[kEthLen + 8], &f[kEthLen + 14], port_mac(kG2).addr_bytes));
    auto ev = events();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].type, dp::EventType::neighbour_seen);
    EXPECT_EQ(ev[0].port, kG2);
    EXPECT_EQ(ev[0].ip, ip4("10.0.10.30"));
    EXPECT_EQ(pipeline::owner_in_segment(*snap, kG2, ip4("10.0.10.1")), kG0);
    EXPECT_EQ(pipeline::owner_in_segment(*snap, kR0, ip4("10.0.10.1")), -1);
    EXPECT_EQ(pipeline::owner_in_segment(*snap, kR1, ip4("10.0.3.1")), kR1);
}

TEST_F(ArpInput, ReplyToUsIsConsumedAndReported) {
    rte_mbuf* m = mbuf(reply(ip4("10.0.2.77"), kAsker, ip4("10.0.2.1"), kR1), kR1);
    run({m});
    ASSERT_EQ(out.size(ArpEdge::drop), 1);
    EXPECT_EQ(out.at(ArpEdge::drop, 0), m);
    EXPECT_EQ(total_drops(), 0u) << "consumed, not a drop";
    EXPECT_EQ(total_tx(), 0u);
    EXPECT_EQ(ctx->counters.arp_replies, 0u);
    auto ev = events();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].type, dp::EventType::neighbour_seen);
    EXPECT_EQ(ev[0].ip, ip4("10.0.2.77"));
    EXPECT_EQ(ev[0].port, kR1);
    EXPECT_EQ(ev[0].group, 0);
    EXPECT_TRUE(std::equal(ev[0].mac, ev[0].mac + 6, kAsker.addr_bytes));
    EXPECT_EQ(ctx->counters.arp_learned, 1u);
}

TEST_F(ArpInput, ReportsAreRateLimited) {
    run({mbuf(reply(ip4("10.0.2.77"), kAsker, ip4("10.0.2.1"), kR1), kR1),
         mbuf(reply(ip4("10.0.2.77"), kAsker, ip4("10.0.2.1"), kR1), kR1)});
    EXPECT_EQ(events().size(), 1u);
    EXPECT_EQ(ctx->counters.arp_learned, 1u);
    // A different MAC for the same address is news.
    run({mbuf(reply(ip4("10.0.2.77"), kStranger, ip4("10.0.2.1"), kR1), kR1)});
    EXPECT_EQ(events().size(), 1u);
    // After the interval, the same report again.
    ctx->now_tsc += ctx->event_interval_tsc;
    run({mbuf(reply(ip4("10.0.2.77"), kAsker, ip4("10.0.2.1"), kR1), kR1)});
    EXPECT_EQ(events().size(), 1u);
    EXPECT_EQ(ctx->counters.arp_learned, 3u);
}

TEST_F(ArpInput, RequestForOtherAddressOnRoutedPortIsDropped) {
    rte_mbuf* m = mbuf(request(ip4("10.0.1.9"), ip4("10.0.1.50")), kR0);
    run({m});
    ASSERT_EQ(out.size(ArpEdge::drop), 1);
    EXPECT_EQ(out.at(ArpEdge::drop, 0), m);
    EXPECT_EQ(drops(dp::DropReason::arp_not_for_us), 1u);
    EXPECT_EQ(total_tx(), 0u);
    // Its sender may only refresh an existing entry.
    auto ev = events();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].type, dp::EventType::neighbour_refresh);
    EXPECT_EQ(ev[0].ip, ip4("10.0.1.9"));
    EXPECT_EQ(ev[0].port, kR0);
    // A request for an address of another port (not in this segment) is not ours here.
    run({mbuf(request(ip4("10.0.1.9"), ip4("10.0.2.1")), kR0)});
    EXPECT_EQ(drops(dp::DropReason::arp_not_for_us), 2u);
    EXPECT_EQ(total_tx(), 0u);
}

TEST_F(ArpInput, RequestForOtherAddressOnGroupPortIsBridged) {
    rte_mbuf* m = mbuf(request(ip4("10.0.10.30"), ip4("10.0.10.40")), kG1);
    const Bytes before = bytes_of(m);
    run({m});
    ASSERT_EQ(out.size(ArpEdge::bridge), 1);
    EXPECT_EQ(out.at(ArpEdge::bridge, 0), m);
    EXPECT_EQ(out.size(ArpEdge::drop), 0);
    EXPECT_EQ(total_drops(), 0u);
    EXPECT_EQ(bytes_of(m), before) << "bridged frames are not modified";
    auto ev = events();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].type, dp::EventType::neighbour_refresh);
    EXPECT_EQ(ev[0].port, kG1);
    // The dmz group has no addresses: its ARP is bridged and reports nothing.
    run({mbuf(request(ip4("10.50.0.1"), ip4("10.50.0.2")), kH0)});
    EXPECT_EQ(out.size(ArpEdge::bridge), 2);
    EXPECT_TRUE(events().empty());
}

TEST_F(ArpInput, GratuitousArpRefreshes) {
    // Gratuitous request (sender == target) from the static neighbour 10.0.2.2 on r1.
    rte_mbuf* g = mbuf(eth_frame(kBroadcast, kNbR1Gw, RTE_ETHER_TYPE_ARP,
                                 arp_payload(RTE_ARP_OP_REQUEST, kNbR1Gw, ip4("10.0.2.2"), kZeroMac,
                                             ip4("10.0.2.2"))),
                       kR1);
    // Gratuitous reply form, on the LAN.
    rte_mbuf* r = mbuf(eth_frame(kBroadcast, kHostA, RTE_ETHER_TYPE_ARP,
                                 arp_payload(RTE_ARP_OP_REPLY, kHostA, ip4("10.0.10.20"), kBroadcast,
                                             ip4("10.0.10.20"))),
                       kG1);
    run({g, r});
    auto ev = events();
    ASSERT_EQ(ev.size(), 2u);
    EXPECT_EQ(ev[0].type, dp::EventType::neighbour_refresh);
    EXPECT_EQ(ev[0].ip, ip4("10.0.2.2"));
    EXPECT_EQ(ev[0].port, kR1);
    EXPECT_TRUE(std::equal(ev[0].mac, ev[0].mac + 6, kNbR1Gw.addr_bytes));
    EXPECT_EQ(ev[1].type, dp::EventType::neighbour_refresh);
    EXPECT_EQ(ev[1].ip, ip4("10.0.10.20"));
    EXPECT_EQ(ev[1].port, kG1);
    EXPECT_EQ(out.size(ArpEdge::drop), 1);
    EXPECT_EQ(out.at(ArpEdge::drop, 0), g);
    EXPECT_EQ(out.size(ArpEdge::bridge), 1);
    EXPECT_EQ(out.at(ArpEdge::bridge, 0), r);
    EXPECT_EQ(drops(dp::DropReason::arp_not_for_us), 1u);
}

TEST_F(ArpInput, SendersThatAreNeverReported) {
    // Answered, but the sender is not reported when it is:
    run({
        // outside the port's subnets,
        mbuf(request(ip4("10.0.9.9"), ip4("10.0.1.1")), kR0),
        // an ARP probe (sender 0.0.0.0),
        mbuf(request(0, ip4("10.0.1.1")), kR0),
        // claiming our own address,
        mbuf(request(ip4("10.0.1.1"), ip4("10.0.1.1"), kAsker), kR0),
        // with a multicast or zero sender MAC.
        mbuf(request(ip4("10.0.1.9"), ip4("10.0.1.1"), mac("01:00:00:00:00:01")), kR0),
        mbuf(request(ip4("10.0.1.10"), ip4("10.0.1.1"), kZeroMac), kR0),
    });
    EXPECT_TRUE(events().empty());
    EXPECT_EQ(ctx->counters.arp_learned, 0u);
    EXPECT_EQ(ctx->counters.arp_replies, 5u);
    EXPECT_EQ(tx_count(kR0), 5);
}

TEST_F(ArpInput, RepliesFromSendersThatCannotBeLearnedAreCountedByReason) {
    run({
        mbuf(reply(ip4("10.0.9.9"), kAsker, ip4("10.0.1.1"), kR0), kR0),    // off the subnet
        mbuf(reply(0, kAsker, ip4("10.0.1.1"), kR0), kR0),                  // 0.0.0.0
        mbuf(reply(ip4("10.0.1.1"), kAsker, ip4("10.0.1.1"), kR0), kR0),    // our own address
        mbuf(reply(ip4("10.0.1.9"), mac("01:00:5e:00:00:01"), ip4("10.0.1.1"), kR0), kR0),
        mbuf(reply(ip4("10.0.1.10"), kZeroMac, ip4("10.0.1.1"), kR0), kR0),
        mbuf(reply(ip4("10.0.1.11"), kAsker, ip4("10.0.1.1"), kR0), kR0),   // a good one
    });
    EXPECT_EQ(drops(dp::DropReason::arp_sender_off_subnet), 1u);
    EXPECT_EQ(drops(dp::DropReason::arp_sender_unspecified), 1u);
    EXPECT_EQ(drops(dp::DropReason::arp_address_conflict), 1u);
    EXPECT_EQ(drops(dp::DropReason::arp_sender_bad_mac), 2u);
    EXPECT_EQ(total_drops(), 5u);
    EXPECT_EQ(ctx->counters.arp_learned, 1u) << "only the good sender";
    EXPECT_EQ(events().size(), 1u);
    EXPECT_EQ(out.size(ArpEdge::drop), 6) << "every reply to the switch is consumed";
    EXPECT_EQ(total_tx(), 0u);
}

TEST_F(ArpInput, MalformedArpIsDropped) {
    std::vector<Bytes> bad;
    Bytes base = request(ip4("10.0.1.9"), ip4("10.0.1.1"));
    Bytes truncated = base;
    truncated.resize(kEthLen + kArpLen - 1);
    bad.push_back(truncated);
    Bytes hrd = base;
    put16(&hrd[kEthLen + 0], 6);  // IEEE 802 hardware
    bad.push_back(hrd);
    Bytes pro = base;
    put16(&pro[kEthLen + 2], 0x86dd);
    bad.push_back(pro);
    Bytes hlen = base;
    hlen[kEthLen + 4] = 8;
    bad.push_back(hlen);
    Bytes plen = base;
    plen[kEthLen + 5] = 16;
    bad.push_back(plen);
    Bytes op = base;
    put16(&op[kEthLen + 6], 3);  // RARP request
    bad.push_back(op);
    Bytes op0 = base;
    put16(&op0[kEthLen + 6], 0);
    bad.push_back(op0);
    std::vector<rte_mbuf*> in;
    for (const auto& b : bad) {
        in.push_back(mbuf(b, kR0));
    }
    run(in);
    EXPECT_EQ(out.size(ArpEdge::drop), bad.size());
    EXPECT_EQ(drops(dp::DropReason::arp_malformed), bad.size());
    EXPECT_EQ(total_drops(), bad.size());
    EXPECT_EQ(total_tx(), 0u);
    EXPECT_TRUE(events().empty());
    // Malformed ARP on a group port is dropped too, not bridged.
    run({mbuf(hrd, kG0)});
    EXPECT_EQ(out.size(ArpEdge::bridge), 0);
    EXPECT_EQ(drops(dp::DropReason::arp_malformed), bad.size() + 1);
}

TEST_F(ArpInput, PaddedFramesAreFine) {
    // Minimum-size Ethernet frames carry 18 bytes of padding after the ARP message.
    Bytes f = request(ip4("10.0.1.9"), ip4("10.0.1.1"));
    f.resize(60, 0);
    rte_mbuf* m = mbuf(f, kR0);
    run({m});
    ASSERT_EQ(tx_count(kR0), 1);
    EXPECT_EQ(rte_pktmbuf_pkt_len(m), 60u);
}

}  // namespace
}  // namespace ina::test
