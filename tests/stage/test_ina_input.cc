// SPDX-License-Identifier: Apache-2.0
// ina_input inside process_burst: absorb and complete into one partial result routed to the
// parent, and chunk steering between two lcores over an SPSC hand-off ring.
#include "pipeline/ina_input.h"

#include <rte_ip.h>
#include <rte_udp.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ina/chunk_table.h"
#include "ina/protocol.h"
#include "net/checksum.h"
#include "pipeline/feature_stages.h"
#include "pipeline/pipeline.h"
#include "stage_util.h"

namespace ina::test {
namespace {

constexpr uint32_t kJob = 7;
constexpr uint16_t kInaPort = 9470;


ina::JobParams job_params() { return ina_job_params(kJob, {1, 2}, ina::Role::aggregator); }

class InaInput : public StageTest {
protected:
    void SetUp() override {
        StageTest::SetUp();
        build(kInaAggregatorYaml);
        table = std::make_unique<ina::ChunkTable>(job_params());
        ASSERT_TRUE(pipeline::attach_ina_table(*ctx, *snap, kJob, 0, table.get()));
        ctx->pool = pool;
    }
    void TearDown() override {
        if (handoff != nullptr) {
            rte_mbuf* m = nullptr;
            while (rte_ring_sc_dequeue(handoff, reinterpret_cast<void**>(&m)) == 0) {
                rte_pktmbuf_free(m);
            }
            rte_ring_free(handoff);
        }
        StageTest::TearDown();
    }

    // A worker's contribution from 10.0.1.9 on r0 toward the root 10.0.2.2.
    rte_mbuf* contribution(uint16_t bfr_id, uint32_t seq, const std::vector<int32_t>& values) {
        return mbuf(ina_contribution(kJob, bfr_id, seq, values, ip4("10.0.2.2")), kR0);
    }

    void run(std::vector<rte_mbuf*> in) {
        pipeline::process_burst(*ctx, *snap, in.data(), static_cast<uint16_t>(in.size()));
    }

    // The table attached again to a snapshot built anew (its job's slot is the snapshot's).
    void reattach() {
        ctx->feature_slots[0] = {};
        ASSERT_TRUE(pipeline::attach_ina_table(*ctx, *snap, kJob, 0, table.get()));
    }

