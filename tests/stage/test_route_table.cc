// SPDX-License-Identifier: Apache-2.0
// Routes changed in place on a snapshot's LPM (dataplane/snapshot.h add_route, remove_route):
// what the control plane does for an API route change instead of building a new snapshot.
// Lookups follow each change at once; next hops are shared by gateway; a full table is a
// refusal that changes nothing; and a reader looking up without a lock while the writer adds
// and deletes (tbl8 groups freed and reused through QSBR) only ever finds a route that exists.
#include <rte_lpm.h>
#include <rte_rcu_qsbr.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "stage_util.h"

namespace ina::test {
namespace {

using Change = dp::Snapshot::RouteChange;

net::Ipv4Prefix prefix(const char* addr, uint8_t length) {
    return net::Ipv4Prefix{net::Ipv4Addr{ip4(addr)}, length};
}
net::Ipv4Prefix prefix(uint32_t addr, uint8_t length) {
    return net::Ipv4Prefix{net::Ipv4Addr{addr}, length};
}

dp::NextHop via(uint32_t gateway, uint16_t port) {
    dp::NextHop nh;
    nh.kind = dp::NextHopKind::gateway;
    nh.gateway = gateway;
    nh.port = port;
    return nh;
}

using InPlaceRoutes = StageTest;

TEST_F(InPlaceRoutes, AddAndDeleteAreSeenAtOnceAndShareNextHops) {
    const uint32_t routes0 = snap->routes;
    const uint32_t nexthops0 = snap->nexthops.size();
    EXPECT_EQ(snap->route(ip4("10.77.1.1")), nullptr) << "no route yet";
    const uint32_t gw = ip4("10.0.2.60");
    ASSERT_EQ(snap->add_route(prefix("10.77.0.0", 16), via(gw, kR1)), Change::done);
    ASSERT_EQ(snap->add_route(prefix("10.78.0.0", 16), via(gw, kR1)), Change::done);
    const dp::NextHop* a = snap->route(ip4("10.77.1.1"));
    ASSERT_NE(a, nullptr);
    EXPECT_EQ(a->gateway, gw);
    EXPECT_EQ(a, snap->route(ip4("10.78.200.3"))) << "routes through one gateway share a next hop";
    EXPECT_EQ(snap->nexthops.size(), nexthops0 + 1);
    EXPECT_EQ(snap->routes, routes0 + 2);
    // A longer prefix inside, through another gateway, then deleted: the /16 covers it again.
    ASSERT_EQ(snap->add_route(prefix("10.77.5.0", 24), via(ip4("10.0.1.60"), kR0)), Change::done);
    EXPECT_EQ(snap->route(ip4("10.77.5.9"))->gateway, ip4("10.0.1.60"));
    EXPECT_TRUE(snap->remove_route(prefix("10.77.5.0", 24)));
    EXPECT_EQ(snap->route(ip4("10.77.5.9")), a);
    EXPECT_TRUE(snap->remove_route(prefix("10.77.0.0", 16)));
    EXPECT_EQ(snap->route(ip4("10.77.1.1")), nullptr);
    EXPECT_FALSE(snap->remove_route(prefix("10.77.0.0", 16))) << "already gone";
    // A gateway's station stored once resolves every route through it, old or new.
    a->set_station(dp::pack_station(kNbR1Gw, kR1));
    ASSERT_EQ(snap->add_route(prefix("10.79.0.0", 16), via(gw, kR1)), Change::done);
    EXPECT_EQ(snap->route(ip4("10.79.0.1"))->station_word(), dp::pack_station(kNbR1Gw, kR1));
    // The configured routes are untouched.
    ASSERT_NE(snap->route(ip4("192.168.5.1")), nullptr);
    EXPECT_EQ(snap->route(ip4("192.168.5.1"))->gateway, ip4("10.0.1.2"));
}

TEST_F(InPlaceRoutes, FullTableRefusesAndChangesNothing) {
    // Prefix rules: /24s in 10.128.0.0/9 until the LPM's rule capacity is reached.
    const uint32_t capacity = snap->max_routes;
    ASSERT_GT(capacity, snap->routes);
    uint32_t added = 0;
    Change last = Change::done;
    for (uint32_t i = 0; i < capacity + 8 && last == Change::done; ++i) {
        last = snap->add_route(prefix(ip4("10.128.0.0") + (i << 8), 24), via(ip4("10.0.2.61"), kR1));
        added += last == Change::done ? 1 : 0;
    }
    EXPECT_EQ(last, Change::table_full) << "after " << added << " routes";
    EXPECT_LE(snap->routes, capacity);
    const uint32_t refused = ip4("10.128.0.0") + (added << 8);
    EXPECT_EQ(snap->route(refused + 1), nullptr) << "the refused route is not there";
    EXPECT_EQ(snap->route(ip4("10.128.0.1"))->gateway, ip4("10.0.2.61")) << "earlier ones stay";
    // One delete makes room for one add.
    ASSERT_TRUE(snap->remove_route(prefix(ip4("10.128.0.0"), 24)));
    EXPECT_EQ(snap->add_route(prefix(refused, 24), via(ip4("10.0.2.61"), kR1)), Change::done);
    EXPECT_NE(snap->route(refused + 1), nullptr);
}

TEST_F(InPlaceRoutes, LongPrefixesRunOutOfGroupsAsARefusal) {
    // Each /28 in a /24 of its own takes a tbl8 group: far fewer than rules.
    uint32_t added = 0;
    Change last = Change::done;
    for (uint32_t i = 0; i < snap->max_routes && last == Change::done; ++i) {
        last = snap->add_route(prefix(ip4("11.0.0.16") + (i << 8), 28), via(ip4("10.0.2.62"), kR1));
        added += last == Change::done ? 1 : 0;
    }
    EXPECT_EQ(last, Change::table_full) << "after " << added << " /28 routes";
    EXPECT_LT(added, snap->max_routes) << "groups run out before rules";
    EXPECT_EQ(snap->route(ip4("11.0.0.17"))->gateway, ip4("10.0.2.62"));
}

TEST_F(InPlaceRoutes, NextHopTableFullRefuses) {
    const uint32_t room = snap->nexthops.capacity() - snap->nexthops.size();
    Change last = Change::done;
    uint32_t i = 0;
    for (; i <= room && last == Change::done; ++i) {
        // A distinct gateway each: one next hop per route.
        last = snap->add_route(prefix(ip4("12.0.0.0") + (i << 8), 24), via(ip4("100.0.0.1") + i, kR1));
    }
    // Rules and next hops are sized alike: whichever runs out first, the refusal is counted
    // by the caller and nothing half-done stays.
    EXPECT_NE(last, Change::done);
    EXPECT_EQ(snap->route(ip4("12.0.0.0") + ((i - 1) << 8) + 1), nullptr);
}

// A reader that has not passed a quiescent state since a delete may still be in the tbl8 group
// the delete freed: the group stays out of use until it reports one (rte_lpm_rcu_qsbr_add).
// Driven through rte_lpm directly: Snapshot::add_route would wait for this very reader.
TEST_F(InPlaceRoutes, FreedGroupIsReusedOnlyAfterQuiescence) {
    ASSERT_EQ(rte_rcu_qsbr_thread_register(qsbr, 0), 0);
    rte_rcu_qsbr_thread_online(qsbr, 0);
    // Every free tbl8 group taken: a /28 in a /24 of its own each.
    const uint32_t base = ip4("14.0.0.16");
    uint32_t taken = 0;
    while (taken < snap->max_routes && rte_lpm_add(snap->lpm, base + (taken << 8), 28, 0) == 0) {
        ++taken;
    }
    ASSERT_GT(taken, 0u);
    ASSERT_LT(taken, snap->max_routes) << "the groups never ran out";
    ASSERT_EQ(rte_lpm_delete(snap->lpm, base, 28), 0);  // frees its /24's group
    const uint32_t fresh = base + (taken << 8) + (1u << 8);
    EXPECT_NE(rte_lpm_add(snap->lpm, fresh, 28, 0), 0)
        << "the freed group was reused while a reader could still be in it";
    rte_rcu_qsbr_quiescent(qsbr, 0);
    EXPECT_EQ(rte_lpm_add(snap->lpm, fresh, 28, 0), 0)
        << "the group must come back once the reader has passed a quiescent state";
    rte_rcu_qsbr_thread_offline(qsbr, 0);
    rte_rcu_qsbr_thread_unregister(qsbr, 0);
}

// One writer adds and deletes /24 and /28 routes (tbl8 groups allocated, freed and reused)
// while a reader looks up without a lock and reports a quiescent state each loop, as a worker
// does. Route r goes through gateway 10.200.0.r (the /24) or 10.201.0.r (the /28 inside it): a
// lookup of an address in /24 r finds r's gateway or nothing, never another route's.
TEST_F(InPlaceRoutes, ReaderOnlyFindsRoutesThatExistWhileTheWriterChangesThem) {
    constexpr uint32_t kRoutes = 100;  // fewer /28s than the tbl8 groups left
    const uint32_t base = ip4("13.1.0.0");
    ASSERT_EQ(rte_rcu_qsbr_thread_register(qsbr, 0), 0);
    std::atomic<bool> done{false};
    std::atomic<uint64_t> found{0};
    std::atomic<uint64_t> bad{0};
    std::atomic<uint64_t> loops{0};
    const dp::Snapshot& reader_view = *snap;
    std::thread reader([&] {
        rte_rcu_qsbr_thread_online(qsbr, 0);
        uint32_t r = 0;
        while (!done.load(std::memory_order_acquire)) {
            for (int i = 0; i < 64; ++i, r = (r + 7) % kRoutes) {
                // Inside the /28 (13.1.r.16/28) and outside it (13.1.r.200).
                for (uint32_t host : {16u + (r & 15), 200u}) {
                    const dp::NextHop* nh = reader_view.route(base + (r << 8) + host);
                    if (nh == nullptr) {
                        continue;
                    }
                    found.fetch_add(1, std::memory_order_relaxed);
                    const bool mine = nh->gateway == ip4("10.200.0.0") + r ||
                                      (host < 32 && nh->gateway == ip4("10.201.0.0") + r);
                    bad.fetch_add(mine ? 0 : 1, std::memory_order_relaxed);
                }
            }
            loops.fetch_add(1, std::memory_order_relaxed);
            rte_rcu_qsbr_quiescent(qsbr, 0);
        }
        rte_rcu_qsbr_thread_offline(qsbr, 0);
    });
    uint32_t refused = 0;
    for (int round = 0; round < 40; ++round) {
        for (uint32_t r = 0; r < kRoutes; ++r) {
            const uint32_t net24 = base + (r << 8);
            if (round % 2 == 0) {
                refused += snap->add_route(prefix(net24, 24), via(ip4("10.200.0.0") + r, kR1)) ==
                                   Change::done ? 0 : 1;
                refused += snap->add_route(prefix(net24 + 16, 28), via(ip4("10.201.0.0") + r, kR1)) ==
                                   Change::done ? 0 : 1;
            } else {
                // Deleting the /28 frees the /24's tbl8 group; the next round takes it again.
                EXPECT_TRUE(snap->remove_route(prefix(net24 + 16, 28)));
                if (r % 2 == 0) {
                    EXPECT_TRUE(snap->remove_route(prefix(net24, 24)));
                }
            }
        }
    }
    const uint64_t seen = loops.load();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (loops.load() < seen + 100 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::yield();
    }
    done.store(true, std::memory_order_release);
    reader.join();
    rte_rcu_qsbr_thread_unregister(qsbr, 0);
    EXPECT_EQ(refused, 0u) << "freed groups must come back once the reader is quiescent";
    EXPECT_EQ(bad.load(), 0u) << "of " << found.load() << " lookups that found a route";
    EXPECT_GT(found.load(), 0u) << "the reader never found a route: the test proved nothing";
    // The last round (odd) left the /24s of odd r only, and no /28.
    for (uint32_t r = 0; r < kRoutes; ++r) {
        const dp::NextHop* nh = snap->route(base + (r << 8) + 17);
        if (r % 2 == 0) {
            EXPECT_EQ(nh, nullptr) << r;
        } else {
            ASSERT_NE(nh, nullptr) << r;
            EXPECT_EQ(nh->gateway, ip4("10.200.0.0") + r);
        }
    }
}

}  // namespace
}  // namespace ina::test
