// SPDX-License-Identifier: Apache-2.0
// Chained (multi-segment) frames through the whole pipeline: flooded by reference on every
// segment, headers gathered when the first segment is short, routed, answered (ARP, ICMP echo)
// and refused with a counted reason when they cannot be read — never a leaked or doubly freed
// segment (the fixture checks the pool is empty after every test).
#include <rte_ip.h>

#include "pipeline/pipeline.h"
#include "stage_util.h"

namespace ina::test {
namespace {

class Chained : public StageTest {
protected:
    void SetUp() override {
        StageTest::SetUp();
        ctx->pool = pool;
    }
    void run(std::vector<rte_mbuf*> in) {
        pipeline::process_burst(*ctx, *snap, in.data(), static_cast<uint16_t>(in.size()));
    }
    static uint16_t segs(const rte_mbuf* m) { return m->nb_segs; }
};

// The remote crash of the reliability issue: a chained broadcast flooded in a 3-port group took
// its extra reference on the first segment only, so each TX freed the tail once per copy.
TEST_F(Chained, FloodedChainsHoldOneReferencePerCopyOnEverySegment) {
    const Bytes frame = eth_frame(kBroadcast, kStranger, RTE_ETHER_TYPE_IPV4,
                                  ipv4_packet(ip4("10.0.10.50"), ip4("10.0.10.255"), 17,
                                              payload_of(4000 - 34, 7)));
    ASSERT_EQ(in_use(), 0u);
    for (int i = 0; i < 2000; ++i) {
        rte_mbuf* m = chained(frame, kG0, {1000, 1000, 1000});
        ASSERT_NE(m, nullptr);
        ASSERT_EQ(segs(m), 4);
        run({m});
        auto to_g1 = take_tx(kG1);
        auto to_g2 = take_tx(kG2);
        ASSERT_EQ(to_g1.size(), 1u);
        ASSERT_EQ(to_g2.size(), 1u);
        ASSERT_EQ(bytes_of(to_g1[0]), frame) << "iteration " << i;
        // Transmit one copy: the other must still hold every byte of the frame.
        free_mbufs(to_g1);
        ASSERT_EQ(bytes_of(to_g2[0]), frame) << "iteration " << i;
        free_mbufs(to_g2);
        ASSERT_EQ(in_use(), 0u) << "iteration " << i << ": every segment back exactly once";
    }
    EXPECT_EQ(ctx->counters.flooded, 2000u);
    EXPECT_EQ(total_drops(), 0u);
}

TEST_F(Chained, RoutedFrameWithHeadersSplitAcrossSegments) {
    // 10.0.2.x on r1 to 192.168.5.7, routed via 10.0.1.2 on r0; the first segment ends inside
    // the IPv4 header.
    Bytes in = eth_frame(port_mac(kR1), kStranger, RTE_ETHER_TYPE_IPV4,
                         ipv4_packet(ip4("10.0.2.9"), ip4("192.168.5.7"), 17,
                                     udp_datagram(ip4("10.0.2.9"), ip4("192.168.5.7"), 1, 2,
                                                  payload_of(1300, 3))));
    run({chained(in, kR1, {20, 7, 500})});
    auto out = take_tx(kR0);
    ASSERT_EQ(out.size(), 1u);
    Bytes want = in;
    std::memcpy(want.data(), &kNbR0Gw, 6);
    const rte_ether_addr src = port_mac(kR0);
    std::memcpy(want.data() + 6, &src, 6);
    want[kEthLen + 8] = 63;  // TTL - 1
    fix_ipv4_checksum(want);
    EXPECT_EQ(bytes_of(out[0]), want);
    EXPECT_EQ(ctx->counters.routed, 1u);
    EXPECT_EQ(total_drops(), 0u);
    free_mbufs(out);
}

TEST_F(Chained, EchoRequestSpanningSegmentsIsAnswered) {
    const Bytes icmp = icmp_echo(8, 0x1234, 9, payload_of(1200, 5));
    const Bytes in = eth_frame(port_mac(kR0), kStranger, RTE_ETHER_TYPE_IPV4,
                               ipv4_packet(ip4("10.0.1.77"), ip4("10.0.1.1"), 1, icmp));
    run({chained(in, kR0, {40, 300, 301})});
    auto out = take_tx(kR0);
    ASSERT_EQ(out.size(), 1u) << "dropped as " << total_drops() << " drop(s)";
    const Bytes reply = bytes_of(out[0]);
    ASSERT_EQ(reply.size(), in.size());
    EXPECT_EQ(reply[kEthLen + kIpLen], 0) << "echo reply";
    EXPECT_TRUE(ref_checksum_ok(reply.data() + kEthLen + kIpLen, icmp.size()));
    EXPECT_TRUE(ref_checksum_ok(reply.data() + kEthLen, kIpLen));
    EXPECT_EQ(get32(reply.data() + kEthLen + 16), ip4("10.0.1.77"));
    EXPECT_EQ(Bytes(reply.begin() + kEthLen + kIpLen + 8, reply.end()),
              Bytes(in.begin() + kEthLen + kIpLen + 8, in.end()));
    EXPECT_EQ(ctx->counters.icmp_echo_replies, 1u);
    free_mbufs(out);

    // A corrupted byte in the last segment fails the checksum over the whole chain.
    Bytes bad = in;
    bad.back() ^= 0x40;
    run({chained(bad, kR0, {40, 300, 301})});
    EXPECT_EQ(take_tx(kR0).size(), 0u);
    EXPECT_EQ(drops(dp::DropReason::local_unsupported), 1u);
}

TEST_F(Chained, ArpRequestInTwoSegmentsIsAnswered) {
    const Bytes in = eth_frame(kBroadcast, kStranger, RTE_ETHER_TYPE_ARP,
                               arp_payload(1, kStranger, ip4("10.0.1.77"), kZeroMac,
                                           ip4("10.0.1.1")));
    run({chained(in, kR0, {16})});
    auto out = take_tx(kR0);
    ASSERT_EQ(out.size(), 1u);
    const Bytes reply = bytes_of(out[0]);
    EXPECT_EQ(get16(reply.data() + kEthLen + 6), 2) << "ARP reply";
    EXPECT_EQ(get32(reply.data() + kEthLen + 14), ip4("10.0.1.1"));
    EXPECT_EQ(ctx->counters.arp_replies, 1u);
    free_mbufs(out);
}

TEST_F(Chained, HeadersThatCannotBeGatheredAreCountedAndDropped) {
    const Bytes in = eth_frame(port_mac(kR1), kStranger, RTE_ETHER_TYPE_IPV4,
                               ipv4_packet(ip4("10.0.2.9"), ip4("192.168.5.7"), 17,
                                           payload_of(600)));
    rte_mbuf* m = chained(in, kR1, {20});
    ASSERT_NE(m, nullptr);
    // A first segment whose data ends at the end of its buffer: no room to gather into.
    const uint16_t len = rte_pktmbuf_data_len(m);
    uint8_t head[20];
    std::memcpy(head, rte_pktmbuf_mtod(m, uint8_t*), len);
    m->data_off = static_cast<uint16_t>(m->buf_len - len);
    std::memcpy(rte_pktmbuf_mtod(m, uint8_t*), head, len);
    ASSERT_EQ(rte_pktmbuf_tailroom(m), 0u);
    run({m});
    EXPECT_EQ(total_tx(), 0u);
    EXPECT_EQ(drops(dp::DropReason::chain_unreadable), 1u);
}

}  // namespace
}  // namespace ina::test
