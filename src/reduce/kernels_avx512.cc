// SPDX-License-Identifier: Apache-2.0
// AVX-512 kernels (AVX512F; AVX512BW for the 16-bit masked loads/stores of fp16/bf16 tails), on
// 512-bit vectors. Every function that uses these instructions carries
// __attribute__((target(...))), so this file builds with the project's baseline flags and is only
// entered after __builtin_cpu_supports said yes. FMA is deliberately not enabled (see avx2).
// AVX512_BF16's VCVTNEPS2BF16 is not used: it flushes denormals. Tails use masked loads/stores,
// so acc/in/out are never touched past element n.
#if defined(__x86_64__)

#include <immintrin.h>

#include "reduce/kernels_internal.h"

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() (`__m512i __Y = __Y;`), which trips
// a false -Wmaybe-uninitialized once inlined (GCC PR 105593, fixed in GCC 13). Nothing here reads
// an undefined lane: every such source is fully overwritten (mask all ones).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define INA_AVX512 __attribute__((target("avx512f,avx512bw,avx2,f16c")))

namespace ina::reduce::detail {
namespace {

struct F32 {
    using Acc = float;
    using V = __m512;
    using Mask = __mmask16;
    static constexpr size_t kLanes = 16;
    static constexpr size_t kWire = 4;

    INA_AVX512 static V load_acc(const Acc* p) { return _mm512_loadu_ps(p); }
    INA_AVX512 static V load_acc(const Acc* p, Mask k) { return _mm512_maskz_loadu_ps(k, p); }
    INA_AVX512 static void store_acc(Acc* p, V v) { _mm512_storeu_ps(p, v); }
    INA_AVX512 static void store_acc(Acc* p, V v, Mask k) { _mm512_mask_storeu_ps(p, k, v); }
    INA_AVX512 static V load_in(const unsigned char* p) { return _mm512_loadu_ps(p); }
    INA_AVX512 static V load_in(const unsigned char* p, Mask k) { return _mm512_maskz_loadu_ps(k, p); }
    INA_AVX512 static void store_out(unsigned char* p, V v) { _mm512_storeu_ps(p, v); }
    INA_AVX512 static void store_out(unsigned char* p, V v, Mask k) { _mm512_mask_storeu_ps(p, k, v); }

    INA_AVX512 static V nan() { return _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000)); }
    INA_AVX512 static V canon(V v) {
        return _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), nan());
    }
    INA_AVX512 static V sum(V a, V b) { return canon(_mm512_add_ps(a, b)); }
    INA_AVX512 static V prod(V a, V b) { return canon(_mm512_mul_ps(a, b)); }
    // vminps returns b when the operands compare equal (also -0 vs +0): use a|b there (a&b for
    // max). Bitwise ops in the integer domain: the _ps forms need AVX512DQ.
    INA_AVX512 static V min(V a, V b) {
        const __mmask16 eq = _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ);
        const __m512i r = _mm512_mask_or_epi32(_mm512_castps_si512(_mm512_min_ps(a, b)), eq,
                                               _mm512_castps_si512(a), _mm512_castps_si512(b));
        return _mm512_mask_mov_ps(_mm512_castsi512_ps(r), _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q), nan());
    }
    INA_AVX512 static V max(V a, V b) {
        const __mmask16 eq = _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ);
        const __m512i r = _mm512_mask_and_epi32(_mm512_castps_si512(_mm512_max_ps(a, b)), eq,
                                                _mm512_castps_si512(a), _mm512_castps_si512(b));
        return _mm512_mask_mov_ps(_mm512_castsi512_ps(r), _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q), nan());
    }
};

struct F64 {
    using Acc = double;
    using V = __m512d;
    using Mask = __mmask8;
    static constexpr size_t kLanes = 8;
    static constexpr size_t kWire = 8;

    INA_AVX512 static V load_acc(const Acc* p) { return _mm512_loadu_pd(p); }
    INA_AVX512 static V load_acc(const Acc* p, Mask k) { return _mm512_maskz_loadu_pd(k, p); }
    INA_AVX512 static void store_acc(Acc* p, V v) { _mm512_storeu_pd(p, v); }
    INA_AVX512 static void store_acc(Acc* p, V v, Mask k) { _mm512_mask_storeu_pd(p, k, v); }
    INA_AVX512 static V load_in(const unsigned char* p) { return _mm512_loadu_pd(p); }
    INA_AVX512 static V load_in(const unsigned char* p, Mask k) { return _mm512_maskz_loadu_pd(k, p); }
    INA_AVX512 static void store_out(unsigned char* p, V v) { _mm512_storeu_pd(p, v); }
    INA_AVX512 static void store_out(unsigned char* p, V v, Mask k) { _mm512_mask_storeu_pd(p, k, v); }