    // This lcore as worker 0 of two, handing worker 1's chunks over a ring of `size` slots.
    // Two lanes share the job's slot indices (ina::chunk_place): chunks 1 and 3 belong to
    // worker 1, chunk 2 to this one.
    void two_lanes(const char* ring_name, unsigned size) {
        handoff = rte_ring_create(ring_name, size, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
        ASSERT_NE(handoff, nullptr);
        ctx->n_workers = 2;
        ctx->worker_index = 0;
        ctx->handoff[1] = handoff;
        lane0 = job_params();
        lane0.lanes = 2;
        table = std::make_unique<ina::ChunkTable>(lane0);
        ctx->feature_slots[0].state = table.get();  // the fixture attached the job in slot 0
        ASSERT_EQ(table->lane_of(1), 1u);
        ASSERT_EQ(table->lane_of(2), 0u);
        ASSERT_EQ(table->lane_of(3), 1u);
    }

    // Worker 1, the owner: its own context and table.
    void make_owner() {
        ina::JobParams lane1 = lane0;
        lane1.lane = 1;
        owner_table = std::make_unique<ina::ChunkTable>(lane1);
        owner = std::make_unique<pipeline::LcoreContext>();
        owner->burst_size = 32;
        owner->tsc_hz = ctx->tsc_hz;
        owner->now_tsc = ctx->now_tsc;
        owner->worker_index = 1;
        owner->n_workers = 2;
        ASSERT_TRUE(pipeline::attach_ina_table(*owner, *snap, kJob, 0, owner_table.get()));
        owner->pool = pool;
    }

    // What the hand-off ring holds for the owner, in order (the caller passes them on).
    std::vector<rte_mbuf*> handed() {
        std::vector<rte_mbuf*> v(64);
        const unsigned n = rte_ring_sc_dequeue_burst(handoff, reinterpret_cast<void**>(v.data()),
                                                     static_cast<unsigned>(v.size()), nullptr);
        v.resize(n);
        return v;
    }

    // The owner's one partial to the parent (r1): its first element.
    int32_t owner_partial() {
        auto& buf = owner->tx[kR1];
        EXPECT_EQ(buf.count, 1u);
        if (buf.count != 1) {
            return 0;
        }
        const Bytes f = bytes_of(buf.pkts[0]);
        rte_pktmbuf_free_bulk(buf.pkts.data(), buf.count);
        buf.count = 0;
        buf.bytes = 0;
        int32_t sum = 0;
        std::memcpy(&sum, f.data() + 42 + 24 + 8, 4);
        return sum;
    }

    std::unique_ptr<ina::ChunkTable> table;
    rte_ring* handoff = nullptr;
    ina::JobParams lane0;
    std::unique_ptr<ina::ChunkTable> owner_table;
    std::unique_ptr<pipeline::LcoreContext> owner;
};

TEST_F(InaInput, TwoContributionsBecomeOnePartialToTheParent) {
    run({contribution(1, 0, {1, 2, -3}), contribution(1, 0, {1, 2, -3}),
         contribution(2, 0, {10, 20, 30})});
    EXPECT_EQ(ctx->counters.ina_absorbed, 2u);
    EXPECT_EQ(ctx->counters.ina_partials_sent, 1u);
    EXPECT_EQ(drops(dp::DropReason::ina_duplicate), 1u);
    auto out = take_tx(kR1);
    ASSERT_EQ(out.size(), 1u);
    const Bytes f = bytes_of(out[0]);
    free_mbufs(out);
    const auto* ip = reinterpret_cast<const rte_ipv4_hdr*>(f.data() + 14);
    EXPECT_EQ(rte_be_to_cpu_32(ip->src_addr), ip4("10.0.2.1"));  // r1's address
    EXPECT_EQ(rte_be_to_cpu_32(ip->dst_addr), ip4("10.0.2.2"));
    EXPECT_EQ(ip->time_to_live, 64) << "the switch's own packet: routing keeps its TTL";
    EXPECT_EQ(net::ones_complement_sum(ip, 20), 0xffff) << "IPv4 header checksum";
    const auto* udp = reinterpret_cast<const rte_udp_hdr*>(ip + 1);
    EXPECT_EQ(rte_be_to_cpu_16(udp->dst_port), kInaPort);
    const auto parsed = proto::parse(f.data() + 42, f.size() - 42);
    ASSERT_TRUE(parsed.packet.has_value()) << proto::to_string(parsed.error);
    EXPECT_EQ(parsed.packet->header.type, proto::PacketType::data);
    EXPECT_EQ(parsed.packet->bitstring[7], 0x03) << "P-BM = A-BM = {1, 2}";
    int32_t sum[3];
    std::memcpy(sum, parsed.packet->payload, sizeof sum);
    EXPECT_EQ(sum[0], 11);
    EXPECT_EQ(sum[1], 22);
    EXPECT_EQ(sum[2], 27);
}

// A partial leaves from its chunk's steering port (40960 | (seq & 63), docs/protocol.md
// "Transport"), so a parent switch's NIC rules steer it to the lcore owning the chunk; it goes
// to the INA port.
TEST_F(InaInput, APartialLeavesFromItsChunksSteeringSourcePort) {
    run({contribution(1, 3, {1}), contribution(2, 3, {2}), contribution(1, 66, {3}),
         contribution(2, 66, {4})});
    auto out = take_tx(kR1);
    ASSERT_EQ(out.size(), 2u);
    std::vector<std::pair<uint32_t, uint16_t>> seq_and_port;
    for (rte_mbuf* m : out) {
        const Bytes f = bytes_of(m);
        const auto* udp = reinterpret_cast<const rte_udp_hdr*>(f.data() + 14 + 20);
        EXPECT_EQ(rte_be_to_cpu_16(udp->dst_port), kInaPort);
        const auto parsed = proto::parse(f.data() + 42, f.size() - 42);
        ASSERT_TRUE(parsed.packet.has_value());
        seq_and_port.emplace_back(parsed.packet->header.seq, rte_be_to_cpu_16(udp->src_port));
    }
    free_mbufs(out);
    EXPECT_EQ(seq_and_port, (std::vector<std::pair<uint32_t, uint16_t>>{{3, 40963}, {66, 40962}}));
}

// The partial result's 16 elements, read from a (possibly chained) frame.
std::vector<int32_t> partial_elements(const Bytes& f) {
    const auto parsed = proto::parse(f.data() + 42, f.size() - 42);
    EXPECT_TRUE(parsed.packet.has_value()) << proto::to_string(parsed.error);
    std::vector<int32_t> v(16);
    if (parsed.packet) {
        std::memcpy(v.data(), parsed.packet->payload, 16 * sizeof(int32_t));
    }
    return v;
}

std::vector<int32_t> iota16(int32_t from) {
    std::vector<int32_t> v(16);
    for (int32_t i = 0; i < 16; ++i) {
        v[static_cast<size_t>(i)] = from + i;
    }
    return v;
}

// On ports that compute UDP checksums on send, the partial is marked for the device with its
// pseudo-header sum in the field (DPDK's contract), and what the device completes is the
// datagram's true checksum. The elements are never summed on the core.
TEST_F(InaInput, OnOffloadingPortsThePartialLeavesItsUdpChecksumToTheDevice) {
    build(kInaAggregatorYaml, stage_learned(), stage_fdb(), stage_bindings(true));
    ASSERT_TRUE(snap->udp_checksum_offload);
    reattach();
    run({contribution(1, 5, iota16(7)), contribution(2, 5, iota16(-3))});
    auto out = take_tx(kR1);
    ASSERT_EQ(out.size(), 1u);
    const rte_mbuf* m = out[0];
    EXPECT_EQ(m->ol_flags & (RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_UDP_CKSUM),
              RTE_MBUF_F_TX_IPV4 | RTE_MBUF_F_TX_UDP_CKSUM);
    EXPECT_EQ(m->l2_len, 14u);
    EXPECT_EQ(m->l3_len, 20u);
    const auto* ip = rte_pktmbuf_mtod_offset(m, const rte_ipv4_hdr*, 14);
    const auto* udp = reinterpret_cast<const rte_udp_hdr*>(ip + 1);
    EXPECT_EQ(udp->dgram_cksum, rte_ipv4_phdr_cksum(ip, 0)) << "the pseudo-header sum";
    Bytes sent = device_completed_udp_checksum(m);
    const auto* sent_ip = reinterpret_cast<const rte_ipv4_hdr*>(sent.data() + 14);
    EXPECT_TRUE(udp_checksum_holds(sent_ip)) << "as the parent checks it";
    EXPECT_EQ(partial_elements(sent), [] {
        std::vector<int32_t> v(16);
        for (int32_t i = 0; i < 16; ++i) v[static_cast<size_t>(i)] = 4 + 2 * i;
        return v;
    }());
    free_mbufs(out);
}

// One port without the offload: every emitted datagram carries its checksum from the core.
TEST_F(InaInput, OnePortWithoutTheOffloadKeepsEveryChecksumInSoftware) {
    auto bindings = stage_bindings(true);
    bindings.back().tx_udp_checksum = false;
    build(kInaAggregatorYaml, stage_learned(), stage_fdb(), bindings);
    ASSERT_FALSE(snap->udp_checksum_offload);
    reattach();
    run({contribution(1, 5, iota16(7)), contribution(2, 5, iota16(-3))});
    auto out = take_tx(kR1);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0]->ol_flags & RTE_MBUF_F_TX_UDP_CKSUM, 0u);
    const auto* ip = rte_pktmbuf_mtod_offset(out[0], const rte_ipv4_hdr*, 14);
    EXPECT_TRUE(udp_checksum_holds(ip));
    free_mbufs(out);
}

TEST_F(InaInput, ChainedContributionsAreAbsorbedWhole) {
    // 138-byte frames: the first segment ends inside the IPv4 header, the elements span the
    // boundary eth_input leaves after gathering the headers.
    const Bytes a = ina_contribution(kJob, 1, 3, iota16(100), ip4("10.0.2.2"));
    const Bytes b = ina_contribution(kJob, 2, 3, iota16(-50), ip4("10.0.2.2"));
    run({chained(a, kR0, {30, 50}), chained(b, kR0, {90, 1})});
    EXPECT_EQ(ctx->counters.ina_absorbed, 2u);
    EXPECT_EQ(ctx->counters.ina_not_ina, 0u);
    auto out = take_tx(kR1);
    ASSERT_EQ(out.size(), 1u);
    const auto sum = partial_elements(bytes_of(out[0]));
    for (int32_t i = 0; i < 16; ++i) {
        EXPECT_EQ(sum[static_cast<size_t>(i)], 50 + 2 * i) << "element " << i;
    }
    free_mbufs(out);
}

TEST_F(InaInput, ResultLargerThanOneMbufIsBuiltAsAChain) {
    // Mbufs of 128 data bytes: a 138-byte contribution arrives in two segments and its
    // partial result no longer fits one, so it leaves as a chain from the same pool.
    const std::string name = "small" + std::to_string(unique_id());
    rte_mempool* small = rte_pktmbuf_pool_create(name.c_str(), 63, 0, 0,
                                                 RTE_PKTMBUF_HEADROOM + 128, SOCKET_ID_ANY);
    ASSERT_NE(small, nullptr);
    ctx->pool = small;
    const Bytes a = ina_contribution(kJob, 1, 4, iota16(1), ip4("10.0.2.2"));
    const Bytes b = ina_contribution(kJob, 2, 4, iota16(1000), ip4("10.0.2.2"));
    run({chained(a, kR0, {128}, small), chained(b, kR0, {128}, small)});
    EXPECT_EQ(ctx->counters.ina_absorbed, 2u);
    EXPECT_EQ(drops(dp::DropReason::ina_no_mbuf), 0u);
    auto out = take_tx(kR1);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0]->nb_segs, 2);
    const Bytes f = bytes_of(out[0]);
    ASSERT_EQ(f.size(), a.size());
    const auto* ip = reinterpret_cast<const rte_ipv4_hdr*>(f.data() + 14);
    EXPECT_EQ(net::ones_complement_sum(ip, 20), 0xffff) << "IPv4 header checksum";
    const auto sum = partial_elements(f);
    for (int32_t i = 0; i < 16; ++i) {
        EXPECT_EQ(sum[static_cast<size_t>(i)], 1001 + 2 * i) << "element " << i;
    }
    free_mbufs(out);
    EXPECT_EQ(rte_mempool_in_use_count(small), 0u);
    ctx->pool = pool;
    rte_mempool_free(small);
}

