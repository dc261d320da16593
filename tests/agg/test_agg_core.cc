// SPDX-License-Identifier: Apache-2.0
// The aggregation core on its own, with no protocol above it: exactly once, no early result,
// refusals that leave the slot untouched, results bit-identical to a reference fold, slots
// independent of one another, release and reset.
#include <gtest/gtest.h>

#include <cstring>
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

}  // namespace
}  // namespace ina::agg
