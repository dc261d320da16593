// SPDX-License-Identifier: Apache-2.0
// IPv6 through the whole burst path (eth_input, classify, ipv6_forward, icmp6_local): ND
// answered and learned with RFC 4861's checks, echo answered, routes with the hop limit, ND
// resolution of unknown next hops, malformed packets counted by reason, chained frames. Frames
// are built here byte by byte with a reference checksum, never by the code under test.
#include <rte_ip.h>

#include <algorithm>
#include <array>

#include "net/addr.h"
#include "pipeline/classify.h"
#include "pipeline/ipv6_forward.h"
#include "pipeline/packet_meta.h"
#include "pipeline/pipeline.h"
#include "stage_util.h"

namespace ina::test {
namespace {

using Addr6 = std::array<uint8_t, 16>;

Addr6 a6(const char* text) {
    auto a = net::Ipv6Addr::parse(text);
    EXPECT_TRUE(a.has_value()) << text;
    return a ? a->bytes : Addr6{};
}

const char* const kYaml6 = R"(version: 1
ports:
  - name: v0
    devargs: net_null0
    ipv4: [10.0.1.1/24]
    ipv6: [2001:db8:1::1/64]
  - name: v1
    devargs: net_null1
    ipv6: [2001:db8:2::1/64, fd00:2::1/64]
    mtu: 1000
ipv6_routes:
  - prefix: 2001:db8:100::/48
    via: 2001:db8:2::2
  - prefix: 2001:db8:200::/48
    port: v1
arp:
  request_interval_ms: 1000
)";
constexpr uint16_t kV0 = 0;
constexpr uint16_t kV1 = 1;
constexpr rte_ether_addr kHost6{{0x02, 0x66, 0, 0, 0, 0x09}};
constexpr rte_ether_addr kGw6{{0x02, 0x66, 0, 0, 0x02, 0x02}};

// The reference ICMPv6 checksum: the pseudo-header (RFC 8200 8.1) and the message summed as
// big-endian words by the stage tests' own checksum.
uint16_t ref_icmp6_checksum(const Addr6& src, const Addr6& dst, const Bytes& msg) {
    Bytes buf(src.begin(), src.end());
    buf.insert(buf.end(), dst.begin(), dst.end());
    const auto len = static_cast<uint32_t>(msg.size());
    buf.insert(buf.end(), {static_cast<uint8_t>(len >> 24), static_cast<uint8_t>(len >> 16),
                           static_cast<uint8_t>(len >> 8), static_cast<uint8_t>(len), 0, 0, 0,
                           58});
    buf.insert(buf.end(), msg.begin(), msg.end());
    return ref_checksum(buf.data(), buf.size());
}

Bytes ipv6_packet(const Addr6& src, const Addr6& dst, uint8_t next, const Bytes& payload,
                  uint8_t hop_limit) {
    Bytes p(40);
    put32(&p[0], 6u << 28);
    put16(&p[4], static_cast<uint16_t>(payload.size()));
    p[6] = next;
    p[7] = hop_limit;
    std::copy(src.begin(), src.end(), &p[8]);
    std::copy(dst.begin(), dst.end(), &p[24]);
    p.insert(p.end(), payload.begin(), payload.end());
    return p;
}

// An ICMPv6 message with its checksum set (or off by one when `corrupt`).
Bytes icmp6(const Addr6& src, const Addr6& dst, uint8_t type, uint8_t code, const Bytes& body,
            bool corrupt = false) {
    Bytes msg(4 + body.size());
    msg[0] = type;
    msg[1] = code;
    std::copy(body.begin(), body.end(), msg.begin() + 4);
    put16(&msg[2], static_cast<uint16_t>(ref_icmp6_checksum(src, dst, msg) + (corrupt ? 1 : 0)));
    return msg;
}

// NS/NA body: flags, target, then a link-layer option when `lla` is given.
Bytes nd_body(uint32_t flags, const Addr6& target, const rte_ether_addr* lla, uint8_t opt_type) {
    Bytes b(4);
    put32(&b[0], flags);
    b.insert(b.end(), target.begin(), target.end());
    if (lla != nullptr) {
        b.push_back(opt_type);
        b.push_back(1);
        b.insert(b.end(), lla->addr_bytes, lla->addr_bytes + 6);
    }
    return b;
}

Addr6 solicited(const Addr6& a) {
    Addr6 g = a6("ff02::1:ff00:0");
    std::copy(a.begin() + 13, a.end(), g.begin() + 13);
    return g;
}
rte_ether_addr mcast_mac(const Addr6& g) { return rte_ether_addr{{0x33, 0x33, g[12], g[13], g[14], g[15]}}; }

class Ipv6Path : public StageTest {
protected:
    void SetUp() override {
        StageTest::SetUp();
        std::vector<dp::PortBinding> b;
        for (uint16_t p = 0; p < 2; ++p) {
            b.push_back({p, rte_ether_addr{{0x02, 0, 0, 0, 0x06, static_cast<uint8_t>(p)}}});
        }
        build(kYaml6, {}, {}, b);
        ctx->pool = pool;
    }
    static rte_ether_addr own_mac(uint16_t p) {
        return rte_ether_addr{{0x02, 0, 0, 0, 0x06, static_cast<uint8_t>(p)}};
    }
    void run(std::vector<rte_mbuf*> in) {
        pipeline::process_burst(*ctx, *snap, in.data(), static_cast<uint16_t>(in.size()));
    }
    // A neighbour solicitation from `src` (MAC kHost6) for `target`, as a host sends it: to the
    // target's solicited-node group, or unicast to v0's address (NUD).
    Bytes ns(const Addr6& src, const Addr6& target, uint8_t hop_limit = 255, bool with_lla = true,
             bool multicast = true, bool corrupt = false) {
        const Addr6 dst = multicast ? solicited(target) : a6("2001:db8:1::1");
        const rte_ether_addr eth_dst = multicast ? mcast_mac(dst) : own_mac(kV0);
        return eth_frame(eth_dst, kHost6, RTE_ETHER_TYPE_IPV6,
                         ipv6_packet(src, dst, 58,
                                     icmp6(src, dst, 135, 0,
                                           nd_body(0, target, with_lla ? &kHost6 : nullptr, 1),
                                           corrupt),
                                     hop_limit));
    }
    Bytes echo6(uint16_t in, const Addr6& src, const Addr6& dst, const Bytes& data,
                uint8_t hop_limit = 64) {
        Bytes body{0x12, 0x34, 0x00, 0x07};
        body.insert(body.end(), data.begin(), data.end());
        return eth_frame(own_mac(in), kHost6, RTE_ETHER_TYPE_IPV6,
                         ipv6_packet(src, dst, 58, icmp6(src, dst, 128, 0, body), hop_limit));
    }
    Bytes udp6(const Addr6& src, const Addr6& dst, uint8_t hop_limit, size_t data_len = 64) {
        Bytes u(8);
        put16(&u[0], 5000);
        put16(&u[2], 4791);
        put16(&u[4], static_cast<uint16_t>(8 + data_len));
        const Bytes data = payload_of(data_len, 9);
        u.insert(u.end(), data.begin(), data.end());
        return eth_frame(own_mac(kV0), kHost6, RTE_ETHER_TYPE_IPV6,
                         ipv6_packet(src, dst, 17, u, hop_limit));
    }
    void learn_gateway() {
        ASSERT_TRUE(tables->set_neighbour6(a6("2001:db8:2::2").data(), kGw6, kV1));
    }
    // Checks the ICMPv6 checksum of a frame built by the switch with the reference sum.
    static void expect_icmp6_valid(const Bytes& f) {
        ASSERT_GE(f.size(), kEthLen + 40 + 4);
        const uint8_t* ip = &f[kEthLen];
        Addr6 src;
        Addr6 dst;
        std::copy(ip + 8, ip + 24, src.begin());
        std::copy(ip + 24, ip + 40, dst.begin());
        const Bytes msg(ip + 40, ip + 40 + get16(ip + 4));
        EXPECT_EQ(ref_icmp6_checksum(src, dst, msg), 0) << "checksum of the switch's ICMPv6";
    }
};

TEST_F(Ipv6Path, SolicitationForOwnAddressIsAdvertisedAndItsSenderLearned) {
    const Addr6 host = a6("2001:db8:1::9");
    const Addr6 own = a6("2001:db8:1::1");
    run({mbuf(ns(host, own), kV0)});
    EXPECT_EQ(total_drops(), 0u);
    EXPECT_EQ(ctx->counters.nd_advertisements, 1u);
    auto tx = take_tx(kV0);
    ASSERT_EQ(tx.size(), 1u);
    const Bytes na = bytes_of(tx[0]);
    free_mbufs(tx);
    ASSERT_EQ(na.size(), kEthLen + 40 + 32u);
    EXPECT_TRUE(std::equal(&na[0], &na[6], kHost6.addr_bytes));
    EXPECT_TRUE(std::equal(&na[6], &na[12], own_mac(kV0).addr_bytes));
    EXPECT_EQ(get16(&na[12]), RTE_ETHER_TYPE_IPV6);
    const uint8_t* ip = &na[kEthLen];
    EXPECT_EQ(ip[6], 58);
    EXPECT_EQ(ip[7], 255) << "ND leaves with hop limit 255";
    EXPECT_TRUE(std::equal(ip + 8, ip + 24, own.begin()));
    EXPECT_TRUE(std::equal(ip + 24, ip + 40, host.begin()));
    const uint8_t* icmp = ip + 40;
    EXPECT_EQ(icmp[0], 136);
    EXPECT_EQ(icmp[1], 0);
    EXPECT_EQ(get32(icmp + 4), 0xe0000000u) << "router, solicited, override";
    EXPECT_TRUE(std::equal(icmp + 8, icmp + 24, own.begin()));
    EXPECT_EQ(icmp[24], 2) << "target link-layer address option";
    EXPECT_EQ(icmp[25], 1);
    EXPECT_TRUE(std::equal(icmp + 26, icmp + 32, own_mac(kV0).addr_bytes));
    expect_icmp6_valid(na);

    const auto ev = events();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].type, dp::EventType::neighbour6_seen);
    EXPECT_EQ(ev[0].port, kV0);
    EXPECT_TRUE(std::equal(ev[0].ip6, ev[0].ip6 + 16, host.begin()));
    EXPECT_TRUE(std::equal(ev[0].mac, ev[0].mac + 6, kHost6.addr_bytes));
}

