// SPDX-License-Identifier: Apache-2.0
// BIER inside process_burst: a BFR's copies (BitString AND F-BM, TTL - 1, a private header over
// one shared payload), ECMP by entropy, TTL expiry, own-bit delivery, malformed headers, and the
// BFIR paths (an INA root's result and an IPv4 multicast group).
#include <rte_ip.h>
#include <rte_udp.h>

#include <cstring>

#include "ina/chunk_table.h"
#include "ina/protocol.h"
#include "pipeline/feature_stages.h"
#include "pipeline/pipeline.h"
#include "stage_util.h"
#include "wire/bier_header.h"

namespace ina::test {
namespace {

// BSL 64, set 0 (BIFT-id 0x10000): bits 1-2 via 10.0.2.2 (r1), bits 3-4 via 10.0.1.2 (r0),
// bit 5 by ECMP over both, bit 6 is ours (host 10.0.2.7 on r1), bit 7 nobody's.
const std::string kBierYaml = std::string(kStageYaml) + R"(bier:
  bfr_id: 40
  ttl: 32
  bifts:
    - bsl: 64
      neighbours:
        - {via: 10.0.2.2, bfr_ids: "1-2,5"}
        - {via: 10.0.1.2, bfr_ids: "3-5"}
      local:
        - {bfr_id: 6, host: 10.0.2.7}
  groups:
    - {group: 239.1.2.3, bfr_ids: "1,3"}
ina:
  jobs:
    - job_id: 7
      role: root
      bsl: 64
      abm: "1-4"
      op: sum
      elem_type: int32
      max_elements: 16
      window: 8
      root: 10.0.1.1
      results: bier
)";

constexpr uint32_t kBift = 0x10000;

uint64_t bits(std::initializer_list<int> bps) {
    uint64_t v = 0;
    for (int bp : bps) {
        v |= uint64_t{1} << (bp - 1);
    }
    return v;
}

// RFC 8296 header, written here field by field (independently of wire::write_bier_header).
Bytes bier_header(uint32_t bift_id, uint8_t ttl, uint32_t entropy, uint64_t bs,
                  uint8_t bsl_code = 1, uint8_t proto = 4, uint8_t nibble = 5) {
    Bytes h(12 + 8);
    put32(h.data(), bift_id << 12 | 1u << 8 | ttl);
    put32(h.data() + 4, uint32_t{nibble} << 28 | uint32_t{bsl_code} << 20 | entropy);
    put32(h.data() + 8, uint32_t{proto} << 16 | 99u);
    for (int i = 0; i < 8; ++i) {
        h[12 + static_cast<size_t>(i)] = static_cast<uint8_t>(bs >> (56 - 8 * i));
    }
    return h;
}

uint64_t bitstring_of(const Bytes& frame) {
    uint64_t v = 0;
    for (size_t i = 0; i < 8; ++i) {
        v = v << 8 | frame[14 + 12 + i];
    }
    return v;
}

class Bier : public StageTest {
protected:
    void SetUp() override {
        StageTest::SetUp();
        build(kBierYaml);
        ctx->pool = pool;
    }

    std::unique_ptr<ina::ChunkTable> ina_root_completes_chunk_21();

    Bytes inner() const {
        const uint32_t src = ip4("10.50.0.1");
        return ipv4_packet(src, ip4("10.60.0.1"), IPPROTO_UDP,
                           udp_datagram(src, ip4("10.60.0.1"), 1000, 2000, payload_of(300)));
    }

    rte_mbuf* bier_frame(uint8_t ttl, uint32_t entropy, uint64_t bs, uint32_t bift = kBift,
                         uint8_t bsl_code = 1) {
        Bytes payload = bier_header(bift, ttl, entropy, bs, bsl_code);
        const Bytes in = inner();
        payload.insert(payload.end(), in.begin(), in.end());
        return mbuf(eth_frame(port_mac(kR0), kHostA, wire::kBierEthertype, payload), kR0);
    }

    void run(std::vector<rte_mbuf*> in) {
        pipeline::process_burst(*ctx, *snap, in.data(), static_cast<uint16_t>(in.size()));
    }

