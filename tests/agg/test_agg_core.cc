// SPDX-License-Identifier: Apache-2.0
// The aggregation core on its own, with no protocol above it: exactly once, no early result,
// refusals that leave the slot untouched, results bit-identical to a reference fold, slots
// independent of one another, release and reset.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "agg/agg_core.h"

namespace ina::agg {
namespace {

constexpr uint16_t kBsl = 64;

wire::BitString set_of(std::initializer_list<wire::BfrId> ids) {
    return *wire::BitString::from_bfr_ids(kBsl, 0, std::vector<wire::BfrId>(ids));
}

CoreParams int32_sum(std::initializer_list<wire::BfrId> contributors, uint32_t slots = 4) {
    CoreParams p;
    p.contributors = set_of(contributors);
    p.op = reduce::Op::sum;
    p.elem_type = reduce::ElemType::int32;
    p.max_elems = 16;
    p.slots = slots;
    return p;
}

std::vector<uint8_t> ints(std::initializer_list<int32_t> v) {
    std::vector<uint8_t> out(v.size() * 4);
    if (!out.empty()) {  // an empty list has no data pointer to copy from
        std::memcpy(out.data(), std::data(v), out.size());
    }
    return out;
}

std::vector<int32_t> result(const AggCore& c, uint32_t s) {
    std::vector<int32_t> out(c.count(s));
    EXPECT_EQ(c.store_result(s, out.data()), out.size());
    return out;
}

TEST(AggCore, ValidateRefusesUnusableParams) {
    EXPECT_EQ(validate(int32_sum({1, 2})), "");
    CoreParams p = int32_sum({1, 2});
    p.contributors = set_of({});
    EXPECT_NE(validate(p), "");
    EXPECT_THROW(AggCore{p}, std::invalid_argument);
    p = int32_sum({1, 2});
    p.slots = 0;
    EXPECT_NE(validate(p), "");
    p = int32_sum({1, 2});
    p.max_elems = 0;
    EXPECT_NE(validate(p), "");
    p.max_elems = 65536;
    EXPECT_NE(validate(p), "");
}

TEST(AggCore, CompletesExactlyWhenEveryContributorIsIn) {
    AggCore c(int32_sum({1, 2, 3}));
    EXPECT_EQ(c.add(0, set_of({2}).data(), 2, ints({10, 20}).data()), AddResult::added);
    EXPECT_EQ(c.state(0), SlotState::aggregating);
    int32_t none[2] = {7, 7};
    EXPECT_EQ(c.store_result(0, none), 0u) << "no result before all contributors";
    EXPECT_EQ(none[0], 7);
    EXPECT_EQ(c.add(0, set_of({1}).data(), 2, ints({1, 2}).data()), AddResult::added);
    EXPECT_EQ(c.add(0, set_of({3}).data(), 2, ints({100, 200}).data()), AddResult::completed);
    EXPECT_EQ(c.state(0), SlotState::complete);
    EXPECT_EQ(result(c, 0), (std::vector<int32_t>{111, 222}));
    EXPECT_EQ(c.in_use(), 1u);
}

TEST(AggCore, NoContributionIsAddedTwice) {
    AggCore c(int32_sum({1, 2, 3, 4}));
    ASSERT_EQ(c.add(1, set_of({1, 2}).data(), 1, ints({3}).data()), AddResult::added);
    EXPECT_EQ(c.add(1, set_of({1}).data(), 1, ints({1000}).data()), AddResult::duplicate);
    EXPECT_EQ(c.add(1, set_of({1, 2}).data(), 1, ints({1000}).data()), AddResult::duplicate);
    // Some in, some not: a sum cannot be taken back, so nothing is added.
    EXPECT_EQ(c.add(1, set_of({2, 3}).data(), 1, ints({1000}).data()), AddResult::overlap);
    EXPECT_EQ(c.add(1, set_of({3, 4}).data(), 1, ints({4}).data()), AddResult::completed);
    EXPECT_EQ(result(c, 1), (std::vector<int32_t>{7}));
    // A complete slot takes nothing more.
    EXPECT_EQ(c.add(1, set_of({3}).data(), 1, ints({1000}).data()), AddResult::complete);
    EXPECT_EQ(result(c, 1), (std::vector<int32_t>{7}));
}

TEST(AggCore, RefusalsLeaveTheSlotUntouched) {
    AggCore c(int32_sum({1, 2}));
    EXPECT_EQ(c.add(0, set_of({3}).data(), 1, ints({5}).data()), AddResult::outside);
    EXPECT_EQ(c.add(0, set_of({1, 3}).data(), 1, ints({5}).data()), AddResult::outside);
    EXPECT_EQ(c.add(0, set_of({}).data(), 1, ints({5}).data()), AddResult::outside);
    EXPECT_EQ(c.add(0, set_of({1}).data(), 0, ints({}).data()), AddResult::bad_count);
    const std::vector<uint8_t> big(17 * 4, 0);
    EXPECT_EQ(c.add(0, set_of({1}).data(), 17, big.data()), AddResult::bad_count);
    EXPECT_EQ(c.state(0), SlotState::empty);
    EXPECT_EQ(c.in_use(), 0u);
    ASSERT_EQ(c.add(0, set_of({1}).data(), 2, ints({1, 1}).data()), AddResult::added);
    EXPECT_EQ(c.add(0, set_of({2}).data(), 3, ints({1, 1, 1}).data()), AddResult::count_mismatch);
    EXPECT_EQ(c.add(0, set_of({2}).data(), 2, ints({2, 3}).data()), AddResult::completed);
    EXPECT_EQ(result(c, 0), (std::vector<int32_t>{3, 4}));
}

TEST(AggCore, SlotsAreIndependentAndReleaseForgets) {
    AggCore c(int32_sum({1, 2}, 3));
    ASSERT_EQ(c.add(0, set_of({1}).data(), 1, ints({1}).data()), AddResult::added);
    ASSERT_EQ(c.add(2, set_of({1}).data(), 1, ints({5}).data()), AddResult::added);
    ASSERT_EQ(c.add(2, set_of({2}).data(), 1, ints({6}).data()), AddResult::completed);
    EXPECT_EQ(c.state(0), SlotState::aggregating);
    EXPECT_EQ(c.state(1), SlotState::empty);
    EXPECT_EQ(result(c, 2), (std::vector<int32_t>{11}));
    EXPECT_EQ(c.in_use(), 2u);
    c.release(2);
    EXPECT_EQ(c.state(2), SlotState::empty);
    EXPECT_EQ(c.in_use(), 1u);
    c.release(2);  // releasing an empty slot changes nothing
    EXPECT_EQ(c.in_use(), 1u);
    // A released slot starts afresh: nothing of the old sum or contributors remains.
    EXPECT_EQ(c.add(2, set_of({2}).data(), 1, ints({40}).data()), AddResult::added);
    EXPECT_EQ(c.add(2, set_of({1}).data(), 1, ints({2}).data()), AddResult::completed);
    EXPECT_EQ(result(c, 2), (std::vector<int32_t>{42}));
    c.reset();
    EXPECT_EQ(c.in_use(), 0u);
    EXPECT_EQ(c.state(0), SlotState::empty);
}

// fp32 sums fold in arrival order with every ISA's kernels: the core's result equals a scalar
// left fold of the same contributions, bit for bit.
TEST(AggCore, Fp32ResultEqualsTheScalarFold) {
    CoreParams p = int32_sum({1, 2, 3});
    p.elem_type = reduce::ElemType::fp32;
    p.max_elems = 40;
    AggCore c(p);
    std::vector<std::vector<float>> in(3, std::vector<float>(40));
    for (size_t w = 0; w < 3; ++w) {
        for (size_t i = 0; i < 40; ++i) in[w][i] = 0.1f * static_cast<float>(i + 1) / float(w + 3);
    }
    std::vector<float> expect(40, 0.0f);
    const wire::BfrId order[3] = {3, 1, 2};
    for (wire::BfrId id : order) {
        const auto& v = in[id - 1];
        for (size_t i = 0; i < 40; ++i) expect[i] = expect[i] + v[i];
        c.add(0, set_of({id}).data(), 40, v.data());
    }
    ASSERT_EQ(c.state(0), SlotState::complete);
    std::vector<float> got(40);
    ASSERT_EQ(c.store_result(0, got.data()), 40u);
    EXPECT_EQ(std::memcmp(got.data(), expect.data(), 40 * sizeof(float)), 0);
}

// The reference the word-wise add() must match: the contributor-set rules of agg_core.h, one
// byte at a time, on a model slot (state, count, added set, sum).
struct ReferenceSlot {
    SlotState state = SlotState::empty;
    uint32_t count = 0;
    std::vector<uint8_t> added;
    int64_t sum = 0;
};

AddResult reference_add(ReferenceSlot& slot, const std::vector<uint8_t>& full,
                        const std::vector<uint8_t>& from, uint32_t count, uint32_t max_elems,
                        int32_t value) {
    bool named = false;
    bool outside = false;
    for (size_t i = 0; i < full.size(); ++i) {
        named = named || from[i] != 0;
        outside = outside || (from[i] & ~full[i]) != 0;
    }
    if (!named || outside) {
        return AddResult::outside;
    }
    if (count == 0 || count > max_elems) {
        return AddResult::bad_count;
    }
    if (slot.state == SlotState::complete) {
        return count != slot.count ? AddResult::count_mismatch : AddResult::complete;
    }
    if (slot.state == SlotState::empty) {
        slot.added = from;
        slot.count = count;
        slot.sum = value;
    } else {
        if (count != slot.count) {
            return AddResult::count_mismatch;
        }
        bool all_in = true;
        bool some_in = false;
        for (size_t i = 0; i < full.size(); ++i) {
            all_in = all_in && (from[i] & ~slot.added[i]) == 0;
            some_in = some_in || (from[i] & slot.added[i]) != 0;
        }
        if (all_in) {
            return AddResult::duplicate;
        }
        if (some_in) {
            return AddResult::overlap;
        }
        for (size_t i = 0; i < full.size(); ++i) {
            slot.added[i] = static_cast<uint8_t>(slot.added[i] | from[i]);
        }
        slot.sum += value;
    }
    slot.state = slot.added == full ? SlotState::complete : SlotState::aggregating;
    return slot.state == SlotState::complete ? AddResult::completed : AddResult::added;
}

// For every BSL, random full sets and random contributions (single fresh contributors, random
// subsets that overlap or repeat, bits outside the full set, empty sets, wrong counts) and
// releases: every result, state, added set and sum equals the byte-wise reference's.
TEST(AggCore, WordWiseSetTestsMatchTheByteWiseReference) {
    std::mt19937_64 rng(20261124);
    constexpr uint32_t kSlots = 3;
    constexpr uint32_t kMaxElems = 4;
    for (uint16_t bsl = wire::kMinBslBits; bsl <= wire::kMaxBslBits; bsl *= 2) {
        const size_t bytes = wire::bsl_bytes(bsl);
        for (int round = 0; round < 20; ++round) {
            // Dense, sparse and single-word full sets: a bit is in with probability 1/2^k.
            const unsigned sparsity = static_cast<unsigned>(round % 4);
            auto random_bits = [&](unsigned k) {
                std::vector<uint8_t> v(bytes);
                for (auto& b : v) {
                    uint8_t x = static_cast<uint8_t>(rng());
                    for (unsigned i = 0; i < k; ++i) x &= static_cast<uint8_t>(rng());
                    b = x;
                }
                return v;
            };
            std::vector<uint8_t> full = random_bits(sparsity);
            if (round % 5 == 4) {  // only the last or the first word used
                std::fill(full.begin(), full.end(), 0);
                full[round % 2 == 0 ? bytes - 1 : 0] = static_cast<uint8_t>(rng() | 1);
            }
            if (std::all_of(full.begin(), full.end(), [](uint8_t b) { return b == 0; })) {
                full[bytes - 1] = 1;
            }
            CoreParams p;
            p.contributors = *wire::BitString::from_wire(bsl, full);
            p.elem_type = reduce::ElemType::int32;
            p.max_elems = kMaxElems;
            p.slots = kSlots;
            AggCore core(p);
            std::vector<ReferenceSlot> model(kSlots);
            for (int step = 0; step < 400; ++step) {
                const uint32_t s = static_cast<uint32_t>(rng() % kSlots);
                if (rng() % 16 == 0) {
                    core.release(s);
                    model[s] = ReferenceSlot{};
                    continue;
                }
                std::vector<uint8_t> from(bytes, 0);
                switch (rng() % 6) {
                case 0: {  // one contributor of the full set
                    std::vector<size_t> bits;
                    for (size_t i = 0; i < bytes * 8; ++i) {
                        if ((full[i / 8] >> (i % 8)) & 1u) bits.push_back(i);
                    }
                    const size_t bit = bits[rng() % bits.size()];
                    from[bit / 8] = static_cast<uint8_t>(1u << (bit % 8));
                    break;
                }
                case 1:  // a random subset of the full set (may repeat or overlap)
                case 2: {
                    const std::vector<uint8_t> r = random_bits(2);
                    for (size_t i = 0; i < bytes; ++i) from[i] = full[i] & r[i];
                    break;
                }
                case 3:  // what the slot still misses (completes it when aggregating)
                    for (size_t i = 0; i < bytes; ++i) {
                        const uint8_t in = model[s].state == SlotState::empty ? 0 : model[s].added[i];
                        from[i] = static_cast<uint8_t>(full[i] & ~in);
                    }
                    break;
                case 4:  // random bits, mostly outside the full set
                    from = random_bits(3);
                    break;
                default:  // empty
                    break;
                }
                const uint32_t count = rng() % 8 == 0 ? static_cast<uint32_t>(rng() % 6) : 2u;
                const int32_t value = static_cast<int32_t>(rng() % 1000);
                const std::vector<int32_t> payload(std::max<uint32_t>(count, 1), value);
                const AddResult want =
                    reference_add(model[s], full, from, count, kMaxElems, value);
                ASSERT_EQ(core.add(s, from.data(), count, payload.data()), want)
                    << "BSL " << bsl << " round " << round << " step " << step;
                ASSERT_EQ(core.state(s), model[s].state);
                if (model[s].state != SlotState::empty) {
                    ASSERT_EQ(std::memcmp(core.added(s), model[s].added.data(), bytes), 0);
                    ASSERT_EQ(core.count(s), model[s].count);
                }
                if (model[s].state == SlotState::complete) {
                    std::vector<int32_t> got(core.count(s));
                    ASSERT_EQ(core.store_result(s, got.data()), model[s].count);
                    for (const int32_t g : got) ASSERT_EQ(g, model[s].sum);
                }
            }
        }
    }
}

}  // namespace
}  // namespace ina::agg
