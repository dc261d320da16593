// SPDX-License-Identifier: Apache-2.0
// The scalar fp16/bf16 conversions (the reference every kernel is compared with) against the
// hardware (F16C for fp16 both ways: all 65536 fp16 values, and every fp32 value), against
// independent arithmetic oracles, and against known constants.
#include <gtest/gtest.h>

#include <immintrin.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "reduce/convert.h"
#include "reduce_test_util.h"

namespace ina::reduce::test {
namespace {

// Known constants, checked at compile time too.
static_assert(fp32_to_fp16(1.0f) == 0x3C00);
static_assert(fp32_to_fp16(-2.0f) == 0xC000);
static_assert(fp32_to_fp16(65504.0f) == 0x7BFF);
static_assert(fp32_to_fp16(65520.0f) == 0x7C00);
static_assert(fp32_to_fp16(0.1f) == 0x2E66);
static_assert(fp16_to_fp32(0x3C00) == 1.0f);
static_assert(fp16_to_fp32(0x0001) == 0x1p-24f);
static_assert(fp32_to_bf16(std::bit_cast<float>(0x3F808000u)) == 0x3F80);
static_assert(fp32_to_bf16(std::bit_cast<float>(0x3F818000u)) == 0x3F82);
static_assert(bf16_to_fp32(0x4049) == 3.140625f);

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

bool have_f16c() {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
}

// Hardware conversions, 8 at a time (n a multiple of 8).
__attribute__((target("avx,f16c"))) void hw_fp16_to_fp32(const uint16_t* in, uint32_t* out, size_t n) {
    for (size_t i = 0; i < n; i += 8) {
        const __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_castps_si256(v));
    }
}
__attribute__((target("avx,f16c"))) void hw_fp32_to_fp16(const uint32_t* in, uint16_t* out, size_t n) {
    for (size_t i = 0; i < n; i += 8) {
        const __m256 v = _mm256_castsi256_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i)));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    }
}

// --- fp16 -----------------------------------------------------------------------------------------

TEST(Fp16, AllValuesToFp32MatchF16C) {
    if (!have_f16c()) GTEST_SKIP() << "no F16C";
    std::vector<uint16_t> in(65536);
    std::vector<uint32_t> hw(65536);
    for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint16_t>(i);
    hw_fp16_to_fp32(in.data(), hw.data(), in.size());
    for (size_t i = 0; i < in.size(); ++i) {
        ASSERT_EQ(hex(bits(fp16_to_fp32(in[i])), 4), hex(hw[i], 4)) << "fp16 " << hex(i, 2);
    }
}

// Independent of the hardware: (-1)^s * 2^(e-15) * (1 + m/1024), or m * 2^-24 for subnormals.
TEST(Fp16, AllFiniteValuesToFp32MatchFormula) {
    for (uint32_t h = 0; h < 65536; ++h) {
        const uint32_t e = (h >> 10) & 0x1F, m = h & 0x3FF;
        if (e == 0x1F) continue;
        const double mag = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, static_cast<int>(e) - 25);
        const double want = (h & 0x8000) ? -mag : mag;
        const float got = fp16_to_fp32(static_cast<uint16_t>(h));
        ASSERT_EQ(static_cast<double>(got), want) << hex(h, 2);
        ASSERT_EQ(std::signbit(got), (h & 0x8000) != 0) << hex(h, 2);
    }
    // Inf and NaN: Inf exact; NaN quiet, sign and payload kept.
    EXPECT_EQ(bits(fp16_to_fp32(0x7C00)), 0x7F800000u);
    EXPECT_EQ(bits(fp16_to_fp32(0xFC00)), 0xFF800000u);
    EXPECT_EQ(bits(fp16_to_fp32(0x7D00)), 0x7FE00000u);  // signalling in, quiet out
    EXPECT_EQ(bits(fp16_to_fp32(0xFE01)), 0xFFC02000u);
}

// Every one of the 2^32 fp32 bit patterns, against F16C (about 5 s of CPU).
TEST(Fp16, AllFp32ValuesToFp16MatchF16C) {
    if (!have_f16c()) GTEST_SKIP() << "no F16C";
    constexpr size_t kChunk = 1u << 16;
    std::vector<uint32_t> in(kChunk);
    std::vector<uint16_t> hw(kChunk);
    for (uint64_t base = 0; base < (1ull << 32); base += kChunk) {
        for (size_t i = 0; i < kChunk; ++i) in[i] = static_cast<uint32_t>(base + i);
        hw_fp32_to_fp16(in.data(), hw.data(), kChunk);
        for (size_t i = 0; i < kChunk; ++i) {
            const uint16_t got = fp32_to_fp16(std::bit_cast<float>(in[i]));
            if (got != hw[i]) {
                FAIL() << "fp32 " << hex(in[i], 4) << ": scalar " << hex(got, 2) << ", F16C " << hex(hw[i], 2);
            }
        }
    }
}

