// SPDX-License-Identifier: Apache-2.0
// The per-lcore timer wheel: timers fire once their deadline has passed and not before, far
// deadlines wait out whole turns of the wheel, cancelled timers never fire, and a timer may
// re-arm itself from its callback (periodic work).
#include "pipeline/timer_wheel.h"

#include <gtest/gtest.h>

#include <vector>

namespace ina::pipeline {
namespace {

constexpr uint64_t kTick = 100;

std::vector<std::pair<Timer*, uint64_t>> g_fired;

void record(TimerWheel&, Timer& t, uint64_t now) { g_fired.emplace_back(&t, now); }

void every_1000(TimerWheel& wheel, Timer& t, uint64_t now) {
    g_fired.emplace_back(&t, now);
    wheel.arm(t, t.deadline + 1000);
}

class Wheel : public ::testing::Test {
protected:
    void SetUp() override {
        g_fired.clear();
        wheel.init(kTick, 10'000);
    }
    Timer timer(Timer::Fire f = record) {
        Timer t;
        t.fire = f;
        return t;
    }
    TimerWheel wheel;
};

TEST_F(Wheel, FiresAtTheDeadlineAndNotBefore) {
    Timer a = timer();
    wheel.arm(a, 10'550);
    EXPECT_EQ(wheel.service(10'499), 0u);
    EXPECT_EQ(wheel.service(10'549), 0u) << "same tick, deadline not reached";
    EXPECT_TRUE(a.armed);
    EXPECT_EQ(wheel.service(10'650), 1u);
    ASSERT_EQ(g_fired.size(), 1u);
    EXPECT_EQ(g_fired[0].first, &a);
    EXPECT_FALSE(a.armed);
    EXPECT_EQ(wheel.armed(), 0u);
    EXPECT_EQ(wheel.service(20'000), 0u) << "fires once";
}

TEST_F(Wheel, ADeadlineInThePastFiresAtTheNextService) {
    Timer a = timer();
    wheel.arm(a, 5);
    EXPECT_EQ(wheel.service(10'100), 1u);
}

TEST_F(Wheel, FarDeadlinesWaitOutWholeTurns) {
    Timer far = timer();
    const uint64_t deadline = 10'000 + 3 * TimerWheel::kSlots * kTick + 250;
    wheel.arm(far, deadline);
    for (uint64_t now = 10'000; now < deadline; now += 7 * kTick) {
        ASSERT_EQ(wheel.service(now), 0u) << "at " << now;
    }
    EXPECT_EQ(wheel.service(deadline + kTick), 1u);
}

TEST_F(Wheel, ALongGapFiresEverythingDue) {
    std::vector<Timer> ts(1000, timer());
    for (size_t i = 0; i < ts.size(); ++i) {
        wheel.arm(ts[i], 10'000 + i * 37);
    }
    EXPECT_EQ(wheel.armed(), ts.size());
    EXPECT_EQ(wheel.service(10'000 + 500 * 37), 501u);
    EXPECT_EQ(wheel.service(10'000'000), 499u) << "a gap longer than a turn";
    EXPECT_EQ(wheel.armed(), 0u);
}

TEST_F(Wheel, CancelledTimersNeverFire) {
    Timer a = timer(), b = timer(), c = timer();
    wheel.arm(a, 10'300);
    wheel.arm(b, 10'300);  // same slot: cancel unlinks from the middle and the head
    wheel.arm(c, 10'300);
    wheel.cancel(b);
    wheel.cancel(c);
    wheel.cancel(c);  // twice is harmless
    EXPECT_EQ(wheel.armed(), 1u);
    EXPECT_EQ(wheel.service(11'000), 1u);
    ASSERT_EQ(g_fired.size(), 1u);
    EXPECT_EQ(g_fired[0].first, &a);
}

TEST_F(Wheel, ReArmingMovesATimer) {
    Timer a = timer();
    wheel.arm(a, 10'300);
    wheel.arm(a, 12'000);
    EXPECT_EQ(wheel.armed(), 1u);
    EXPECT_EQ(wheel.service(11'000), 0u);
    EXPECT_EQ(wheel.service(12'000), 1u);
}

TEST_F(Wheel, APeriodicTimerReArmsItselfFromItsCallback) {
    Timer p = timer(every_1000);
    wheel.arm(p, 11'000);
    for (uint64_t now = 10'000; now <= 15'500; now += 250) {
        wheel.service(now);
    }
    ASSERT_EQ(g_fired.size(), 5u);  // 11000, 12000, ..., 15000
    for (size_t i = 0; i < g_fired.size(); ++i) {
        EXPECT_GE(g_fired[i].second, 11'000 + 1000 * i);
        EXPECT_LT(g_fired[i].second, 11'000 + 1000 * i + 250 + kTick);
    }
    EXPECT_TRUE(p.armed);
}

}  // namespace
}  // namespace ina::pipeline
