// SPDX-License-Identifier: Apache-2.0
// Pure helpers of the dataplane that need no EAL: burst histogram buckets, drop-reason names,
// the event layout, and the rate limiter for control-plane events.
#include <cstddef>
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "control/ageing.h"
#include "dataplane/counters.h"
#include "dataplane/events.h"
#include "pipeline/context.h"

namespace {

using ina::dp::burst_bucket;

TEST(BurstBucket, PowerOfTwoBuckets) {
    EXPECT_EQ(burst_bucket(0), 0u);
    EXPECT_EQ(burst_bucket(1), 0u);
    EXPECT_EQ(burst_bucket(2), 1u);
    EXPECT_EQ(burst_bucket(3), 1u);
    EXPECT_EQ(burst_bucket(4), 2u);
    EXPECT_EQ(burst_bucket(7), 2u);
    EXPECT_EQ(burst_bucket(8), 3u);
    EXPECT_EQ(burst_bucket(15), 3u);
    EXPECT_EQ(burst_bucket(16), 4u);
    EXPECT_EQ(burst_bucket(31), 4u);
    EXPECT_EQ(burst_bucket(32), 5u);
    EXPECT_EQ(burst_bucket(63), 5u);
    EXPECT_EQ(burst_bucket(64), 6u);
    EXPECT_EQ(burst_bucket(1000), ina::dp::kBurstBuckets - 1) << "clamped to the last bucket";
    for (uint16_t n = 1; n <= 64; ++n) {
        EXPECT_LT(burst_bucket(n), ina::dp::kBurstBuckets);
    }
}

TEST(DropReasons, NamesAreUniqueSnakeCaseAndDocumented) {
    std::set<std::string_view> seen;
    for (size_t i = 0; i < ina::dp::kDropReasonCount; ++i) {
        const auto name = ina::dp::kDropReasonNames[i];
        EXPECT_TRUE(seen.insert(name).second) << name;
        ASSERT_FALSE(name.empty());
        for (char c : name) {
            EXPECT_TRUE((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_') << name;
        }
        EXPECT_FALSE(ina::dp::kDropReasonHelp[i].empty()) << name;
    }
    EXPECT_EQ(ina::dp::kDropReasonNames[static_cast<size_t>(ina::dp::DropReason::runt)], "runt");
    EXPECT_EQ(ina::dp::kDropReasonNames[static_cast<size_t>(ina::dp::DropReason::tx_full)],
              "tx_full");
}

TEST(Events, FixedThirtyTwoByteLayout) {
    // 32 bytes since an event carries an IPv6 address (neighbour6_seen).
    EXPECT_EQ(sizeof(ina::dp::Event), 32u);
    ina::dp::Event ev{};
    EXPECT_EQ(ev.port, 0);
    EXPECT_EQ(ev.ip, 0u);
    EXPECT_EQ(ev.group, 0);
    EXPECT_EQ(offsetof(ina::dp::Event, ip6), 16u);
    for (uint8_t b : ev.ip6) {
        EXPECT_EQ(b, 0);
    }
}

TEST(RecentEvents, ReportsOncePerInterval) {
    ina::pipeline::RecentEvents r;
    const uint64_t t0 = 1'000'000;
    EXPECT_TRUE(r.should_report(42, t0, 100));
    EXPECT_FALSE(r.should_report(42, t0, 100));
    EXPECT_FALSE(r.should_report(42, t0 + 99, 100));
    EXPECT_TRUE(r.should_report(42, t0 + 100, 100));
    EXPECT_FALSE(r.should_report(42, t0 + 150, 100)) << "the interval restarts at each report";
    EXPECT_TRUE(r.should_report(42, t0 + 200, 100));
}

TEST(RecentEvents, DistinctKeysAreIndependent) {
    ina::pipeline::RecentEvents r;
    const uint64_t t0 = 5'000'000;
    EXPECT_TRUE(r.should_report(1, t0, 1000));
    EXPECT_TRUE(r.should_report(2, t0, 1000));
    EXPECT_FALSE(r.should_report(1, t0 + 1, 1000));
    EXPECT_FALSE(r.should_report(2, t0 + 1, 1000));
}

TEST(RecentEvents, ACollidingKeyEvictsRatherThanSuppresses) {
    // 1 and 257 share a slot: the limiter may over-report, but a new key is never suppressed.
    ina::pipeline::RecentEvents r;
    const uint64_t t0 = 5'000'000;
    EXPECT_TRUE(r.should_report(1, t0, 1000));
    EXPECT_TRUE(r.should_report(257, t0, 1000));
    EXPECT_TRUE(r.should_report(1, t0 + 1, 1000));
}

TEST(RecentEvents, ZeroIntervalNeverSuppresses) {
    ina::pipeline::RecentEvents r;
    EXPECT_TRUE(r.should_report(9, 10, 0));
    EXPECT_TRUE(r.should_report(9, 10, 0));
}

}  // namespace

// The FDB's ager compares the control thread's TSC with the last-seen stamps workers write
// while it runs: a stamp newer than the ager's `now` is an entry seen just now. Before
// control/ageing.h the unsigned difference wrapped to ~2^64 and expired every MAC a worker
// was forwarding at that moment.
TEST(Ageing, AStampTakenAfterNowIsAgeZeroNotAWrappedAge) {
    constexpr uint64_t now = 1'000'000;
    EXPECT_EQ(ina::control::cycles_since(now, now + 1), 0u);
    EXPECT_EQ(ina::control::cycles_since(now, UINT64_MAX), 0u);
    EXPECT_EQ(ina::control::cycles_since(now, now), 0u);
    EXPECT_EQ(ina::control::cycles_since(now, now - 250), 250u);
    EXPECT_EQ(ina::control::cycles_since(now, 0), now);
    const uint64_t ageing = 300;  // an entry is aged out after more than this many cycles
    EXPECT_FALSE(ina::control::cycles_since(now, now + 5) > ageing);
    EXPECT_TRUE(ina::control::cycles_since(now, now - 301) > ageing);
}
