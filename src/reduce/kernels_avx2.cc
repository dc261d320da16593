// SPDX-License-Identifier: Apache-2.0
// AVX2 (+F16C) kernels. Every function that uses these instructions carries
// __attribute__((target(...))), so this file builds with the project's baseline flags and is only
// entered after __builtin_cpu_supports said yes. FMA is deliberately not enabled: nothing here
// needs it, and it could let the compiler contract a*b+c and break bit-exactness.
// Tails (n % lanes) go through a small bounce buffer with the same vector code, so they follow
// exactly the same arithmetic; acc/in/out are never touched past element n.
#if defined(__x86_64__)

#include <immintrin.h>

#include <cstring>

#include "reduce/kernels_internal.h"

#define INA_AVX2 __attribute__((target("avx2,f16c")))

namespace ina::reduce::detail {
namespace {

// Traits: the accumulator vector V of one element type, how wire bytes become a V (load_in) and
// back (store_out), and the four operations with the semantics of the scalar reference.
struct F32 {
    using Acc = float;
    using V = __m256;
    static constexpr size_t kLanes = 8;
    static constexpr size_t kWire = 4;
    static constexpr bool kPairStore = false;  // store_out2() narrows two vectors at once

    INA_AVX2 static V load_acc(const Acc* p) { return _mm256_loadu_ps(p); }
    INA_AVX2 static void store_acc(Acc* p, V v) { _mm256_storeu_ps(p, v); }
    INA_AVX2 static V load_in(const unsigned char* p) {
        return _mm256_loadu_ps(reinterpret_cast<const float*>(p));
    }
    INA_AVX2 static void store_out(unsigned char* p, V v) {
        _mm256_storeu_ps(reinterpret_cast<float*>(p), v);
    }

    INA_AVX2 static V nan() { return _mm256_castsi256_ps(_mm256_set1_epi32(0x7FC00000)); }
    INA_AVX2 static V canon(V v) { return _mm256_blendv_ps(v, nan(), _mm256_cmp_ps(v, v, _CMP_UNORD_Q)); }
    INA_AVX2 static V sum(V a, V b) { return canon(_mm256_add_ps(a, b)); }
    // sum() of four vectors, canonicalising only when one of them holds a NaN (one unordered
    // compare covers two vectors): exactly sum() per vector, since canon() is the identity on
    // every lane that is not NaN.
    static constexpr bool kSum4 = true;
    INA_AVX2 static void sum4(V& a0, V b0, V& a1, V b1, V& a2, V b2, V& a3, V b3) {
        a0 = _mm256_add_ps(a0, b0);
        a1 = _mm256_add_ps(a1, b1);
        a2 = _mm256_add_ps(a2, b2);
        a3 = _mm256_add_ps(a3, b3);
        const V nan = _mm256_or_ps(_mm256_cmp_ps(a0, a1, _CMP_UNORD_Q),
                                   _mm256_cmp_ps(a2, a3, _CMP_UNORD_Q));
        if (!_mm256_testz_ps(nan, nan)) [[unlikely]] {
            a0 = canon(a0);
            a1 = canon(a1);
            a2 = canon(a2);
            a3 = canon(a3);
        }
    }
    INA_AVX2 static V prod(V a, V b) { return canon(_mm256_mul_ps(a, b)); }
    // minps returns b when the operands compare equal (also -0 vs +0): OR in a's bits then.
    INA_AVX2 static V min(V a, V b) {
        const V eq = _mm256_cmp_ps(a, b, _CMP_EQ_OQ);
        const V r = _mm256_or_ps(_mm256_min_ps(a, b), _mm256_and_ps(eq, a));
        return _mm256_blendv_ps(r, nan(), _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
    }
    INA_AVX2 static V max(V a, V b) {
        const V eq = _mm256_cmp_ps(a, b, _CMP_EQ_OQ);
        const V r = _mm256_blendv_ps(_mm256_max_ps(a, b), _mm256_and_ps(a, b), eq);
        return _mm256_blendv_ps(r, nan(), _mm256_cmp_ps(a, b, _CMP_UNORD_Q));
    }
};

struct F64 {
    using Acc = double;
    static constexpr bool kSum4 = false;  // (F32 has sum4)
    using V = __m256d;
    static constexpr size_t kLanes = 4;
    static constexpr size_t kWire = 8;
    static constexpr bool kPairStore = false;