TEST_F(Ipv6Path, DuplicateAddressDetectionIsDefendedToAllNodesAndNotLearned) {
    const Addr6 own = a6("2001:db8:1::1");
    run({mbuf(ns(a6("::"), own, 255, false), kV0)});
    auto tx = take_tx(kV0);
    ASSERT_EQ(tx.size(), 1u);
    const Bytes na = bytes_of(tx[0]);
    free_mbufs(tx);
    const Addr6 all_nodes = a6("ff02::1");
    EXPECT_TRUE(std::equal(&na[0], &na[6], mcast_mac(all_nodes).addr_bytes));
    EXPECT_TRUE(std::equal(&na[kEthLen + 24], &na[kEthLen + 40], all_nodes.begin()));
    EXPECT_EQ(get32(&na[kEthLen + 44]), 0xa0000000u) << "not solicited";
    expect_icmp6_valid(na);
    EXPECT_TRUE(events().empty());
}

TEST_F(Ipv6Path, NeighborDiscoveryFailingRfc4861ChecksIsDroppedByReason) {
    const Addr6 host = a6("2001:db8:1::9");
    const Addr6 own = a6("2001:db8:1::1");
    run({mbuf(ns(host, own, 64), kV0)});  // forwarded ND would not have hop limit 255
    EXPECT_EQ(drops(dp::DropReason::nd_invalid), 1u);
    run({mbuf(ns(host, own, 255, true, true, true), kV0)});
    EXPECT_EQ(drops(dp::DropReason::icmp6_bad_checksum), 1u);
    run({mbuf(ns(host, a6("2001:db8:1::77")), kV0)});  // someone else's solicited-node group
    EXPECT_EQ(drops(dp::DropReason::not_for_us), 1u);
    run({mbuf(ns(host, a6("2001:db8:1::77"), 255, true, false), kV0)});  // unicast to us, not ours
    EXPECT_EQ(drops(dp::DropReason::nd_not_for_us), 1u);
    run({mbuf(ns(a6("::"), own, 255, true), kV0)});  // DAD with a source link-layer option
    EXPECT_EQ(drops(dp::DropReason::nd_invalid), 2u);
    EXPECT_EQ(total_tx(), 0u);
    EXPECT_EQ(total_drops(), 5u);
    EXPECT_TRUE(events().empty());
}