// A pool whose mbufs hold 129 data bytes (odd; at least kHeadBytes): a 138-byte INA frame is a
// chain whose first segment holds 95 bytes of the UDP datagram, the case DPDK 22.11's net_tap
// gets wrong (it sums each segment's 16-bit words from the segment's own start).
rte_mempool* odd_room_pool() {
    const std::string name = "oddroom" + std::to_string(unique_id());
    return rte_pktmbuf_pool_create(name.c_str(), 63, 0, 0, RTE_PKTMBUF_HEADROOM + 129,
                                   SOCKET_ID_ANY);
}

// On ports that offload, a partial too large for one mbuf is not marked for the device: its
// checksum is the core's (devices differ in what they sum right across segments).
TEST_F(InaInput, OnOffloadingPortsAChainedPartialCarriesTheCoresChecksum) {
    build(kInaAggregatorYaml, stage_learned(), stage_fdb(), stage_bindings(true));
    ASSERT_TRUE(snap->udp_checksum_offload);
    reattach();
    rte_mempool* small = odd_room_pool();
    ASSERT_NE(small, nullptr);
    ctx->pool = small;
    const Bytes a = ina_contribution(kJob, 1, 6, iota16(7), ip4("10.0.2.2"));
    const Bytes b = ina_contribution(kJob, 2, 6, iota16(-3), ip4("10.0.2.2"));
    run({chained(a, kR0, {129}, small), chained(b, kR0, {129}, small)});
    auto out = take_tx(kR1);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0]->nb_segs, 2);
    EXPECT_EQ(out[0]->data_len, 129u);
    EXPECT_EQ(out[0]->ol_flags & RTE_MBUF_F_TX_UDP_CKSUM, 0u) << "not left to the device";
    const Bytes f = bytes_of(out[0]);
    ASSERT_EQ(f.size(), a.size());
    EXPECT_TRUE(udp_checksum_holds(reinterpret_cast<const rte_ipv4_hdr*>(f.data() + 14)));
    EXPECT_EQ(partial_elements(f), [] {
        std::vector<int32_t> v(16);
        for (int32_t i = 0; i < 16; ++i) v[static_cast<size_t>(i)] = 4 + 2 * i;
        return v;
    }());
    free_mbufs(out);
    EXPECT_EQ(rte_mempool_in_use_count(small), 0u);
    ctx->pool = pool;
    rte_mempool_free(small);
}