    INA_AVX2 static V load_acc(const Acc* p) { return _mm256_loadu_pd(p); }
    INA_AVX2 static void store_acc(Acc* p, V v) { _mm256_storeu_pd(p, v); }
    INA_AVX2 static V load_in(const unsigned char* p) {
        return _mm256_loadu_pd(reinterpret_cast<const double*>(p));
    }
    INA_AVX2 static void store_out(unsigned char* p, V v) {
        _mm256_storeu_pd(reinterpret_cast<double*>(p), v);
    }

    INA_AVX2 static V nan() {
        return _mm256_castsi256_pd(_mm256_set1_epi64x(static_cast<long long>(kCanonicalNanF64)));
    }
    INA_AVX2 static V canon(V v) { return _mm256_blendv_pd(v, nan(), _mm256_cmp_pd(v, v, _CMP_UNORD_Q)); }
    INA_AVX2 static V sum(V a, V b) { return canon(_mm256_add_pd(a, b)); }
    INA_AVX2 static V prod(V a, V b) { return canon(_mm256_mul_pd(a, b)); }
    INA_AVX2 static V min(V a, V b) {
        const V eq = _mm256_cmp_pd(a, b, _CMP_EQ_OQ);
        const V r = _mm256_or_pd(_mm256_min_pd(a, b), _mm256_and_pd(eq, a));
        return _mm256_blendv_pd(r, nan(), _mm256_cmp_pd(a, b, _CMP_UNORD_Q));
    }
    INA_AVX2 static V max(V a, V b) {
        const V eq = _mm256_cmp_pd(a, b, _CMP_EQ_OQ);
        const V r = _mm256_blendv_pd(_mm256_max_pd(a, b), _mm256_and_pd(a, b), eq);
        return _mm256_blendv_pd(r, nan(), _mm256_cmp_pd(a, b, _CMP_UNORD_Q));
    }
};

// fp16 wire, fp32 accumulator: F16C conversions (VCVTPS2PH with round to nearest even).
struct F16 : F32 {
    static constexpr size_t kWire = 2;
    INA_AVX2 static V load_in(const unsigned char* p) {
        return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    }
    INA_AVX2 static void store_out(unsigned char* p, V v) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    }
};

// bf16 wire, fp32 accumulator: widen by a 16-bit shift; narrow with integer round to nearest even.
struct BF16 : F32 {
    static constexpr size_t kWire = 2;
    INA_AVX2 static V load_in(const unsigned char* p) {
        const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
        return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
    }
    // Rounded bf16 bits in the low half of each 32-bit lane (every lane <= 0xFFFF).
    INA_AVX2 static __m256i narrow(V v) {
        const __m256i u = _mm256_castps_si256(v);
        const __m256i hi = _mm256_srli_epi32(u, 16);
        const __m256i lsb = _mm256_and_si256(hi, _mm256_set1_epi32(1));
        const __m256i rounded =
            _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb), 16);
        const __m256i quiet = _mm256_or_si256(hi, _mm256_set1_epi32(0x0040));
        const __m256i isnan = _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        return _mm256_blendv_epi8(rounded, quiet, isnan);
    }
    INA_AVX2 static void store_out(unsigned char* p, V v) {
        const __m256i r = narrow(v);
        _mm_storeu_si128(reinterpret_cast<__m128i*>(p),
                         _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
    }
    // Two vectors at once: one in-lane pack, one cross-lane permute, one 32-byte store.
    static constexpr bool kPairStore = true;
    INA_AVX2 static void store_out2(unsigned char* p, V v0, V v1) {
        const __m256i packed = _mm256_packus_epi32(narrow(v0), narrow(v1));  // 0..3 8..11 | 4..7 12..15
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), _mm256_permute4x64_epi64(packed, 0xD8));
    }
};

