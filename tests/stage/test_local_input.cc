// SPDX-License-Identifier: Apache-2.0
// local_input: ICMP echo is answered in place; everything else to the switch is dropped.
#include "pipeline/local_input.h"

#include <rte_icmp.h>
#include <rte_ip.h>

#include "pipeline/ipv4_forward.h"
#include "stage_util.h"

namespace ina::test {
namespace {

using pipeline::EdgeBatches;
using pipeline::LocalEdge;

constexpr rte_ether_addr kPinger{{0x02, 0x50, 0x49, 0x4e, 0x47, 0x01}};

class LocalInput : public StageTest {
protected:
    Bytes echo(uint16_t in, uint32_t src, uint32_t dst, const Bytes& data, uint8_t type = 8) {
        return eth_frame(port_mac(in), kPinger, RTE_ETHER_TYPE_IPV4,
                         ipv4_packet(src, dst, IPPROTO_ICMP, icmp_echo(type, 0x4242, 7, data), 57));
    }
    void run(std::vector<rte_mbuf*> in) {
        pipeline::local_input(*ctx, *snap, in.data(), static_cast<uint16_t>(in.size()), out);
    }
    void expect_unsupported(const Bytes& f, uint16_t in) {
        rte_mbuf* m = mbuf(f, in);
        const uint16_t n = out.size(LocalEdge::drop);
        const uint64_t before = drops(dp::DropReason::local_unsupported);
        run({m});
        ASSERT_EQ(out.size(LocalEdge::drop), n + 1);
        EXPECT_EQ(out.at(LocalEdge::drop, n), m);
        EXPECT_EQ(drops(dp::DropReason::local_unsupported), before + 1);
        EXPECT_EQ(total_tx(), 0u);
        EXPECT_EQ(ctx->counters.icmp_echo_replies, 0u);
    }
    void TearDown() override {
        free_all(out);
        StageTest::TearDown();
    }
    EdgeBatches<LocalEdge> out;
};

TEST_F(LocalInput, EchoRequestBecomesAValidEchoReply) {
    const Bytes data = payload_of(56, 3);
    const Bytes req = echo(kR0, ip4("10.0.1.9"), ip4("10.0.1.1"), data);
    rte_mbuf* m = mbuf(req, kR0);
    ASSERT_EQ(pipeline::ipv4_check(m), dp::DropReason::count) << "the request itself is sound";
    run({m});
    EXPECT_EQ(out.size(LocalEdge::drop), 0);
    ASSERT_EQ(tx_count(kR0), 1);
    EXPECT_EQ(ctx->tx[kR0].pkts[0], m);
    EXPECT_EQ(total_tx(), 1u);
    EXPECT_EQ(ctx->counters.icmp_echo_replies, 1u);
    EXPECT_EQ(total_drops(), 0u);

    const Bytes r = bytes_of(m);
    ASSERT_EQ(r.size(), req.size());
    // Ethernet: back to the pinger, from the ingress port.
    EXPECT_TRUE(std::equal(&r[0], &r[6], kPinger.addr_bytes));
    EXPECT_TRUE(std::equal(&r[6], &r[12], port_mac(kR0).addr_bytes));
    EXPECT_EQ(get16(&r[12]), RTE_ETHER_TYPE_IPV4);
    // IPv4: addresses swapped, fresh TTL, valid checksum, the rest as it was.
    const uint8_t* ip = &r[kEthLen];
    EXPECT_EQ(get32(&ip[12]), ip4("10.0.1.1"));
    EXPECT_EQ(get32(&ip[16]), ip4("10.0.1.9"));
    EXPECT_EQ(ip[8], 64);
    EXPECT_EQ(ip[9], IPPROTO_ICMP);
    EXPECT_EQ(get16(&ip[2]), get16(&req[kEthLen + 2]));
    EXPECT_EQ(get16(&ip[4]), get16(&req[kEthLen + 4]));
    EXPECT_TRUE(ref_checksum_ok(ip, kIpLen));
    // ICMP: type 0 code 0, same id/seq/data, checksum over the whole message verifies.
    const uint8_t* icmp = ip + kIpLen;
    const size_t icmp_len = r.size() - kEthLen - kIpLen;
    EXPECT_EQ(icmp[0], RTE_IP_ICMP_ECHO_REPLY);
    EXPECT_EQ(icmp[1], 0);
    EXPECT_EQ(get16(&icmp[4]), 0x4242);
    EXPECT_EQ(get16(&icmp[6]), 7);
    EXPECT_TRUE(std::equal(icmp + 8, icmp + icmp_len, data.begin()));
    EXPECT_TRUE(ref_checksum_ok(icmp, icmp_len));
    const Bytes expect_icmp = icmp_echo(0, 0x4242, 7, data);
    EXPECT_TRUE(std::equal(icmp, icmp + icmp_len, expect_icmp.begin()))
        << "identical to an echo reply built from scratch";
}

TEST_F(LocalInput, OddLengthAndEmptyPayloads) {
    for (size_t len : {size_t{0}, size_t{1}, size_t{3}, size_t{57}, size_t{1001}}) {
        const Bytes data = payload_of(len, static_cast<uint8_t>(len));
        rte_mbuf* m = mbuf(echo(kR1, ip4("10.0.3.200"), ip4("10.0.3.1"), data), kR1);
        run({m});
        ASSERT_EQ(tx_count(kR1), 1) << len;
        const Bytes r = bytes_of(m);
        EXPECT_TRUE(ref_checksum_ok(&r[kEthLen], kIpLen)) << len;
        EXPECT_TRUE(ref_checksum_ok(&r[kEthLen + kIpLen], r.size() - kEthLen - kIpLen)) << len;
        EXPECT_EQ(r[kEthLen + kIpLen], RTE_IP_ICMP_ECHO_REPLY);
        EXPECT_TRUE(std::equal(&r[6], &r[12], port_mac(kR1).addr_bytes));
        free_mbufs(take_tx(kR1));
    }
    EXPECT_EQ(ctx->counters.icmp_echo_replies, 5u);
}

TEST_F(LocalInput, ReplyLeavesByTheIngressPortEvenForAnotherPortsAddress) {
    rte_mbuf* m = mbuf(echo(kG1, ip4("10.0.10.20"), ip4("10.0.10.1"), payload_of(8)), kG1);
    run({m});
    ASSERT_EQ(tx_count(kG1), 1);
    const Bytes r = bytes_of(m);
    EXPECT_TRUE(std::equal(&r[6], &r[12], port_mac(kG1).addr_bytes));
    EXPECT_EQ(get32(&r[kEthLen + 12]), ip4("10.0.10.1"));
}

TEST_F(LocalInput, EthernetPaddingDoesNotBreakTheIcmpChecksum) {
    Bytes f = echo(kR0, ip4("10.0.1.9"), ip4("10.0.1.1"), payload_of(2));
    f.resize(60, 0xee);  // padding must not be summed
    rte_mbuf* m = mbuf(f, kR0);
    run({m});
    ASSERT_EQ(tx_count(kR0), 1);
    const Bytes r = bytes_of(m);
    EXPECT_TRUE(ref_checksum_ok(&r[kEthLen + kIpLen], 8 + 2));
}

TEST_F(LocalInput, NonIcmpIsUnsupported) {
    expect_unsupported(eth_frame(port_mac(kR0), kPinger, RTE_ETHER_TYPE_IPV4,
                                 ipv4_packet(ip4("10.0.1.9"), ip4("10.0.1.1"), IPPROTO_UDP,
                                             udp_datagram(ip4("10.0.1.9"), ip4("10.0.1.1"), 5, 53,
                                                          payload_of(30)))),
                       kR0);
    expect_unsupported(eth_frame(port_mac(kR0), kPinger, RTE_ETHER_TYPE_IPV4,
                                 ipv4_packet(ip4("10.0.1.9"), ip4("10.0.1.1"), IPPROTO_TCP,
                                             payload_of(40))),
                       kR0);
    EXPECT_EQ(drops(dp::DropReason::local_unsupported), 2u);
    EXPECT_EQ(total_drops(), 2u);
}

TEST_F(LocalInput, IcmpThatIsNotAnAnswerableEchoRequest) {
    // An echo reply is not answered.
    expect_unsupported(echo(kR0, ip4("10.0.1.9"), ip4("10.0.1.1"), payload_of(8), 0), kR0);
    // Destination unreachable.
    expect_unsupported(echo(kR0, ip4("10.0.1.9"), ip4("10.0.1.1"), payload_of(8), 3), kR0);
    // Echo request with a bad ICMP checksum.
    Bytes bad = echo(kR0, ip4("10.0.1.9"), ip4("10.0.1.1"), payload_of(8));
    bad[kEthLen + kIpLen + 2] ^= 0x10;
    expect_unsupported(bad, kR0);
    // Echo request with a non-zero code.
    Bytes code = echo(kR0, ip4("10.0.1.9"), ip4("10.0.1.1"), payload_of(8));
    code[kEthLen + kIpLen + 1] = 1;
    put16(&code[kEthLen + kIpLen + 2], 0);
    put16(&code[kEthLen + kIpLen + 2], ref_checksum(&code[kEthLen + kIpLen], 16));
    expect_unsupported(code, kR0);
    // A fragment (more-fragments set) of an echo request.
    Bytes frag = echo(kR0, ip4("10.0.1.9"), ip4("10.0.1.1"), payload_of(8));
    put16(&frag[kEthLen + 6], 0x2000);
    fix_ipv4_checksum(frag);
    expect_unsupported(frag, kR0);
    // ICMP shorter than its 8-byte header.
    Bytes tiny = eth_frame(port_mac(kR0), kPinger, RTE_ETHER_TYPE_IPV4,
                           ipv4_packet(ip4("10.0.1.9"), ip4("10.0.1.1"), IPPROTO_ICMP,
                                       Bytes{8, 0, 0xf7, 0xff}));
    expect_unsupported(tiny, kR0);
    EXPECT_EQ(drops(dp::DropReason::local_unsupported), 6u);
}

TEST_F(LocalInput, BurstOfRequestsAllAnswered) {
    std::vector<rte_mbuf*> in;
    for (uint8_t i = 0; i < 10; ++i) {
        in.push_back(mbuf(echo(kR0, ip4("10.0.1.100") + i, ip4("10.0.1.1"), payload_of(i)), kR0));
    }
    in.push_back(mbuf(echo(kR1, ip4("10.0.2.9"), ip4("10.0.2.1"), payload_of(20)), kR1));
    run(in);
    EXPECT_EQ(tx_count(kR0), 10);
    EXPECT_EQ(tx_count(kR1), 1);
    EXPECT_EQ(ctx->counters.icmp_echo_replies, 11u);
    for (uint16_t i = 0; i < 10; ++i) {
        const Bytes r = bytes_of(ctx->tx[kR0].pkts[i]);
        EXPECT_EQ(get32(&r[kEthLen + 16]), ip4("10.0.1.100") + i);
    }
}

}  // namespace
}  // namespace ina::test
