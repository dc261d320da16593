// SPDX-License-Identifier: Apache-2.0
// Hand-picked special values, checked against hand-computed expected bits on every ISA this CPU
// runs (the scalar reference included): NaN (signalling in, canonical quiet out), +-Inf, +-0,
// denormals, integer wrap-around, fp16/bf16 rounding ties, overflow to Inf, subnormals, and the
// single rounding of narrow types. Each case is tiled over 37 elements so that it lands in every
// lane of the SIMD main loop and in the tail.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <limits>
#include <vector>

#include "reduce/convert.h"
#include "reduce_test_util.h"

namespace ina::reduce::test {
namespace {

constexpr size_t kTiled = 37;

uint32_t f32(float f) { return std::bit_cast<uint32_t>(f); }
uint64_t f64(double d) { return std::bit_cast<uint64_t>(d); }

constexpr uint32_t kNan32 = 0x7FC00000u;
constexpr uint64_t kNan64 = 0x7FF8000000000000ull;
constexpr uint16_t kNan16 = 0x7E00u;
constexpr uint16_t kNanBf16 = 0x7FC0u;

class Special : public ::testing::TestWithParam<Isa> {
protected:
    void SetUp() override {
        if (!isa_supported(GetParam())) GTEST_SKIP() << to_string(GetParam()) << " not supported";
        ASSERT_TRUE(fp_env_is_default());
    }
    const Kernels& k() const { return select_kernels(GetParam()); }