struct I32 {
    using Acc = int32_t;
    static constexpr bool kSum4 = false;  // (F32 has sum4)
    using V = __m256i;
    static constexpr size_t kLanes = 8;
    static constexpr size_t kWire = 4;
    static constexpr bool kPairStore = false;

    INA_AVX2 static V load_acc(const Acc* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
    INA_AVX2 static void store_acc(Acc* p, V v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
    INA_AVX2 static V load_in(const unsigned char* p) {
        return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    }
    INA_AVX2 static void store_out(unsigned char* p, V v) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v);
    }

    INA_AVX2 static V canon(V v) { return v; }
    INA_AVX2 static V sum(V a, V b) { return _mm256_add_epi32(a, b); }     // wraps
    INA_AVX2 static V prod(V a, V b) { return _mm256_mullo_epi32(a, b); }  // low 32 bits: wraps
    INA_AVX2 static V min(V a, V b) { return _mm256_min_epi32(a, b); }
    INA_AVX2 static V max(V a, V b) { return _mm256_max_epi32(a, b); }
};

struct I64 : I32 {
    using Acc = int64_t;
    static constexpr size_t kLanes = 4;
    static constexpr size_t kWire = 8;

    INA_AVX2 static V load_acc(const Acc* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
    INA_AVX2 static void store_acc(Acc* p, V v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }

    INA_AVX2 static V sum(V a, V b) { return _mm256_add_epi64(a, b); }
    // No 64-bit multiply in AVX2: a*b mod 2^64 = alo*blo + ((ahi*blo + alo*bhi) << 32).
    INA_AVX2 static V prod(V a, V b) {
        const V lo = _mm256_mul_epu32(a, b);
        const V cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), b),
                                         _mm256_mul_epu32(a, _mm256_srli_epi64(b, 32)));
        return _mm256_add_epi64(lo, _mm256_slli_epi64(cross, 32));
    }
    INA_AVX2 static V min(V a, V b) { return _mm256_blendv_epi8(a, b, _mm256_cmpgt_epi64(a, b)); }
    INA_AVX2 static V max(V a, V b) { return _mm256_blendv_epi8(b, a, _mm256_cmpgt_epi64(a, b)); }
};

template <class T, Op op>
INA_AVX2 typename T::V apply(typename T::V a, typename T::V b) {
    if constexpr (op == Op::sum) return T::sum(a, b);
    if constexpr (op == Op::prod) return T::prod(a, b);
    if constexpr (op == Op::min) return T::min(a, b);
    if constexpr (op == Op::max) return T::max(a, b);
}

// Runs one(at) for every whole vector of n elements (kLanes each), four a step (at one, the
// loop's own instructions were a third of the work); returns where the tail starts.
template <size_t kLanes, class One>
INA_AVX2 size_t each_vector(size_t n, One&& one) {
    size_t i = 0;
    for (; i + 4 * kLanes <= n; i += 4 * kLanes) {
        one(i);
        one(i + kLanes);
        one(i + 2 * kLanes);
        one(i + 3 * kLanes);
    }
    for (; i + kLanes <= n; i += kLanes) one(i);
    return i;
}

template <class T>
INA_AVX2 void load(void* acc_v, const void* in_v, size_t n) {
    auto* acc = static_cast<typename T::Acc*>(acc_v);
    const auto* in = static_cast<const unsigned char*>(in_v);
    const size_t i = each_vector<T::kLanes>(n, [&](size_t at) INA_AVX2 {
        T::store_acc(acc + at, T::canon(T::load_in(in + at * T::kWire)));
    });
    if (i < n) {
        const size_t r = n - i;
        alignas(32) unsigned char inbuf[T::kLanes * T::kWire] = {};
        alignas(32) typename T::Acc accbuf[T::kLanes] = {};
        std::memcpy(inbuf, in + i * T::kWire, r * T::kWire);
        T::store_acc(accbuf, T::canon(T::load_in(inbuf)));
        std::memcpy(acc + i, accbuf, r * sizeof(typename T::Acc));
    }
}

