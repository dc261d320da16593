// SPDX-License-Identifier: Apache-2.0
// ipv4_forward: validation, LPM, neighbour resolution, TTL/checksum, MAC rewrite, MTU, local.
#include "pipeline/ipv4_forward.h"

#include <rte_ip.h>

#include <array>
#include <cstring>

#include "stage_util.h"

namespace ina::test {
namespace {

using pipeline::EdgeBatches;
using pipeline::Ipv4Edge;

// Every case runs through both entry points: ipv4_forward (packets that may carry the
// classifier's metadata; these carry none) and its Ipv4Input::unclassified form (a burst
// nobody classified), which must decide every packet the same way.
class Ipv4Forward : public StageTest, public ::testing::WithParamInterface<bool> {
protected:
    // An IPv4/UDP frame addressed to the ingress port's MAC.
    Bytes frame(uint16_t in, uint32_t src, uint32_t dst, uint8_t ttl = 64, size_t payload = 64,
                const Bytes& options = {}) {
        return eth_frame(port_mac(in), kStranger, RTE_ETHER_TYPE_IPV4,
                         ipv4_packet(src, dst, 17,
                                     udp_datagram(src, dst, 1000, 2000, payload_of(payload)), ttl,
                                     options));
    }
    void run(std::vector<rte_mbuf*> in) {
        pipeline::ipv4_forward(*ctx, *snap, in.data(), static_cast<uint16_t>(in.size()), out,
                               GetParam() ? pipeline::Ipv4Input::unclassified
                                          : pipeline::Ipv4Input::any);
    }
    // Forwards one frame and expects it routed to `egress` towards `next_mac`; returns the mbuf
    // (still in the TX buffer).
    rte_mbuf* expect_routed(const Bytes& f, uint16_t in, uint16_t egress,
                            const rte_ether_addr& next_mac) {
        rte_mbuf* m = mbuf(f, in);
        const uint16_t before = tx_count(egress);
        const uint64_t routed = ctx->counters.routed;
        run({m});
        EXPECT_EQ(tx_count(egress), before + 1) << "expected TX on port " << egress;
        if (tx_count(egress) != before + 1) {
            return nullptr;
        }
        EXPECT_EQ(ctx->tx[egress].pkts[before], m);
        EXPECT_EQ(ctx->counters.routed, routed + 1);
        const Bytes o = bytes_of(m);
        EXPECT_TRUE(std::equal(&o[0], &o[6], next_mac.addr_bytes))
            << "dst MAC " << mac_str(*reinterpret_cast<const rte_ether_addr*>(&o[0]));
        EXPECT_TRUE(std::equal(&o[6], &o[12], port_mac(egress).addr_bytes)) << "src MAC";
        // TTL decremented, checksum verifies, nothing else in the packet changed.
        const size_t hlen = (o[kEthLen] & 0x0f) * 4u;
        EXPECT_EQ(o[kEthLen + 8], f[kEthLen + 8] - 1);
        EXPECT_TRUE(ref_checksum_ok(&o[kEthLen], hlen));
        Bytes expected = f;
        std::copy(&o[0], &o[12], expected.begin());
        expected[kEthLen + 8] = o[kEthLen + 8];
        expected[kEthLen + 10] = o[kEthLen + 10];
        expected[kEthLen + 11] = o[kEthLen + 11];
        EXPECT_EQ(o, expected);
        Bytes recomputed = o;
        fix_ipv4_checksum(recomputed);
        EXPECT_EQ(get16(&o[kEthLen + 10]), get16(&recomputed[kEthLen + 10]));
        return m;
    }
    void expect_dropped(const Bytes& f, uint16_t in, dp::DropReason why) {
        rte_mbuf* m = mbuf(f, in);
        const uint64_t before = drops(why);
        const uint16_t dropped = out.size(Ipv4Edge::drop);
        run({m});
        EXPECT_EQ(drops(why), before + 1) << dp::kDropReasonNames[static_cast<size_t>(why)];
        ASSERT_EQ(out.size(Ipv4Edge::drop), dropped + 1);
        EXPECT_EQ(out.at(Ipv4Edge::drop, dropped), m);
        EXPECT_EQ(total_tx(), 0u);
    }