TEST_F(InaInput, ChunksOwnedByAnotherLcoreAreHandedOverAndAggregatedThere) {
    ASSERT_NO_FATAL_FAILURE(two_lanes("ina_ho_test", 64));
    run({contribution(1, 1, {5}), contribution(1, 2, {7}), contribution(2, 1, {6})});
    EXPECT_EQ(ctx->counters.ina_handed_off, 2u);
    EXPECT_EQ(ctx->counters.ina_absorbed, 1u);
    EXPECT_EQ(ctx->counters.ina_packets, 1u) << "a handed-off packet counts on its owner only";
    EXPECT_EQ(table->state_of(1), ina::ChunkTable::State::empty) << "not this lcore's chunk";
    EXPECT_EQ(table->state_of(2), ina::ChunkTable::State::aggregating);
    ASSERT_EQ(rte_ring_count(handoff), 2u);

    // The owner, fed from the ring through its whole pipeline (as the RoCE modes' hand-offs).
    ASSERT_NO_FATAL_FAILURE(make_owner());
    auto pkts = handed();
    ASSERT_EQ(pkts.size(), 2u);
    pipeline::process_burst(*owner, *snap, pkts.data(), static_cast<uint16_t>(pkts.size()));
    EXPECT_EQ(owner->counters.ina_handed_off, 0u);
    EXPECT_EQ(owner->counters.ina_packets, 2u);
    EXPECT_EQ(owner->counters.ina_partials_sent, 1u);
    EXPECT_EQ(owner_table->state_of(1), ina::ChunkTable::State::complete);
    EXPECT_EQ(owner_partial(), 11);
}

// The owner's side of a hand-off as the worker loop runs it (process_handoff): the frames enter
// the INA stage directly, are counted once, and the checks that depend on the owner's table
// (here the UDP checksum: the sender reads no payload) are made there.
TEST_F(InaInput, HandedContributionsEnterTheOwnersStageAndAreCheckedThere) {
    ASSERT_NO_FATAL_FAILURE(two_lanes("ina_ho_direct", 64));
    Bytes corrupt = ina_contribution(kJob, 1, 3, {5}, ip4("10.0.2.2"));
    corrupt.back() ^= 0x01;  // the element changes under the sender's checksum
    run({contribution(1, 1, {5}), mbuf(corrupt, kR0), contribution(2, 1, {6})});
    EXPECT_EQ(ctx->counters.ina_handed_off, 3u);
    EXPECT_EQ(ctx->counters.ina_packets, 0u);
    EXPECT_EQ(drops(dp::DropReason::ina_bad_checksum), 0u) << "the payload is the owner's to read";
    ASSERT_EQ(rte_ring_count(handoff), 3u) << "one enqueue at the end of the burst";

    ASSERT_NO_FATAL_FAILURE(make_owner());
    auto pkts = handed();
    ASSERT_EQ(pkts.size(), 3u);
    pipeline::process_handoff(*owner, *snap, pkts.data(), static_cast<uint16_t>(pkts.size()));
    EXPECT_EQ(owner->counters.ina_packets, 3u) << "counted once, on the owner";
    EXPECT_EQ(owner->counters.drops[static_cast<size_t>(dp::DropReason::ina_bad_checksum)], 1u);
    EXPECT_EQ(owner->counters.ina_partials_sent, 1u);
    EXPECT_EQ(owner_table->state_of(1), ina::ChunkTable::State::complete);
    EXPECT_EQ(owner_table->state_of(3), ina::ChunkTable::State::empty);
    EXPECT_EQ(owner_partial(), 11);
}