template <class T, Op op>
INA_AVX2 void accumulate(void* acc_v, const void* in_v, size_t n) {
    auto* acc = static_cast<typename T::Acc*>(acc_v);
    const auto* in = static_cast<const unsigned char*>(in_v);
    size_t i = 0;
    if constexpr (op == Op::sum && T::kSum4) {
        constexpr size_t L = T::kLanes;
        for (; i + 4 * L <= n; i += 4 * L) {
            typename T::V a0 = T::load_acc(acc + i), a1 = T::load_acc(acc + i + L),
                          a2 = T::load_acc(acc + i + 2 * L), a3 = T::load_acc(acc + i + 3 * L);
            T::sum4(a0, T::load_in(in + i * T::kWire), a1, T::load_in(in + (i + L) * T::kWire),
                    a2, T::load_in(in + (i + 2 * L) * T::kWire), a3,
                    T::load_in(in + (i + 3 * L) * T::kWire));
            T::store_acc(acc + i, a0);
            T::store_acc(acc + i + L, a1);
            T::store_acc(acc + i + 2 * L, a2);
            T::store_acc(acc + i + 3 * L, a3);
        }
    }
    i += each_vector<T::kLanes>(n - i, [&](size_t at) INA_AVX2 {
        T::store_acc(acc + i + at,
                     apply<T, op>(T::load_acc(acc + i + at), T::load_in(in + (i + at) * T::kWire)));
    });
    if (i < n) {
        const size_t r = n - i;
        alignas(32) unsigned char inbuf[T::kLanes * T::kWire] = {};
        alignas(32) typename T::Acc accbuf[T::kLanes] = {};
        std::memcpy(inbuf, in + i * T::kWire, r * T::kWire);
        std::memcpy(accbuf, acc + i, r * sizeof(typename T::Acc));
        T::store_acc(accbuf, apply<T, op>(T::load_acc(accbuf), T::load_in(inbuf)));
        std::memcpy(acc + i, accbuf, r * sizeof(typename T::Acc));
    }
}

// The last r (< kLanes) elements of a store, through a bounce buffer with the same vector code:
// `outbuf` holds the r * kWire bytes written to `out` afterwards.
template <class T>
INA_AVX2 void store_tail(unsigned char* out, const typename T::Acc* acc, size_t r,
                         unsigned char* outbuf) {
    alignas(32) typename T::Acc accbuf[T::kLanes] = {};
    std::memcpy(accbuf, acc, r * sizeof(typename T::Acc));
    T::store_out(outbuf, T::load_acc(accbuf));
    std::memcpy(out, outbuf, r * T::kWire);
}

template <class T>
INA_AVX2 void store(void* out_v, const void* acc_v, size_t n) {
    const auto* acc = static_cast<const typename T::Acc*>(acc_v);
    auto* out = static_cast<unsigned char*>(out_v);
    size_t i = 0;
    if constexpr (T::kPairStore) {
        for (; i + 2 * T::kLanes <= n; i += 2 * T::kLanes) {
            T::store_out2(out + i * T::kWire, T::load_acc(acc + i), T::load_acc(acc + i + T::kLanes));
        }
    }
    for (; i + T::kLanes <= n; i += T::kLanes) T::store_out(out + i * T::kWire, T::load_acc(acc + i));
    if (i < n) {
        alignas(32) unsigned char outbuf[T::kLanes * T::kWire];
        store_tail<T>(out + i * T::kWire, acc + i, n - i, outbuf);
    }
}

// Running sums of the 64-bit words of the bytes a store_sum has written: `whole` adds each word
// (wrapping), `high` its upper 32 bits, so the lower halves' sum is whole - (high << 32) (exact
// mod 2^64: it stays far below) and the words' one's-complement sum is congruent to that plus
// high (2^32 = 1 mod 0xffff). Two vector operations per 32 bytes.
struct WordSums {
    __m256i whole;
    __m256i high;
};