TEST_F(Ipv6Path, AdvertisementToUsIsLearnedOnlyOnTheLinkPrefix) {
    const Addr6 own = a6("2001:db8:2::1");
    auto na = [&](const Addr6& target) {
        const Addr6 src = target;
        return eth_frame(own_mac(kV1), kGw6, RTE_ETHER_TYPE_IPV6,
                         ipv6_packet(src, own, 58,
                                     icmp6(src, own, 136, 0, nd_body(0x60000000, target, &kGw6, 2)),
                                     255));
    };
    run({mbuf(na(a6("2001:db8:2::2")), kV1), mbuf(na(a6("2001:db8:7::2")), kV1)});
    const auto ev = events();
    ASSERT_EQ(ev.size(), 1u) << "only the neighbour on v1's prefix is reported";
    EXPECT_EQ(ev[0].type, dp::EventType::neighbour6_seen);
    EXPECT_EQ(ev[0].port, kV1);
    const Addr6 gw = a6("2001:db8:2::2");
    EXPECT_TRUE(std::equal(ev[0].ip6, ev[0].ip6 + 16, gw.begin()));
    EXPECT_EQ(total_tx(), 0u);
    EXPECT_EQ(total_drops(), 0u) << "advertisements are consumed, not dropped";
}

TEST_F(Ipv6Path, EchoToOwnAddressIsAnsweredInPlace) {
    const Addr6 host = a6("2001:db8:1::9");
    const Addr6 own = a6("2001:db8:2::1");  // another port's address: still the switch's
    const Bytes req = echo6(kV0, host, own, payload_of(56, 4), 1);
    rte_mbuf* m = mbuf(req, kV0);
    run({m});
    EXPECT_EQ(total_drops(), 0u) << "hop limit 1 is fine for a packet to the switch";
    auto tx = take_tx(kV0);
    ASSERT_EQ(tx.size(), 1u);
    EXPECT_EQ(tx[0], m) << "answered in place";
    const Bytes r = bytes_of(tx[0]);
    free_mbufs(tx);
    ASSERT_EQ(r.size(), req.size());
    EXPECT_TRUE(std::equal(&r[0], &r[6], kHost6.addr_bytes));
    EXPECT_EQ(r[kEthLen + 7], 64);
    EXPECT_TRUE(std::equal(&r[kEthLen + 8], &r[kEthLen + 24], own.begin()));
    EXPECT_TRUE(std::equal(&r[kEthLen + 24], &r[kEthLen + 40], host.begin()));
    EXPECT_EQ(r[kEthLen + 40], 129);
    EXPECT_TRUE(std::equal(r.begin() + kEthLen + 44, r.end(), req.begin() + kEthLen + 44));
    expect_icmp6_valid(r);
    EXPECT_EQ(ctx->counters.icmp6_echo_replies, 1u);
}