// The sender looks at a contribution's chunk only (job, seq) before handing it over: a packet
// malformed beyond that is parsed, counted by reason and passed on by its owner, once.
TEST_F(InaInput, AMalformedContributionToAnotherLcoresChunkIsParsedAndCountedByItsOwner) {
    ASSERT_NO_FATAL_FAILURE(two_lanes("ina_ho_malformed", 64));
    Bytes bad = ina_contribution(kJob, 1, 1, {5}, ip4("10.0.2.2"));
    put16(&bad[42 + 16], 2);  // two elements claimed, one carried
    run({mbuf(bad, kR0)});
    EXPECT_EQ(ctx->counters.ina_handed_off, 1u);
    EXPECT_EQ(ctx->counters.ina_not_ina, 0u) << "the sender parsed nothing";
    ASSERT_NO_FATAL_FAILURE(make_owner());
    auto pkts = handed();
    ASSERT_EQ(pkts.size(), 1u);
    pipeline::process_handoff(*owner, *snap, pkts.data(), static_cast<uint16_t>(pkts.size()));
    EXPECT_EQ(owner->counters.ina_not_ina, 1u);
    EXPECT_EQ(owner->counters.ina_malformed[static_cast<size_t>(proto::ParseError::length_mismatch)],
              1u);
    EXPECT_EQ(owner->counters.ina_packets, 0u) << "not a contribution";
    EXPECT_EQ(owner_table->state_of(1), ina::ChunkTable::State::empty);
    auto& buf = owner->tx[kR1];
    ASSERT_EQ(buf.count, 1u) << "routed on toward its destination, unchanged";
    EXPECT_EQ(bytes_of(buf.pkts[0]).size(), bad.size());
    rte_pktmbuf_free_bulk(buf.pkts.data(), buf.count);
    buf.count = 0;
    buf.bytes = 0;
}

// The stage fetches the next received frame's body ahead only while the lcore keeps most of
// its input: bodies of frames handed over are read on their owner's core. The rule follows the
// share of the previous burst; handed input (every frame the owner's) leaves it alone.
TEST_F(InaInput, ReceivedBodiesAreFetchedAheadOnlyWhileMostOfTheInputStaysHere) {
    ASSERT_NO_FATAL_FAILURE(two_lanes("ina_ho_prefetch", 64));
    EXPECT_TRUE(ctx->prefetch_received_bodies);
    run({contribution(1, 1, {5}), contribution(1, 2, {7}), contribution(2, 1, {6})});
    ASSERT_EQ(ctx->counters.ina_handed_off, 2u);
    EXPECT_FALSE(ctx->prefetch_received_bodies) << "2 of 3 handed over";
    run({contribution(1, 4, {1}), contribution(1, 6, {2}), contribution(1, 8, {3}),
         contribution(1, 3, {4})});
    ASSERT_EQ(ctx->counters.ina_handed_off, 3u);
    EXPECT_TRUE(ctx->prefetch_received_bodies) << "1 of 4 handed over";

    ASSERT_NO_FATAL_FAILURE(make_owner());
    owner->prefetch_received_bodies = false;
    auto pkts = handed();
    ASSERT_EQ(pkts.size(), 3u);
    pipeline::process_handoff(*owner, *snap, pkts.data(), static_cast<uint16_t>(pkts.size()));
    EXPECT_EQ(owner->counters.ina_packets, 3u);
    EXPECT_EQ(owner_partial(), 11);
    EXPECT_FALSE(owner->prefetch_received_bodies) << "handed input says nothing of received";
}

TEST_F(InaInput, HandOffsAFullRingCannotTakeAreCountedAndStillSeenOnce) {
    // Room for one: a ring of two slots holds one entry.
    ASSERT_NO_FATAL_FAILURE(two_lanes("ina_ho_small", 2));
    run({contribution(1, 1, {5}), contribution(2, 1, {6}), contribution(1, 2, {7})});
    EXPECT_EQ(ctx->counters.ina_handed_off, 1u);
    EXPECT_EQ(drops(dp::DropReason::ina_handoff_full), 1u);
    EXPECT_EQ(ctx->counters.ina_packets, 2u) << "the own chunk's and the lost one";
    EXPECT_EQ(ctx->counters.ina_absorbed, 1u);
    EXPECT_EQ(rte_ring_count(handoff), 1u);
}

// With INA the routed path's one feature, its stage gets the frames unclassified and classifies
// them in its own loop: classify's checks, with the same counters and the same fate per frame.
TEST_F(InaInput, MalformedFramesToTheInaPortMeetClassifysChecksInTheStage) {
    const Bytes good = ina_contribution(kJob, 1, 4, {1, 2}, ip4("10.0.2.2"));
    const std::vector<Bytes> frames = malformed_udp_frames(good);
    std::vector<rte_mbuf*> in;
    for (const auto& f : frames) {
        in.push_back(mbuf(f, kR0));
    }
    run(in);
    EXPECT_EQ(udp_malformed(dp::UdpMalformed::bad_length), 1u);
    EXPECT_EQ(udp_malformed(dp::UdpMalformed::length_mismatch), 2u);
    EXPECT_EQ(udp_malformed(dp::UdpMalformed::truncated), 1u);
    EXPECT_EQ(drops(dp::DropReason::ipv4_bad_checksum), 1u) << "routing drops by the verdict";
    EXPECT_EQ(ctx->counters.ina_not_ina, 3u) << "the unsound datagrams reach INA, flagged";
    EXPECT_EQ(ctx->counters.ina_packets, 0u);
    EXPECT_EQ(ctx->counters.routed, 4u);
    auto out = take_tx(kR1);
    ASSERT_EQ(out.size(), 4u);
    for (size_t i = 0; i < out.size(); ++i) {
        Bytes expect = frames[i];
        expect[kEthLen + 8] = static_cast<uint8_t>(expect[kEthLen + 8] - 1);  // TTL
        fix_ipv4_checksum(expect);
        const Bytes got = bytes_of(out[i]);
        ASSERT_EQ(got.size(), expect.size());
        EXPECT_TRUE(std::equal(expect.begin() + kEthLen, expect.end(), got.begin() + kEthLen))
            << "frame " << i << " changed beyond TTL and MACs";
    }
    free_mbufs(out);
}

