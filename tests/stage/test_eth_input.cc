// SPDX-License-Identifier: Apache-2.0
// eth_input: classification by destination MAC and ethertype, and source learning on L2 ports.
#include "pipeline/eth_input.h"

#include "stage_util.h"

namespace ina::test {
namespace {

using pipeline::EdgeBatches;
using pipeline::EthEdge;

class EthInput : public StageTest {
protected:
    // Runs one frame through eth_input and returns the edge it took.
    EthEdge classify(const Bytes& frame, uint16_t port) {
        rte_mbuf* m = mbuf(frame, port);
        EdgeBatches<EthEdge> out;
        pipeline::eth_input(*ctx, *snap, &m, 1, out);
        EthEdge edge = EthEdge::count;
        int found = 0;
        for (auto e : {EthEdge::arp, EthEdge::ipv4, EthEdge::bridge, EthEdge::drop}) {
            if (out.size(e) == 1) {
                EXPECT_EQ(out.at(e, 0), m);
                edge = e;
                ++found;
            }
        }
        EXPECT_EQ(found, 1) << "a frame leaves by exactly one edge";
        free_all(out);
        return edge;
    }
    Bytes ip_frame(const rte_ether_addr& dst, const rte_ether_addr& src) {
        return eth_frame(dst, src, RTE_ETHER_TYPE_IPV4,
                         ipv4_packet(ip4("10.0.1.9"), ip4("192.168.1.1"), 17, payload_of(20)));
    }
};

TEST_F(EthInput, RuntIsDropped) {
    Bytes f = ip_frame(port_mac(kR0), kStranger);
    f.resize(13);
    EXPECT_EQ(classify(f, kR0), EthEdge::drop);
    EXPECT_EQ(drops(dp::DropReason::runt), 1u);
    EXPECT_EQ(total_drops(), 1u);
    // Exactly an Ethernet header is not a runt for eth_input.
    f.resize(14);
    EXPECT_EQ(classify(f, kR0), EthEdge::ipv4);
    EXPECT_EQ(classify(Bytes{}, kR0), EthEdge::drop);
    EXPECT_EQ(drops(dp::DropReason::runt), 2u);
}

TEST_F(EthInput, PortOutsideTheSnapshotIsDropped) {
    EXPECT_EQ(classify(ip_frame(port_mac(kR0), kStranger), 8), EthEdge::drop);
    EXPECT_EQ(classify(ip_frame(port_mac(kR0), kStranger), 31), EthEdge::drop);
    EXPECT_EQ(drops(dp::DropReason::runt), 2u);
}

TEST_F(EthInput, UnicastForAnotherMacOnRoutedPortIsNotForUs) {
    EXPECT_EQ(classify(ip_frame(kStranger, kHostA), kR0), EthEdge::drop);
    // Another of the switch's own MACs is still "not for us" on this port.
    EXPECT_EQ(classify(ip_frame(port_mac(kR1), kHostA), kR0), EthEdge::drop);
    // Broadcast IPv4 and multicast on a routed port are not forwarded either.
    EXPECT_EQ(classify(ip_frame(kBroadcast, kHostA), kR0), EthEdge::drop);
    EXPECT_EQ(classify(ip_frame(mac("01:00:5e:00:00:05"), kHostA), kR1), EthEdge::drop);
    EXPECT_EQ(drops(dp::DropReason::not_for_us), 4u);
    EXPECT_EQ(total_drops(), 4u);
    EXPECT_TRUE(events().empty()) << "no learning on routed ports";
}

TEST_F(EthInput, UnsupportedEthertypeToUs) {
    EXPECT_EQ(classify(eth_frame(port_mac(kR0), kStranger, RTE_ETHER_TYPE_IPV6, payload_of(40)),
                       kR0),
              EthEdge::drop);
    EXPECT_EQ(classify(eth_frame(port_mac(kR1), kStranger, RTE_ETHER_TYPE_VLAN, payload_of(40)),
                       kR1),
              EthEdge::drop);
    // Also on a group port, when addressed to the switch itself.
    EXPECT_EQ(classify(eth_frame(port_mac(kG0), kStranger, 0x88b5, payload_of(40)), kG0),
              EthEdge::drop);
    EXPECT_EQ(drops(dp::DropReason::unsupported_ethertype), 3u);
    EXPECT_EQ(total_drops(), 3u);
}

TEST_F(EthInput, ArpBroadcastGoesToArp) {
    const Bytes arp = arp_payload(1, kStranger, ip4("10.0.1.9"), kZeroMac, ip4("10.0.1.1"));
    EXPECT_EQ(classify(eth_frame(kBroadcast, kStranger, RTE_ETHER_TYPE_ARP, arp), kR0),
              EthEdge::arp);
    EXPECT_EQ(classify(eth_frame(port_mac(kR0), kStranger, RTE_ETHER_TYPE_ARP, arp), kR0),
              EthEdge::arp);
    // On a group port too: ARP decides whether it is for us or to be bridged.
    EXPECT_EQ(classify(eth_frame(kBroadcast, kStranger, RTE_ETHER_TYPE_ARP, arp), kG1),
              EthEdge::arp);
    // ARP unicast to somebody else on a routed port is not ours.
    EXPECT_EQ(classify(eth_frame(kHostA, kStranger, RTE_ETHER_TYPE_ARP, arp), kR0), EthEdge::drop);
    EXPECT_EQ(drops(dp::DropReason::not_for_us), 1u);
}

TEST_F(EthInput, Ipv4ToOurMacGoesToIpv4) {
    EXPECT_EQ(classify(ip_frame(port_mac(kR0), kStranger), kR0), EthEdge::ipv4);
    EXPECT_EQ(classify(ip_frame(port_mac(kR1), kStranger), kR1), EthEdge::ipv4);
    EXPECT_EQ(classify(ip_frame(port_mac(kG2), kStranger), kG2), EthEdge::ipv4);
    EXPECT_EQ(total_drops(), 0u);
}

TEST_F(EthInput, BridgesOnGroupPorts) {
    EXPECT_EQ(classify(ip_frame(kHostA, kHostB), kG0), EthEdge::bridge);
    EXPECT_EQ(classify(ip_frame(kBroadcast, kHostB), kG0), EthEdge::bridge);
    EXPECT_EQ(classify(ip_frame(mac("01:00:5e:01:02:03"), kHostB), kG0), EthEdge::bridge);
    EXPECT_EQ(classify(eth_frame(kStranger, kHostC, RTE_ETHER_TYPE_IPV6, payload_of(60)), kH1),
              EthEdge::bridge);
    // A frame for a switch port outside the segment is bridged like any other unicast.
    EXPECT_EQ(classify(ip_frame(port_mac(kR0), kHostB), kG0), EthEdge::bridge);
    EXPECT_EQ(classify(ip_frame(port_mac(kG0), kHostB), kH0), EthEdge::bridge);
    EXPECT_EQ(total_drops(), 0u);
}

TEST_F(EthInput, AnyMemberMacOfTheSegmentIsTheSwitch) {
    // One router per segment: a frame to another member's MAC is for the switch, not flooded.
    EXPECT_EQ(classify(ip_frame(port_mac(kG1), kHostB), kG0), EthEdge::ipv4);
    EXPECT_EQ(classify(ip_frame(port_mac(kG2), kHostB), kG0), EthEdge::ipv4);
    EXPECT_EQ(classify(ip_frame(port_mac(kH1), kHostB), kH0), EthEdge::ipv4);
    EXPECT_EQ(total_drops(), 0u);
}

TEST_F(EthInput, LearnsUnknownSourceOnGroupPort) {
    EXPECT_EQ(classify(ip_frame(kBroadcast, kStranger), kG2), EthEdge::bridge);
    auto ev = events();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].type, dp::EventType::fdb_learn);
    EXPECT_EQ(ev[0].port, kG2);
    EXPECT_EQ(ev[0].group, kLan);
    EXPECT_EQ(ev[0].ip, 0u);
    EXPECT_TRUE(std::equal(ev[0].mac, ev[0].mac + 6, kStranger.addr_bytes));
    EXPECT_EQ(ctx->counters.events_lost, 0u);