    void TearDown() override {
        free_all(out);
        StageTest::TearDown();
    }
    EdgeBatches<Ipv4Edge> out;
};

TEST_P(Ipv4Forward, RoutesViaStaticGatewayNeighbour) {
    expect_routed(frame(kR0, ip4("10.0.1.9"), ip4("192.168.1.9")), kR0, kR1, kNbR1Gw);
    EXPECT_EQ(total_drops(), 0u);
    EXPECT_TRUE(events().empty());
    EXPECT_EQ(out.size(Ipv4Edge::drop), 0);
    EXPECT_EQ(out.size(Ipv4Edge::local), 0);
}

TEST_P(Ipv4Forward, ConnectedRouteResolvesTheDestinationItself) {
    expect_routed(frame(kR0, ip4("10.0.1.9"), ip4("10.0.2.7")), kR0, kR1, kNbR1Host);
    expect_routed(frame(kR0, ip4("10.0.1.9"), ip4("10.0.2.2")), kR0, kR1, kNbR1Gw);
    // A learned neighbour on an L2 group member: egress is that member, with its MAC.
    expect_routed(frame(kR1, ip4("10.0.2.7"), ip4("10.0.10.20")), kR1, kG1, kNbLanHost);
    // Hairpin: back out of the ingress port.
    expect_routed(frame(kR1, ip4("10.0.2.7"), ip4("10.0.2.2")), kR1, kR1, kNbR1Gw);
    EXPECT_EQ(total_drops(), 0u);
}

TEST_P(Ipv4Forward, GatewayRouteResolvesTheGateway) {
    // 192.168.0.0/16 via 10.0.2.2: the next-hop MAC is the gateway's, not a lookup of the dst.
    expect_routed(frame(kR0, ip4("10.0.1.9"), ip4("192.168.200.1")), kR0, kR1, kNbR1Gw);
    // 10.99.0.0/16 via 10.0.2.50, which is not resolved: the request is for the gateway.
    rte_mbuf* m = mbuf(frame(kR0, ip4("10.0.1.9"), ip4("10.99.1.1")), kR0);
    run({m});
    auto ev = events();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].type, dp::EventType::resolve_request);
    EXPECT_EQ(ev[0].ip, ip4("10.0.2.50"));
    EXPECT_EQ(ev[0].port, kR1);
}

TEST_P(Ipv4Forward, LongestPrefixWins) {
    expect_routed(frame(kR1, ip4("10.0.2.7"), ip4("192.168.5.77")), kR1, kR0, kNbR0Gw);
    expect_routed(frame(kR1, ip4("10.0.2.7"), ip4("192.168.6.77")), kR1, kR1, kNbR1Gw);
    expect_routed(frame(kR1, ip4("10.0.2.7"), ip4("192.168.4.255")), kR1, kR1, kNbR1Gw);
    expect_routed(frame(kR1, ip4("10.0.2.7"), ip4("192.168.5.0")), kR1, kR0, kNbR0Gw);
}

TEST_P(Ipv4Forward, ConnectedSubnetIsNotShadowedByAStaticRouteToIt) {
    std::string yaml = kStageYaml;
    yaml.insert(yaml.find("neighbours:"), "  - prefix: 10.0.2.0/24\n    via: 10.0.1.2\n");
    build(yaml);
    expect_routed(frame(kR0, ip4("10.0.1.9"), ip4("10.0.2.7")), kR0, kR1, kNbR1Host);
}