TEST_F(Ipv6Path, ChainedEchoIsAnsweredWithAChecksumOverEverySegment) {
    const Addr6 host = a6("2001:db8:1::9");
    const Addr6 own = a6("2001:db8:1::1");
    const Bytes req = echo6(kV0, host, own, payload_of(1200, 5));
    run({chained(req, kV0, {70, 301, 500})});
    auto tx = take_tx(kV0);
    ASSERT_EQ(tx.size(), 1u);
    const Bytes r = bytes_of(tx[0]);
    free_mbufs(tx);
    ASSERT_EQ(r.size(), req.size());
    EXPECT_EQ(r[kEthLen + 40], 129);
    expect_icmp6_valid(r);
}

TEST_F(Ipv6Path, RoutedViaGatewayWithHopLimitDecremented) {
    learn_gateway();
    const Bytes in = udp6(a6("2001:db8:1::9"), a6("2001:db8:100::5"), 17);
    run({mbuf(in, kV0)});
    EXPECT_EQ(total_drops(), 0u);
    auto tx = take_tx(kV1);
    ASSERT_EQ(tx.size(), 1u);
    const Bytes out = bytes_of(tx[0]);
    free_mbufs(tx);
    ASSERT_EQ(out.size(), in.size());
    EXPECT_TRUE(std::equal(&out[0], &out[6], kGw6.addr_bytes));
    EXPECT_TRUE(std::equal(&out[6], &out[12], own_mac(kV1).addr_bytes));
    EXPECT_EQ(out[kEthLen + 7], 16);
    // Everything but the hop limit and the MACs is as it came (UDP untouched: no feature).
    Bytes expect = in;
    expect[kEthLen + 7] = 16;
    EXPECT_TRUE(std::equal(out.begin() + 12, out.end(), expect.begin() + 12));
    EXPECT_EQ(ctx->counters.routed6, 1u);
}