// Adds the kBytes (16 or 32) bytes at p (just stored: the load is forwarded) to sums.
template <size_t kBytes>
INA_AVX2 void add_words(WordSums& sums, const unsigned char* p) {
    static_assert(kBytes == 16 || kBytes == 32);
    __m256i v;
    if constexpr (kBytes == 32) {
        v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    } else {
        v = _mm256_cvtepu32_epi64(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    }
    sums.whole = _mm256_add_epi64(sums.whole, v);
    sums.high = _mm256_add_epi64(sums.high, _mm256_srli_epi64(v, 32));
}

// The sums' lanes as one value congruent (mod 0xffff) to the words' one's-complement sum, for
// add_words16 / fold_words16: each lane's lower halves (whole - (high << 32), exact) plus high.
INA_AVX2 inline uint64_t unfolded(const WordSums& sums) {
    alignas(32) uint64_t whole[4];
    alignas(32) uint64_t high[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(whole), sums.whole);
    _mm256_store_si256(reinterpret_cast<__m256i*>(high), sums.high);
    uint64_t sum = 0;
    for (size_t l = 0; l < 4; ++l) sum += (whole[l] - (high[l] << 32)) + high[l];
    return sum;
}

// store<T>, summing each vector's bytes right after storing them: the result's bytes are read
// once, where store and a separate checksum pass read them twice. Four vectors a step (the loop's
// own instructions are a third of the work at one). Lanes: no overflow below 2^30 vectors.
template <class T>
INA_AVX2 uint32_t store_sum(void* out_v, const void* acc_v, size_t n) {
    const auto* acc = static_cast<const typename T::Acc*>(acc_v);
    auto* out = static_cast<unsigned char*>(out_v);
    constexpr size_t kBytes = T::kLanes * T::kWire;
    WordSums sums{_mm256_setzero_si256(), _mm256_setzero_si256()};
    size_t i = 0;
    if constexpr (T::kPairStore) {
        for (; i + 2 * T::kLanes <= n; i += 2 * T::kLanes) {
            T::store_out2(out + i * T::kWire, T::load_acc(acc + i), T::load_acc(acc + i + T::kLanes));
            add_words<2 * kBytes>(sums, out + i * T::kWire);
        }
    }
    i += each_vector<T::kLanes>(n - i, [&](size_t at) INA_AVX2 {
        T::store_out(out + (i + at) * T::kWire, T::load_acc(acc + i + at));
        add_words<kBytes>(sums, out + (i + at) * T::kWire);
    });
    uint64_t sum = unfolded(sums);
    if (i < n) {
        alignas(32) unsigned char outbuf[T::kLanes * T::kWire];
        store_tail<T>(out + i * T::kWire, acc + i, n - i, outbuf);
        sum = add_words16(sum, outbuf, (n - i) * T::kWire);  // i * kWire is even: words pair
    }
    return fold_words16(sum);
}

}  // namespace

// The bytes' one's-complement sum by the store_sum scheme (WordSums): four 32-byte vectors a
// step, each added whole and by its upper halves, then 16 bytes as four 32-bit lanes, then the
// tail (< 16 bytes) word by word. One vector load and three vector operations per 32 bytes, where the add-with-carry chain of
// net::ones_complement_sum takes eight. Lanes cannot overflow below 2^30 vectors.
INA_AVX2 uint32_t avx2_sum_bytes(const void* p_v, size_t len) {
    const auto* p = static_cast<const unsigned char*>(p_v);
    WordSums sums{_mm256_setzero_si256(), _mm256_setzero_si256()};
    size_t i = 0;
    for (; i + 128 <= len; i += 128) {
        add_words<32>(sums, p + i);
        add_words<32>(sums, p + i + 32);
        add_words<32>(sums, p + i + 64);
        add_words<32>(sums, p + i + 96);
    }
    for (; i + 32 <= len; i += 32) add_words<32>(sums, p + i);
    if (i + 16 <= len) {
        add_words<16>(sums, p + i);  // four 32-bit words, each widened to a lane
        i += 16;
    }
    const uint64_t sum = unfolded(sums);
    // i is a multiple of 16 (even): the tail's words pair as the buffer's do.
    return fold_words16(add_words16(sum, p + i, len - i));
}

INA_REDUCE_KERNEL_TABLE(avx2_kernels, Isa::avx2, &avx2_sum_bytes);

}  // namespace ina::reduce::detail

#endif  // __x86_64__
