// SPDX-License-Identifier: Apache-2.0
#include "reduce/fixed_point.h"

#include <bit>
#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "reduce/convert.h"
#include "reduce/kernels_internal.h"

namespace ina::reduce {

// Wire elements are read and written with memcpy: native order, the wire's little-endian.
static_assert(std::endian::native == std::endian::little, "fixed_point.cc assumes a little-endian host");

namespace {

// 1.5 * 2^52: for |d| <= 2^51 - 1, d + kRoundMagic lies in [2^52, 2^53), where the double's ulp
// is 1, so the addition rounds d to an integer (to nearest even, the CPU default) and the
// mantissa bits ARE that integer's offset from kRoundMagic. No double -> int64 conversion is
// needed (AVX2 has none), so the loop vectorises.
constexpr double kRoundMagic = 6755399441055744.0;
constexpr auto kRoundMagicBits = std::bit_cast<int64_t>(kRoundMagic);
constexpr auto kFixedMaxD = static_cast<double>(kFixedMax);  // exact: below 2^53

// 2^e as a double (|e| <= 1022), built from its bits: no libm call on the hot path.
double pow2(int e) { return std::bit_cast<double>(static_cast<uint64_t>(1023 + e) << 52); }
float pow2f(int e) { return std::bit_cast<float>(static_cast<uint32_t>(127 + e) << 23); }

struct LocalStats {
    uint64_t saturated = 0;
    uint64_t underflow = 0;
    uint64_t nan = 0;
    void add_to(FixedStats& s) const {
        s.saturated += saturated;
        s.underflow += underflow;
        s.nan += nan;
    }
};

// q(x) for x already widened to double (exact for every wire type), scale = 2^F. Branch free.
inline int64_t quantize_one(double x, double scale, LocalStats& st) {
    const double d = x * scale;  // exact (a power of two), or +-Inf beyond the double range
    const bool nan = d != d;
    const bool sat = !(std::fabs(d) <= kFixedMaxD) && !nan;
    const double clamped = sat ? std::copysign(kFixedMaxD, d) : (nan ? 0.0 : d);
    int64_t q = std::bit_cast<int64_t>(clamped + kRoundMagic) - kRoundMagicBits;
    st.nan += nan;
    st.saturated += sat;
    st.underflow += (x != 0.0) & (q == 0) & !nan;
    return nan ? kFixedNan : q;
}

// a (+) b: NaN sticky; wrapping through uint64 (valid sums never wrap: fixed_point.h's bound).
inline int64_t fixed_sum(int64_t a, int64_t b) {
    const auto s = static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
    return ((a == kFixedNan) | (b == kFixedNan)) ? kFixedNan : s;
}

// Wire element -> double (exact for every float type: fp16/bf16/fp32 widen without rounding).
double widen_f32(uint32_t b) { return static_cast<double>(std::bit_cast<float>(b)); }
double widen_f64(uint64_t b) { return std::bit_cast<double>(b); }
double widen_f16(uint16_t b) { return fp16_to_fp32(b); }
double widen_bf16(uint16_t b) { return bf16_to_fp32(b); }

template <class Bits, double (*widen)(Bits)>
struct Wire {
    static constexpr size_t kSize = sizeof(Bits);
    static double read(const unsigned char* p) {
        Bits b;
        std::memcpy(&b, p, sizeof b);
        return widen(b);
    }
};
using WireF32 = Wire<uint32_t, &widen_f32>;
using WireF64 = Wire<uint64_t, &widen_f64>;
using WireF16 = Wire<uint16_t, &widen_f16>;
using WireBF16 = Wire<uint16_t, &widen_bf16>;

template <class W>
void quantize_load(int64_t* acc, const void* in_v, size_t n, int fraction_bits,
                   FixedStats& stats) {
    const auto* in = static_cast<const unsigned char*>(in_v);
    const double scale = pow2(fraction_bits);
    LocalStats st;
    for (size_t i = 0; i < n; ++i) acc[i] = quantize_one(W::read(in + i * W::kSize), scale, st);
    st.add_to(stats);
}

template <class W>
void quantize_add(int64_t* acc, const void* in_v, size_t n, int fraction_bits,
                  FixedStats& stats) {
    const auto* in = static_cast<const unsigned char*>(in_v);
    const double scale = pow2(fraction_bits);
    LocalStats st;
    for (size_t i = 0; i < n; ++i) {
        acc[i] = fixed_sum(acc[i], quantize_one(W::read(in + i * W::kSize), scale, st));
    }
    st.add_to(stats);
}

// S rounded to fp32 with round-to-odd: truncate to 24 significant bits and set the last bit if
// anything was cut. Narrowing that to fp16/bf16 (<= 22 bits) with round-to-nearest then gives
// exactly RN(S) in the narrow type (round-to-odd is innocuous for a later rounding to 2 bits
// fewer), where two ordinary roundings could round twice.
float to_fp32_round_odd(int64_t s) {
    const bool neg = s < 0;
    uint64_t u = neg ? 0 - static_cast<uint64_t>(s) : static_cast<uint64_t>(s);
    const int width = std::bit_width(u);
    if (width > 24) {
        const int shift = width - 24;
        const bool lost = (u & ((uint64_t{1} << shift) - 1)) != 0;
        u = (u >> shift) | static_cast<uint64_t>(lost);
        const float f = static_cast<float>(u) * pow2f(shift);  // exact: 24 bits, small power
        return neg ? -f : f;
    }
    const auto f = static_cast<float>(u);  // exact
    return neg ? -f : f;
}

void dequantize_f32(void* out_v, const int64_t* acc, size_t n, int fraction_bits) {
    auto* out = static_cast<unsigned char*>(out_v);
    const float inv = pow2f(-fraction_bits);
    for (size_t i = 0; i < n; ++i) {
        // int64 -> fp32 rounds once (to nearest even); * 2^-F is exact (the result is normal:
        // |S| >= 1 and F <= 126).
        const uint32_t bits = acc[i] == kFixedNan
                                  ? detail::kCanonicalNanF32
                                  : std::bit_cast<uint32_t>(static_cast<float>(acc[i]) * inv);
        std::memcpy(out + 4 * i, &bits, 4);
    }
}

void dequantize_f64(void* out_v, const int64_t* acc, size_t n, int fraction_bits) {
    auto* out = static_cast<unsigned char*>(out_v);
    const double inv = pow2(-fraction_bits);
    for (size_t i = 0; i < n; ++i) {
        const uint64_t bits = acc[i] == kFixedNan
                                  ? detail::kCanonicalNanF64
                                  : std::bit_cast<uint64_t>(static_cast<double>(acc[i]) * inv);
        std::memcpy(out + 8 * i, &bits, 8);
    }
}

template <uint16_t (*narrow)(float)>
void dequantize_narrow(void* out_v, const int64_t* acc, size_t n, int fraction_bits) {
    auto* out = static_cast<unsigned char*>(out_v);
    const float inv = pow2f(-fraction_bits);
    const float nan = std::bit_cast<float>(detail::kCanonicalNanF32);
    for (size_t i = 0; i < n; ++i) {
        const uint16_t bits = narrow(acc[i] == kFixedNan ? nan : to_fp32_round_odd(acc[i]) * inv);
        std::memcpy(out + 2 * i, &bits, 2);
    }
}

uint16_t narrow_fp16(float f) { return fp32_to_fp16(f); }
uint16_t narrow_bf16(float f) { return fp32_to_bf16(f); }

#if defined(__x86_64__)
// fp32 quantize (+ add) with AVX-512F, 8 elements a step in double lanes: the same operations
// as quantize_one (exact scaling, the magic-number rounding, clamp, NaN marker, counts by mask
// popcount), so it is bit-identical to the scalar loop; the tail runs the scalar code.
#define INA_FIXED_AVX512 __attribute__((target("avx512f")))
template <bool kAdd>
INA_FIXED_AVX512 void quantize_f32_avx512(int64_t* acc, const void* in_v, size_t n,
                                          int fraction_bits, FixedStats& stats) {
    const auto* in = static_cast<const unsigned char*>(in_v);
    const double scale = pow2(fraction_bits);
    const __m512d vscale = _mm512_set1_pd(scale);
    const __m512d vmax = _mm512_set1_pd(kFixedMaxD);
    const __m512d vmagic = _mm512_set1_pd(kRoundMagic);
    const __m512i vmagic_bits = _mm512_set1_epi64(kRoundMagicBits);
    const __m512i vnan = _mm512_set1_epi64(kFixedNan);
    const __m512i vsign = _mm512_set1_epi64(kFixedNan);  // the sign bit alone
    LocalStats st;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m512d x = _mm512_maskz_cvtps_pd(0xFF, _mm256_loadu_ps(reinterpret_cast<const float*>(in + 4 * i)));
        const __m512d d = _mm512_mul_pd(x, vscale);
        const __mmask8 nan = _mm512_cmp_pd_mask(d, d, _CMP_UNORD_Q);
        const __mmask8 in_range = _mm512_cmp_pd_mask(_mm512_abs_pd(d), vmax, _CMP_LE_OQ);
        const auto sat = static_cast<__mmask8>(~in_range & ~nan);
        const __m512d signed_max = _mm512_castsi512_pd(_mm512_or_si512(
            _mm512_castpd_si512(vmax), _mm512_and_si512(_mm512_castpd_si512(d), vsign)));
        const __m512d clamped = _mm512_mask_mov_pd(_mm512_maskz_mov_pd(in_range, d), sat, signed_max);
        __m512i q = _mm512_sub_epi64(_mm512_castpd_si512(_mm512_add_pd(clamped, vmagic)), vmagic_bits);
        const __mmask8 zero_q = _mm512_cmpeq_epi64_mask(q, _mm512_setzero_si512());
        const __mmask8 nonzero_x = _mm512_cmp_pd_mask(x, _mm512_setzero_pd(), _CMP_NEQ_UQ);
        q = _mm512_mask_mov_epi64(q, nan, vnan);
        st.nan += static_cast<uint64_t>(__builtin_popcount(nan));
        st.saturated += static_cast<uint64_t>(__builtin_popcount(sat));
        st.underflow += static_cast<uint64_t>(__builtin_popcount(nonzero_x & zero_q & ~nan & 0xFF));
        if constexpr (kAdd) {
            const __m512i a = _mm512_loadu_si512(acc + i);
            const auto either = static_cast<__mmask8>(_mm512_cmpeq_epi64_mask(a, vnan) | nan);
            q = _mm512_mask_mov_epi64(_mm512_add_epi64(a, q), either, vnan);
        }
        _mm512_storeu_si512(acc + i, q);
    }
    for (; i < n; ++i) {
        const int64_t q = quantize_one(WireF32::read(in + 4 * i), scale, st);
        acc[i] = kAdd ? fixed_sum(acc[i], q) : q;
    }
    st.add_to(stats);
}
#endif

constexpr FixedKernels kNone{};
constexpr FixedKernels kF32{&quantize_load<WireF32>, &quantize_add<WireF32>, &dequantize_f32};
constexpr FixedKernels kF16{&quantize_load<WireF16>, &quantize_add<WireF16>,
                            &dequantize_narrow<&narrow_fp16>};
constexpr FixedKernels kBF16{&quantize_load<WireBF16>, &quantize_add<WireBF16>,
                             &dequantize_narrow<&narrow_bf16>};
constexpr FixedKernels kF64{&quantize_load<WireF64>, &quantize_add<WireF64>, &dequantize_f64};
#if defined(__x86_64__)
constexpr FixedKernels kF32Avx512{&quantize_f32_avx512<false>, &quantize_f32_avx512<true>,
                                  &dequantize_f32};
#endif

}  // namespace

