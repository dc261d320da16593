// SPDX-License-Identifier: Apache-2.0
// Deterministic jobs (issue 15 item 4): the same fp32 / fp16 / bf16 / fp64 contributions fed in
// many orders — random permutations with duplicates and retransmissions mixed in — through
// 1-level trees (workers -> root), 2-level trees (random groups of workers -> aggregators ->
// root, some workers straight to the root) and 1 or 2 lcores give a bit-identical result, equal
// to the exact reference RN(sum of quantized inputs). The default mode gets different bits for
// some orders of the same data (the sanity check that the test can fail).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "chunk_test_util.h"
#include "reduce/convert.h"
#include "reduce/fixed_point.h"

namespace ina::test {
namespace {

using reduce::ElemType;
constexpr unsigned kWorkers = 12;
constexpr uint32_t kElems = 48;
constexpr uint32_t kWindow = 4;

// Worker w's contribution to chunk seq in type t: values over many magnitudes and both signs, so
// a float sum's rounding depends on the order.
std::vector<uint8_t> payload(ElemType t, unsigned w, uint32_t seq) {
    std::vector<uint8_t> out(kElems * reduce::elem_size(t));
    for (uint32_t i = 0; i < kElems; ++i) {
        const uint64_t r = mix(uint64_t{w} << 40 ^ uint64_t{seq} << 20 ^ i);
        const int exp = static_cast<int>(r % 24) - 12;
        const double v = std::ldexp(static_cast<double>(r >> 11) / 0x1p53 + 0.5, exp) *
                         ((r >> 63) != 0 ? -1.0 : 1.0);
        if (t == ElemType::fp32) {
            const auto f = static_cast<float>(v);
            std::memcpy(out.data() + 4 * i, &f, 4);
        } else if (t == ElemType::fp64) {
            std::memcpy(out.data() + 8 * i, &v, 8);
        } else {
            const auto f = static_cast<float>(v);
            const uint16_t h = t == ElemType::fp16 ? reduce::fp32_to_fp16(f)
                                                   : reduce::fp32_to_bf16(f);
            std::memcpy(out.data() + 2 * i, &h, 2);
        }
    }
    return out;
}

JobParams job(Role role, const wire::BitString& abm, ElemType t, bool deterministic,
              uint16_t lanes = 1, uint16_t lane = 0) {
    JobParams p = make_job(role, kWindow, 1, t, kElems);
    p.abm = abm;
    p.deterministic = deterministic;
    p.fraction_bits = deterministic ? static_cast<uint8_t>(reduce::default_fraction_bits(t)) : 0;
    p.lanes = lanes;
    p.lane = lane;
    return p;
}

// One VAT node: a table per lane (chunks steered by lane_of, as ina_input does).
struct Node {
    wire::BitString abm;
    std::vector<std::unique_ptr<ChunkTable>> lanes;
    Node* parent = nullptr;
    Node(Role role, const wire::BitString& a, ElemType t, bool det, uint16_t n_lanes) : abm(a) {
        for (uint16_t l = 0; l < n_lanes; ++l) {
            lanes.push_back(std::make_unique<ChunkTable>(job(role, a, t, det, n_lanes, l)));
        }
    }
    ChunkTable& table(uint32_t seq) { return *lanes[lanes[0]->lane_of(seq)]; }
};

// A message in flight towards `to`.
struct Msg {
    Node* to;
    wire::BitString pbm;
    uint32_t seq;
    std::vector<uint8_t> bytes;
    agg::Encoding enc;
    uint8_t flags;
};

// Runs one tree: every worker's contribution for `seq` goes to its first node; messages are
// delivered in a random order (a random pending one each step), each copied again with
// probability 1/4 (a duplicate or a retransmission) before delivery. Returns the root's
// result bytes.
std::vector<uint8_t> run(ElemType t, bool det, uint16_t n_lanes, uint32_t seq,
                         const std::vector<int>& group_of, std::mt19937_64& rng) {
    // group_of[w] = -1: straight to the root; g >= 0: through aggregator g.
    const int groups = *std::max_element(group_of.begin(), group_of.end()) + 1;
    std::vector<std::vector<wire::BfrId>> members(static_cast<size_t>(std::max(groups, 0)));
    for (unsigned w = 0; w < kWorkers; ++w) {
        if (group_of[w] >= 0) members[static_cast<size_t>(group_of[w])].push_back(
            static_cast<wire::BfrId>(w + 1));
    }
    Node root(Role::root, first_n(kWorkers), t, det, n_lanes);
    std::vector<std::unique_ptr<Node>> aggs;
    for (const auto& m : members) {
        aggs.push_back(std::make_unique<Node>(
            Role::aggregator, *wire::BitString::from_bfr_ids(kBsl, 0, m), t, det, n_lanes));
        aggs.back()->parent = &root;
    }
    std::vector<Msg> pending;
    for (unsigned w = 0; w < kWorkers; ++w) {
        Node* to = group_of[w] < 0 ? &root : aggs[static_cast<size_t>(group_of[w])].get();
        pending.push_back({to, ids({static_cast<wire::BfrId>(w + 1)}), seq, payload(t, w + 1, seq),
                           agg::Encoding::native, 0});
    }
    std::vector<uint8_t> result;
    while (!pending.empty()) {
        const size_t k = rng() % pending.size();
        Msg m = pending[k];
        if (rng() % 4 == 0) {
            Msg again = m;
            again.flags = rng() % 2 == 0 ? proto::kFlagRetransmit : 0;
            pending.push_back(std::move(again));
        }
        pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(k));
        ChunkTable& tb = m.to->table(m.seq);
        const uint32_t count = kElems;
        const Verdict v = tb.on_data(m.pbm.data(), m.seq, count, m.bytes.data(), m.flags, 0, m.enc);
        EXPECT_TRUE(v == Verdict::absorbed || v == Verdict::completed ||
                    v == Verdict::duplicate || v == Verdict::resend_result)
            << to_string(v);
        if (v != Verdict::completed) continue;
        if (m.to->parent == nullptr) {
            result.assign(count * reduce::elem_size(t), 0);
            EXPECT_EQ(tb.store_result(m.seq, result.data()), count);
            continue;
        }
        // An aggregator's partial: int64 fixed point in a deterministic job.
        const agg::Encoding enc = tb.encoding_of(tb.partial_elem_type());
        EXPECT_EQ(enc, det ? agg::Encoding::fixed_point : agg::Encoding::native);
        std::vector<uint8_t> partial(count * reduce::elem_size(static_cast<ElemType>(
                                                 tb.partial_elem_type())));
        EXPECT_EQ(tb.store_result(m.seq, partial.data(), enc), count);
        pending.push_back({m.to->parent, m.to->abm, m.seq, std::move(partial), enc, 0});
    }
    EXPECT_FALSE(result.empty());
    return result;
}

// Reference: RN_t(sum_i q(x_i) * 2^-F), with q and the sum computed in exact integers.
std::vector<uint8_t> reference(ElemType t, uint32_t seq) {
    const int f = reduce::default_fraction_bits(t);
    std::vector<int64_t> sum(kElems, 0);
    reduce::FixedStats st;
    for (unsigned w = 1; w <= kWorkers; ++w) {
        const std::vector<uint8_t> p = payload(t, w, seq);
        for (uint32_t i = 0; i < kElems; ++i) {
            double x = 0;
            if (t == ElemType::fp32) {
                float v;
                std::memcpy(&v, p.data() + 4 * i, 4);
                x = v;
            } else if (t == ElemType::fp64) {
                std::memcpy(&x, p.data() + 8 * i, 8);
            } else {
                uint16_t h;
                std::memcpy(&h, p.data() + 2 * i, 2);
                x = t == ElemType::fp16 ? reduce::fp16_to_fp32(h) : reduce::bf16_to_fp32(h);
            }
            sum[i] += reduce::quantize(x, f, st);
        }
    }
    EXPECT_EQ(st.saturated + st.nan, 0u);
    std::vector<uint8_t> out(kElems * reduce::elem_size(t));
    for (uint32_t i = 0; i < kElems; ++i) {
        const long double exact = std::ldexp(static_cast<long double>(sum[i]), -f);
        if (t == ElemType::fp32) {
            const auto v = static_cast<float>(exact);
            std::memcpy(out.data() + 4 * i, &v, 4);
        } else if (t == ElemType::fp64) {
            const auto v = static_cast<double>(exact);
            std::memcpy(out.data() + 8 * i, &v, 8);
        } else {
            // Round the exact value once to the narrow significand (fp16: 11 bits, subnormal
            // below 2^-14; bf16: 8 bits), ties to even (nearbyintl in the default mode); the
            // rounded value is then exact in fp32 and in the narrow type.
            const int digits = t == ElemType::fp16 ? 11 : 8;
            int e = exact == 0 ? 0 : std::ilogb(exact);
            if (t == ElemType::fp16) e = std::max(e, -14);
            const long double m = std::nearbyintl(std::ldexp(exact, digits - 1 - e));
            const auto v = static_cast<float>(std::ldexp(m, e - (digits - 1)));
            const uint16_t h = t == ElemType::fp16 ? reduce::fp32_to_fp16(v)
                                                   : reduce::fp32_to_bf16(v);
            std::memcpy(out.data() + 2 * i, &h, 2);
        }
    }
    return out;
}

std::vector<int> random_groups(std::mt19937_64& rng, bool two_level) {
    std::vector<int> g(kWorkers, -1);
    if (!two_level) return g;
    const int n = 1 + static_cast<int>(rng() % 4);  // 1..4 aggregators
    for (auto& x : g) x = static_cast<int>(rng() % static_cast<uint64_t>(n + 1)) - 1;
    // Renumber the used groups 0..k-1 (an aggregator needs at least one worker).
    std::vector<int> map(static_cast<size_t>(n), -1);
    int next = 0;
    for (auto& x : g) {
        if (x < 0) continue;
        if (map[static_cast<size_t>(x)] < 0) map[static_cast<size_t>(x)] = next++;
        x = map[static_cast<size_t>(x)];
    }
    return g;
}

class Deterministic : public ::testing::TestWithParam<ElemType> {};

TEST_P(Deterministic, BitIdenticalAcrossOrdersTreesAndLcores) {
    const ElemType t = GetParam();
    std::mt19937_64 rng(0x15 + static_cast<unsigned>(t));
    for (uint32_t seq : {0u, 5u}) {  // two chunks: lanes 0 and 1 of a 2-lcore node
        const std::vector<uint8_t> want = reference(t, seq);
        for (int trial = 0; trial < 120; ++trial) {
            const bool two_level = trial % 2 == 1;
            const auto lanes = static_cast<uint16_t>(1 + (trial / 2) % 2);
            const std::vector<uint8_t> got =
                run(t, true, lanes, seq, random_groups(rng, two_level), rng);
            ASSERT_EQ(got, want) << reduce::to_string(t) << " seq " << seq << " trial " << trial
                                 << (two_level ? " 2-level" : " 1-level") << " lanes " << lanes;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(FloatTypes, Deterministic,
                         ::testing::Values(ElemType::fp32, ElemType::fp16, ElemType::bf16,
                                           ElemType::fp64),
                         [](const auto& p) { return std::string(reduce::to_string(p.param)); });

// The same schedules in the default mode: the float result depends on the order and tree
// (the reason the mode exists, and proof the comparison above can fail).
TEST(DeterministicSanity, DefaultModeDiffersForSomeOrder) {
    for (ElemType t : {ElemType::fp32, ElemType::fp64}) {
        std::mt19937_64 rng(99);
        const std::vector<uint8_t> first = run(t, false, 1, 0, random_groups(rng, false), rng);
        int differing = 0;
        for (int trial = 1; trial < 60; ++trial) {
            differing += run(t, false, 1, 0, random_groups(rng, trial % 2 == 1), rng) != first;
        }
        EXPECT_GT(differing, 0) << reduce::to_string(t);
    }
}

// Saturation, underflow and NaN are counted at the node that quantizes, and a NaN contribution
// makes the element's result the canonical NaN whatever the order.
TEST(DeterministicSanity, SpecialValuesCounted) {
    JobParams p = job(Role::root, first_n(2), ElemType::fp32, true);
    ChunkTable t(p);
    const float a[4] = {1e30f, 1e-20f, NAN, 1.0f};
    const float b[4] = {1.0f, 0.0f, 2.0f, -INFINITY};
    p.max_elems = 4;
    ChunkTable t4(p);
    EXPECT_EQ(t4.on_data(ids({1}).data(), 0, 4, a, 0, 0), Verdict::absorbed);
    EXPECT_EQ(t4.on_data(ids({2}).data(), 0, 4, b, 0, 0), Verdict::completed);
    float out[4];
    ASSERT_EQ(t4.store_result(0, out), 4u);
    const ChunkCounters c = t4.counters();
    EXPECT_EQ(c.fixed_saturated, 2u);  // 1e30, -Inf
    EXPECT_EQ(c.fixed_underflow, 1u);  // 1e-20
    EXPECT_EQ(c.fixed_nan, 1u);
    EXPECT_EQ(out[0], std::ldexp(static_cast<float>(reduce::kFixedMax + (int64_t{1} << 32)), -32));
    EXPECT_EQ(out[1], 0.0f);
    EXPECT_EQ(std::bit_cast<uint32_t>(out[2]), 0x7FC00000u);
    EXPECT_EQ(out[3], std::ldexp(static_cast<float>((int64_t{1} << 32) - reduce::kFixedMax), -32));
    // A deterministic job's header may carry int64 (a partial), a default job's may not.
    proto::Header h;
    h.job_id = p.job_id;
    h.op = 0;
    h.bsl_code = 1;
    h.elem_type = static_cast<uint8_t>(ElemType::int64);
    EXPECT_EQ(header_mismatch(h, p), 0);
    EXPECT_EQ(t.encoding_of(h.elem_type), agg::Encoding::fixed_point);
    p.deterministic = false;
    EXPECT_EQ(header_mismatch(h, p), mismatch::elem_type);
    // Only float sums can be deterministic.
    p = job(Role::root, first_n(2), ElemType::int32, true);
    EXPECT_NE(validate(p), "");
    p = job(Role::root, first_n(2), ElemType::fp32, true);
    p.op = reduce::Op::max;
    EXPECT_NE(validate(p), "");
    p.op = reduce::Op::sum;
    p.fraction_bits = 127;
    EXPECT_NE(validate(p), "");
}

}  // namespace
}  // namespace ina::test