    INA_AVX512 static V nan() {
        return _mm512_castsi512_pd(_mm512_set1_epi64(static_cast<long long>(kCanonicalNanF64)));
    }
    INA_AVX512 static V canon(V v) {
        return _mm512_mask_mov_pd(v, _mm512_cmp_pd_mask(v, v, _CMP_UNORD_Q), nan());
    }
    INA_AVX512 static V sum(V a, V b) { return canon(_mm512_add_pd(a, b)); }
    INA_AVX512 static V prod(V a, V b) { return canon(_mm512_mul_pd(a, b)); }
    INA_AVX512 static V min(V a, V b) {
        const __mmask8 eq = _mm512_cmp_pd_mask(a, b, _CMP_EQ_OQ);
        const __m512i r = _mm512_mask_or_epi64(_mm512_castpd_si512(_mm512_min_pd(a, b)), eq,
                                               _mm512_castpd_si512(a), _mm512_castpd_si512(b));
        return _mm512_mask_mov_pd(_mm512_castsi512_pd(r), _mm512_cmp_pd_mask(a, b, _CMP_UNORD_Q), nan());
    }
    INA_AVX512 static V max(V a, V b) {
        const __mmask8 eq = _mm512_cmp_pd_mask(a, b, _CMP_EQ_OQ);
        const __m512i r = _mm512_mask_and_epi64(_mm512_castpd_si512(_mm512_max_pd(a, b)), eq,
                                                _mm512_castpd_si512(a), _mm512_castpd_si512(b));
        return _mm512_mask_mov_pd(_mm512_castsi512_pd(r), _mm512_cmp_pd_mask(a, b, _CMP_UNORD_Q), nan());
    }
};

// 16-bit wire elements, fp32 accumulator: 16 lanes = 32 wire bytes; masked tails need AVX512BW.
struct Half : F32 {
    static constexpr size_t kWire = 2;
    INA_AVX512 static __m256i load16(const unsigned char* p) {
        return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    }
    INA_AVX512 static __m256i load16(const unsigned char* p, Mask k) {
        return _mm512_castsi512_si256(_mm512_maskz_loadu_epi16(static_cast<__mmask32>(k), p));
    }
    INA_AVX512 static void store16(unsigned char* p, __m256i h) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), h);
    }
    INA_AVX512 static void store16(unsigned char* p, __m256i h, Mask k) {
        _mm512_mask_storeu_epi16(p, static_cast<__mmask32>(k), _mm512_castsi256_si512(h));
    }
};

struct F16 : Half {
    INA_AVX512 static V widen(__m256i h) { return _mm512_cvtph_ps(h); }
    INA_AVX512 static __m256i narrow(V v) { return _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT); }
    INA_AVX512 static V load_in(const unsigned char* p) { return widen(load16(p)); }
    INA_AVX512 static V load_in(const unsigned char* p, Mask k) { return widen(load16(p, k)); }
    INA_AVX512 static void store_out(unsigned char* p, V v) { store16(p, narrow(v)); }
    INA_AVX512 static void store_out(unsigned char* p, V v, Mask k) { store16(p, narrow(v), k); }
};

struct BF16 : Half {
    INA_AVX512 static V widen(__m256i h) {
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    // Integer round to nearest even on the low 16 bits; NaN -> top bits with the quiet bit set.
    INA_AVX512 static __m256i narrow(V v) {
        const __m512i u = _mm512_castps_si512(v);
        const __m512i hi = _mm512_srli_epi32(u, 16);
        const __m512i lsb = _mm512_and_si512(hi, _mm512_set1_epi32(1));
        const __m512i rounded =
            _mm512_srli_epi32(_mm512_add_epi32(_mm512_add_epi32(u, _mm512_set1_epi32(0x7FFF)), lsb), 16);
        const __m512i quiet = _mm512_or_si512(hi, _mm512_set1_epi32(0x0040));
        const __m512i r = _mm512_mask_mov_epi32(rounded, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), quiet);
        return _mm512_cvtepi32_epi16(r);  // VPMOVDW: every lane <= 0xFFFF, so no truncation
    }
    INA_AVX512 static V load_in(const unsigned char* p) { return widen(load16(p)); }
    INA_AVX512 static V load_in(const unsigned char* p, Mask k) { return widen(load16(p, k)); }
    INA_AVX512 static void store_out(unsigned char* p, V v) { store16(p, narrow(v)); }
    INA_AVX512 static void store_out(unsigned char* p, V v, Mask k) { store16(p, narrow(v), k); }
};