TEST_P(Ipv4Forward, DefaultRoute) {
    std::string yaml = kStageYaml;
    // A /1 listed before the default route must still win over it.
    yaml.insert(yaml.find("neighbours:"),
                "  - prefix: 128.0.0.0/1\n    via: 10.0.2.2\n"
                "  - prefix: 0.0.0.0/0\n    via: 10.0.1.2\n");
    build(yaml);
    expect_routed(frame(kR1, ip4("10.0.2.7"), ip4("8.8.8.8")), kR1, kR0, kNbR0Gw);
    expect_routed(frame(kR1, ip4("10.0.2.7"), ip4("100.64.0.1")), kR1, kR0, kNbR0Gw);
    expect_routed(frame(kR1, ip4("10.0.2.7"), ip4("200.1.1.1")), kR1, kR1, kNbR1Gw);
    expect_routed(frame(kR1, ip4("10.0.2.7"), ip4("223.255.255.254")), kR1, kR1, kNbR1Gw);
    // More specific routes and connected subnets still win.
    expect_routed(frame(kR1, ip4("10.0.2.7"), ip4("192.168.5.1")), kR1, kR0, kNbR0Gw);
    expect_routed(frame(kR0, ip4("10.0.1.9"), ip4("10.0.2.7")), kR0, kR1, kNbR1Host);
    EXPECT_EQ(total_drops(), 0u);
}

TEST_P(Ipv4Forward, DefaultRouteOnly) {
    build(R"(version: 1
ports:
  - {name: a, devargs: x0, ipv4: [10.1.0.1/24]}
  - {name: b, devargs: x1, ipv4: [10.2.0.1/24]}
routes:
  - {prefix: 0.0.0.0/0, via: 10.2.0.254}
neighbours:
  - {ip: 10.2.0.254, mac: "02:aa:00:00:00:fe", port: b}
)",
          {}, {}, {{kR0, port_mac(kR0)}, {kR1, port_mac(kR1)}});
    expect_routed(frame(kR0, ip4("10.1.0.9"), ip4("1.1.1.1")), kR0, kR1,
                  rte_ether_addr{{0x02, 0xaa, 0, 0, 0, 0xfe}});
    expect_routed(frame(kR0, ip4("10.1.0.9"), ip4("223.0.0.1")), kR0, kR1,
                  rte_ether_addr{{0x02, 0xaa, 0, 0, 0, 0xfe}});
}

TEST_P(Ipv4Forward, TtlExpiry) {
    expect_dropped(frame(kR0, ip4("10.0.1.9"), ip4("192.168.1.9"), 1), kR0,
                   dp::DropReason::ttl_exceeded);
    expect_dropped(frame(kR0, ip4("10.0.1.9"), ip4("192.168.1.9"), 0), kR0,
                   dp::DropReason::ttl_exceeded);
    EXPECT_EQ(total_drops(), 2u);
    rte_mbuf* m = expect_routed(frame(kR0, ip4("10.0.1.9"), ip4("192.168.1.9"), 2), kR0, kR1,
                                kNbR1Gw);
    ASSERT_NE(m, nullptr);
    EXPECT_EQ(rte_pktmbuf_mtod_offset(m, const uint8_t*, kEthLen)[8], 1);
    expect_routed(frame(kR0, ip4("10.0.1.9"), ip4("192.168.1.9"), 255), kR0, kR1, kNbR1Gw);
}

TEST_P(Ipv4Forward, IncrementalChecksumHoldsForEveryTtlAndManyHeaders) {
    uint32_t seed = 12345;
    for (int ttl = 2; ttl <= 255; ++ttl) {
        seed = seed * 1103515245u + 12345u;
        const uint32_t src = ip4("10.0.1.0") | ((seed >> 8) % 250 + 2);
        const uint32_t dst = ip4("192.168.0.0") | (seed & 0xffff);
        Bytes f = frame(kR0, src, dst, static_cast<uint8_t>(ttl), (seed >> 16) % 200);
        // Vary the identification field too so the checksum takes many values.
        put16(&f[kEthLen + 4], static_cast<uint16_t>(seed >> 7));
        fix_ipv4_checksum(f);
        const bool via_r0 = (dst & 0xffffff00u) == ip4("192.168.5.0");  // the /24 route
        expect_routed(f, kR0, via_r0 ? kR0 : kR1, via_r0 ? kNbR0Gw : kNbR1Gw);
        free_mbufs(take_tx(kR0));
        free_mbufs(take_tx(kR1));
        if (HasFailure()) {
            break;
        }
    }
    EXPECT_EQ(total_drops(), 0u);
}