// Deterministic fp32 job (issue 15 item 4), the wire format: an aggregator quantizes the
// workers' fp32 elements and sends its partial as int64 (element type 4, 8 bytes an element,
// sum of round(x * 2^32)); the root adds that partial to a worker's fp32 contribution and
// emits fp32 = RN(S * 2^-32).
constexpr int kF = 32;
Bytes fp32_bytes(const std::vector<float>& v) {
    Bytes b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    return b;
}
int64_t q32(float x) { return std::llround(std::ldexp(static_cast<double>(x), kF)); }

ina::JobParams deterministic_params(ina::Role role, const std::vector<uint16_t>& abm) {
    ina::JobParams p = ina_job_params(kJob, abm, role);
    p.elem_type = reduce::ElemType::fp32;
    p.deterministic = true;
    p.fraction_bits = kF;
    return p;
}

TEST_F(InaInput, DeterministicAggregatorSendsAnInt64FixedPointPartial) {
    table = std::make_unique<ina::ChunkTable>(deterministic_params(ina::Role::aggregator, {1, 2}));
    ctx->feature_slots[0].state = table.get();  // the fixture attached the job in slot 0
    const std::vector<float> a = {1.5f, -0.25f, 3.0e-3f};
    const std::vector<float> b = {2.0f, 0.125f, -7.0e-4f};
    const uint32_t dst = ip4("10.0.2.2");
    run({mbuf(ina_data(kJob, {1}, 0, 1, fp32_bytes(a), dst), kR0),
         mbuf(ina_data(kJob, {2}, 0, 0, fp32_bytes(b), dst), kR0),  // int32: not this job's
         mbuf(ina_data(kJob, {2}, 0, 1, fp32_bytes(b), dst), kR0)});
    EXPECT_EQ(table->counters().rejected[2], 1u) << "elem_type";
    EXPECT_EQ(ctx->counters.ina_partials_sent, 1u);
    auto out = take_tx(kR1);
    ASSERT_EQ(out.size(), 2u) << "the rejected int32 copy is forwarded (on_reject: forward)";
    Bytes f = bytes_of(out[0]);
    if (f.size() != 42u + 24 + 8 + 3 * 8) f = bytes_of(out[1]);
    free_mbufs(out);
    const auto parsed = proto::parse(f.data() + 42, f.size() - 42);
    ASSERT_TRUE(parsed.packet.has_value()) << proto::to_string(parsed.error);
    const proto::Header& h = parsed.packet->header;
    EXPECT_EQ(h.type, proto::PacketType::data);
    EXPECT_EQ(h.elem_type, 4) << "a partial travels as int64 fixed point";
    EXPECT_EQ(h.elem_count, 3);
    EXPECT_EQ(f.size(), 42u + 24 + 8 + 3 * 8);
    int64_t sum[3];
    std::memcpy(sum, parsed.packet->payload, sizeof sum);
    for (size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(sum[i], q32(a[i]) + q32(b[i])) << "element " << i;
    }
}

const std::string kRootYaml = std::string(kStageYaml) + R"(ina:
  jobs:
    - job_id: 7
      role: root
      bsl: 64
      abm: "1-3"
      op: sum
      elem_type: fp32
      deterministic: true
      max_elements: 16
      window: 8
      root: 10.0.2.1
      workers:
        - {bfr_id: 1, ip: 10.0.2.7}
        - {bfr_id: 2, ip: 10.0.2.2}
        - {bfr_id: 3, ip: 10.0.2.7}
)";

class InaDeterministicRoot : public StageTest {
protected:
    void SetUp() override {
        StageTest::SetUp();
        build(kRootYaml);
        table = std::make_unique<ina::ChunkTable>(deterministic_params(ina::Role::root, {1, 2, 3}));
        ASSERT_TRUE(pipeline::attach_ina_table(*ctx, *snap, kJob, 0, table.get()));
        ctx->pool = pool;
    }
    std::unique_ptr<ina::ChunkTable> table;
};