    // In the other group, with the other group's id.
    EXPECT_EQ(classify(ip_frame(kBroadcast, kStranger), kH0), EthEdge::bridge);
    ev = events();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].port, kH0);
    EXPECT_EQ(ev[0].group, kDmz);
}

TEST_F(EthInput, LearningIsRateLimitedPerMacAndPort) {
    classify(ip_frame(kBroadcast, kStranger), kG2);
    classify(ip_frame(kBroadcast, kStranger), kG2);
    classify(ip_frame(kHostA, kStranger), kG2);
    EXPECT_EQ(events().size(), 1u) << "one event per interval for the same MAC on the same port";
    // The same MAC on another port is news (a move) and reported at once.
    classify(ip_frame(kBroadcast, kStranger), kG0);
    auto ev = events();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].port, kG0);
    // After the interval the first one is reported again.
    ctx->now_tsc += ctx->event_interval_tsc + 1;
    classify(ip_frame(kBroadcast, kStranger), kG2);
    ev = events();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].port, kG2);
}

TEST_F(EthInput, KnownSourceStampsLastSeenWithoutAnEvent) {
    ctx->now_tsc = kStartTsc + 12345;
    EXPECT_EQ(classify(ip_frame(kBroadcast, kHostA), kG1), EthEdge::bridge);
    EXPECT_TRUE(events().empty());
    EXPECT_EQ(fdb_seen[kFdbIndexA], kStartTsc + 12345);
    EXPECT_EQ(fdb_seen[kFdbIndexB], 0u);
    EXPECT_EQ(fdb_seen[kFdbIndexC], 0u);
    ctx->now_tsc = kStartTsc + 99999;
    EXPECT_EQ(classify(ip_frame(port_mac(kG1), kHostA), kG1), EthEdge::ipv4);
    EXPECT_EQ(fdb_seen[kFdbIndexA], kStartTsc + 99999);
    EXPECT_TRUE(events().empty());
}