TEST_P(Ipv4Forward, NoRoute) {
    expect_dropped(frame(kR0, ip4("10.0.1.9"), ip4("8.8.8.8")), kR0, dp::DropReason::no_route);
    expect_dropped(frame(kR0, ip4("10.0.1.9"), ip4("10.0.4.1")), kR0, dp::DropReason::no_route);
    expect_dropped(frame(kR0, ip4("10.0.1.9"), ip4("192.169.0.1")), kR0, dp::DropReason::no_route);
    EXPECT_TRUE(events().empty());
}

TEST_P(Ipv4Forward, BadHeaderChecksum) {
    Bytes f = frame(kR0, ip4("10.0.1.9"), ip4("192.168.1.9"));
    f[kEthLen + 10] ^= 0x01;
    expect_dropped(f, kR0, dp::DropReason::ipv4_bad_checksum);
    // A corrupted field with the old checksum is caught the same way.
    Bytes g = frame(kR0, ip4("10.0.1.9"), ip4("192.168.1.9"));
    g[kEthLen + 15] ^= 0x40;
    expect_dropped(g, kR0, dp::DropReason::ipv4_bad_checksum);
    // A valid checksum that the NIC flags as bad is dropped; a bad one the NIC flags as good is
    // trusted.
    rte_mbuf* m = mbuf(frame(kR0, ip4("10.0.1.9"), ip4("192.168.1.9")), kR0);
    m->ol_flags |= RTE_MBUF_F_RX_IP_CKSUM_BAD;
    run({m});
    EXPECT_EQ(drops(dp::DropReason::ipv4_bad_checksum), 3u);
    rte_mbuf* n = mbuf(f, kR0);
    n->ol_flags |= RTE_MBUF_F_RX_IP_CKSUM_GOOD;
    run({n});
    EXPECT_EQ(tx_count(kR1), 1);
    EXPECT_EQ(pipeline::ipv4_check(n), dp::DropReason::count);
}

TEST_P(Ipv4Forward, MalformedHeaders) {
    const Bytes good = frame(kR0, ip4("10.0.1.9"), ip4("192.168.1.9"));
    {
        Bytes f = good;
        f[kEthLen] = 0x65;  // version 6
        fix_ipv4_checksum(f);
        expect_dropped(f, kR0, dp::DropReason::ipv4_malformed);
    }
    {
        Bytes f = good;
        f[kEthLen] = 0x44;  // IHL 4 words
        expect_dropped(f, kR0, dp::DropReason::ipv4_malformed);
    }
    {
        Bytes f = good;
        put16(&f[kEthLen + 2], 19);  // total length shorter than the header
        fix_ipv4_checksum(f);
        expect_dropped(f, kR0, dp::DropReason::ipv4_malformed);
    }
    {
        Bytes f = good;
        put16(&f[kEthLen + 2], static_cast<uint16_t>(f.size() - kEthLen + 1));  // beyond frame
        fix_ipv4_checksum(f);
        expect_dropped(f, kR0, dp::DropReason::ipv4_malformed);
    }
    {
        Bytes f = good;
        f.resize(kEthLen + kIpLen - 1);  // truncated header
        expect_dropped(f, kR0, dp::DropReason::ipv4_malformed);
    }
    {
        Bytes f = good;
        f.resize(kEthLen + 24);
        f[kEthLen] = 0x4f;  // IHL 60 bytes, frame holds 24
        put16(&f[kEthLen + 2], 24);
        expect_dropped(f, kR0, dp::DropReason::ipv4_malformed);
    }
    EXPECT_EQ(drops(dp::DropReason::ipv4_malformed), 6u);
    EXPECT_EQ(total_drops(), 6u);
}