// Results unicast to each worker on ports that offload: every copy is marked for the device,
// its field the pseudo-header sum of its own destination (a copy's address is rewritten).
TEST_F(InaDeterministicRoot, OnOffloadingPortsEachUnicastCopyLeavesItsChecksumToTheDevice) {
    build(kRootYaml, stage_learned(), stage_fdb(), stage_bindings(true));
    ASSERT_TRUE(snap->udp_checksum_offload);
    ctx->feature_slots[0] = {};  // attached again: the job's slot is the new snapshot's
    ASSERT_TRUE(pipeline::attach_ina_table(*ctx, *snap, kJob, 0, table.get()));
    const uint32_t dst = ip4("10.0.2.1");
    std::vector<rte_mbuf*> in;
    for (uint16_t w = 1; w <= 3; ++w) {
        in.push_back(mbuf(ina_data(kJob, {w}, 0, 1, fp32_bytes({0.5f * w}), dst), kR0));
    }
    pipeline::process_burst(*ctx, *snap, in.data(), static_cast<uint16_t>(in.size()));
    auto out = take_tx(kR1);
    ASSERT_EQ(out.size(), 3u);
    std::vector<uint32_t> to;
    for (const rte_mbuf* m : out) {
        EXPECT_NE(m->ol_flags & RTE_MBUF_F_TX_UDP_CKSUM, 0u);
        const auto* ip = rte_pktmbuf_mtod_offset(m, const rte_ipv4_hdr*, 14);
        const auto* udp = reinterpret_cast<const rte_udp_hdr*>(ip + 1);
        EXPECT_EQ(udp->dgram_cksum, rte_ipv4_phdr_cksum(ip, 0));
        to.push_back(rte_be_to_cpu_32(ip->dst_addr));
        Bytes sent = device_completed_udp_checksum(m);
        const auto* sent_ip = reinterpret_cast<const rte_ipv4_hdr*>(sent.data() + 14);
        EXPECT_TRUE(udp_checksum_holds(sent_ip));
    }
    std::sort(to.begin(), to.end());
    EXPECT_EQ(to, (std::vector<uint32_t>{ip4("10.0.2.2"), ip4("10.0.2.7"), ip4("10.0.2.7")}));
    free_mbufs(out);
}

// The same for a chained result on ports that offload: the first copy and each retargeted one
// carry the core's checksum, updated for its own destination.
TEST_F(InaDeterministicRoot, OnOffloadingPortsChainedUnicastCopiesCarryTheCoresChecksums) {
    build(kRootYaml, stage_learned(), stage_fdb(), stage_bindings(true));
    ASSERT_TRUE(snap->udp_checksum_offload);
    ctx->feature_slots[0] = {};
    ASSERT_TRUE(pipeline::attach_ina_table(*ctx, *snap, kJob, 0, table.get()));
    rte_mempool* small = odd_room_pool();
    ASSERT_NE(small, nullptr);
    ctx->pool = small;
    const uint32_t dst = ip4("10.0.2.1");
    std::vector<rte_mbuf*> in;
    for (uint16_t w = 1; w <= 3; ++w) {
        in.push_back(chained(ina_data(kJob, {w}, 0, 1, fp32_bytes(std::vector<float>(16, 0.5f * w)),
                                      dst),
                             kR0, {129}, small));
    }
    pipeline::process_burst(*ctx, *snap, in.data(), static_cast<uint16_t>(in.size()));
    EXPECT_EQ(ctx->counters.ina_results_sent, 3u);
    auto out = take_tx(kR1);
    ASSERT_EQ(out.size(), 3u);
    std::vector<uint32_t> to;
    for (const rte_mbuf* m : out) {
        EXPECT_EQ(m->nb_segs, 2);
        EXPECT_EQ(m->ol_flags & RTE_MBUF_F_TX_UDP_CKSUM, 0u);
        const Bytes f = bytes_of(m);
        const auto* ip = reinterpret_cast<const rte_ipv4_hdr*>(f.data() + 14);
        EXPECT_TRUE(udp_checksum_holds(ip));
        to.push_back(rte_be_to_cpu_32(ip->dst_addr));
    }
    std::sort(to.begin(), to.end());
    EXPECT_EQ(to, (std::vector<uint32_t>{ip4("10.0.2.2"), ip4("10.0.2.7"), ip4("10.0.2.7")}));
    free_mbufs(out);
    EXPECT_EQ(rte_mempool_in_use_count(small), 0u);
    ctx->pool = pool;
    rte_mempool_free(small);
}

