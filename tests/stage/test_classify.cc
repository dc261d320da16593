// SPDX-License-Identifier: Apache-2.0
// Classify once and generic feature stages: a dummy feature is added through the registration
// table (a UDP port bound in the snapshot, a stage registered under its handle) without any
// change to pipeline.cc, and process_burst hands it routed and bridged frames with their
// metadata; a stage that emits several packets per input runs again until its input is done.
#include "pipeline/classify.h"

#include <rte_ip.h>
#include <rte_udp.h>

#include <vector>

#include "pipeline/feature_stages.h"
#include "pipeline/packet_meta.h"
#include "pipeline/pipeline.h"
#include "stage_util.h"

namespace ina::test {
namespace {

using pipeline::EdgeBatches;
using pipeline::FeatureEdge;
using pipeline::PacketMeta;

constexpr uint8_t kTestFeature = dp::kMaxFeatures - 1;
constexpr uint16_t kTestPort = 4791;  // RoCEv2's port: the next real client of this mechanism
constexpr rte_ether_addr kClient{{0x02, 0x77, 0x00, 0x00, 0x00, 0x01}};

// What the dummy stage saw and does. Plain globals: a stage is a plain function.
struct Probe {
    std::vector<uint16_t> offered;  // inputs offered per call
    std::vector<uint16_t> taken;    // inputs taken per call
    std::vector<PacketMeta> metas;
    std::vector<FeatureEdge> passes;
    uint16_t copies = 0;  // extra packets emitted per input: one to r1's side, one to r0's
} g_probe;

void retarget(rte_mbuf* m, uint32_t dst) {
    auto* ip = rte_pktmbuf_mtod_offset(m, uint8_t*, kEthLen);
    put32(ip + 16, dst);
    put16(ip + 10, 0);
    put16(ip + 10, ref_checksum(ip, (ip[0] & 0x0f) * 4u));
}

uint16_t dummy_stage(pipeline::LcoreContext& ctx, const dp::Snapshot&, rte_mbuf** pkts,
                     uint16_t n, FeatureEdge pass, EdgeBatches<FeatureEdge>& out) {
    g_probe.offered.push_back(n);
    const auto max_emit = static_cast<uint16_t>(1 + g_probe.copies);
    uint16_t i = 0;
    for (; i < n && out.room_for(max_emit); ++i) {
        const PacketMeta* pm = pipeline::classified(pkts[i]);
        g_probe.metas.push_back(pm != nullptr ? *pm : PacketMeta{});
        g_probe.passes.push_back(pass);
        for (uint16_t k = 0; k < g_probe.copies; ++k) {
            rte_mbuf* copy = rte_pktmbuf_copy(pkts[i], ctx.pool, 0, UINT32_MAX);
            if (copy == nullptr) {
                continue;
            }
            copy->port = pkts[i]->port;
            if (k == 1) {
                retarget(copy, ip4("192.168.5.3"));  // via 10.0.1.2 on r0
            }
            out.push(FeatureEdge::route, copy);
        }
        out.push(pass, pkts[i]);
    }
    g_probe.taken.push_back(i);
    return i;
}

class Classify : public StageTest {
protected:
    void SetUp() override {
        StageTest::SetUp();
        g_probe = Probe{};
        ctx->pool = pool;
        ASSERT_TRUE(pipeline::register_feature(
            kTestFeature, pipeline::FeatureStage{"test", dummy_stage, 3, nullptr, 0}));
    }
    void TearDown() override {
        // Leave the registry as other tests of this binary expect it.
        pipeline::register_feature(kTestFeature, pipeline::FeatureStage{"none", nullptr, 1});
        StageTest::TearDown();
    }
    void bind(uint8_t scopes) {
        ASSERT_TRUE(snap->features.bind({dp::kIpProtoUdp, kTestFeature, scopes, kTestPort}));
    }
    void run(std::vector<rte_mbuf*> in) {
        pipeline::process_burst(*ctx, *snap, in.data(), static_cast<uint16_t>(in.size()));
    }
    // UDP from a host behind r0 to 192.168.1.9 (routed to r1), to our MAC.
    static Bytes routed_udp(uint16_t dport, const Bytes& options = {}, size_t payload = 40) {
        const uint32_t src = ip4("10.0.1.9"), dst = ip4("192.168.1.9");
        return eth_frame(port_mac(kR0), kClient, RTE_ETHER_TYPE_IPV4,
                         ipv4_packet(src, dst, IPPROTO_UDP,
                                     udp_datagram(src, dst, 5000, dport, payload_of(payload)), 64,
                                     options));
    }
    // UDP between two stations of L2 group "lan": kHostB (on g0) to kHostA (on g1).
    static Bytes bridged_udp(uint16_t dport) {
        const uint32_t src = ip4("10.0.10.21"), dst = ip4("10.0.10.22");
        return eth_frame(kHostA, kHostB, RTE_ETHER_TYPE_IPV4,
                         ipv4_packet(src, dst, IPPROTO_UDP,
                                     udp_datagram(src, dst, 5000, dport, payload_of(60))));
    }
};

TEST_F(Classify, RegistrationTableRefusesDuplicatesAndBadHandles) {
    dp::FeatureTable t;
    EXPECT_TRUE(t.bind({dp::kIpProtoUdp, 3, dp::kScopeRouted, 100}));
    EXPECT_FALSE(t.bind({dp::kIpProtoUdp, 4, dp::kScopeBridged, 100})) << "port already bound";
    EXPECT_FALSE(t.bind({dp::kIpProtoUdp, dp::kFeatureNone, dp::kScopeRouted, 101}));
    EXPECT_FALSE(t.bind({dp::kIpProtoUdp, dp::kMaxFeatures, dp::kScopeRouted, 101}));
    EXPECT_EQ(t.lookup(dp::kIpProtoUdp, 100, dp::kScopeRouted), 3);
    EXPECT_EQ(t.lookup(dp::kIpProtoUdp, 100, dp::kScopeBridged), dp::kFeatureNone);
    EXPECT_EQ(t.lookup(6, 100, dp::kScopeRouted), dp::kFeatureNone) << "TCP is not UDP";
    for (uint16_t p = 1; t.n < dp::FeatureTable::kMaxBindings; ++p) {
        ASSERT_TRUE(t.bind({dp::kIpProtoUdp, 2, dp::kScopeRouted, static_cast<uint16_t>(200 + p)}));
    }
    EXPECT_FALSE(t.bind({dp::kIpProtoUdp, 2, dp::kScopeRouted, 999})) << "table full";
    EXPECT_FALSE(pipeline::register_feature(dp::kFeatureNone, {"x", dummy_stage, 1}));
    EXPECT_FALSE(pipeline::register_feature(kTestFeature, {"x", dummy_stage, 65}))
        << "more emissions per input than an edge holds";
    // The INA binding exists only when the snapshot has jobs.
    EXPECT_EQ(snap->features.n, 0);
}

TEST_F(Classify, RoutedFrameReachesTheBoundFeatureWithItsMetadata) {
    bind(dp::kScopeRouted);
    const Bytes options = {0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x01, 0x00};  // NOPs, EOL
    run({mbuf(routed_udp(kTestPort), kR0), mbuf(routed_udp(kTestPort + 1), kR0),
         mbuf(routed_udp(kTestPort, options), kR0)});
    ASSERT_EQ(g_probe.metas.size(), 2u) << "only the datagrams to the bound port";
    const PacketMeta& plain = g_probe.metas[0];
    EXPECT_EQ(plain.l3_offset, kEthLen);
    EXPECT_EQ(plain.l4_offset, kEthLen + kIpLen);
    EXPECT_EQ(plain.proto, IPPROTO_UDP);
    EXPECT_EQ(plain.udp_dport, kTestPort);
    EXPECT_EQ(plain.l4_length, 8 + 40);
    EXPECT_EQ(plain.feature, kTestFeature);
    EXPECT_EQ(plain.l3_verdict, static_cast<uint8_t>(dp::DropReason::count));
    EXPECT_EQ(plain.flags, pipeline::kMetaUdpSound);
    const PacketMeta& with_options = g_probe.metas[1];
    EXPECT_EQ(with_options.l4_offset, kEthLen + kIpLen + options.size());
    EXPECT_EQ(with_options.udp_dport, kTestPort);
    EXPECT_EQ(with_options.l4_length, 8 + 40);
    EXPECT_EQ(g_probe.passes[0], FeatureEdge::route);
    // Passed on: all three routed to r1, in arrival order.
    EXPECT_EQ(ctx->counters.routed, 3u);
    auto out = take_tx(kR1);
    ASSERT_EQ(out.size(), 3u);
    EXPECT_EQ(get16(bytes_of(out[1]).data() + kEthLen + kIpLen + 2), kTestPort + 1);
    free_mbufs(out);
}

// A second feature sharing kTestPort with the dummy (as the two RoCEv2 modes share UDP 4791):
// the first bound takes datagrams from UDP source port kOwnSport (routes them) and passes the
// rest; the second records what reaches it and passes everything.
constexpr uint8_t kSharingFeature = dp::kMaxFeatures - 2;
constexpr uint16_t kOwnSport = 1111;
struct SharingProbe {
    std::vector<uint16_t> first_sports, second_sports;
    std::vector<FeatureEdge> first_passes, second_passes;
} g_sharing;

uint16_t udp_sport(const rte_mbuf* m) {
    const PacketMeta* pm = pipeline::classified(m);
    return get16(rte_pktmbuf_mtod_offset(m, const uint8_t*, pm->l4_offset));
}

uint16_t first_sharing_stage(pipeline::LcoreContext&, const dp::Snapshot&, rte_mbuf** pkts,
                             uint16_t n, FeatureEdge pass, EdgeBatches<FeatureEdge>& out) {
    uint16_t i = 0;
    for (; i < n && out.room_for(1); ++i) {
        g_sharing.first_sports.push_back(udp_sport(pkts[i]));
        g_sharing.first_passes.push_back(pass);
        out.push(udp_sport(pkts[i]) == kOwnSport ? FeatureEdge::route : pass, pkts[i]);
    }
    return i;
}

uint16_t second_sharing_stage(pipeline::LcoreContext&, const dp::Snapshot&, rte_mbuf** pkts,
                              uint16_t n, FeatureEdge pass, EdgeBatches<FeatureEdge>& out) {
    uint16_t i = 0;
    for (; i < n && out.room_for(1); ++i) {
        g_sharing.second_sports.push_back(udp_sport(pkts[i]));
        g_sharing.second_passes.push_back(pass);
        out.push(pass, pkts[i]);
    }
    return i;
}

TEST_F(Classify, OnlySharingBindingsShareAPort) {
    dp::FeatureTable t;
    EXPECT_TRUE(t.bind({dp::kIpProtoUdp, 3, dp::kScopeRouted, 100, true}));
    EXPECT_EQ(t.followed[3], 0);
    EXPECT_FALSE(t.bind({dp::kIpProtoUdp, 4, dp::kScopeRouted, 100})) << "4 does not share";
    EXPECT_FALSE(t.bind({dp::kIpProtoUdp, 3, dp::kScopeBridged, 100, true})) << "3 is bound";
    EXPECT_TRUE(t.bind({dp::kIpProtoUdp, 4, dp::kScopeRouted | dp::kScopeBridged, 100, true}));
    EXPECT_EQ(t.followed[3], dp::kScopeRouted) << "4 after 3 on the routed path";
    EXPECT_EQ(t.followed[4], 0) << "nothing after 4";
    EXPECT_TRUE(t.bind({dp::kIpProtoUdp, 5, dp::kScopeRouted, 101}));
    EXPECT_FALSE(t.bind({dp::kIpProtoUdp, 6, dp::kScopeRouted, 101, true}))
        << "101 is 5's alone";
    EXPECT_EQ(t.lookup(dp::kIpProtoUdp, 100, dp::kScopeRouted), 3) << "the first bound";
    EXPECT_EQ(t.lookup(dp::kIpProtoUdp, 100, dp::kScopeBridged), 4) << "3 is routed only";
    EXPECT_EQ(t.next_after(dp::kIpProtoUdp, 100, dp::kScopeRouted, 3), 4);
    EXPECT_EQ(t.next_after(dp::kIpProtoUdp, 100, dp::kScopeRouted, 4), dp::kFeatureNone);
    EXPECT_EQ(t.next_after(dp::kIpProtoUdp, 100, dp::kScopeBridged, 4), dp::kFeatureNone);
    EXPECT_EQ(t.next_after(dp::kIpProtoUdp, 101, dp::kScopeRouted, 5), dp::kFeatureNone);
}

TEST_F(Classify, FeaturesSharingAPortEachSeeWhatTheOtherPassed) {
    g_sharing = SharingProbe{};
    ASSERT_TRUE(pipeline::register_feature(
        kTestFeature, pipeline::FeatureStage{"first", first_sharing_stage, 1, nullptr, 0}));
    ASSERT_TRUE(pipeline::register_feature(
        kSharingFeature,
        pipeline::FeatureStage{"second", second_sharing_stage, 1, nullptr, 0}));
    ASSERT_TRUE(snap->features.bind(
        {dp::kIpProtoUdp, kTestFeature, dp::kScopeRouted, kTestPort, true}));
    ASSERT_TRUE(snap->features.bind({dp::kIpProtoUdp, kSharingFeature,
                                     dp::kScopeRouted | dp::kScopeBridged, kTestPort, true}));
    const uint32_t src = ip4("10.0.1.9"), dst = ip4("192.168.1.9");
    auto routed_from = [&](uint16_t sport, uint16_t dport) {
        return eth_frame(port_mac(kR0), kClient, RTE_ETHER_TYPE_IPV4,
                         ipv4_packet(src, dst, IPPROTO_UDP,
                                     udp_datagram(src, dst, sport, dport, payload_of(40))));
    };
    run({mbuf(routed_from(kOwnSport, kTestPort), kR0), mbuf(routed_from(2222, kTestPort), kR0),
         mbuf(routed_from(kOwnSport, kTestPort), kR0), mbuf(routed_from(3333, kTestPort + 1), kR0),
         mbuf(bridged_udp(kTestPort), kG0)});
    EXPECT_EQ(g_sharing.first_sports, (std::vector<uint16_t>{kOwnSport, 2222, kOwnSport}))
        << "the first bound sees every routed datagram to the port";
    EXPECT_EQ(g_sharing.first_passes,
              std::vector<FeatureEdge>(3, FeatureEdge::next)) << "and passes to the next";
    EXPECT_EQ(g_sharing.second_sports, (std::vector<uint16_t>{2222, 5000}))
        << "the second sees what the first passed, and the bridged datagram it alone is bound for";
    EXPECT_EQ(g_sharing.second_passes,
              (std::vector<FeatureEdge>{FeatureEdge::route, FeatureEdge::bridge}))
        << "the last in the chain passes where the packet was going";
    EXPECT_EQ(ctx->counters.routed, 4u);
    auto out = take_tx(kR1);
    ASSERT_EQ(out.size(), 4u) << "taken, passed by both, taken, no feature: all routed";
    // A flow keeps its order (the first passes whole flows, as the RoCE endpoint does by
    // destination); what the first took leaves before what it passed in the same run.
    const std::vector<uint16_t> sports = {kOwnSport, kOwnSport, 2222, 3333};
    for (size_t i = 0; i < out.size(); ++i) {
        EXPECT_EQ(get16(bytes_of(out[i]).data() + kEthLen + kIpLen), sports[i]) << i;
    }
    free_mbufs(out);
    auto bridged = take_tx(kG1);
    EXPECT_EQ(bridged.size(), 1u);
    free_mbufs(bridged);
    pipeline::register_feature(kSharingFeature, pipeline::FeatureStage{"none", nullptr, 1});
}

TEST_F(Classify, ChainedFrameIsClassifiedFromItsGatheredHeaders) {
    bind(dp::kScopeRouted);
    // The IPv4 header straddles the first two segments, UDP sits in the third.
    run({chained(routed_udp(kTestPort, {}, 300), kR0, {20, 16, 40})});
    ASSERT_EQ(g_probe.metas.size(), 1u);
    EXPECT_EQ(g_probe.metas[0].udp_dport, kTestPort);
    EXPECT_EQ(g_probe.metas[0].l4_length, 8 + 300);
    EXPECT_EQ(g_probe.metas[0].flags, pipeline::kMetaUdpSound);
    EXPECT_EQ(ctx->counters.routed, 1u);
    free_mbufs(take_tx(kR1));
}

TEST_F(Classify, MalformedUdpIsCountedByReasonAndForwardedUnmodified) {
    bind(dp::kScopeRouted);
    const std::vector<Bytes> frames = malformed_udp_frames(routed_udp(kTestPort));
    std::vector<rte_mbuf*> in;
    for (const auto& f : frames) {
        in.push_back(mbuf(f, kR0));
    }
    run(in);
    EXPECT_EQ(udp_malformed(dp::UdpMalformed::bad_length), 1u);
    EXPECT_EQ(udp_malformed(dp::UdpMalformed::length_mismatch), 2u)
        << "longer and shorter than IPv4";
    EXPECT_EQ(udp_malformed(dp::UdpMalformed::truncated), 1u);
    EXPECT_EQ(drops(dp::DropReason::ipv4_bad_checksum), 1u) << "routing drops by the verdict";
    // The feature of the port sees the unsound datagrams flagged (never the broken IPv4 one, nor
    // the truncated one whose port could not be read); all four are routed untouched.
    ASSERT_EQ(g_probe.metas.size(), 3u);
    for (const auto& pm : g_probe.metas) {
        EXPECT_EQ(pm.flags & pipeline::kMetaUdpSound, 0);
    }
    EXPECT_EQ(ctx->counters.routed, 4u);
    auto out = take_tx(kR1);
    ASSERT_EQ(out.size(), 4u);
    for (size_t i = 0; i < out.size(); ++i) {
        Bytes expect = frames[i];
        expect[kEthLen + 8] = 63;  // TTL, and its checksum update
        fix_ipv4_checksum(expect);
        const Bytes got = bytes_of(out[i]);
        EXPECT_TRUE(std::equal(expect.begin() + kEthLen, expect.end(), got.begin() + kEthLen))
            << "frame " << i << " changed beyond TTL and MACs";
    }
    free_mbufs(out);
}

TEST_F(Classify, BridgedFramesReachAFeatureBoundForTheBridgedPath) {
    bind(dp::kScopeRouted | dp::kScopeBridged);
    // RDMA between two servers of one L2 group: the feature sees it, then the bridge sends it
    // to kHostA's port. Other bridged traffic goes straight to the bridge.
    run({mbuf(bridged_udp(kTestPort), kG0), mbuf(eth_frame(kHostA, kHostB, 0x88b5,
                                                          payload_of(50)), kG0),
         mbuf(bridged_udp(kTestPort + 1), kG0)});
    ASSERT_EQ(g_probe.metas.size(), 1u);
    EXPECT_EQ(g_probe.passes[0], FeatureEdge::bridge);
    EXPECT_EQ(g_probe.metas[0].udp_dport, kTestPort);
    EXPECT_EQ(ctx->counters.bridged, 3u);
    auto out = take_tx(kG1);
    ASSERT_EQ(out.size(), 3u);
    EXPECT_EQ(get16(bytes_of(out[0]).data() + kEthLen + kIpLen + 2), kTestPort) << "in order";
    EXPECT_EQ(get16(bytes_of(out[0]).data() + 12), RTE_ETHER_TYPE_IPV4);
    EXPECT_EQ(get16(bytes_of(out[1]).data() + 12), 0x88b5);
    free_mbufs(out);
}

TEST_F(Classify, BridgedFramesAreNotClassifiedWithoutABridgedBinding) {
    bind(dp::kScopeRouted);
    run({mbuf(bridged_udp(kTestPort), kG0)});
    EXPECT_TRUE(g_probe.metas.empty());
    EXPECT_EQ(ctx->counters.bridged, 1u);
    auto out = take_tx(kG1);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(pipeline::classified(out[0]), nullptr) << "the bridge's fast path stays as it was";
    free_mbufs(out);
}

TEST_F(Classify, AStageEmittingSeveralPacketsPerInputRunsAgainUntilDone) {
    bind(dp::kScopeRouted);
    g_probe.copies = 2;  // three packets per input, the most the stage declared
    constexpr uint16_t kInputs = 30;
    std::vector<rte_mbuf*> in;
    for (uint16_t i = 0; i < kInputs; ++i) {
        in.push_back(mbuf(routed_udp(kTestPort), kR0));
    }
    run(in);
    // 64 / 3: a call takes 21 inputs at most; the pipeline drains and calls again for the rest.
    ASSERT_EQ(g_probe.taken.size(), 2u);
    EXPECT_EQ(g_probe.offered[0], kInputs);
    EXPECT_EQ(g_probe.taken[0], 21);
    EXPECT_EQ(g_probe.offered[1], kInputs - 21);
    EXPECT_EQ(g_probe.taken[1], kInputs - 21);
    EXPECT_EQ(drops(dp::DropReason::stage_contract), 0u);
    EXPECT_EQ(ctx->counters.routed, 3u * kInputs);
    EXPECT_EQ(tx_count(kR1), 2 * kInputs) << "inputs and their first copies";
    EXPECT_EQ(tx_count(kR0), kInputs) << "the second copies";
}

TEST_F(Classify, EdgeBatchesNeverWritePastTheirCapacity) {
    EdgeBatches<FeatureEdge> out;
    std::vector<rte_mbuf*> ms;
    for (uint16_t i = 0; i < EdgeBatches<FeatureEdge>::kCapacity + 2; ++i) {
        ms.push_back(mbuf(payload_of(60), kR0));
    }
    EXPECT_TRUE(out.room_for(EdgeBatches<FeatureEdge>::kCapacity));
    for (rte_mbuf* m : ms) {
        out.push(FeatureEdge::route, m);
    }
    EXPECT_EQ(out.size(FeatureEdge::route), EdgeBatches<FeatureEdge>::kCapacity);
    EXPECT_EQ(out.overflowed, 2) << "refused and freed";
    EXPECT_FALSE(out.room_for(1));
    EXPECT_EQ(in_use(), EdgeBatches<FeatureEdge>::kCapacity);
    free_all(out);
}

}  // namespace
}  // namespace ina::test