TEST_P(Ipv4Forward, EthernetPaddingAfterTheDatagramIsAllowed) {
    // A small datagram padded to the 60-byte Ethernet minimum.
    Bytes f = frame(kR0, ip4("10.0.1.9"), ip4("192.168.1.9"), 64, 0);
    ASSERT_LT(f.size(), 60u);
    f.resize(60, 0);
    rte_mbuf* m = mbuf(f, kR0);
    run({m});
    ASSERT_EQ(tx_count(kR1), 1);
    EXPECT_EQ(rte_pktmbuf_pkt_len(m), 60u);
}

TEST_P(Ipv4Forward, HeaderWithOptions) {
    const Bytes options = {0x94, 0x04, 0x00, 0x00};  // Router Alert
    expect_routed(frame(kR0, ip4("10.0.1.9"), ip4("192.168.1.9"), 64, 32, options), kR0, kR1,
                  kNbR1Gw);
}

TEST_P(Ipv4Forward, Martians) {
    const std::vector<const char*> bad_sources = {"0.0.0.0", "127.0.0.1", "224.0.0.1",
                                                  "239.255.255.250", "255.255.255.255"};
    for (const char* s : bad_sources) {
        expect_dropped(frame(kR0, ip4(s), ip4("192.168.1.9")), kR0, dp::DropReason::ipv4_martian);
    }
    const std::vector<const char*> bad_destinations = {"0.1.2.3", "127.0.0.1", "224.0.0.5",
                                                       "240.0.0.1", "255.255.255.255"};
    for (const char* d : bad_destinations) {
        expect_dropped(frame(kR0, ip4("10.0.1.9"), ip4(d)), kR0, dp::DropReason::ipv4_martian);
    }
    EXPECT_EQ(drops(dp::DropReason::ipv4_martian), 10u);
    EXPECT_EQ(total_drops(), 10u);
}

TEST_P(Ipv4Forward, DirectedBroadcastIsNotForwardedNorResolved) {
    // RFC 2644: a connected subnet's broadcast address is never routed into it, and the switch
    // must not ARP for it.
    expect_dropped(frame(kR0, ip4("10.0.1.9"), ip4("10.0.2.255")), kR0,
                   dp::DropReason::ipv4_martian);
    expect_dropped(frame(kR0, ip4("10.0.1.9"), ip4("10.0.3.255")), kR0,
                   dp::DropReason::ipv4_martian);
    expect_dropped(frame(kR0, ip4("10.0.1.9"), ip4("10.0.2.0")), kR0,
                   dp::DropReason::ipv4_martian);
    EXPECT_EQ(drops(dp::DropReason::ipv4_martian), 3u);
    EXPECT_EQ(drops(dp::DropReason::neighbour_unresolved), 0u);
    dp::Event ev{};
    EXPECT_NE(rte_ring_sc_dequeue_elem(ctx->events, &ev, sizeof ev), 0) << "no event expected";
}

TEST_P(Ipv4Forward, UnresolvedNeighbourRequestsResolutionOncePerInterval) {
    // 10.0.2.99 is on r1's connected subnet with no neighbour entry.
    expect_dropped(frame(kR0, ip4("10.0.1.9"), ip4("10.0.2.99")), kR0,
                   dp::DropReason::neighbour_unresolved);
    auto ev = events();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].type, dp::EventType::resolve_request);
    EXPECT_EQ(ev[0].ip, ip4("10.0.2.99"));
    EXPECT_EQ(ev[0].port, kR1);
    const uint8_t zero[6] = {};
    EXPECT_TRUE(std::equal(ev[0].mac, ev[0].mac + 6, zero));

    // A second packet within the interval: dropped and counted, no new event.
    ctx->now_tsc += ctx->tsc_hz / 2;
    expect_dropped(frame(kR0, ip4("10.0.1.9"), ip4("10.0.2.99")), kR0,
                   dp::DropReason::neighbour_unresolved);
    EXPECT_TRUE(events().empty());
    EXPECT_EQ(drops(dp::DropReason::neighbour_unresolved), 2u);

    // Another address is its own request.
    expect_dropped(frame(kR0, ip4("10.0.1.9"), ip4("10.0.3.5")), kR0,
                   dp::DropReason::neighbour_unresolved);
    ev = events();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].ip, ip4("10.0.3.5"));

    // Once the interval (arp.request_interval_ms = 1000) has passed, the request repeats.
    ctx->now_tsc = kStartTsc + ctx->tsc_hz + 1;
    expect_dropped(frame(kR0, ip4("10.0.1.9"), ip4("10.0.2.99")), kR0,
                   dp::DropReason::neighbour_unresolved);
    EXPECT_EQ(events().size(), 1u);
    EXPECT_EQ(ctx->counters.events_lost, 0u);
}