TEST_F(InaDeterministicRoot, AddsAnInt64PartialAndAWorkerAndEmitsFp32) {
    const std::vector<float> a = {1.5f, -0.25f, 3.0e-3f};
    const std::vector<float> b = {2.0f, 0.125f, -7.0e-4f};
    const std::vector<float> c = {1.0e-6f, 100.0f, 0.1f};
    Bytes partial(3 * 8);
    for (size_t i = 0; i < 3; ++i) {
        const int64_t v = q32(a[i]) + q32(b[i]);
        std::memcpy(partial.data() + 8 * i, &v, 8);
    }
    const uint32_t dst = ip4("10.0.2.1");
    std::vector<rte_mbuf*> in = {mbuf(ina_data(kJob, {3}, 0, 1, fp32_bytes(c), dst), kR0),
                                 mbuf(ina_data(kJob, {1, 2}, 0, 4, partial, dst), kR0)};
    pipeline::process_burst(*ctx, *snap, in.data(), static_cast<uint16_t>(in.size()));
    EXPECT_EQ(ctx->counters.ina_results_sent, 3u) << "one unicast copy per worker";
    auto out = take_tx(kR1);
    ASSERT_EQ(out.size(), 3u);
    for (const rte_mbuf* m : out) {
        const auto* ip = rte_pktmbuf_mtod_offset(m, const rte_ipv4_hdr*, 14);
        EXPECT_TRUE(udp_checksum_holds(ip)) << "each copy's own checksum";
    }
    const Bytes f = bytes_of(out[0]);
    free_mbufs(out);
    const auto parsed = proto::parse(f.data() + 42, f.size() - 42);
    ASSERT_TRUE(parsed.packet.has_value()) << proto::to_string(parsed.error);
    EXPECT_EQ(parsed.packet->header.type, proto::PacketType::result);
    EXPECT_EQ(parsed.packet->header.elem_type, 1) << "the result is the job's fp32";
    float r[3];
    std::memcpy(r, parsed.packet->payload, sizeof r);
    for (size_t i = 0; i < 3; ++i) {
        const int64_t s = q32(a[i]) + q32(b[i]) + q32(c[i]);
        EXPECT_EQ(r[i], static_cast<float>(std::ldexp(static_cast<long double>(s), -kF)))
            << "element " << i;
    }
}

TEST_F(InaInput, UdpLengthReachingIntoEthernetPaddingIsNotIna) {
    // A contribution whose UDP length (and INA element count) claim 8 bytes the IPv4 total
    // length does not cover, i.e. Ethernet padding: not a datagram the switch may absorb.
    Bytes f = ina_contribution(kJob, 1, 5, {1, 2}, ip4("10.0.2.2"));
    Bytes padded = ina_contribution(kJob, 1, 5, {1, 2, 3, 4}, ip4("10.0.2.2"));
    put16(&padded[kEthLen + 2], static_cast<uint16_t>(get16(&padded[kEthLen + 2]) - 8));
    fix_ipv4_checksum(padded);
    run({mbuf(padded, kR0), mbuf(f, kR0)});
    EXPECT_EQ(ctx->counters.ina_not_ina, 1u);
    EXPECT_EQ(ctx->counters.ina_absorbed, 1u) << "the sound contribution only";
    EXPECT_EQ(table->state_of(5), ina::ChunkTable::State::aggregating);
    EXPECT_EQ(ctx->counters.routed, 1u) << "the padded frame is routed untouched";
}

TEST_F(InaInput, RejectionsMalformedAndBadChecksumsAreCountedByReason) {
    constexpr size_t kIna = kEthLen + kIpLen + 8;
    auto without_checksum = [](Bytes f) {
        put16(&f[kEthLen + kIpLen + 6], 0);  // UDP checksum 0: none
        return f;
    };
    Bytes fp32 = ina_contribution(kJob, 1, 6, {1}, ip4("10.0.2.2"));
    fp32[kIna + 4] = static_cast<uint8_t>((fp32[kIna + 4] & 0xF0) | 1);  // EType fp32, job: int32
    Bytes bad_magic = ina_contribution(kJob, 1, 6, {1}, ip4("10.0.2.2"));
    bad_magic[kIna] = 'X';
    Bytes corrupt = ina_contribution(kJob, 2, 6, {5}, ip4("10.0.2.2"));
    corrupt.back() ^= 0x01;  // the element changes under the sender's checksum
    run({mbuf(without_checksum(fp32), kR0), mbuf(without_checksum(bad_magic), kR0),
         mbuf(corrupt, kR0), contribution(2, 6, {5})});
    EXPECT_EQ(table->counters().rejected[2], 1u) << "elem_type";
    EXPECT_EQ(ina::reject_reason_name(2), "elem_type");
    EXPECT_EQ(ctx->counters.ina_malformed[static_cast<size_t>(proto::ParseError::bad_magic)], 1u);
    EXPECT_EQ(drops(dp::DropReason::ina_bad_checksum), 1u);
    EXPECT_EQ(ctx->counters.ina_absorbed, 1u) << "only the sound contribution";
    EXPECT_EQ(table->state_of(6), ina::ChunkTable::State::aggregating);
    free_mbufs(take_tx(kR1));  // the rejected and malformed ones, routed on
}

TEST_F(InaInput, OtherUdpAndUnknownJobsAreRoutedUntouched) {
    const uint32_t src = ip4("10.0.1.9"), dst = ip4("10.0.2.2");
    Bytes plain = eth_frame(port_mac(kR0), kHostA, RTE_ETHER_TYPE_IPV4,
                            ipv4_packet(src, dst, IPPROTO_UDP,
                                        udp_datagram(src, dst, 1, 9471, payload_of(40))));
    // The job in the snapshot, its table not (yet) attached on this lcore.
    ASSERT_TRUE(pipeline::apply_command(
        *ctx, dp::Command{dp::CommandType::detach, dp::kFeatureIna, 0, kJob, nullptr}));
    table.reset();
    run({mbuf(plain, kR0), contribution(1, 0, {1})});
    EXPECT_EQ(ctx->counters.ina_packets, 1u);
    EXPECT_EQ(ctx->counters.ina_unknown_job, 1u);
    EXPECT_EQ(ctx->counters.routed, 2u);
    free_mbufs(take_tx(kR1));
}

}  // namespace
}  // namespace ina::test
