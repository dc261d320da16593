// SPDX-License-Identifier: Apache-2.0
// The ACK-driven policy: a result is released only when every receiver acknowledged it, is
// handed back for retransmission to the receivers that have not, a busy slot answers no_slot
// without touching anything, and a released unit's late contributions are stale. A randomized
// run with lost results and acks checks that every unit is delivered to every receiver exactly
// as the reference sum, and that slots never leak.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "agg/ack_table.h"

namespace ina::agg {
namespace {

constexpr uint16_t kBsl = 64;

wire::BitString set_of(std::initializer_list<wire::BfrId> ids) {
    return *wire::BitString::from_bfr_ids(kBsl, 0, std::vector<wire::BfrId>(ids));
}

AckParams params(uint32_t slots = 4, uint64_t rto = 10) {
    AckParams p;
    p.core.contributors = set_of({1, 2});
    p.core.op = reduce::Op::sum;
    p.core.elem_type = reduce::ElemType::int32;
    p.core.max_elems = 8;
    p.core.slots = slots;
    p.receivers = set_of({1, 2, 3});
    p.retransmit_timeout = rto;
    return p;
}

std::vector<uint8_t> one(int32_t v) {
    std::vector<uint8_t> out(4);
    std::memcpy(out.data(), &v, 4);
    return out;
}

TEST(AckTable, ValidateRefusesUnusableParams) {
    EXPECT_EQ(validate(params()), "");
    AckParams p = params(6);
    EXPECT_NE(validate(p), "") << "slots not a power of two";
    EXPECT_THROW(AckTable{p}, std::invalid_argument);
    p = params();
    p.receivers = set_of({});
    EXPECT_NE(validate(p), "");
    p = params(4, 0);
    EXPECT_NE(validate(p), "");
}

TEST(AckTable, ReleasedOnlyWhenEveryReceiverAcknowledged) {
    AckTable t(params());
    EXPECT_EQ(t.contribute(5, set_of({1}).data(), 1, one(3).data(), 0), AckVerdict::absorbed);
    // Nobody can acknowledge a result that does not exist yet.
    EXPECT_EQ(t.ack(5, set_of({1, 2, 3}).data()), AckResult::unknown);
    EXPECT_EQ(t.contribute(5, set_of({2}).data(), 1, one(4).data(), 0), AckVerdict::completed);
    int32_t r = 0;
    ASSERT_EQ(t.store_result(5, &r), 1u);
    EXPECT_EQ(r, 7);
    EXPECT_EQ(t.ack(5, set_of({1}).data()), AckResult::partial);
    EXPECT_EQ(t.ack(5, set_of({1}).data()), AckResult::partial) << "a repeated ack is harmless";
    uint8_t missing[8];
    ASSERT_TRUE(t.missing(5, missing));
    EXPECT_EQ(std::memcmp(missing, set_of({2, 3}).data(), 8), 0);
    // An ack naming a non-receiver counts for nobody.
    EXPECT_EQ(t.ack(5, set_of({2, 9}).data()), AckResult::partial);
    EXPECT_TRUE(t.holds(5));
    EXPECT_EQ(t.ack(5, set_of({3}).data()), AckResult::released);
    EXPECT_FALSE(t.holds(5));
    EXPECT_EQ(t.in_use(), 0u);
    EXPECT_EQ(t.store_result(5, &r), 0u);
    EXPECT_EQ(t.counters().released, 1u);
}

// One packet of a result sent in several: exactly the elements asked for, nothing outside the
// unit's count, nothing for an incomplete or unknown key.
TEST(AckTable, StoreRangeWritesOnlyThatRange) {
    AckParams p = params();
    p.core.max_elems = 64;
    AckTable t(p);
    std::vector<int32_t> a(40), b(40);
    for (int32_t i = 0; i < 40; ++i) {
        a[i] = i;
        b[i] = 1000 * i;
    }
    ASSERT_EQ(t.contribute(9, set_of({1}).data(), 40, a.data(), 0), AckVerdict::absorbed);
    std::vector<int32_t> out(40, -1);
    EXPECT_EQ(t.store_range(9, 16, 16, out.data()), 0u) << "not complete yet";
    ASSERT_EQ(t.contribute(9, set_of({2}).data(), 40, b.data(), 0), AckVerdict::completed);
    ASSERT_EQ(t.store_range(9, 16, 16, out.data()), 16u);
    for (int32_t i = 0; i < 16; ++i) {
        EXPECT_EQ(out[i], 1001 * (16 + i));
    }
    EXPECT_EQ(out[16], -1) << "nothing written past the range";
    EXPECT_EQ(t.store_range(9, 32, 8, out.data()), 8u);
    EXPECT_EQ(out[7], 1001 * 39);
    EXPECT_EQ(t.store_range(9, 32, 9, out.data()), 0u) << "past the unit's count";
    EXPECT_EQ(t.store_range(13, 0, 1, out.data()), 0u) << "another key of the slot";
}

// A deterministic table: a range is dequantized into the element type, or (fixed_point) given
// as the exact int64 sums, 8 bytes an element: a deterministic aggregator's partial segment.
TEST(AckTable, StoreRangeOfADeterministicTableDequantizesOrGivesTheExactSums) {
    AckParams p = params();
    p.core.elem_type = reduce::ElemType::fp32;
    p.core.max_elems = 64;
    p.core.deterministic = true;
    p.core.fraction_bits = 32;
    AckTable t(p);
    std::vector<float> a(40), b(40);
    for (int i = 0; i < 40; ++i) {
        a[i] = 0.5f * static_cast<float>(i);
        b[i] = 0x1p-32f * static_cast<float>(i);  // i units of the resolution
    }
    ASSERT_EQ(t.contribute(9, set_of({1}).data(), 40, a.data(), 0), AckVerdict::absorbed);
    ASSERT_EQ(t.contribute(9, set_of({2}).data(), 40, b.data(), 0), AckVerdict::completed);
    std::vector<int64_t> fixed(17, -1);
    ASSERT_EQ(t.store_range(9, 16, 16, fixed.data(), Encoding::fixed_point), 16u);
    for (int i = 0; i < 16; ++i) {
        const int64_t k = 16 + i;
        EXPECT_EQ(fixed[i], k * (int64_t{1} << 31) + k) << "0.5k x 2^32 + k, exactly";
    }
    EXPECT_EQ(fixed[16], -1) << "nothing written past the range";
    std::vector<float> native(16);
    ASSERT_EQ(t.store_range(9, 16, 16, native.data()), 16u);
    for (int i = 0; i < 16; ++i) {
        EXPECT_EQ(native[i], 0.5f * static_cast<float>(16 + i)) << "rounded to the nearest fp32";
    }
}

TEST(AckTable, BusySlotAnswersNoSlotAndTouchesNothing) {
    AckTable t(params(4));
    ASSERT_EQ(t.contribute(1, set_of({1}).data(), 1, one(1).data(), 0), AckVerdict::absorbed);
    // 5 and 1 share slot 1 (5 mod 4): back-pressure, not eviction.
    EXPECT_EQ(t.contribute(5, set_of({1}).data(), 1, one(9).data(), 0), AckVerdict::no_slot);
    EXPECT_EQ(t.contribute(5, set_of({2}).data(), 1, one(9).data(), 0), AckVerdict::no_slot);
    EXPECT_TRUE(t.holds(1));
    EXPECT_FALSE(t.holds(5));
    EXPECT_EQ(t.contribute(1, set_of({2}).data(), 1, one(2).data(), 0), AckVerdict::completed);
    // Complete but unacknowledged: still no slot for 5.
    EXPECT_EQ(t.contribute(5, set_of({1}).data(), 1, one(9).data(), 0), AckVerdict::no_slot);
    EXPECT_EQ(t.ack(1, set_of({1, 2, 3}).data()), AckResult::released);
    EXPECT_EQ(t.contribute(5, set_of({1}).data(), 1, one(9).data(), 0), AckVerdict::absorbed);
    EXPECT_EQ(t.counters()[AckVerdict::no_slot], 3u);
}

TEST(AckTable, LateContributionsOfAReleasedUnitAreStale) {
    AckTable t(params());
    t.contribute(2, set_of({1}).data(), 1, one(1).data(), 0);
    t.contribute(2, set_of({2}).data(), 1, one(1).data(), 0);
    ASSERT_EQ(t.ack(2, set_of({1, 2, 3}).data()), AckResult::released);
    EXPECT_EQ(t.contribute(2, set_of({1}).data(), 1, one(1).data(), 0), AckVerdict::stale);
    EXPECT_FALSE(t.holds(2)) << "a late copy never starts the unit again";
    // Duplicates before completion and after it are refused by the core.
    t.contribute(6, set_of({1}).data(), 1, one(1).data(), 0);
    EXPECT_EQ(t.contribute(6, set_of({1}).data(), 1, one(50).data(), 0), AckVerdict::duplicate);
    EXPECT_EQ(t.contribute(6, set_of({1, 2}).data(), 1, one(50).data(), 0), AckVerdict::overlap);
    EXPECT_EQ(t.contribute(6, set_of({2}).data(), 1, one(2).data(), 0), AckVerdict::completed);
    EXPECT_EQ(t.contribute(6, set_of({2}).data(), 1, one(50).data(), 0), AckVerdict::duplicate);
    int32_t r = 0;
    t.store_result(6, &r);
    EXPECT_EQ(r, 3);
}

TEST(AckTable, ResetStartsANewSessionWhoseKeysStartOver) {
    AckTable t(params());
    t.contribute(0, set_of({1}).data(), 1, one(1).data(), 0);
    t.contribute(0, set_of({2}).data(), 1, one(1).data(), 0);
    ASSERT_EQ(t.ack(0, set_of({1, 2, 3}).data()), AckResult::released);
    t.contribute(1, set_of({1}).data(), 1, one(7).data(), 0);  // held, never finished
    ASSERT_EQ(t.contribute(0, set_of({1}).data(), 1, one(1).data(), 0), AckVerdict::stale);
    t.reset();
    EXPECT_EQ(t.in_use(), 0u);
    EXPECT_FALSE(t.holds(1));
    EXPECT_EQ(t.contribute(0, set_of({1}).data(), 1, one(4).data(), 0), AckVerdict::absorbed)
        << "key 0 is a new unit, not stale";
    EXPECT_EQ(t.contribute(1, set_of({2}).data(), 1, one(5).data(), 0), AckVerdict::absorbed)
        << "nothing of the old session's key 1 is left";
    EXPECT_EQ(t.contribute(0, set_of({2}).data(), 1, one(6).data(), 0), AckVerdict::completed);
    int32_t r = 0;
    t.store_result(0, &r);
    EXPECT_EQ(r, 10);
}

// A contributor that left for good (exclude): units every other contributor is in complete at
// once with the others' sum (its own earlier contribution kept), a unit still waiting for
// another completes when that one comes, and the left contributor cannot add any more.
TEST(AckTable, ExcludedContributorFlushesPartialUnits) {
    AckParams p = params(4);
    p.core.contributors = set_of({1, 2, 3});
    AckTable t(p);
    ASSERT_EQ(t.contribute(0, set_of({1}).data(), 1, one(1).data(), 0), AckVerdict::absorbed);
    ASSERT_EQ(t.contribute(0, set_of({2}).data(), 1, one(2).data(), 0), AckVerdict::absorbed);
    ASSERT_EQ(t.contribute(1, set_of({1}).data(), 1, one(10).data(), 0), AckVerdict::absorbed);
    ASSERT_EQ(t.contribute(2, set_of({1}).data(), 1, one(100).data(), 0), AckVerdict::absorbed);
    ASSERT_EQ(t.contribute(2, set_of({3}).data(), 1, one(300).data(), 0), AckVerdict::absorbed);
    uint32_t keys[4] = {};
    ASSERT_EQ(t.exclude(set_of({3}).data(), keys, 4, 7), 1u) << "only unit 0 had 1 and 2";
    EXPECT_EQ(keys[0], 0u);
    int32_t r = 0;
    ASSERT_EQ(t.store_result(0, &r), 1u);
    EXPECT_EQ(r, 3) << "the others' sum";
    EXPECT_EQ(t.store_result(1, &r), 0u) << "unit 1 still waits for contributor 2";
    EXPECT_EQ(t.contribute(1, set_of({2}).data(), 1, one(20).data(), 0), AckVerdict::completed);
    ASSERT_EQ(t.store_result(1, &r), 1u);
    EXPECT_EQ(r, 30);
    EXPECT_EQ(t.contribute(1, set_of({3}).data(), 1, one(5).data(), 0), AckVerdict::duplicate);
    EXPECT_EQ(t.contribute(2, set_of({2}).data(), 1, one(200).data(), 0), AckVerdict::completed);
    ASSERT_EQ(t.store_result(2, &r), 1u);
    EXPECT_EQ(r, 600) << "3's contribution from before it left is kept";
    EXPECT_EQ(t.exclude(set_of({3}).data(), keys, 4, 8), 0u) << "nothing aggregating";
    EXPECT_EQ(t.ack(0, set_of({1, 2, 3}).data()), AckResult::released);
}

// Completion decided by the caller (complete_now): only that unit completes, with the sum of
// what it holds; the missing contributor can add nothing to it, other units still wait for it.
TEST(AckTable, CompleteNowCompletesThatUnitAlone) {
    AckParams p = params(4);
    p.core.contributors = set_of({1, 2, 3});
    AckTable t(p);
    ASSERT_EQ(t.contribute(0, set_of({1}).data(), 1, one(1).data(), 0), AckVerdict::absorbed);
    ASSERT_EQ(t.contribute(0, set_of({2}).data(), 1, one(2).data(), 0), AckVerdict::absorbed);
    ASSERT_EQ(t.contribute(1, set_of({1}).data(), 1, one(10).data(), 0), AckVerdict::absorbed);
    EXPECT_FALSE(t.complete_now(2, 5)) << "no unit 2 here";
    EXPECT_FALSE(t.complete_now(4, 5)) << "slot 0 holds unit 0, not 4";
    ASSERT_TRUE(t.complete_now(0, 5));
    int32_t r = 0;
    ASSERT_EQ(t.store_result(0, &r), 1u);
    EXPECT_EQ(r, 3);
    EXPECT_FALSE(t.complete_now(0, 6)) << "complete already";
    EXPECT_EQ(t.contribute(0, set_of({3}).data(), 1, one(5).data(), 0), AckVerdict::duplicate);
    EXPECT_EQ(t.store_result(1, &r), 0u) << "unit 1 untouched";
    EXPECT_EQ(t.contribute(1, set_of({3}).data(), 1, one(30).data(), 0), AckVerdict::absorbed);
    uint32_t keys[4];
    EXPECT_EQ(t.collect_due(14, keys, 4, 4), 0u);
    ASSERT_EQ(t.collect_due(15, keys, 4, 4), 1u) << "its clock started at complete_now's time";
    EXPECT_EQ(keys[0], 0u);
}

TEST(AckTable, UnacknowledgedResultsComeBackForRetransmission) {
    AckTable t(params(4, 10));
    t.contribute(0, set_of({1, 2}).data(), 1, one(1).data(), 100);  // completes at 100
    t.contribute(3, set_of({1, 2}).data(), 1, one(1).data(), 105);
    uint32_t keys[4];
    EXPECT_EQ(t.collect_due(109, keys, 4, 4), 0u);
    ASSERT_EQ(t.collect_due(110, keys, 4, 4), 1u);
    EXPECT_EQ(keys[0], 0u);
    EXPECT_EQ(t.collect_due(114, keys, 4, 4), 0u) << "the clock restarted at 110";
    t.mark_sent(3, 112);  // the caller re-sent 3 itself
    EXPECT_EQ(t.collect_due(119, keys, 4, 4), 0u);
    ASSERT_EQ(t.collect_due(122, keys, 4, 4), 2u);
    // Acknowledged units stop coming back.
    EXPECT_EQ(t.ack(0, set_of({1, 2, 3}).data()), AckResult::released);
    ASSERT_EQ(t.collect_due(140, keys, 4, 4), 1u);
    EXPECT_EQ(keys[0], 3u);
    // The budget bounds the slots looked at per call; `max` the keys handed back.
    EXPECT_EQ(t.collect_due(200, keys, 0, 4), 0u);
    size_t found = 0;
    for (int i = 0; i < 4; ++i) found += t.collect_due(300, keys, 4, 1);
    EXPECT_EQ(found, 1u);
    EXPECT_EQ(t.counters().retransmits, 5u);
}

// Random loss of contributions, results and acks, keys wrapping through 2^32: every unit
// reaches every receiver with the exact sum, nothing is released before every receiver has it,
// and at the end no slot is held.
TEST(AckTable, EveryUnitReachesEveryReceiverUnderLoss) {
    for (uint64_t seed = 1; seed <= 20; ++seed) {
        std::mt19937_64 rng(seed);
        auto lost = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
        constexpr uint32_t kUnits = 200, kSlots = 8;
        const uint32_t key0 = 0xFFFFFFFFu - 50;  // wraps mid-run
        AckTable t(params(kSlots, 5));
        std::vector<std::array<bool, 3>> got(kUnits, {false, false, false});
        std::vector<std::array<bool, 2>> sent(kUnits, {false, false});
        uint64_t now = 0;
        auto delivered = [&](uint32_t u) { return got[u][0] && got[u][1] && got[u][2]; };
        auto receive = [&](uint32_t key, unsigned r) {
            const uint32_t u = key - key0;
            int32_t v = 0;
            ASSERT_EQ(t.store_result(key, &v), 1u);
            EXPECT_EQ(v, static_cast<int32_t>(3 * u + 1)) << "unit " << u;
            got[u][r] = true;
            if (!lost(0.2)) {  // the ack may be lost too
                const wire::BitString who = set_of({static_cast<wire::BfrId>(r + 1)});
                const AckResult a = t.ack(key, who.data());
                EXPECT_NE(a, AckResult::unknown);
            }
        };
        uint32_t low = 0;
        while (low < kUnits && now < 200000) {
            ++now;
            while (low < kUnits && delivered(low) && !t.holds(key0 + low)) ++low;
            for (uint32_t u = low; u < std::min(kUnits, low + kSlots); ++u) {
                for (unsigned c = 0; c < 2; ++c) {
                    if (sent[u][c] && !lost(0.05)) continue;  // retransmit now and then
                    if (lost(0.3)) continue;                      // lost on the way
                    sent[u][c] = true;
                    const auto part = static_cast<int32_t>(c == 0 ? u : 2 * u + 1);
                    const wire::BitString from = set_of({static_cast<wire::BfrId>(c + 1)});
                    const AckVerdict v =
                        t.contribute(key0 + u, from.data(), 1, one(part).data(), now);
                    if (v == AckVerdict::completed) {
                        for (unsigned r = 0; r < 3; ++r) {
                            if (!lost(0.3)) receive(key0 + u, r);
                        }
                    }
                    EXPECT_NE(v, AckVerdict::overlap);
                }
            }
            uint32_t due[kSlots];
            const size_t n = t.collect_due(now, due, kSlots, kSlots);
            for (size_t i = 0; i < n; ++i) {
                uint8_t missing[8];
                ASSERT_TRUE(t.missing(due[i], missing));
                for (unsigned r = 0; r < 3; ++r) {
                    const wire::BitString who = set_of({static_cast<wire::BfrId>(r + 1)});
                    if (wire::bits_intersect(missing, who.data(), 8) && !lost(0.3)) {
                        receive(due[i], r);
                    }
                }
            }
            if (::testing::Test::HasFailure()) return;
        }
        EXPECT_EQ(low, kUnits) << "seed " << seed << ": stuck at unit " << low;
        EXPECT_EQ(t.in_use(), 0u);
        EXPECT_GT(t.counters().retransmits, 0u);
        EXPECT_EQ(t.counters().released, kUnits);
    }
}

}  // namespace
}  // namespace ina::agg