struct I32 {
    using Acc = int32_t;
    using V = __m512i;
    using Mask = __mmask16;
    static constexpr size_t kLanes = 16;
    static constexpr size_t kWire = 4;

    INA_AVX512 static V load_acc(const Acc* p) { return _mm512_loadu_si512(p); }
    INA_AVX512 static V load_acc(const Acc* p, Mask k) { return _mm512_maskz_loadu_epi32(k, p); }
    INA_AVX512 static void store_acc(Acc* p, V v) { _mm512_storeu_si512(p, v); }
    INA_AVX512 static void store_acc(Acc* p, V v, Mask k) { _mm512_mask_storeu_epi32(p, k, v); }
    INA_AVX512 static V load_in(const unsigned char* p) { return _mm512_loadu_si512(p); }
    INA_AVX512 static V load_in(const unsigned char* p, Mask k) { return _mm512_maskz_loadu_epi32(k, p); }
    INA_AVX512 static void store_out(unsigned char* p, V v) { _mm512_storeu_si512(p, v); }
    INA_AVX512 static void store_out(unsigned char* p, V v, Mask k) { _mm512_mask_storeu_epi32(p, k, v); }

    INA_AVX512 static V canon(V v) { return v; }
    INA_AVX512 static V sum(V a, V b) { return _mm512_add_epi32(a, b); }     // wraps
    INA_AVX512 static V prod(V a, V b) { return _mm512_mullo_epi32(a, b); }  // low 32 bits: wraps
    INA_AVX512 static V min(V a, V b) { return _mm512_min_epi32(a, b); }
    INA_AVX512 static V max(V a, V b) { return _mm512_max_epi32(a, b); }
};

struct I64 {
    using Acc = int64_t;
    using V = __m512i;
    using Mask = __mmask8;
    static constexpr size_t kLanes = 8;
    static constexpr size_t kWire = 8;

    INA_AVX512 static V load_acc(const Acc* p) { return _mm512_loadu_si512(p); }
    INA_AVX512 static V load_acc(const Acc* p, Mask k) { return _mm512_maskz_loadu_epi64(k, p); }
    INA_AVX512 static void store_acc(Acc* p, V v) { _mm512_storeu_si512(p, v); }
    INA_AVX512 static void store_acc(Acc* p, V v, Mask k) { _mm512_mask_storeu_epi64(p, k, v); }
    INA_AVX512 static V load_in(const unsigned char* p) { return _mm512_loadu_si512(p); }
    INA_AVX512 static V load_in(const unsigned char* p, Mask k) { return _mm512_maskz_loadu_epi64(k, p); }
    INA_AVX512 static void store_out(unsigned char* p, V v) { _mm512_storeu_si512(p, v); }
    INA_AVX512 static void store_out(unsigned char* p, V v, Mask k) { _mm512_mask_storeu_epi64(p, k, v); }

    INA_AVX512 static V canon(V v) { return v; }
    INA_AVX512 static V sum(V a, V b) { return _mm512_add_epi64(a, b); }
    // VPMULLQ needs AVX512DQ; this AVX512F sequence gives the same low 64 bits.
    INA_AVX512 static V prod(V a, V b) { return _mm512_mullox_epi64(a, b); }
    INA_AVX512 static V min(V a, V b) { return _mm512_min_epi64(a, b); }
    INA_AVX512 static V max(V a, V b) { return _mm512_max_epi64(a, b); }
};

template <class T, Op op>
INA_AVX512 typename T::V apply(typename T::V a, typename T::V b) {
    if constexpr (op == Op::sum) return T::sum(a, b);
    if constexpr (op == Op::prod) return T::prod(a, b);
    if constexpr (op == Op::min) return T::min(a, b);
    if constexpr (op == Op::max) return T::max(a, b);
}

template <class T>
INA_AVX512 typename T::Mask tail_mask(size_t r) {  // r < kLanes <= 16
    return static_cast<typename T::Mask>((1u << r) - 1u);
}

template <class T>
INA_AVX512 void load(void* acc_v, const void* in_v, size_t n) {
    auto* acc = static_cast<typename T::Acc*>(acc_v);
    const auto* in = static_cast<const unsigned char*>(in_v);
    size_t i = 0;
    for (; i + T::kLanes <= n; i += T::kLanes) {
        T::store_acc(acc + i, T::canon(T::load_in(in + i * T::kWire)));
    }
    if (i < n) {
        const auto k = tail_mask<T>(n - i);
        T::store_acc(acc + i, T::canon(T::load_in(in + i * T::kWire, k)), k);
    }
}