TEST_F(EthInput, KnownSourceOnAnotherPortIsAMove) {
    // kHostA is in the FDB on g1; seen on g2 it has moved.
    EXPECT_EQ(classify(ip_frame(kBroadcast, kHostA), kG2), EthEdge::bridge);
    auto ev = events();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].type, dp::EventType::fdb_learn);
    EXPECT_EQ(ev[0].port, kG2);
    EXPECT_EQ(ev[0].group, kLan);
    EXPECT_EQ(fdb_seen[kFdbIndexA], 0u) << "the stale entry is not refreshed";
    // kHostC is known in dmz only; in lan it is unknown.
    EXPECT_EQ(classify(ip_frame(kBroadcast, kHostC), kG0), EthEdge::bridge);
    ev = events();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].group, kLan);
    EXPECT_EQ(fdb_seen[kFdbIndexC], 0u);
}

TEST_F(EthInput, NoLearningOfMulticastSourcesOrOnRoutedPorts) {
    classify(ip_frame(kBroadcast, mac("03:00:00:00:00:01")), kG0);
    classify(ip_frame(port_mac(kR0), kStranger), kR0);
    EXPECT_TRUE(events().empty());
}

TEST_F(EthInput, FullEventRingCountsLostEvents) {
    // 63 distinct unknown sources fill the ring (capacity 63); more are lost and counted.
    for (uint8_t i = 0; i < 70; ++i) {
        rte_ether_addr src = kStranger;
        src.addr_bytes[5] = i;
        classify(ip_frame(kBroadcast, src), kG0);
    }
    EXPECT_EQ(events().size(), 63u);
    EXPECT_EQ(ctx->counters.events_lost, 7u);
}

TEST_F(EthInput, MixedBurstKeepsOrderWithinEdges) {
    std::vector<rte_mbuf*> in = {
        mbuf(ip_frame(port_mac(kR0), kStranger), kR0),                                  // ipv4
        mbuf(ip_frame(kStranger, kHostA), kR0),                                         // drop
        mbuf(ip_frame(kHostA, kHostB), kG0),                                            // bridge
        mbuf(eth_frame(kBroadcast, kStranger, RTE_ETHER_TYPE_ARP,
                       arp_payload(1, kStranger, ip4("10.0.1.9"), kZeroMac, ip4("10.0.1.1"))),
             kR0),                                                                      // arp
        mbuf(ip_frame(port_mac(kR1), kStranger), kR1),                                  // ipv4
        mbuf(Bytes(6, 0xff), kR1),                                                      // drop
    };
    EdgeBatches<EthEdge> out;
    pipeline::eth_input(*ctx, *snap, in.data(), static_cast<uint16_t>(in.size()), out);
    ASSERT_EQ(out.size(EthEdge::ipv4), 2);
    EXPECT_EQ(out.at(EthEdge::ipv4, 0), in[0]);
    EXPECT_EQ(out.at(EthEdge::ipv4, 1), in[4]);
    ASSERT_EQ(out.size(EthEdge::drop), 2);
    EXPECT_EQ(out.at(EthEdge::drop, 0), in[1]);
    EXPECT_EQ(out.at(EthEdge::drop, 1), in[5]);
    ASSERT_EQ(out.size(EthEdge::bridge), 1);
    EXPECT_EQ(out.at(EthEdge::bridge, 0), in[2]);
    ASSERT_EQ(out.size(EthEdge::arp), 1);
    EXPECT_EQ(out.at(EthEdge::arp, 0), in[3]);
    EXPECT_EQ(drops(dp::DropReason::not_for_us), 1u);
    EXPECT_EQ(drops(dp::DropReason::runt), 1u);
    free_all(out);
}

}  // namespace
}  // namespace ina::test