TEST_P(Ipv4Forward, ResolutionIntervalComesFromTheConfig) {
    std::string yaml = kStageYaml;
    yaml.replace(yaml.find("request_interval_ms: 1000"), 25, "request_interval_ms: 10");
    build(yaml);
    expect_dropped(frame(kR0, ip4("10.0.1.9"), ip4("172.16.9.9")), kR0,
                   dp::DropReason::neighbour_unresolved);
    auto ev = events();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].ip, ip4("172.16.9.9")) << "device route: resolve the destination";
    EXPECT_EQ(ev[0].port, kR1);
    ctx->now_tsc += ctx->tsc_hz / 200;  // 5 ms
    expect_dropped(frame(kR0, ip4("10.0.1.9"), ip4("172.16.9.9")), kR0,
                   dp::DropReason::neighbour_unresolved);
    EXPECT_TRUE(events().empty());
    ctx->now_tsc += ctx->tsc_hz / 100;  // 15 ms after the first
    expect_dropped(frame(kR0, ip4("10.0.1.9"), ip4("172.16.9.9")), kR0,
                   dp::DropReason::neighbour_unresolved);
    EXPECT_EQ(events().size(), 1u);
}

TEST_P(Ipv4Forward, UnresolvedBurstPostsOneEvent) {
    std::vector<rte_mbuf*> in;
    for (int i = 0; i < 20; ++i) {
        in.push_back(mbuf(frame(kR0, ip4("10.0.1.9"), ip4("10.99.0.1") + static_cast<uint32_t>(i)),
                          kR0));
    }
    run(in);
    EXPECT_EQ(drops(dp::DropReason::neighbour_unresolved), 20u);
    auto ev = events();
    ASSERT_EQ(ev.size(), 1u) << "all 20 need the same gateway";
    EXPECT_EQ(ev[0].ip, ip4("10.0.2.50"));
}

TEST_P(Ipv4Forward, MtuExceeded) {
    // r1 has mtu 1000: an IPv4 total length of 1000 fits, 1001 does not.
    const size_t udp_payload_1000 = 1000 - kIpLen - 8;
    expect_routed(frame(kR0, ip4("10.0.1.9"), ip4("192.168.1.9"), 64, udp_payload_1000), kR0, kR1,
                  kNbR1Gw);
    free_mbufs(take_tx(kR1));
    expect_dropped(frame(kR0, ip4("10.0.1.9"), ip4("192.168.1.9"), 64, udp_payload_1000 + 1), kR0,
                   dp::DropReason::mtu_exceeded);
    // r0 has the default 1500.
    expect_routed(frame(kR1, ip4("10.0.2.7"), ip4("192.168.5.1"), 64, 1500 - kIpLen - 8), kR1, kR0,
                  kNbR0Gw);
    free_mbufs(take_tx(kR0));
    expect_dropped(frame(kR1, ip4("10.0.2.7"), ip4("192.168.5.1"), 64, 1500 - kIpLen - 7), kR1,
                   dp::DropReason::mtu_exceeded);
}