TEST_F(Ipv6Path, HopLimitOneIsDroppedAndCounted) {
    learn_gateway();
    run({mbuf(udp6(a6("2001:db8:1::9"), a6("2001:db8:100::5"), 1), kV0),
         mbuf(udp6(a6("2001:db8:1::9"), a6("2001:db8:100::5"), 0), kV0)});
    EXPECT_EQ(drops(dp::DropReason::hop_limit_exceeded), 2u);
    EXPECT_EQ(total_tx(), 0u);
}

TEST_F(Ipv6Path, UnresolvedNextHopIsSolicitedOncePerIntervalAndTheCountedDrop) {
    const Addr6 dst = a6("2001:db8:200::7");  // device route on v1: the destination itself
    run({mbuf(udp6(a6("2001:db8:1::9"), dst, 64), kV0),
         mbuf(udp6(a6("2001:db8:1::9"), dst, 64), kV0)});
    EXPECT_EQ(drops(dp::DropReason::neighbour_unresolved), 2u);
    EXPECT_EQ(ctx->counters.nd_solicitations, 1u);
    auto tx = take_tx(kV1);
    ASSERT_EQ(tx.size(), 1u);
    const Bytes s = bytes_of(tx[0]);
    free_mbufs(tx);
    const Addr6 group = solicited(dst);
    EXPECT_TRUE(std::equal(&s[0], &s[6], mcast_mac(group).addr_bytes));
    EXPECT_TRUE(std::equal(&s[6], &s[12], own_mac(kV1).addr_bytes));
    const uint8_t* ip = &s[kEthLen];
    EXPECT_EQ(ip[7], 255);
    const Addr6 first = a6("2001:db8:2::1");
    EXPECT_TRUE(std::equal(ip + 8, ip + 24, first.begin())) << "v1's first address: no prefix holds dst";
    EXPECT_TRUE(std::equal(ip + 24, ip + 40, group.begin()));
    EXPECT_EQ(ip[40], 135);
    EXPECT_TRUE(std::equal(ip + 48, ip + 64, dst.begin()));
    EXPECT_EQ(ip[64], 1) << "source link-layer address option";
    EXPECT_TRUE(std::equal(ip + 66, ip + 72, own_mac(kV1).addr_bytes));
    expect_icmp6_valid(s);

    // Once the host is known (the control plane stores what its NA reported), packets flow.
    ASSERT_TRUE(tables->set_neighbour6(dst.data(), kHost6, kV1));
    run({mbuf(udp6(a6("2001:db8:1::9"), dst, 64), kV0)});
    EXPECT_EQ(tx_count(kV1), 1);
}

