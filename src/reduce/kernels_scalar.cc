// SPDX-License-Identifier: Apache-2.0
// Scalar reference kernels: one element at a time, written to be obviously correct. The SIMD
// kernels must match them bit for bit. Wire elements are little-endian: read with memcpy on a
// little-endian host, assembled byte by byte otherwise, so this file is correct on any host.
#include <bit>
#include <cmath>
#include <cstring>

#include "reduce/convert.h"
#include "reduce/kernels_internal.h"

namespace ina::reduce::detail {
namespace {

template <class U>
U read_le(const unsigned char* p) {
    U v = 0;
    if constexpr (std::endian::native == std::endian::little) {
        std::memcpy(&v, p, sizeof v);
    } else {
        for (size_t b = 0; b < sizeof(U); ++b) v |= static_cast<U>(static_cast<U>(p[b]) << (8 * b));
    }
    return v;
}

template <class U>
void write_le(unsigned char* p, U v) {
    if constexpr (std::endian::native == std::endian::little) {
        std::memcpy(p, &v, sizeof v);
    } else {
        for (size_t b = 0; b < sizeof(U); ++b) p[b] = static_cast<unsigned char>(v >> (8 * b));
    }
}

template <class F>
F canonical_nan() {
    if constexpr (sizeof(F) == 4) return std::bit_cast<F>(kCanonicalNanF32);
    else return std::bit_cast<F>(kCanonicalNanF64);
}
template <class F>
F canonical(F x) { return std::isnan(x) ? canonical_nan<F>() : x; }

// IEEE 754-2019 minimum/maximum with canonical NaN. For equal operands (which includes -0 vs +0)
// OR-ing the bits gives -0 if either is -0 (min); AND-ing gives +0 if either is +0 (max).
template <class F, class U>
F minimum(F a, F b) {
    if (std::isnan(a) || std::isnan(b)) return canonical_nan<F>();
    if (a < b) return a;
    if (b < a) return b;
    return std::bit_cast<F>(static_cast<U>(std::bit_cast<U>(a) | std::bit_cast<U>(b)));
}
template <class F, class U>
F maximum(F a, F b) {
    if (std::isnan(a) || std::isnan(b)) return canonical_nan<F>();
    if (a > b) return a;
    if (b > a) return b;
    return std::bit_cast<F>(static_cast<U>(std::bit_cast<U>(a) & std::bit_cast<U>(b)));
}

// Integer elements: wrapping sum/prod through the unsigned type, signed min/max.
template <class S, class U>
struct IntType {
    using Acc = S;
    static constexpr size_t kWire = sizeof(S);
    static Acc decode(const unsigned char* p) { return static_cast<S>(read_le<U>(p)); }
    static Acc widen(Acc v) { return v; }
    static void encode(unsigned char* p, Acc v) { write_le<U>(p, static_cast<U>(v)); }
    static Acc sum(Acc a, Acc b) { return static_cast<S>(static_cast<U>(a) + static_cast<U>(b)); }
    static Acc prod(Acc a, Acc b) { return static_cast<S>(static_cast<U>(a) * static_cast<U>(b)); }
    static Acc min(Acc a, Acc b) { return b < a ? b : a; }
    static Acc max(Acc a, Acc b) { return a < b ? b : a; }
};

// Floating point elements accumulated in F (bits U); Wire converts wire bits <-> F.
template <class F, class U, class Wire>
struct FloatType {
    using Acc = F;
    static constexpr size_t kWire = Wire::kSize;
    static Acc decode(const unsigned char* p) { return Wire::to_acc(read_le<typename Wire::Bits>(p)); }
    static Acc widen(Acc v) { return canonical(v); }
    static void encode(unsigned char* p, Acc v) { write_le<typename Wire::Bits>(p, Wire::from_acc(v)); }
    static Acc sum(Acc a, Acc b) { return canonical(a + b); }
    static Acc prod(Acc a, Acc b) { return canonical(a * b); }
    static Acc min(Acc a, Acc b) { return minimum<F, U>(a, b); }
    static Acc max(Acc a, Acc b) { return maximum<F, U>(a, b); }
};

struct WireF32 {
    using Bits = uint32_t;
    static constexpr size_t kSize = 4;
    static float to_acc(Bits b) { return std::bit_cast<float>(b); }
    static Bits from_acc(float v) { return std::bit_cast<Bits>(v); }
};
struct WireF64 {
    using Bits = uint64_t;
    static constexpr size_t kSize = 8;
    static double to_acc(Bits b) { return std::bit_cast<double>(b); }
    static Bits from_acc(double v) { return std::bit_cast<Bits>(v); }
};
struct WireF16 {
    using Bits = uint16_t;
    static constexpr size_t kSize = 2;
    static float to_acc(Bits b) { return fp16_to_fp32(b); }
    static Bits from_acc(float v) { return fp32_to_fp16(v); }
};
struct WireBF16 {
    using Bits = uint16_t;
    static constexpr size_t kSize = 2;
    static float to_acc(Bits b) { return bf16_to_fp32(b); }
    static Bits from_acc(float v) { return fp32_to_bf16(v); }
};

using I32 = IntType<int32_t, uint32_t>;
using I64 = IntType<int64_t, uint64_t>;
using F32 = FloatType<float, uint32_t, WireF32>;
using F64 = FloatType<double, uint64_t, WireF64>;
using F16 = FloatType<float, uint32_t, WireF16>;
using BF16 = FloatType<float, uint32_t, WireBF16>;

template <class T>
void load(void* acc_v, const void* in_v, size_t n) {
    auto* acc = static_cast<typename T::Acc*>(acc_v);
    const auto* in = static_cast<const unsigned char*>(in_v);
    for (size_t i = 0; i < n; ++i) acc[i] = T::widen(T::decode(in + i * T::kWire));
}

template <class T, Op op>
void accumulate(void* acc_v, const void* in_v, size_t n) {
    auto* acc = static_cast<typename T::Acc*>(acc_v);
    const auto* in = static_cast<const unsigned char*>(in_v);
    for (size_t i = 0; i < n; ++i) {
        const typename T::Acc x = T::decode(in + i * T::kWire);
        if constexpr (op == Op::sum) acc[i] = T::sum(acc[i], x);
        if constexpr (op == Op::prod) acc[i] = T::prod(acc[i], x);
        if constexpr (op == Op::min) acc[i] = T::min(acc[i], x);
        if constexpr (op == Op::max) acc[i] = T::max(acc[i], x);
    }
}

template <class T>
void store(void* out_v, const void* acc_v, size_t n) {
    const auto* acc = static_cast<const typename T::Acc*>(acc_v);
    auto* out = static_cast<unsigned char*>(out_v);
    for (size_t i = 0; i < n; ++i) T::encode(out + i * T::kWire, acc[i]);
}

// The reference: store, then sum the bytes written.
template <class T>
uint32_t store_sum(void* out_v, const void* acc_v, size_t n) {
    store<T>(out_v, acc_v, n);
    return fold_words16(add_words16(0, static_cast<const unsigned char*>(out_v), n * T::kWire));
}

}  // namespace

// The reference: 16-bit words in memory order, folded once.
uint32_t scalar_sum_bytes(const void* p, size_t len) {
    return fold_words16(add_words16(0, static_cast<const unsigned char*>(p), len));
}

INA_REDUCE_KERNEL_TABLE(scalar_kernels, Isa::scalar, &scalar_sum_bytes);

}  // namespace ina::reduce::detail