TEST_P(Ipv4Forward, OwnAddressesGoToLocal) {
    struct Case {
        uint16_t in;
        const char* dst;
        uint8_t ttl;
    };
    const std::vector<Case> cases = {
        {kR0, "10.0.1.1", 64},
        {kR0, "10.0.2.1", 64},  // another port's address, reached through r0
        {kR1, "10.0.3.1", 64},  // secondary address
        {kG1, "10.0.10.1", 64}, // the L2 group's address, on another member
        {kR0, "10.0.1.1", 1},   // TTL 1 is fine for us
    };
    for (const auto& c : cases) {
        const Bytes f = frame(c.in, ip4("10.0.1.9"), ip4(c.dst), c.ttl);
        rte_mbuf* m = mbuf(f, c.in);
        const uint16_t before = out.size(Ipv4Edge::local);
        run({m});
        ASSERT_EQ(out.size(Ipv4Edge::local), before + 1) << c.dst;
        EXPECT_EQ(out.at(Ipv4Edge::local, before), m);
        EXPECT_EQ(bytes_of(m), f) << "local packets are not rewritten";
    }
    EXPECT_EQ(total_drops(), 0u);
    EXPECT_EQ(total_tx(), 0u);
    EXPECT_EQ(ctx->counters.routed, 0u);
}

TEST_P(Ipv4Forward, MixedBurstUsesTheRightLookupForEachPacket) {
    std::vector<rte_mbuf*> in = {
        mbuf(frame(kR0, ip4("10.0.1.9"), ip4("192.168.5.1")), kR0),   // -> r0
        mbuf(frame(kR0, ip4("10.0.1.9"), ip4("8.8.8.8")), kR0),       // no route
        mbuf(frame(kR0, ip4("10.0.1.9"), ip4("192.168.1.1")), kR0),   // -> r1
        mbuf(frame(kR0, ip4("10.0.1.9"), ip4("10.0.1.1")), kR0),      // local
        mbuf(frame(kR0, ip4("10.0.1.9"), ip4("10.0.2.7"), 1), kR0),   // ttl
        mbuf(frame(kR0, ip4("10.0.1.9"), ip4("10.0.10.20")), kR0),    // -> g1
    };
    Bytes bad = frame(kR0, ip4("10.0.1.9"), ip4("192.168.1.2"));
    bad[kEthLen + 10] ^= 0xff;
    in.push_back(mbuf(bad, kR0));  // bad checksum
    const auto copy = in;
    run(in);
    ASSERT_EQ(tx_count(kR0), 1);
    EXPECT_EQ(ctx->tx[kR0].pkts[0], copy[0]);
    ASSERT_EQ(tx_count(kR1), 1);
    EXPECT_EQ(ctx->tx[kR1].pkts[0], copy[2]);
    ASSERT_EQ(tx_count(kG1), 1);
    EXPECT_EQ(ctx->tx[kG1].pkts[0], copy[5]);
    ASSERT_EQ(out.size(Ipv4Edge::local), 1);
    EXPECT_EQ(out.at(Ipv4Edge::local, 0), copy[3]);
    ASSERT_EQ(out.size(Ipv4Edge::drop), 3);
    EXPECT_EQ(out.at(Ipv4Edge::drop, 0), copy[1]);
    EXPECT_EQ(out.at(Ipv4Edge::drop, 1), copy[4]);
    EXPECT_EQ(out.at(Ipv4Edge::drop, 2), copy[6]);
    EXPECT_EQ(drops(dp::DropReason::no_route), 1u);
    EXPECT_EQ(drops(dp::DropReason::ttl_exceeded), 1u);
    EXPECT_EQ(drops(dp::DropReason::ipv4_bad_checksum), 1u);
    EXPECT_EQ(ctx->counters.routed, 3u);
}