    const dp::BierCounters& bift_counters() const {
        return ctx->counters.bier[snap->bift(kBift)->counter_slot];
    }
};

TEST_F(Bier, CopiesCarryBitStringAndFbmOverOneSharedPayload) {
    run({bier_frame(10, 0, bits({1, 2, 3, 4, 7}))});
    auto to_r1 = take_tx(kR1);
    auto to_r0 = take_tx(kR0);
    ASSERT_EQ(to_r1.size(), 1u);
    ASSERT_EQ(to_r0.size(), 1u);
    const Bytes a = bytes_of(to_r1[0]);
    const Bytes b = bytes_of(to_r0[0]);
    EXPECT_EQ(bitstring_of(a), bits({1, 2}));
    EXPECT_EQ(bitstring_of(b), bits({3, 4}));
    EXPECT_EQ(a[14 + 3], 9) << "TTL decremented once";
    EXPECT_TRUE(same_mac(*reinterpret_cast<const rte_ether_addr*>(a.data()), kNbR1Gw));
    EXPECT_TRUE(same_mac(*reinterpret_cast<const rte_ether_addr*>(a.data() + 6), port_mac(kR1)));
    const Bytes in = inner();
    EXPECT_EQ(Bytes(a.begin() + 34, a.end()), in) << "payload unchanged";
    EXPECT_EQ(Bytes(b.begin() + 34, b.end()), in);
    // Private header segment, then the payload attached by reference to one buffer.
    ASSERT_EQ(to_r1[0]->nb_segs, 2);
    ASSERT_EQ(to_r0[0]->nb_segs, 2);
    ASSERT_TRUE(RTE_MBUF_CLONED(to_r1[0]->next));
    EXPECT_EQ(rte_mbuf_from_indirect(to_r1[0]->next), rte_mbuf_from_indirect(to_r0[0]->next));
    EXPECT_EQ(bift_counters().packets, 1u);
    EXPECT_EQ(bift_counters().copies[0], 1u);
    EXPECT_EQ(bift_counters().copies[1], 1u);
    EXPECT_EQ(bift_counters().bits_no_neighbour, 1u) << "bit 7";
    free_mbufs(to_r1);
    EXPECT_NE(in_use(), 0u) << "the other copy still holds the payload";
    free_mbufs(to_r0);
    EXPECT_EQ(in_use(), 0u);
}

TEST_F(Bier, EcmpBitFollowsTheEntropy) {
    // Bit 5 has two paths: plane entropy % 2 picks 10.0.2.2 (even) or 10.0.1.2 (odd).
    run({bier_frame(10, 4, bits({5})), bier_frame(10, 7, bits({5})), bier_frame(10, 4, bits({5}))});
    auto to_r1 = take_tx(kR1);
    auto to_r0 = take_tx(kR0);
    EXPECT_EQ(to_r1.size(), 2u);
    EXPECT_EQ(to_r0.size(), 1u);
    for (auto* m : to_r1) {
        EXPECT_EQ(bytes_of(m)[14 + 7], 4) << "entropy kept";
    }
    free_mbufs(to_r1);
    free_mbufs(to_r0);
}

TEST_F(Bier, ExpiredTtlStillDeliversOwnBits) {
    run({bier_frame(1, 0, bits({1, 6}))});
    EXPECT_EQ(tx_count(kR0), 0u);
    auto to_r1 = take_tx(kR1);
    ASSERT_EQ(to_r1.size(), 1u) << "only the delivery to 10.0.2.7";
    const Bytes f = bytes_of(to_r1[0]);
    free_mbufs(to_r1);
    EXPECT_TRUE(same_mac(*reinterpret_cast<const rte_ether_addr*>(f.data()), kNbR1Host));
    EXPECT_EQ(get16(f.data() + 12), RTE_ETHER_TYPE_IPV4);
    EXPECT_EQ(get32(f.data() + 14 + 16), ip4("10.0.2.7")) << "inner destination rewritten";
    EXPECT_TRUE(ref_checksum_ok(f.data() + 14, 20));
    EXPECT_EQ(bift_counters().ttl_expired, 1u);
    EXPECT_EQ(bift_counters().delivered, 1u);
    EXPECT_EQ(drops(dp::DropReason::bier_ttl_expired), 1u);
}

TEST_F(Bier, ChainedFrameIsCopiedAndDeliveredWhole) {
    // The BIER header splits across the first two segments and the inner packet across the
    // rest: neighbour copies carry the whole payload, the own bit gets a whole packet.
    Bytes payload = bier_header(kBift, 10, 0, bits({1, 3, 6}));
    const Bytes in = inner();
    payload.insert(payload.end(), in.begin(), in.end());
    const Bytes frame = eth_frame(port_mac(kR0), kHostA, wire::kBierEthertype, payload);
    run({chained(frame, kR0, {20, 60, 100})});
    auto to_r1 = take_tx(kR1);
    auto to_r0 = take_tx(kR0);
    ASSERT_EQ(to_r1.size(), 2u) << "the copy for bit 1 and the delivery of bit 6";
    ASSERT_EQ(to_r0.size(), 1u) << "the copy for bit 3";
    const Bytes copy = bytes_of(to_r0[0]);
    EXPECT_EQ(bitstring_of(copy), bits({3}));
    EXPECT_EQ(Bytes(copy.begin() + 34, copy.end()), in) << "payload unchanged";
    EXPECT_EQ(bitstring_of(bytes_of(to_r1[0])), bits({1}));
    const Bytes delivered = bytes_of(to_r1[1]);
    ASSERT_EQ(delivered.size(), 14 + in.size());
    EXPECT_EQ(get32(delivered.data() + 14 + 16), ip4("10.0.2.7"));
    EXPECT_TRUE(ref_checksum_ok(delivered.data() + 14, 20));
    EXPECT_EQ(Bytes(delivered.begin() + 14 + 28, delivered.end()), Bytes(in.begin() + 28, in.end()))
        << "UDP payload delivered whole";
    EXPECT_EQ(bift_counters().delivered, 1u);
    EXPECT_EQ(total_drops(), 0u);
    free_mbufs(to_r1);
    free_mbufs(to_r0);
    EXPECT_EQ(in_use(), 0u);
}

TEST_F(Bier, OwnBitWithABrokenInnerPacketIsNotDelivered) {
    // Bit 6 is ours; the payloads are a runt, a header claiming more than it has, and a total
    // length below the header length. Bit 1 still goes to its neighbour: only delivery needs IPv4.
    std::vector<rte_mbuf*> in;
    for (const Bytes& inner : {Bytes(10, 0x45), [] {
                                   Bytes b(20, 0);
                                   b[0] = 0x45;
                                   put16(b.data() + 2, 400);
                                   return b;
                               }(),
                               [] {
                                   Bytes b(40, 0);
                                   b[0] = 0x46;
                                   put16(b.data() + 2, 20);
                                   return b;
                               }()}) {
        Bytes payload = bier_header(kBift, 9, 0, bits({1, 6}));
        payload.insert(payload.end(), inner.begin(), inner.end());
        in.push_back(mbuf(eth_frame(port_mac(kR0), kHostA, wire::kBierEthertype, payload), kR0));
    }
    run(in);
    EXPECT_EQ(drops(dp::DropReason::ipv4_malformed), 3u);
    EXPECT_EQ(bift_counters().delivered, 0u);
    EXPECT_EQ(tx_count(kR1), 3u) << "the copies for bit 1";
    free_mbufs(take_tx(kR1));
    EXPECT_EQ(in_use(), 0u);
}

TEST_F(Bier, MalformedAndUnknownAreCountedAndDropped) {
    Bytes bad_nibble = bier_header(kBift, 9, 0, 1, 1, 4, 4);
    Bytes truncated = bier_header(kBift, 9, 0, 1);
    truncated.resize(15);  // the BitString cut short
    run({bier_frame(9, 0, 1, 0x12345),        // unknown BIFT-id
         bier_frame(9, 0, 1, kBift, 3),       // BSL field 256 where the BIFT says 64
         bier_frame(9, 0, 1, kBift, 0),       // reserved BSL
         mbuf(eth_frame(port_mac(kR0), kHostA, wire::kBierEthertype, truncated), kR0),
         mbuf(eth_frame(port_mac(kR0), kHostA, wire::kBierEthertype, bad_nibble), kR0)});
    EXPECT_EQ(total_tx(), 0u);
    EXPECT_EQ(drops(dp::DropReason::bier_unknown_bift), 1u);
    EXPECT_EQ(drops(dp::DropReason::bier_malformed), 4u);
    const auto& m = bift_counters().malformed;
    EXPECT_EQ(m[static_cast<size_t>(wire::BierParseError::bsl_mismatch)], 1u);
    EXPECT_EQ(m[static_cast<size_t>(wire::BierParseError::reserved_bsl)], 1u);
    EXPECT_EQ(m[static_cast<size_t>(wire::BierParseError::truncated)], 1u);
    EXPECT_EQ(m[static_cast<size_t>(wire::BierParseError::bad_nibble)], 1u);
    EXPECT_EQ(in_use(), 0u);
}

TEST_F(Bier, MulticastGroupIsEncapsulatedAtTheBfir) {
    const uint32_t src = ip4("10.0.1.9"), group = ip4("239.1.2.3");
    Bytes frame = eth_frame(mac("01:00:5e:01:02:03"), kHostA, RTE_ETHER_TYPE_IPV4,
                            ipv4_packet(src, group, IPPROTO_UDP,
                                        udp_datagram(src, group, 5000, 5001, payload_of(64)), 8));
    run({mbuf(frame, kR0)});
    auto to_r1 = take_tx(kR1);
    auto to_r0 = take_tx(kR0);
    ASSERT_EQ(to_r1.size(), 1u);
    ASSERT_EQ(to_r0.size(), 1u);
    const Bytes a = bytes_of(to_r1[0]);
    free_mbufs(to_r1);
    free_mbufs(to_r0);
    EXPECT_EQ(get16(a.data() + 12), wire::kBierEthertype);
    EXPECT_EQ(get32(a.data() + 14) >> 12, kBift);
    EXPECT_EQ(a[14 + 3], 32) << "bier.ttl";
    EXPECT_EQ(get16(a.data() + 14 + 10), 40) << "BFIR-id = bier.bfr_id";
    EXPECT_EQ((get32(a.data() + 14 + 8) >> 16) & 0x3f, 4u) << "Proto IPv4";
    EXPECT_EQ(bitstring_of(a), bits({1}));
    EXPECT_EQ(a[34 + 8], 7) << "inner TTL: one IP hop";
    EXPECT_EQ(ctx->counters.mcast_encapsulated, 1u);
}

// INA job 7, root of BFR-ids 1-4 with results over BIER, attached here; its four workers'
// contributions to chunk 21 (sum 100) run. The table (nullptr: not attached) outlives the run.
std::unique_ptr<ina::ChunkTable> Bier::ina_root_completes_chunk_21() {
    auto table = std::make_unique<ina::ChunkTable>(ina_job_params(7, {1, 2, 3, 4}, ina::Role::root));
    if (!pipeline::attach_ina_table(*ctx, *snap, 7, 0, table.get())) {
        return nullptr;
    }
    std::vector<rte_mbuf*> in;
    for (uint16_t w = 1; w <= 4; ++w) {
        in.push_back(mbuf(ina_contribution(7, w, 21, {w * 10}, ip4("10.0.1.1")), kR0));
    }
    run(in);
    return table;
}

TEST_F(Bier, InaRootResultGoesOutOnceOverBier) {
    auto table = ina_root_completes_chunk_21();
    ASSERT_NE(table, nullptr);
    EXPECT_EQ(ctx->counters.ina_results_sent, 1u);
    auto to_r1 = take_tx(kR1);
    auto to_r0 = take_tx(kR0);
    ASSERT_EQ(to_r1.size(), 1u);
    ASSERT_EQ(to_r0.size(), 1u);
    const Bytes a = bytes_of(to_r1[0]);
    const Bytes b = bytes_of(to_r0[0]);
    free_mbufs(to_r1);
    free_mbufs(to_r0);
    EXPECT_EQ(bitstring_of(a), bits({1, 2}));
    EXPECT_EQ(bitstring_of(b), bits({3, 4}));
    EXPECT_EQ(get32(a.data() + 14 + 4) & 0xfffff, 21u) << "entropy = chunk seq";
    const auto parsed = proto::parse(a.data() + 34 + 28, a.size() - 34 - 28);
    ASSERT_TRUE(parsed.packet.has_value());
    EXPECT_EQ(parsed.packet->header.type, proto::PacketType::result);
    int32_t sum = 0;
    std::memcpy(&sum, parsed.packet->payload, 4);
    EXPECT_EQ(sum, 100);
}

// A result over BIER has a BIER header before its IPv4 one, which a device's checksum offload
// cannot see past: its UDP checksum is the core's, whatever the ports offload.
TEST_F(Bier, InaRootResultOverBierKeepsItsChecksumOnOffloadingPorts) {
    build(kBierYaml, stage_learned(), stage_fdb(), stage_bindings(true));
    ASSERT_TRUE(snap->udp_checksum_offload);
    auto table = ina_root_completes_chunk_21();
    ASSERT_NE(table, nullptr);
    auto to_r1 = take_tx(kR1);
    ASSERT_EQ(to_r1.size(), 1u);
    EXPECT_EQ(to_r1[0]->ol_flags & RTE_MBUF_F_TX_UDP_CKSUM, 0u);
    const Bytes a = bytes_of(to_r1[0]);
    free_mbufs(to_r1);
    free_mbufs(take_tx(kR0));
    const auto* ip = reinterpret_cast<const rte_ipv4_hdr*>(a.data() + 34);
    EXPECT_TRUE(udp_checksum_holds(ip));
}

}  // namespace
}  // namespace ina::test