// Independent of the hardware: the nearest fp16 by exact distance (computed in double), ties to
// the even pattern, Inf standing for 2^16 (IEEE overflow under round to nearest).
uint16_t fp16_oracle(float x) {
    const uint32_t u = bits(x);
    const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
    if (std::isnan(x)) return static_cast<uint16_t>(sign | 0x7E00 | ((u >> 13) & 0x3FF));
    const double a = std::fabs(static_cast<double>(x));
    const auto value = [](uint32_t h) {  // magnitude of a positive pattern <= 0x7C00
        return h == 0x7C00 ? 65536.0 : static_cast<double>(fp16_to_fp32(static_cast<uint16_t>(h)));
    };
    if (a >= 65536.0) return static_cast<uint16_t>(sign | 0x7C00);
    uint32_t lo = 0, hi = 0x7C00;  // largest pattern with value <= a, by bisection
    while (lo < hi) {
        const uint32_t mid = (lo + hi + 1) / 2;
        if (value(mid) <= a) lo = mid; else hi = mid - 1;
    }
    if (value(lo) == a) return static_cast<uint16_t>(sign | lo);
    const double dlo = a - value(lo), dhi = value(lo + 1) - a;
    const uint32_t r = dlo < dhi ? lo : dhi < dlo ? lo + 1 : (lo & 1 ? lo + 1 : lo);
    return static_cast<uint16_t>(sign | r);
}

TEST(Fp16, RandomAndBoundaryFp32ValuesMatchOracle) {
    std::mt19937_64 rng(0xF16F16u);
    std::vector<uint32_t> cases;
    for (int i = 0; i < 1 << 20; ++i) cases.push_back(static_cast<uint32_t>(rng()));
    // Around every rounding boundary in the fp16 range: each exponent, mantissas next to the
    // halfway points (13 dropped bits for normals, more for subnormals).
    for (uint32_t e = 100; e <= 143; ++e) {
        for (uint32_t k = 0; k < 64; ++k) {
            const uint32_t m = static_cast<uint32_t>(rng()) & 0x7FFFFF;
            for (const uint32_t low : {0x0000u, 0x0FFFu, 0x1000u, 0x1001u, 0x1FFFu}) {
                for (const uint32_t s : {0u, 0x80000000u}) cases.push_back(s | (e << 23) | (m & ~0x1FFFu) | low);
            }
            // The exact tie: subnormal results drop more bits of the 24-bit significand.
            if (e < 102) continue;
            const uint32_t shift = e < 113 ? 126 - e : 13;
            const uint32_t half = 1u << (shift - 1);
            const uint32_t sig = ((m | 0x800000u) & ~((half << 1) - 1)) | half;
            cases.push_back((e << 23) | (sig & 0x7FFFFFu));
        }
    }
    for (const uint32_t c : cases) {
        const float x = std::bit_cast<float>(c);
        ASSERT_EQ(hex(fp32_to_fp16(x), 2), hex(fp16_oracle(x), 2)) << "fp32 " << hex(c, 4);
    }
}

TEST(Fp16, KnownConstants) {
    const struct {
        float f;
        uint16_t h;
    } table[] = {
        {1.0f, 0x3C00},        {-2.0f, 0xC000},         {0.5f, 0x3800},          {65504.0f, 0x7BFF},
        {0.1f, 0x2E66},        {1.0f / 3.0f, 0x3555},   {3.14159265f, 0x4248},   {0x1p-14f, 0x0400},
        {0x1p-24f, 0x0001},    {0x1p-25f, 0x0000},      {-0x1p-24f, 0x8001},     {0.0f, 0x0000},
        {-0.0f, 0x8000},       {std::numeric_limits<float>::infinity(), 0x7C00},
        {-std::numeric_limits<float>::infinity(), 0xFC00},  {1e5f, 0x7C00},     {-65519.0f, 0xFBFF},
    };
    for (const auto& t : table) EXPECT_EQ(hex(fp32_to_fp16(t.f), 2), hex(t.h, 2)) << t.f;
    EXPECT_EQ(fp16_to_fp32(0x3555), 0.333251953125f);
    EXPECT_EQ(fp16_to_fp32(0x7BFF), 65504.0f);
    EXPECT_EQ(fp16_to_fp32(0x03FF), 1023.0f * 0x1p-24f);
    EXPECT_EQ(fp16_to_fp32(0x4248), 3.140625f);
    EXPECT_EQ(bits(fp16_to_fp32(0x8000)), 0x80000000u);
}

// --- bf16 -----------------------------------------------------------------------------------------

