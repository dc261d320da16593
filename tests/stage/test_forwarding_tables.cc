// SPDX-License-Identifier: Apache-2.0
// The in-place forwarding tables (dataplane/forwarding_tables.h): lock-free readers see whole
// entries while the writer inserts, replaces and deletes; a deleted slot is reused only after
// every reader has passed a quiescent state; and the packet path follows learning with no new
// snapshot (a connected host is one neighbour insert, a gateway one next-hop word).
#include "dataplane/forwarding_tables.h"

#include "dataplane/fdb_cache.h"

#include <rte_malloc.h>
#include <rte_rcu_qsbr.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "pipeline/ipv4_forward.h"
#include "stage_util.h"

namespace ina::test {
namespace {

// A QSBR variable with `readers` reader slots, freed with the test.
struct Qsbr {
    explicit Qsbr(uint32_t readers) {
        v = static_cast<rte_rcu_qsbr*>(
            rte_zmalloc("t_qsbr", rte_rcu_qsbr_get_memsize(readers), RTE_CACHE_LINE_SIZE));
        if (v != nullptr && rte_rcu_qsbr_init(v, readers) != 0) {
            rte_free(v);
            v = nullptr;
        }
    }
    ~Qsbr() { rte_free(v); }
    rte_rcu_qsbr* v = nullptr;
};

std::unique_ptr<dp::ForwardingTables> make_tables(rte_rcu_qsbr* q, uint32_t neighbours,
                                                  uint32_t fdb) {
    std::string error;
    auto t = dp::ForwardingTables::create("ft" + std::to_string(unique_id()), neighbours, fdb, q,
                                          error);
    EXPECT_NE(t, nullptr) << error;
    return t;
}

// The MAC written for `ip` in round `round`: its low four bytes are the address, so a reader can
// tell an entry that belongs to its key from a torn or foreign one; the port is the round's.
rte_ether_addr mac_for(uint32_t ip, uint8_t round) {
    return rte_ether_addr{{0x02, round, static_cast<uint8_t>(ip >> 24),
                           static_cast<uint8_t>(ip >> 16), static_cast<uint8_t>(ip >> 8),
                           static_cast<uint8_t>(ip)}};
}

TEST(ForwardingTables, PackedStationRoundTrips) {
    const rte_ether_addr m{{0xfe, 0x01, 0x80, 0x7f, 0x00, 0xff}};
    const uint64_t w = dp::pack_station(m, 31);
    EXPECT_NE(w, 0u) << "0 means unresolved, so a station never packs to it";
    const dp::Neighbour n = dp::unpack_station(w);
    EXPECT_TRUE(same_mac(n.mac, m));
    EXPECT_EQ(n.port, 31);
    EXPECT_EQ(dp::unpack_station(dp::pack_station(kZeroMac, 0)).port, 0);
}

TEST(ForwardingTables, CountsAndRefusesWhenFull) {
    Qsbr q(1);
    ASSERT_NE(q.v, nullptr);
    auto t = make_tables(q.v, 16, 16);
    ASSERT_NE(t, nullptr);
    for (uint32_t i = 0; i < 16; ++i) {
        ASSERT_TRUE(t->set_neighbour(0x0a000001 + i, mac_for(0x0a000001 + i, 0), 1)) << i;
        ASSERT_TRUE(t->set_fdb(mac_for(i, 9), 3, dp::FdbEntry{2, i})) << i;
    }
    EXPECT_EQ(t->neighbour_count(), 16u);
    EXPECT_EQ(t->fdb_count(), 16u);
    EXPECT_FALSE(t->set_neighbour(0x0b000001, mac_for(0x0b000001, 0), 1)) << "table is full";
    EXPECT_FALSE(t->set_fdb(mac_for(99, 9), 3, dp::FdbEntry{2, 99})) << "FDB is full";
    EXPECT_EQ(t->neighbour_count(), 16u);
    // Replacing a present key needs no slot.
    EXPECT_TRUE(t->set_neighbour(0x0a000001, mac_for(0x0a000001, 7), 4));
    auto n = t->neighbour(0x0a000001);
    ASSERT_TRUE(n.has_value());
    EXPECT_TRUE(same_mac(n->mac, mac_for(0x0a000001, 7)));
    EXPECT_EQ(n->port, 4);
    auto e = t->fdb(mac_for(5, 9), 3);
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->port, 2);
    EXPECT_EQ(e->index, 5u);
    EXPECT_FALSE(t->fdb(mac_for(5, 9), 4).has_value()) << "the group is part of the key";
    EXPECT_EQ(t->neighbour_count(), 16u);
}

// The bridge's per-lcore FDB memo (fdb_cache.h) answers as the table does, absent pairs
// included, and follows every insert, move and delete at its next lookup.
TEST(ForwardingTables, FdbMemoFollowsEveryChange) {
    Qsbr q(1);
    ASSERT_NE(q.v, nullptr);
    auto t = make_tables(q.v, 16, 64);
    ASSERT_NE(t, nullptr);
    dp::FdbCache memo;
    const auto expect_same = [&](const rte_ether_addr& m, uint16_t group) {
        for (int twice = 0; twice < 2; ++twice) {  // the second answer comes from the memo
            const auto want = t->fdb(m, group);
            const auto got = memo.lookup(*t, m, group);
            ASSERT_EQ(got.has_value(), want.has_value()) << twice;
            if (want) {
                EXPECT_EQ(got->port, want->port);
                EXPECT_EQ(got->index, want->index);
            }
        }
    };
    const rte_ether_addr a = mac_for(1, 9);
    expect_same(a, 3);  // absent, memoised as absent
    ASSERT_TRUE(t->set_fdb(a, 3, dp::FdbEntry{2, 7}));
    expect_same(a, 3);  // learned
    expect_same(a, 4);  // another group: still absent
    ASSERT_TRUE(t->set_fdb(a, 3, dp::FdbEntry{5, 7}));
    expect_same(a, 3);  // moved
    // MACs that share a slot (256 slots) evict each other and still answer right.
    for (uint32_t i = 0; i < 40; ++i) {
        ASSERT_TRUE(t->set_fdb(mac_for(i * 256, 9), 3, dp::FdbEntry{1, i}));
    }
    for (uint32_t i = 0; i < 40; ++i) {
        expect_same(mac_for(i * 256, 9), 3);
        expect_same(mac_for(i * 256 + 1, 9), 3);
    }
    t->remove_fdb(a, 3);
    expect_same(a, 3);  // gone
    EXPECT_FALSE(memo.lookup(*t, a, 3).has_value());
}

// A reader that has not passed a quiescent state since a delete may still be reading the
// deleted key's slot: the slot stays out of use until it reports one.
TEST(ForwardingTables, DeletedSlotIsReusedOnlyAfterQuiescence) {
    Qsbr q(1);
    ASSERT_NE(q.v, nullptr);
    ASSERT_EQ(rte_rcu_qsbr_thread_register(q.v, 0), 0);
    rte_rcu_qsbr_thread_online(q.v, 0);
    auto t = make_tables(q.v, 16, 16);
    ASSERT_NE(t, nullptr);
    for (uint32_t i = 0; i < 16; ++i) {
        ASSERT_TRUE(t->set_neighbour(0x0a000001 + i, mac_for(0x0a000001 + i, 0), 1));
    }
    t->remove_neighbour(0x0a000003);
    EXPECT_FALSE(t->neighbour(0x0a000003).has_value()) << "a delete is seen at once";
    EXPECT_EQ(t->neighbour_count(), 15u);
    EXPECT_FALSE(t->set_neighbour(0x0b000001, mac_for(0x0b000001, 0), 1))
        << "the deleted slot was reused while a reader could still be in it";
    EXPECT_EQ(t->neighbour_count(), 15u) << "a refused insert changes nothing";
    rte_rcu_qsbr_quiescent(q.v, 0);
    EXPECT_TRUE(t->set_neighbour(0x0b000001, mac_for(0x0b000001, 0), 1))
        << "the slot must be reclaimed once the reader has passed a quiescent state";
    EXPECT_EQ(t->neighbour_count(), 16u);
    rte_rcu_qsbr_thread_offline(q.v, 0);
    rte_rcu_qsbr_thread_unregister(q.v, 0);
}

// One writer inserts, replaces and deletes thousands of neighbours while a reader looks them up
// without a lock: every entry the reader finds is whole and belongs to its key.
TEST(ForwardingTables, ReaderSeesWholeEntriesWhileTheWriterChangesThem) {
    constexpr uint32_t kKeys = 4096;
    constexpr uint32_t kBase = 0x0a100000;
    Qsbr q(1);
    ASSERT_NE(q.v, nullptr);
    ASSERT_EQ(rte_rcu_qsbr_thread_register(q.v, 0), 0);
    auto t = make_tables(q.v, kKeys, 16);
    ASSERT_NE(t, nullptr);

    std::atomic<bool> done{false};
    std::atomic<uint64_t> lookups{0};
    std::atomic<uint64_t> found{0};
    std::atomic<uint64_t> bad{0};
    std::thread reader([&] {
        rte_rcu_qsbr_thread_online(q.v, 0);
        uint32_t k = 0;
        while (!done.load(std::memory_order_acquire)) {
            for (int i = 0; i < 64; ++i, k = (k + 613) % kKeys) {
                const uint32_t ip = kBase + k;
                if (auto n = t->neighbour(ip)) {
                    const uint8_t round = n->mac.addr_bytes[1];
                    if (!same_mac(n->mac, mac_for(ip, round)) || n->port != round % 8) {
                        bad.fetch_add(1, std::memory_order_relaxed);
                    }
                    found.fetch_add(1, std::memory_order_relaxed);
                }
                lookups.fetch_add(1, std::memory_order_relaxed);
            }
            rte_rcu_qsbr_quiescent(q.v, 0);  // like a worker, once per loop
        }
        rte_rcu_qsbr_thread_offline(q.v, 0);
    });
    uint32_t refused = 0;
    for (uint8_t round = 0; round < 6 && refused == 0; ++round) {
        for (uint32_t k = 0; k < kKeys && refused == 0; ++k) {
            // Odd rounds drop every third key, even rounds (re)insert or replace all of them.
            if (round % 2 == 1 && k % 3 == 0) {
                t->remove_neighbour(kBase + k);
            } else {
                // Slots of keys deleted moments ago may still be in their grace period (the
                // reader is mid-loop): the insert waits it out. A refusal here means a deleted
                // slot was never reclaimed.
                const bool ok = t->set_neighbour(kBase + k, mac_for(kBase + k, round),
                                                 round % 8,
                                                 dp::ForwardingTables::Room::wait_for_readers);
                EXPECT_TRUE(ok) << "round " << int{round} << " key " << k;
                refused += ok ? 0 : 1;
            }
        }
    }
    // Let the reader run against the final table for a while before stopping it.
    const uint64_t seen = lookups.load();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (lookups.load() < seen + 10 * kKeys && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::yield();
    }
    done.store(true, std::memory_order_release);
    reader.join();
    rte_rcu_qsbr_thread_unregister(q.v, 0);
    ASSERT_EQ(refused, 0u);
    EXPECT_EQ(bad.load(), 0u) << "of " << found.load() << " entries found";
    EXPECT_GT(found.load(), 0u) << "the reader never found an entry: the test proved nothing";
    // The last round (5, odd) left every key but each third one, with round 4's entries.
    EXPECT_EQ(t->neighbour_count(), kKeys - (kKeys + 2) / 3);
    for (uint32_t k = 0; k < kKeys; ++k) {
        auto n = t->neighbour(kBase + k);
        if (k % 3 == 0) {
            EXPECT_FALSE(n.has_value()) << k;
        } else {
            ASSERT_TRUE(n.has_value()) << k;
            EXPECT_TRUE(same_mac(n->mac, mac_for(kBase + k, 5)));
        }
    }
}

// The packet path follows learning without a new snapshot.
class InPlaceLearning : public StageTest {
protected:
    void TearDown() override {
        free_all(out);
        StageTest::TearDown();
    }
    Bytes frame(uint16_t in, uint32_t src, uint32_t dst) {
        return eth_frame(port_mac(in), kStranger, RTE_ETHER_TYPE_IPV4,
                         ipv4_packet(src, dst, 17, udp_datagram(src, dst, 1, 2, payload_of(32))));
    }
    void run(uint16_t in, uint32_t src, uint32_t dst) {
        rte_mbuf* m = mbuf(frame(in, src, dst), in);
        pipeline::ipv4_forward(*ctx, *snap, &m, 1, out);
    }
    pipeline::EdgeBatches<pipeline::Ipv4Edge> out;
};

TEST_F(InPlaceLearning, ConnectedHostIsOneNeighbourInsert) {
    const uint32_t host = ip4("10.0.2.77");
    const uint64_t generation = snap->generation;
    run(kR0, ip4("10.0.1.9"), host);
    EXPECT_EQ(drops(dp::DropReason::neighbour_unresolved), 1u) << "unknown before learning";
    const rte_ether_addr m = mac("02:ee:00:00:02:4d");
    ASSERT_TRUE(tables->set_neighbour(host, m, kR1));
    run(kR0, ip4("10.0.1.9"), host);
    ASSERT_EQ(tx_count(kR1), 1u);
    EXPECT_TRUE(same_mac(rte_pktmbuf_mtod(ctx->tx[kR1].pkts[0], rte_ether_hdr*)->dst_addr, m));
    EXPECT_EQ(snap->generation, generation) << "the same snapshot forwarded it";
    tables->remove_neighbour(host);
    run(kR0, ip4("10.0.1.9"), host);
    EXPECT_EQ(drops(dp::DropReason::neighbour_unresolved), 2u) << "forgotten at once";
}

TEST_F(InPlaceLearning, MemoisedNeighbourFollowsAMoveAtTheNextBurst) {
    // The lcore memoises a connected host's station (neighbour_cache.h); a move of the host to
    // another MAC and port must be what the very next packet uses, and so must a host learned
    // beside it in a burst that mixes memoised and looked-up destinations.
    const uint32_t host = ip4("10.0.2.78");
    const uint32_t other = ip4("10.0.2.79");
    ASSERT_TRUE(tables->set_neighbour(host, mac("02:ee:00:00:02:4e"), kR1));
    run(kR0, ip4("10.0.1.9"), host);
    run(kR0, ip4("10.0.1.9"), host);
    ASSERT_EQ(tx_count(kR1), 2u);
    const rte_ether_addr moved = mac("02:ee:00:00:02:5e");
    ASSERT_TRUE(tables->set_neighbour(host, moved, kR0));
    ASSERT_TRUE(tables->set_neighbour(other, mac("02:ee:00:00:02:4f"), kR1));
    rte_mbuf* burst[3] = {mbuf(frame(kR0, ip4("10.0.1.9"), host), kR0),
                          mbuf(frame(kR0, ip4("10.0.1.9"), other), kR0),
                          mbuf(frame(kR0, ip4("10.0.1.9"), host), kR0)};
    pipeline::ipv4_forward(*ctx, *snap, burst, 3, out);
    EXPECT_EQ(tx_count(kR1), 3u) << "the new host only";
    ASSERT_EQ(tx_count(kR0), 2u) << "both packets to the moved host";
    for (int i = 0; i < 2; ++i) {
        EXPECT_TRUE(same_mac(rte_pktmbuf_mtod(ctx->tx[kR0].pkts[i], rte_ether_hdr*)->dst_addr,
                             moved));
    }
    EXPECT_EQ(drops(dp::DropReason::neighbour_unresolved), 0u);
}

TEST_F(InPlaceLearning, OneGatewayWordResolvesEveryRouteThroughIt) {
    // Two routes through 10.0.2.50, a gateway nobody has resolved yet.
    std::string yaml = kStageYaml;
    yaml.replace(yaml.find("routes:\n"), 8, "routes:\n  - {prefix: 10.98.0.0/16, via: 10.0.2.50}\n");
    build(yaml);
    const dp::NextHop* a = snap->route(ip4("10.98.1.1"));
    const dp::NextHop* b = snap->route(ip4("10.99.1.1"));
    ASSERT_NE(a, nullptr);
    ASSERT_EQ(a, b) << "routes through one gateway share its next hop";
    run(kR0, ip4("10.0.1.9"), ip4("10.98.1.1"));
    EXPECT_EQ(drops(dp::DropReason::neighbour_unresolved), 1u);
    const rte_ether_addr gw = mac("02:ee:00:00:02:09");
    a->set_station(dp::pack_station(gw, kR1));  // what the control plane does on the ARP reply
    run(kR0, ip4("10.0.1.9"), ip4("10.98.1.1"));
    run(kR0, ip4("10.0.1.9"), ip4("10.99.1.1"));
    ASSERT_EQ(tx_count(kR1), 2u);
    for (int i = 0; i < 2; ++i) {
        EXPECT_TRUE(same_mac(rte_pktmbuf_mtod(ctx->tx[kR1].pkts[i], rte_ether_hdr*)->dst_addr, gw));
    }
}

}  // namespace
}  // namespace ina::test