    // Tiles the cases over kTiled elements at an odd wire address, loads the first operands,
    // accumulates each further operand list in turn, stores, and checks every element's bits.
    template <class W>
    void check(ElemType t, Op op, const std::vector<std::vector<W>>& operands, const std::vector<W>& want,
               const char* what) {
        ASSERT_EQ(sizeof(W), elem_size(t));
        ASSERT_FALSE(operands.empty());
        const size_t cases = want.size();
        AlignedBuf acc(acc_bytes(t, kTiled));
        AlignedBuf in(kTiled * sizeof(W) + 64), out(kTiled * sizeof(W) + 64);
        for (size_t c = 0; c < operands.size(); ++c) {
            ASSERT_EQ(operands[c].size(), cases);
            for (size_t i = 0; i < kTiled; ++i) put_elem(in.data() + 1 + i * sizeof(W), sizeof(W), operands[c][i % cases]);
            if (c == 0) {
                k().load(t, acc.data(), in.data() + 1, kTiled);
            } else {
                k().accumulate(t, acc.data(), in.data() + 1, kTiled, op);
            }
        }
        k().store(t, out.data() + 3, acc.data(), kTiled);
        for (size_t i = 0; i < kTiled; ++i) {
            const uint64_t got = get_elem(out.data() + 3 + i * sizeof(W), sizeof(W));
            EXPECT_EQ(hex(got, sizeof(W)), hex(want[i % cases], sizeof(W)))
                << what << " " << to_string(t) << " " << to_string(op) << " case " << i % cases
                << " (element " << i << ") on " << to_string(GetParam());
        }
    }
    template <class W>
    void check2(ElemType t, Op op, const std::vector<W>& a, const std::vector<W>& b, const std::vector<W>& want,
                const char* what) {
        check<W>(t, op, {a, b}, want, what);
        check<W>(t, op, {b, a}, want, what);  // every case here is order independent
    }
    // Stores accumulator contents written by hand (fp32 for fp16/bf16): tests narrowing alone.
    template <class W>
    void check_store(ElemType t, const std::vector<uint32_t>& acc_bits, const std::vector<W>& want) {
        AlignedBuf acc(acc_bytes(t, kTiled));
        AlignedBuf out(kTiled * sizeof(W) + 64);
        for (size_t i = 0; i < kTiled; ++i) put_elem(acc.data() + 4 * i, 4, acc_bits[i % acc_bits.size()]);
        k().store(t, out.data() + 1, acc.data(), kTiled);
        for (size_t i = 0; i < kTiled; ++i) {
            const uint64_t got = get_elem(out.data() + 1 + i * sizeof(W), sizeof(W));
            EXPECT_EQ(hex(got, sizeof(W)), hex(want[i % want.size()], sizeof(W)))
                << to_string(t) << " store of fp32 " << hex(acc_bits[i % acc_bits.size()], 4) << " on "
                << to_string(GetParam());
        }
    }
};

// --- NaN -------------------------------------------------------------------------------------

TEST_P(Special, Fp32NanIsCanonicalQuiet) {
    const uint32_t snan = 0x7F800001u, neg_snan = 0xFFA00000u, qnan_payload = 0x7FC12345u,
                   neg_qnan = 0xFFC00000u;
    const std::vector<uint32_t> a{snan, neg_snan, qnan_payload, neg_qnan, snan, f32(1.0f), f32(-0.0f)};
    const std::vector<uint32_t> b{f32(1.0f), f32(2.0f), qnan_payload, snan, neg_qnan, neg_snan, snan};
    const std::vector<uint32_t> nan(a.size(), kNan32);
    for (const Op op : all_ops()) check2<uint32_t>(ElemType::fp32, op, a, b, nan, "NaN operand");
    // A single contribution: load + store also quiets (and canonicalises).
    check<uint32_t>(ElemType::fp32, Op::sum, {{snan, neg_snan, qnan_payload, neg_qnan}},
                    {kNan32, kNan32, kNan32, kNan32}, "NaN loaded");
    // NaN arising from Inf - Inf and 0 * Inf is canonical too (x86 would give 0xFFC00000).
    check2<uint32_t>(ElemType::fp32, Op::sum, {f32(INFINITY)}, {f32(-INFINITY)}, {kNan32}, "Inf-Inf");
    check2<uint32_t>(ElemType::fp32, Op::prod, {f32(0.0f), f32(-0.0f)}, {f32(INFINITY), f32(INFINITY)},
                     {kNan32, kNan32}, "0*Inf");
}

TEST_P(Special, Fp64NanIsCanonicalQuiet) {
    const uint64_t snan = 0x7FF0000000000001ull, neg_q = 0xFFF8000000000000ull, payload = 0x7FF8DEADBEEF0001ull;
    const std::vector<uint64_t> a{snan, neg_q, payload, f64(1.0), f64(-0.0)};
    const std::vector<uint64_t> b{f64(1.0), payload, snan, neg_q, snan};
    for (const Op op : all_ops()) {
        check2<uint64_t>(ElemType::fp64, op, a, b, std::vector<uint64_t>(a.size(), kNan64), "NaN operand");
    }
    check<uint64_t>(ElemType::fp64, Op::max, {{snan, neg_q}}, {kNan64, kNan64}, "NaN loaded");
    check2<uint64_t>(ElemType::fp64, Op::sum, {f64(INFINITY)}, {f64(-INFINITY)}, {kNan64}, "Inf-Inf");
}

TEST_P(Special, Fp16AndBf16NanInQuietOut) {
    // fp16: 0x7D00 / 0xFC01 signalling, 0x7E55 quiet with payload. bf16: 0x7F81 / 0xFF81 signalling.
    const std::vector<uint16_t> h{0x7D00, 0xFC01, 0x7E55, 0xFE00};
    check<uint16_t>(ElemType::fp16, Op::sum, {h}, std::vector<uint16_t>(h.size(), kNan16), "NaN loaded");
    const std::vector<uint16_t> one16(h.size(), 0x3C00);
    for (const Op op : all_ops()) {
        check2<uint16_t>(ElemType::fp16, op, h, one16, std::vector<uint16_t>(h.size(), kNan16), "NaN operand");
    }
    const std::vector<uint16_t> b{0x7F81, 0xFF81, 0x7FC1, 0xFFC0};
    check<uint16_t>(ElemType::bf16, Op::min, {b}, std::vector<uint16_t>(b.size(), kNanBf16), "NaN loaded");
    const std::vector<uint16_t> one_bf(b.size(), 0x3F80);
    for (const Op op : all_ops()) {
        check2<uint16_t>(ElemType::bf16, op, b, one_bf, std::vector<uint16_t>(b.size(), kNanBf16), "NaN operand");
    }
    // Storing a NaN accumulator written by hand (not canonical): still a quiet NaN, payload kept.
    check_store<uint16_t>(ElemType::fp16, {0x7F800001u, 0xFFC02000u}, {0x7E00, 0xFE01});
    check_store<uint16_t>(ElemType::bf16, {0x7F800001u, 0xFF812345u}, {0x7FC0, 0xFFC1});
}

// --- Inf and signed zeros ----------------------------------------------------------------------

TEST_P(Special, Infinities) {
    const float inf = std::numeric_limits<float>::infinity();
    check2<uint32_t>(ElemType::fp32, Op::sum, {f32(inf), f32(-inf), f32(inf)},
                     {f32(1.0f), f32(-3.0f), f32(std::numeric_limits<float>::max())},
                     {f32(inf), f32(-inf), f32(inf)}, "Inf+x");
    check2<uint32_t>(ElemType::fp32, Op::prod, {f32(-inf), f32(inf)}, {f32(2.0f), f32(-0.5f)},
                     {f32(-inf), f32(-inf)}, "Inf*x");
    check2<uint32_t>(ElemType::fp32, Op::min, {f32(-inf), f32(inf)}, {f32(5.0f), f32(5.0f)},
                     {f32(-inf), f32(5.0f)}, "min Inf");
    check2<uint32_t>(ElemType::fp32, Op::max, {f32(-inf), f32(inf)}, {f32(5.0f), f32(5.0f)},
                     {f32(5.0f), f32(inf)}, "max Inf");
    // fp32 overflow: max + max = Inf; max * 2 = Inf.
    const float big = std::numeric_limits<float>::max();
    check2<uint32_t>(ElemType::fp32, Op::sum, {f32(big), f32(-big)}, {f32(big), f32(-big)},
                     {f32(inf), f32(-inf)}, "overflow");
    check2<uint64_t>(ElemType::fp64, Op::prod, {f64(1e300)}, {f64(-1e300)}, {f64(-INFINITY)}, "overflow");
    // fp16: Inf + 1 = Inf, -Inf * 2 = -Inf, Inf - Inf = NaN; 60000 + 60000 overflows only on store.
    check2<uint16_t>(ElemType::fp16, Op::sum, {0x7C00, 0x7C00, 0x7B53}, {0x3C00, 0xFC00, 0x7B53},
                     {0x7C00, kNan16, 0x7C00}, "fp16 Inf");
    check2<uint16_t>(ElemType::fp16, Op::prod, {0xFC00}, {0x4000}, {0xFC00}, "fp16 -Inf*2");
    check2<uint16_t>(ElemType::bf16, Op::sum, {0x7F80, 0xFF80, 0x7F7F}, {0x3F80, 0x7F80, 0x7F7F},
                     {0x7F80, kNanBf16, 0x7F80}, "bf16 Inf");
}

TEST_P(Special, SignedZeros) {
    const uint32_t pz = f32(0.0f), nz = f32(-0.0f);
    check2<uint32_t>(ElemType::fp32, Op::min, {nz, nz, pz}, {pz, nz, pz}, {nz, nz, pz}, "min zeros");
    check2<uint32_t>(ElemType::fp32, Op::max, {nz, nz, pz}, {pz, nz, pz}, {pz, nz, pz}, "max zeros");
    check2<uint32_t>(ElemType::fp32, Op::sum, {nz, nz, pz}, {pz, nz, pz}, {pz, nz, pz}, "sum zeros");
    check2<uint32_t>(ElemType::fp32, Op::prod, {nz, nz, pz}, {f32(5.0f), f32(-5.0f), f32(-5.0f)}, {nz, pz, nz},
                     "prod zeros");
    const uint64_t pz64 = f64(0.0), nz64 = f64(-0.0);
    check2<uint64_t>(ElemType::fp64, Op::min, {nz64, pz64}, {pz64, pz64}, {nz64, pz64}, "min zeros");
    check2<uint64_t>(ElemType::fp64, Op::max, {nz64, nz64}, {pz64, nz64}, {pz64, nz64}, "max zeros");
    check2<uint64_t>(ElemType::fp64, Op::sum, {nz64, nz64}, {pz64, nz64}, {pz64, nz64}, "sum zeros");
    for (const ElemType t : {ElemType::fp16, ElemType::bf16}) {
        check2<uint16_t>(t, Op::min, {0x8000, 0x0000}, {0x0000, 0x0000}, {0x8000, 0x0000}, "min zeros");
        check2<uint16_t>(t, Op::max, {0x8000, 0x8000}, {0x0000, 0x8000}, {0x0000, 0x8000}, "max zeros");
        check2<uint16_t>(t, Op::sum, {0x8000, 0x8000}, {0x0000, 0x8000}, {0x0000, 0x8000}, "sum zeros");
    }
    // Three contributions, every arrival order: min is -0 and max is +0 whenever both appear.
    for (const auto& order : std::vector<std::vector<uint32_t>>{{nz, pz, pz}, {pz, nz, pz}, {pz, pz, nz}}) {
        check<uint32_t>(ElemType::fp32, Op::min, {{order[0]}, {order[1]}, {order[2]}}, {nz}, "min order");
    }
    for (const auto& order : std::vector<std::vector<uint32_t>>{{pz, nz, nz}, {nz, pz, nz}, {nz, nz, pz}}) {
        check<uint32_t>(ElemType::fp32, Op::max, {{order[0]}, {order[1]}, {order[2]}}, {pz}, "max order");
    }
}

// --- Denormals: kept, never flushed ----------------------------------------------------------

TEST_P(Special, DenormalsPreserved) {
    // fp32: smallest denormal doubled; two half-min-normals make the smallest normal; the smallest
    // normal minus the smallest denormal is the largest denormal; underflow of a product.
    check2<uint32_t>(ElemType::fp32, Op::sum, {0x00000001u, 0x00400000u, 0x00800000u, 0x80000003u},
                     {0x00000001u, 0x00400000u, 0x80000001u, 0x00000001u},
                     {0x00000002u, 0x00800000u, 0x007FFFFFu, 0x80000002u}, "fp32 denormal sum");
    check2<uint32_t>(ElemType::fp32, Op::prod, {0x00800000u, 0x00000002u}, {f32(0.5f), f32(0.5f)},
                     {0x00400000u, 0x00000001u}, "fp32 denormal prod");
    check2<uint32_t>(ElemType::fp32, Op::min, {0x00000001u, 0x00000005u}, {0x80000001u, 0x00000004u},
                     {0x80000001u, 0x00000004u}, "fp32 denormal min");
    check2<uint32_t>(ElemType::fp32, Op::max, {0x00000001u, 0x00000005u}, {0x80000001u, 0x00000004u},
                     {0x00000001u, 0x00000005u}, "fp32 denormal max");
    check2<uint64_t>(ElemType::fp64, Op::sum, {1ull, 0x0008000000000000ull}, {1ull, 0x0008000000000000ull},
                     {2ull, 0x0010000000000000ull}, "fp64 denormal sum");
    // bf16 denormals are fp32 denormals in the accumulator.
    check2<uint16_t>(ElemType::bf16, Op::sum, {0x0001, 0x0040, 0x8001}, {0x0001, 0x0040, 0x0002},
                     {0x0002, 0x0080, 0x0001}, "bf16 denormal sum");
    // fp16 subnormals: widen exactly, come back exactly, carry into the smallest normal.
    check2<uint16_t>(ElemType::fp16, Op::sum, {0x0001, 0x03FF, 0x8001, 0x0200},
                     {0x0001, 0x0001, 0x0003, 0x0200}, {0x0002, 0x0400, 0x0002, 0x0400}, "fp16 subnormal sum");
    check2<uint16_t>(ElemType::fp16, Op::prod, {0x0400, 0x0001}, {0x3800, 0x3800}, {0x0200, 0x0000},
                     "fp16 subnormal prod");  // 2^-24 * 0.5 = 2^-25: a tie, to even (0)
    check2<uint16_t>(ElemType::fp16, Op::min, {0x0001, 0x8001}, {0x0002, 0x0001}, {0x0001, 0x8001},
                     "fp16 subnormal min");
}

// --- Integers wrap -------------------------------------------------------------------------------

TEST_P(Special, Int32Wraps) {
    const auto u = [](int32_t v) { return static_cast<uint32_t>(v); };
    const int32_t mx = INT32_MAX, mn = INT32_MIN;
    check2<uint32_t>(ElemType::int32, Op::sum, {u(mx), u(mn), u(-1), u(mx)}, {u(1), u(-1), u(1), u(mx)},
                     {u(mn), u(mx), u(0), u(-2)}, "int32 sum");
    check2<uint32_t>(ElemType::int32, Op::prod, {0x10000u, u(mn), 46341u, u(-3), u(mx)},
                     {0x10000u, u(-1), 46341u, u(7), u(mx)},
                     {0u, u(mn), u(-2147479015), u(-21), 1u}, "int32 prod");
    check2<uint32_t>(ElemType::int32, Op::min, {u(-1), u(mn), u(mx)}, {u(1), u(mx), u(0)},
                     {u(-1), u(mn), u(0)}, "int32 min");
    check2<uint32_t>(ElemType::int32, Op::max, {u(-1), u(mn), u(mx)}, {u(1), u(mx), u(0)},
                     {u(1), u(mx), u(mx)}, "int32 max");
}

TEST_P(Special, Int64Wraps) {
    const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
    const int64_t mx = INT64_MAX, mn = INT64_MIN;
    check2<uint64_t>(ElemType::int64, Op::sum, {u(mx), u(mn), u(-1)}, {u(1), u(-1), u(1)},
                     {u(mn), u(mx), 0}, "int64 sum");
    // (2^32+1)^2 = 2^64 + 2^33 + 1 = 2^33 + 1 (mod 2^64); the high halves matter in the AVX2 emulation.
    check2<uint64_t>(ElemType::int64, Op::prod,
                     {0x100000000ull, 0x100000001ull, u(mn), u(-3), 0xFFFFFFFF00000001ull, 0x123456789ABCDEFull},
                     {0x100000000ull, 0x100000001ull, u(-1), u(5), 0xFFFFFFFF00000001ull, 0xFEDCBA987654321ull},
                     {0, 0x200000001ull, u(mn), u(-15), 0xFFFFFFFE00000001ull,
                      0x123456789ABCDEFull * 0xFEDCBA987654321ull},
                     "int64 prod");
    check2<uint64_t>(ElemType::int64, Op::min, {u(-1), u(mn), 0x100000000ull}, {u(1), u(mx), 0xFFFFFFFFull},
                     {u(-1), u(mn), 0xFFFFFFFFull}, "int64 min");
    check2<uint64_t>(ElemType::int64, Op::max, {u(-1), u(mn), 0x100000000ull}, {u(1), u(mx), 0xFFFFFFFFull},
                     {u(1), u(mx), 0x100000000ull}, "int64 max");
}

// --- Narrowing: round to nearest even, overflow, subnormals ----------------------------------

TEST_P(Special, Bf16RoundToNearestEven) {
    check_store<uint16_t>(ElemType::bf16,
                          {0x3F808000u, 0x3F818000u, 0x3F808001u, 0x3F80FFFFu, 0x3F817FFFu, 0xBF808000u,
                           0xBF818000u, 0x7F7FFFFFu, 0x7F7F7FFFu, 0x7F7F8000u, 0xFF7FFFFFu, 0x7F800000u,
                           0x00008000u, 0x00018000u, 0x007FFFFFu, 0x00000001u, 0x3DCCCCCDu, 0x40490FDBu},
                          {0x3F80, 0x3F82, 0x3F81, 0x3F81, 0x3F81, 0xBF80, 0xBF82, 0x7F80, 0x7F7F, 0x7F80,
                           0xFF80, 0x7F80, 0x0000, 0x0002, 0x0080, 0x0000, 0x3DCD, 0x4049});
}

TEST_P(Special, Fp16RoundToNearestEvenAndOverflow) {
    check_store<uint16_t>(
        ElemType::fp16,
        {0x3F801000u,   // 1 + 2^-11: tie, to even 1.0
         0x3F803000u,   // 1 + 3*2^-11: tie, to even 1 + 2^-9
         0x3F801001u,   // just above the tie
         0x477FE000u,   // 65504, the largest finite
         0x477FEFFFu,   // just below 65520: still 65504
         0x477FF000u,   // 65520: tie between 65504 and 2^16 -> Inf
         f32(1e6f), f32(-1e6f), f32(INFINITY),
         0x33800000u,   // 2^-24, the smallest subnormal
         0x33000000u,   // 2^-25: tie between 0 and 2^-24 -> 0
         0x33000001u,   // just above: 2^-24
         0x33C00000u,   // 1.5 * 2^-24: tie -> 2 * 2^-24
         0x38800000u,   // 2^-14, the smallest normal
         0x387FE000u,   // 2^-14 - 2^-25: tie between 0x3FF and 0x400 -> 0x400
         0x387FDFFFu,   // just below: 0x3FF
         0x387FC000u,   // 2^-14 - 2^-24 = 0x3FF exactly
         0x00000001u, 0x80000001u, 0xB3800000u, f32(0.1f), f32(-2.0f)},
        {0x3C00, 0x3C02, 0x3C01, 0x7BFF, 0x7BFF, 0x7C00, 0x7C00, 0xFC00, 0x7C00, 0x0001, 0x0000, 0x0001,
         0x0002, 0x0400, 0x0400, 0x03FF, 0x03FF, 0x0000, 0x8000, 0x8001, 0x2E66, 0xC000});
}

// fp16/bf16 accumulate in fp32 and round once at the end: fp16 1 + 2^-11 + 2^-11 = 1 + 2^-10
// exactly, bf16 1 + 2^-8 + 2^-8 = 1 + 2^-7 (each addend is half an ulp of 1).
// (Rounding after each contribution would give 1.0 twice, ties to even.)
TEST_P(Special, NarrowTypesRoundOnce) {
    check<uint16_t>(ElemType::fp16, Op::sum, {{0x3C00}, {0x1000}, {0x1000}}, {0x3C01}, "fp16 single rounding");
    check<uint16_t>(ElemType::bf16, Op::sum, {{0x3F80}, {0x3B80}, {0x3B80}}, {0x3F81}, "bf16 single rounding");
    // 60000 + 60000 - 60000 in fp16: the fp32 accumulator does not overflow in between.
    check<uint16_t>(ElemType::fp16, Op::sum, {{0x7B53}, {0x7B53}, {0xFB53}}, {0x7B53}, "fp16 no mid overflow");
}

// Every fp16 and bf16 value goes through load + store unchanged (NaNs become the canonical NaN).
TEST_P(Special, AllNarrowValuesRoundTrip) {
    for (const ElemType t : {ElemType::fp16, ElemType::bf16}) {
        const size_t n = 65536;
        AlignedBuf in(2 * n + 64), out(2 * n + 64), acc(acc_bytes(t, n));
        for (size_t i = 0; i < n; ++i) put_elem(in.data() + 1 + 2 * i, 2, i);
        k().load(t, acc.data(), in.data() + 1, n);
        k().store(t, out.data() + 1, acc.data(), n);
        const uint16_t exp_mask = t == ElemType::fp16 ? 0x7C00 : 0x7F80;
        const uint16_t canon = t == ElemType::fp16 ? kNan16 : kNanBf16;
        for (size_t i = 0; i < n; ++i) {
            const auto x = static_cast<uint16_t>(i);
            const bool nan = (x & exp_mask) == exp_mask && (x & ~exp_mask & 0x7FFF) != 0;
            const auto got = static_cast<uint16_t>(get_elem(out.data() + 1 + 2 * i, 2));
            ASSERT_EQ(hex(got, 2), hex(nan ? canon : x, 2)) << to_string(t) << " on " << to_string(GetParam());
        }
    }
}

// n = 0 touches nothing (null pointers are fine).
TEST_P(Special, ZeroLength) {
    for (const ElemType t : all_types()) {
        k()[t].load(nullptr, nullptr, 0);
        for (const Op op : all_ops()) k()[t].accumulate(nullptr, nullptr, 0, op);
        k()[t].store(nullptr, nullptr, 0);
    }
    SUCCEED();
}

INSTANTIATE_TEST_SUITE_P(AllIsas, Special, ::testing::ValuesIn(all_isas()),
                         [](const ::testing::TestParamInfo<Isa>& p) { return std::string(to_string(p.param)); });

}  // namespace
}  // namespace ina::reduce::test