const FixedKernels& fixed_kernels(ElemType t) { return fixed_kernels(t, kernels().isa); }

const FixedKernels& fixed_kernels(ElemType t, Isa isa) {
    switch (t) {
    case ElemType::fp32:
#if defined(__x86_64__)
        if (isa == Isa::avx512 && isa_supported(Isa::avx512)) return kF32Avx512;
#endif
        return kF32;
    case ElemType::fp16: return kF16;
    case ElemType::bf16: return kBF16;
    case ElemType::fp64: return kF64;
    case ElemType::int32:
    case ElemType::int64: break;
    }
    return kNone;
}

void fixed_load(int64_t* acc, const void* in, size_t n) {
    if (n != 0) std::memcpy(acc, in, n * 8);  // x86: native order is the wire's little-endian
}

void fixed_add(int64_t* acc, const void* in_v, size_t n) {
    const auto* in = static_cast<const unsigned char*>(in_v);
    for (size_t i = 0; i < n; ++i) {
        int64_t v;
        std::memcpy(&v, in + 8 * i, 8);
        acc[i] = fixed_sum(acc[i], v);
    }
}

void fixed_store(void* out, const int64_t* acc, size_t n) {
    if (n != 0) std::memcpy(out, acc, n * 8);
}

int64_t quantize(double x, int fraction_bits, FixedStats& stats) {
    LocalStats st;
    const int64_t q = quantize_one(x, pow2(fraction_bits), st);
    st.add_to(stats);
    return q;
}

}  // namespace ina::reduce