// A connected destination this lcore has not memoised is looked up with every later one of
// the burst at once, and the burst still leaves in arrival order, as it does once memoised.
TEST_P(Ipv4Forward, UnmemoisedNeighboursKeepArrivalOrder) {
    const auto burst = [&] {
        return std::vector<rte_mbuf*>{
            mbuf(frame(kR0, ip4("10.0.1.9"), ip4("192.168.1.1")), kR0),    // gateway, r1
            mbuf(frame(kR0, ip4("10.0.1.9"), ip4("10.0.2.7")), kR0),       // connected, r1
            mbuf(frame(kR0, ip4("10.0.1.9"), ip4("192.168.1.2")), kR0),    // gateway, r1
            mbuf(frame(kR0, ip4("10.0.1.9"), ip4("10.0.2.200")), kR0),     // unresolved
            mbuf(frame(kR0, ip4("10.0.1.9"), ip4("10.0.2.2"), 9), kR0),    // connected, r1
        };
    };
    for (uint64_t round = 1; round <= 2; ++round) {
        const auto in = burst();
        run(in);
        ASSERT_EQ(tx_count(kR1), 4);
        EXPECT_EQ(ctx->tx[kR1].pkts[0], in[0]);
        EXPECT_EQ(ctx->tx[kR1].pkts[1], in[1]);
        EXPECT_EQ(ctx->tx[kR1].pkts[2], in[2]);
        EXPECT_EQ(ctx->tx[kR1].pkts[3], in[4]);
        ASSERT_EQ(out.size(Ipv4Edge::drop), round);
        EXPECT_EQ(out.at(Ipv4Edge::drop, static_cast<uint16_t>(round - 1)), in[3]);
        EXPECT_EQ(drops(dp::DropReason::neighbour_unresolved), round);
        EXPECT_EQ(ctx->counters.routed, 4 * round);
        free_mbufs(take_tx(kR1));
    }
}

// The 20-byte header check without folding (a remainder by 0xffff) and the TTL update without
// reading the old word agree with the generic RFC 1071 sum and RFC 1624 update on every
// checksum value, for random headers.
TEST(Ipv4HeaderArithmetic, ShortcutsMatchTheGenericSumAndUpdate) {
    uint64_t seed = 0x9e3779b97f4a7c15ULL;
    const auto next = [&] {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        return seed;
    };
    std::array<uint8_t, 20> h{};
    for (uint32_t checksum = 0; checksum <= 0xffff; ++checksum) {
        for (auto& b : h) {
            b = static_cast<uint8_t>(next());
        }
        h[0] = 0x45;
        h[8] = static_cast<uint8_t>(1 + next() % 255);  // a TTL of at least 1
        std::memcpy(&h[10], &checksum, 2);
        const auto* ip = reinterpret_cast<const rte_ipv4_hdr*>(h.data());
        ASSERT_EQ(pipeline::ipv4_header_sum_ok(ip, 20), net::ones_complement_sum(h.data(), 20) == 0xffff)
            << checksum;
        std::array<uint8_t, 20> updated = h;
        pipeline::ipv4_decrement_ttl(reinterpret_cast<rte_ipv4_hdr*>(updated.data()));
        uint16_t old_word;
        uint16_t new_word;
        std::memcpy(&old_word, &h[8], 2);
        std::memcpy(&new_word, &updated[8], 2);
        uint16_t old_checksum;
        uint16_t new_checksum;
        std::memcpy(&old_checksum, &h[10], 2);
        std::memcpy(&new_checksum, &updated[10], 2);
        ASSERT_EQ(updated[8], h[8] - 1);
        ASSERT_EQ(new_checksum, net::checksum_update16(old_checksum, old_word, new_word))
            << checksum;
        // A header made sound stays sound through the update.
        std::memset(&h[10], 0, 2);
        const auto sound = static_cast<uint16_t>(~net::ones_complement_sum(h.data(), 20));
        std::memcpy(&h[10], &sound, 2);
        ASSERT_TRUE(pipeline::ipv4_header_sum_ok(ip, 20));
        if (h[8] > 1) {
            pipeline::ipv4_decrement_ttl(reinterpret_cast<rte_ipv4_hdr*>(h.data()));
            ASSERT_TRUE(pipeline::ipv4_header_sum_ok(ip, 20));
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Entries, Ipv4Forward, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& p) {
                             return p.param ? "Unclassified" : "Any";
                         });

}  // namespace
}  // namespace ina::test