TEST_F(Ipv6Path, MalformedAndMartianPacketsAreCountedByReason) {
    learn_gateway();
    Bytes v4_in_v6 = udp6(a6("2001:db8:1::9"), a6("2001:db8:100::5"), 64);
    v4_in_v6[kEthLen] = 0x45;
    Bytes long_payload = udp6(a6("2001:db8:1::9"), a6("2001:db8:100::5"), 64);
    put16(&long_payload[kEthLen + 4], 2000);
    const Bytes runt = eth_frame(own_mac(kV0), kHost6, RTE_ETHER_TYPE_IPV6, Bytes(30, 0x60));
    run({mbuf(v4_in_v6, kV0), mbuf(long_payload, kV0), mbuf(runt, kV0),
         mbuf(udp6(a6("fe80::9"), a6("2001:db8:100::5"), 64), kV0),
         mbuf(udp6(a6("2001:db8:1::9"), a6("::1"), 64), kV0),
         mbuf(udp6(a6("2001:db8:1::9"), a6("2001:db8:300::1"), 64), kV0),
         mbuf(udp6(a6("2001:db8:1::9"), a6("2001:db8:100::5"), 64, 1200), kV0)});
    EXPECT_EQ(drops(dp::DropReason::ipv6_malformed), 2u);
    EXPECT_EQ(drops(dp::DropReason::ipv6_bad_length), 1u);
    EXPECT_EQ(drops(dp::DropReason::ipv6_martian), 2u);
    EXPECT_EQ(drops(dp::DropReason::no_route), 1u);
    EXPECT_EQ(drops(dp::DropReason::mtu_exceeded), 1u) << "v1's MTU is 1000";
    EXPECT_EQ(total_drops(), 7u);
    EXPECT_EQ(total_tx(), 0u);
}

TEST_F(Ipv6Path, ChainedTransitPacketIsRouted) {
    learn_gateway();
    const Bytes in = udp6(a6("2001:db8:1::9"), a6("2001:db8:100::5"), 9, 900);
    run({chained(in, kV0, {60, 400})});
    auto tx = take_tx(kV1);
    ASSERT_EQ(tx.size(), 1u);
    const Bytes out = bytes_of(tx[0]);
    free_mbufs(tx);
    ASSERT_EQ(out.size(), in.size());
    EXPECT_EQ(out[kEthLen + 7], 8);
    EXPECT_TRUE(std::equal(out.begin() + kEthLen + 8, out.end(), in.begin() + kEthLen + 8));
}

TEST_F(Ipv6Path, ClassifierSeesIpv6UdpAndLeavesItToNoFeature) {
    // classify on its own, as the burst path runs it before routing.
    const Bytes in = udp6(a6("2001:db8:1::9"), a6("2001:db8:100::5"), 64, 100);
    rte_mbuf* m = mbuf(in, kV0);
    pipeline::EdgeBatches<pipeline::Ipv6Edge> unused;
    (void)unused;
    rte_mbuf* one[1] = {m};
    pipeline::classify(*ctx, *snap, one, 1, dp::kScopeRouted);
    const pipeline::PacketMeta* pm = pipeline::classified(m);
    ASSERT_NE(pm, nullptr);
    EXPECT_EQ(pm->l3_verdict, static_cast<uint8_t>(dp::DropReason::count));
    EXPECT_EQ(pm->l3_offset, kEthLen);
    EXPECT_EQ(pm->l4_offset, kEthLen + 40);
    EXPECT_EQ(pm->proto, 17);
    EXPECT_EQ(pm->udp_dport, 4791);
    EXPECT_EQ(pm->l4_length, 108);
    EXPECT_EQ(pm->flags, pipeline::kMetaIpv6 | pipeline::kMetaUdpSound);
    EXPECT_EQ(pm->feature, dp::kFeatureNone);

    Bytes bad = in;
    put16(&bad[kEthLen + 40 + 4], 50);  // UDP length short of the IPv6 payload
    rte_mbuf* b = mbuf(bad, kV0);
    one[0] = b;
    pipeline::classify(*ctx, *snap, one, 1, dp::kScopeRouted);
    EXPECT_EQ(pipeline::classified(b)->flags, pipeline::kMetaIpv6);
    EXPECT_EQ(ctx->counters.udp_malformed[static_cast<size_t>(dp::UdpMalformed::length_mismatch)],
              1u);
    rte_pktmbuf_free(m);
    rte_pktmbuf_free(b);
}

}  // namespace
}  // namespace ina::test