template <class T, Op op>
INA_AVX512 void accumulate(void* acc_v, const void* in_v, size_t n) {
    auto* acc = static_cast<typename T::Acc*>(acc_v);
    const auto* in = static_cast<const unsigned char*>(in_v);
    size_t i = 0;
    for (; i + T::kLanes <= n; i += T::kLanes) {
        T::store_acc(acc + i, apply<T, op>(T::load_acc(acc + i), T::load_in(in + i * T::kWire)));
    }
    if (i < n) {
        const auto k = tail_mask<T>(n - i);
        T::store_acc(acc + i, apply<T, op>(T::load_acc(acc + i, k), T::load_in(in + i * T::kWire, k)), k);
    }
}

template <class T>
INA_AVX512 void store(void* out_v, const void* acc_v, size_t n) {
    const auto* acc = static_cast<const typename T::Acc*>(acc_v);
    auto* out = static_cast<unsigned char*>(out_v);
    size_t i = 0;
    for (; i + T::kLanes <= n; i += T::kLanes) T::store_out(out + i * T::kWire, T::load_acc(acc + i));
    if (i < n) {
        const auto k = tail_mask<T>(n - i);
        T::store_out(out + i * T::kWire, T::load_acc(acc + i, k), k);
    }
}

// Adds the 32-bit words of the kBytes (32 or 64) bytes at p to the eight 64-bit lanes of sum
// (2^32 = 1 mod 0xffff: the lanes stay congruent to the one's-complement sum of the words).
template <size_t kBytes>
INA_AVX512 __m512i add_words32(__m512i sum, const unsigned char* p) {
    static_assert(kBytes == 32 || kBytes == 64);
    if constexpr (kBytes == 64) {
        const __m512i v = _mm512_loadu_si512(p);
        sum = _mm512_add_epi64(sum, _mm512_and_si512(v, _mm512_set1_epi64(0xffffffff)));
        return _mm512_add_epi64(sum, _mm512_srli_epi64(v, 32));
    } else {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
        return _mm512_add_epi64(sum, _mm512_cvtepu32_epi64(v));
    }
}

INA_AVX512 inline __m512i as_bits(__m512 v) { return _mm512_castps_si512(v); }
INA_AVX512 inline __m512i as_bits(__m512d v) { return _mm512_castpd_si512(v); }
INA_AVX512 inline __m512i as_bits(__m512i v) { return v; }

// store<T>, summing each vector's bytes as it is stored. Where the wire element is the
// accumulator's own (32- and 64-bit types) the sum is taken from the register; the narrowed
// 16-bit types are read back right after the store (forwarded from it). The low and high
// 32-bit halves of every 64-bit lane add into two sums, two independent dependency chains.
template <class T>
INA_AVX512 uint32_t store_sum(void* out_v, const void* acc_v, size_t n) {
    const auto* acc = static_cast<const typename T::Acc*>(acc_v);
    auto* out = static_cast<unsigned char*>(out_v);
    const __m512i low_half = _mm512_set1_epi64(0xffffffff);
    __m512i low = _mm512_setzero_si512();
    __m512i high = _mm512_setzero_si512();
    size_t i = 0;
    for (; i + T::kLanes <= n; i += T::kLanes) {
        const auto v = T::load_acc(acc + i);
        T::store_out(out + i * T::kWire, v);
        if constexpr (sizeof(typename T::Acc) == T::kWire) {
            const __m512i w = as_bits(v);
            low = _mm512_add_epi64(low, _mm512_and_si512(w, low_half));
            high = _mm512_add_epi64(high, _mm512_srli_epi64(w, 32));
        } else {
            low = add_words32<T::kLanes * T::kWire>(low, out + i * T::kWire);
        }
    }
    alignas(64) uint64_t part[8];  // not _mm512_reduce_add_epi64: GCC 12 warns inside it
    _mm512_store_si512(part, _mm512_add_epi64(low, high));
    uint64_t sum = 0;
    for (const uint64_t p : part) sum += p;
    if (i < n) {
        const auto k = tail_mask<T>(n - i);
        T::store_out(out + i * T::kWire, T::load_acc(acc + i, k), k);
        sum = add_words16(sum, out + i * T::kWire, (n - i) * T::kWire);
    }
    return fold_words16(sum);
}

}  // namespace

INA_REDUCE_KERNEL_TABLE(avx512_kernels, Isa::avx512, &avx2_sum_bytes);

}  // namespace ina::reduce::detail

#endif  // __x86_64__
