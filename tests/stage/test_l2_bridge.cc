// SPDX-License-Identifier: Apache-2.0
// l2_bridge: known unicast, same-port filtering, flooding by reference count; l2_learn.
#include "pipeline/l2_bridge.h"

#include "stage_util.h"

namespace ina::test {
namespace {

using pipeline::BridgeEdge;
using pipeline::EdgeBatches;

class L2Bridge : public StageTest {
protected:
    Bytes frame(const rte_ether_addr& dst, const rte_ether_addr& src, size_t len = 100) {
        return eth_frame(dst, src, RTE_ETHER_TYPE_IPV4,
                         ipv4_packet(ip4("10.0.10.50"), ip4("10.0.10.60"), 17, payload_of(len)));
    }
    void run(std::vector<rte_mbuf*> in) {
        pipeline::l2_bridge(*ctx, *snap, in.data(), static_cast<uint16_t>(in.size()), out);
    }
    void TearDown() override {
        free_all(out);
        StageTest::TearDown();
    }
    EdgeBatches<BridgeEdge> out;
};

TEST_F(L2Bridge, KnownDestinationGoesToItsPort) {
    const Bytes f = frame(kHostA, kHostB);
    rte_mbuf* m = mbuf(f, kG0);
    run({m});
    ASSERT_EQ(tx_count(kG1), 1);
    EXPECT_EQ(ctx->tx[kG1].pkts[0], m);
    EXPECT_EQ(total_tx(), 1u);
    EXPECT_EQ(rte_mbuf_refcnt_read(m), 1);
    EXPECT_EQ(bytes_of(m), f) << "bridged frames are not modified";
    EXPECT_EQ(ctx->counters.bridged, 1u);
    EXPECT_EQ(ctx->counters.flooded, 0u);
    EXPECT_EQ(total_drops(), 0u);
    // And the other way.
    run({mbuf(frame(kHostB, kHostA), kG2)});
    ASSERT_EQ(tx_count(kG0), 1);
    EXPECT_EQ(ctx->counters.bridged, 2u);
    // In the other group.
    run({mbuf(frame(kHostC, kStranger), kH0)});
    ASSERT_EQ(tx_count(kH1), 1);
    EXPECT_EQ(ctx->counters.bridged, 3u);
}

TEST_F(L2Bridge, DestinationOnTheIngressPortIsDropped) {
    rte_mbuf* m = mbuf(frame(kHostA, kStranger), kG1);
    run({m});
    ASSERT_EQ(out.size(BridgeEdge::drop), 1);
    EXPECT_EQ(out.at(BridgeEdge::drop, 0), m);
    EXPECT_EQ(drops(dp::DropReason::l2_same_port), 1u);
    EXPECT_EQ(total_drops(), 1u);
    EXPECT_EQ(total_tx(), 0u);
    EXPECT_EQ(ctx->counters.bridged, 0u);
}

TEST_F(L2Bridge, UnknownUnicastFloodsToEveryOtherMemberByReference) {
    const Bytes f = frame(kStranger, kHostB);
    rte_mbuf* m = mbuf(f, kG0);
    run({m});
    EXPECT_EQ(out.size(BridgeEdge::drop), 0);
    EXPECT_EQ(tx_count(kG0), 0) << "never back out of the ingress port";
    ASSERT_EQ(tx_count(kG1), 1);
    ASSERT_EQ(tx_count(kG2), 1);
    EXPECT_EQ(total_tx(), 2u) << "nothing leaves the group";
    EXPECT_EQ(ctx->tx[kG1].pkts[0], m);
    EXPECT_EQ(ctx->tx[kG2].pkts[0], m);
    EXPECT_EQ(rte_mbuf_refcnt_read(m), 2) << "one reference per copy";
    EXPECT_EQ(bytes_of(m), f);
    EXPECT_EQ(ctx->counters.flooded, 1u);
    EXPECT_EQ(ctx->counters.bridged, 0u);
    // Each TX frees one reference: the first free keeps the mbuf, the second returns it.
    free_mbufs(take_tx(kG1));
    EXPECT_EQ(rte_mbuf_refcnt_read(m), 1);
    EXPECT_EQ(in_use(), 1u);
    free_mbufs(take_tx(kG2));
    EXPECT_EQ(in_use(), 0u);
}

TEST_F(L2Bridge, BroadcastAndMulticastFlood) {
    rte_mbuf* b = mbuf(frame(kBroadcast, kHostA), kG1);
    // Multicast floods even when the group MAC happens to be in the FDB.
    rte_mbuf* mc = mbuf(frame(mac("01:00:5e:00:00:fb"), kHostA), kG2);
    run({b, mc});
    EXPECT_EQ(ctx->counters.flooded, 2u);
    ASSERT_EQ(tx_count(kG0), 2);
    EXPECT_EQ(ctx->tx[kG0].pkts[0], b);
    EXPECT_EQ(ctx->tx[kG0].pkts[1], mc);
    ASSERT_EQ(tx_count(kG2), 1);
    EXPECT_EQ(ctx->tx[kG2].pkts[0], b);
    ASSERT_EQ(tx_count(kG1), 1);
    EXPECT_EQ(ctx->tx[kG1].pkts[0], mc);
    EXPECT_EQ(rte_mbuf_refcnt_read(b), 2);
    EXPECT_EQ(rte_mbuf_refcnt_read(mc), 2);
}

TEST_F(L2Bridge, TwoMemberGroupFloodsWithoutExtraReferences) {
    rte_mbuf* m = mbuf(frame(kBroadcast, kStranger), kH1);
    run({m});
    ASSERT_EQ(tx_count(kH0), 1);
    EXPECT_EQ(total_tx(), 1u);
    EXPECT_EQ(rte_mbuf_refcnt_read(m), 1);
    EXPECT_EQ(ctx->counters.flooded, 1u);
}

TEST_F(L2Bridge, FdbIsPerGroup) {
    // kHostC is known in dmz only: in lan it is unknown and floods.
    rte_mbuf* m = mbuf(frame(kHostC, kHostB), kG0);
    run({m});
    EXPECT_EQ(tx_count(kH1), 0);
    EXPECT_EQ(tx_count(kG1), 1);
    EXPECT_EQ(tx_count(kG2), 1);
    EXPECT_EQ(ctx->counters.flooded, 1u);
}

TEST_F(L2Bridge, WideGroupFloodRefcountEqualsCopies) {
    // A 6-port group: a flood makes 5 references to one mbuf.
    const std::string yaml = R"(version: 1
ports:
  - {name: a, devargs: x0, l2_group: big}
  - {name: b, devargs: x1, l2_group: big}
  - {name: c, devargs: x2, l2_group: big}
  - {name: d, devargs: x3, l2_group: big}
  - {name: e, devargs: x4, l2_group: big}
  - {name: f, devargs: x5, l2_group: big}
)";
    std::vector<dp::PortBinding> bindings;
    for (uint16_t i = 0; i < 6; ++i) {
        bindings.push_back({static_cast<uint16_t>(10 + i), port_mac(static_cast<uint16_t>(10 + i))});
    }
    build(yaml, {}, {}, bindings);
    rte_mbuf* m = mbuf(frame(kBroadcast, kStranger), 12);
    run({m});
    EXPECT_EQ(rte_mbuf_refcnt_read(m), 5);
    for (uint16_t p = 10; p < 16; ++p) {
        EXPECT_EQ(tx_count(p), p == 12 ? 0 : 1) << p;
    }
    for (uint16_t p = 10; p < 16; ++p) {
        free_mbufs(take_tx(p));
    }
    EXPECT_EQ(in_use(), 0u);
}

TEST_F(L2Bridge, LearnReportsNewAndMovedOnly) {
    ctx->now_tsc = kStartTsc + 7;
    pipeline::l2_learn(*ctx, *snap, kHostA, kLan, kG1);  // known here: refresh
    EXPECT_EQ(fdb_seen[kFdbIndexA], kStartTsc + 7);
    EXPECT_TRUE(events().empty());
    pipeline::l2_learn(*ctx, *snap, kHostA, kLan, kG0);  // moved
    pipeline::l2_learn(*ctx, *snap, kStranger, kDmz, kH0);  // new
    auto ev = events();
    ASSERT_EQ(ev.size(), 2u);
    EXPECT_EQ(ev[0].type, dp::EventType::fdb_learn);
    EXPECT_EQ(ev[0].port, kG0);
    EXPECT_EQ(ev[0].group, kLan);
    EXPECT_TRUE(std::equal(ev[0].mac, ev[0].mac + 6, kHostA.addr_bytes));
    EXPECT_EQ(ev[1].port, kH0);
    EXPECT_EQ(ev[1].group, kDmz);
    EXPECT_TRUE(std::equal(ev[1].mac, ev[1].mac + 6, kStranger.addr_bytes));
}

TEST_F(L2Bridge, LearnIgnoresAnIndexBeyondTheStampArray) {
    auto fdb = stage_fdb();
    fdb.push_back(dp::DynamicFdbEntry{kStranger, kLan, kG2, 1000});
    build(kStageYaml, stage_learned(), fdb);
    const auto saved = fdb_seen;
    pipeline::l2_learn(*ctx, *snap, kStranger, kLan, kG2);
    EXPECT_EQ(fdb_seen, saved);
    EXPECT_TRUE(events().empty()) << "known on this port: nothing to report";
}

}  // namespace
}  // namespace ina::test