// The nearest bf16 by exact distance (in double), ties to even, Inf standing for 2^128.
uint16_t bf16_oracle(float x) {
    const uint32_t u = bits(x);
    if (std::isnan(x)) return static_cast<uint16_t>((u >> 16) | 0x40);
    const auto lo = static_cast<uint16_t>(u >> 16);  // truncation: towards zero
    if ((u & 0xFFFF) == 0) return lo;
    const auto hi = static_cast<uint16_t>(lo + 1);
    const double a = std::fabs(static_cast<double>(x));
    const double vlo = std::fabs(static_cast<double>(bf16_to_fp32(lo)));
    const double vhi = (hi & 0x7FFF) == 0x7F80 ? std::ldexp(1.0, 128) : std::fabs(static_cast<double>(bf16_to_fp32(hi)));
    const double dlo = a - vlo, dhi = vhi - a;
    if (dlo < dhi) return lo;
    if (dhi < dlo) return hi;
    return (lo & 1) ? hi : lo;
}

TEST(Bf16, AllValuesToFp32AreExact) {
    for (uint32_t b = 0; b < 65536; ++b) {
        const uint32_t got = bits(bf16_to_fp32(static_cast<uint16_t>(b)));
        const bool nan = (b & 0x7F80) == 0x7F80 && (b & 0x7F) != 0;
        ASSERT_EQ(hex(got, 4), hex(nan ? (b << 16) | 0x00400000u : b << 16, 4)) << hex(b, 2);
    }
}

TEST(Bf16, RandomAndBoundaryFp32ValuesMatchOracle) {
    std::mt19937_64 rng(0xBF16BF16u);
    std::vector<uint32_t> cases;
    for (int i = 0; i < 1 << 22; ++i) cases.push_back(static_cast<uint32_t>(rng()));
    for (uint32_t hi = 0; hi < 65536; ++hi) {  // every bf16 interval: at, around and at the tie
        for (const uint32_t low : {0x0000u, 0x0001u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) {
            cases.push_back((hi << 16) | low);
        }
    }
    for (const uint32_t c : cases) {
        const float x = std::bit_cast<float>(c);
        ASSERT_EQ(hex(fp32_to_bf16(x), 2), hex(bf16_oracle(x), 2)) << "fp32 " << hex(c, 4);
    }
}

TEST(Bf16, KnownConstants) {
    const struct {
        uint32_t f;
        uint16_t b;
    } table[] = {
        {0x3F800000u, 0x3F80}, {0x3F808000u, 0x3F80}, {0x3F818000u, 0x3F82}, {0x40490FDBu, 0x4049},
        {0x3DCCCCCDu, 0x3DCD}, {0xC0000000u, 0xC000}, {0x7F7FFFFFu, 0x7F80}, {0x000116C2u, 0x0001},
        {0x80000000u, 0x8000}, {0xFF800000u, 0xFF80}, {0x7F800001u, 0x7FC0}, {0xFFC00001u, 0xFFC0},
    };
    for (const auto& t : table) EXPECT_EQ(hex(fp32_to_bf16(std::bit_cast<float>(t.f)), 2), hex(t.b, 2)) << hex(t.f, 4);
}

// AVX512_BF16's VCVTNEPS2BF16 (not used by the kernels: it flushes denormals and its NaN output
// differs) agrees on every other value.
__attribute__((target("avx512f,avx512bf16"))) void hw_fp32_to_bf16(const uint32_t* in, uint16_t* out, size_t n) {
    for (size_t i = 0; i < n; i += 16) {
        const __m256bh h = _mm512_cvtneps_pbh(_mm512_castsi512_ps(_mm512_loadu_si512(in + i)));
        std::memcpy(out + i, &h, sizeof h);
    }
}

TEST(Bf16, NormalValuesMatchAvx512Bf16) {
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bf16")) {
        GTEST_SKIP() << "no AVX512_BF16";
    }
    std::mt19937_64 rng(0xAB16u);
    std::vector<uint32_t> in;
    while (in.size() < (1u << 20)) {
        const auto c = static_cast<uint32_t>(rng());
        const uint32_t e = (c >> 23) & 0xFF;
        if (e != 0 && e != 0xFF) in.push_back(c);  // normal (finite, non-zero, not denormal)
    }
    for (const uint32_t c : {0x3F808000u, 0x3F818000u, 0x7F7FFFFFu, 0x7F7F8000u, 0xFF7FFFFFu, 0x00800000u,
                             0x7F800000u, 0xFF800000u, 0u, 0x80000000u, 0x00FF8000u, 0x3F80FFFFu}) {
        in.push_back(c);
    }
    while (in.size() % 16 != 0) in.push_back(0x3F800000u);
    std::vector<uint16_t> hw(in.size());
    hw_fp32_to_bf16(in.data(), hw.data(), in.size());
    for (size_t i = 0; i < in.size(); ++i) {
        ASSERT_EQ(hex(fp32_to_bf16(std::bit_cast<float>(in[i])), 2), hex(hw[i], 2)) << "fp32 " << hex(in[i], 4);
    }
}

}  // namespace
}  // namespace ina::reduce::test
