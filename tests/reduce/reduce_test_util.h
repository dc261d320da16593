// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the reduce tests: aligned buffers, deterministic random wire data, the ISAs
// this CPU runs, and readable byte-level comparisons.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "reduce/reduce.h"

namespace ina::reduce {
// Readable test parameter names in gtest output.
inline void PrintTo(Isa v, std::ostream* os) { *os << to_string(v); }
inline void PrintTo(ElemType v, std::ostream* os) { *os << to_string(v); }
inline void PrintTo(Op v, std::ostream* os) { *os << to_string(v); }
}  // namespace ina::reduce

namespace ina::reduce::test {

static_assert(std::endian::native == std::endian::little, "tests write wire data natively");

// Every ISA, and the ones this CPU runs.
inline const std::vector<Isa>& all_isas() {
    static const std::vector<Isa> v{Isa::scalar, Isa::avx2, Isa::avx512};
    return v;
}
inline const std::vector<ElemType>& all_types() {
    static const std::vector<ElemType> v{ElemType::int32, ElemType::fp32, ElemType::fp16,
                                         ElemType::bf16,  ElemType::int64, ElemType::fp64};
    return v;
}
inline const std::vector<Op>& all_ops() {
    static const std::vector<Op> v{Op::sum, Op::prod, Op::min, Op::max};
    return v;
}

// A zero-filled, kAccAlign-aligned byte buffer.
class AlignedBuf {
public:
    explicit AlignedBuf(size_t bytes)
        : size_(bytes), p_(static_cast<unsigned char*>(std::aligned_alloc(kAccAlign, round(bytes)))) {
        std::memset(p_.get(), 0, round(bytes));
    }
    unsigned char* data() { return p_.get(); }
    const unsigned char* data() const { return p_.get(); }
    size_t size() const { return size_; }

private:
    static size_t round(size_t b) { return (b + kAccAlign - 1) / kAccAlign * kAccAlign + kAccAlign; }
    struct Free {
        void operator()(unsigned char* p) const { std::free(p); }
    };
    size_t size_;
    std::unique_ptr<unsigned char, Free> p_;
};

// Bit layout of a binary floating point format.
struct FloatFormat {
    int width;     // total bits
    int exp_bits;  // exponent bits
    int mant_bits; // fraction bits
};
inline FloatFormat format_of(ElemType t) {
    switch (t) {
    case ElemType::fp16: return {16, 5, 10};
    case ElemType::bf16: return {16, 8, 7};
    case ElemType::fp32: return {32, 8, 23};
    case ElemType::fp64: return {64, 11, 52};
    default: return {0, 0, 0};
    }
}

inline uint64_t get_elem(const unsigned char* p, size_t size) {
    uint64_t v = 0;
    std::memcpy(&v, p, size);
    return v;
}
inline void put_elem(unsigned char* p, size_t size, uint64_t v) { std::memcpy(p, &v, size); }

// Random wire elements of type t, deterministic for a given rng state. With a partner array (the
// other operand) some elements copy the partner or flip its sign, so min/max see ties and -0/+0.
inline void fill_random(ElemType t, unsigned char* out, size_t n, std::mt19937_64& rng,
                        const unsigned char* partner = nullptr) {
    const size_t es = elem_size(t);
    const uint64_t width_mask = es == 8 ? ~0ull : (1ull << (8 * es)) - 1;
    for (size_t i = 0; i < n; ++i) {
        const uint64_t r = rng();
        const uint64_t bits = rng();
        const unsigned pick = static_cast<unsigned>(r % 100);
        uint64_t v = 0;
        if (partner != nullptr && pick < 8) {
            v = get_elem(partner + i * es, es);  // equal operands
            if (pick < 3 && is_float(t)) v ^= 1ull << (8 * es - 1);  // same magnitude, other sign
            put_elem(out + i * es, es, v);
            continue;
        }
        if (!is_float(t)) {
            static const int64_t extremes[] = {0, 1, -1, INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN,
                                               0x10000, 0x100000000ll, -0x10000};
            if (pick < 20) {
                v = static_cast<uint64_t>(extremes[(r >> 8) % std::size(extremes)]);
            } else if (pick < 50) {
                v = static_cast<uint64_t>(static_cast<int64_t>((bits >> 40)) - (1ll << 23));  // small
            } else {
                v = bits;
            }
            put_elem(out + i * es, es, v & width_mask);
            continue;
        }
        const FloatFormat f = format_of(t);
        const uint64_t sign = (r >> 32) & 1 ? 1ull << (f.width - 1) : 0;
        const uint64_t mant_mask = (1ull << f.mant_bits) - 1;
        const uint64_t exp_max = (1ull << f.exp_bits) - 1;
        const int64_t bias = static_cast<int64_t>(exp_max >> 1);
        const uint64_t mant = bits & mant_mask;
        if (pick < 50) {  // moderate magnitudes: sums and products that round, rarely overflow
            const int64_t span = std::min<int64_t>(bias - 2, 12);
            const int64_t e = bias - span + static_cast<int64_t>((r >> 40) % static_cast<uint64_t>(2 * span + 1));
            v = sign | (static_cast<uint64_t>(e) << f.mant_bits) | mant;
        } else if (pick < 65) {  // anything at all
            v = bits;
        } else if (pick < 71) {  // +-0
            v = sign;
        } else if (pick < 76) {  // +-Inf
            v = sign | (exp_max << f.mant_bits);
        } else if (pick < 80) {  // quiet NaN, random payload
            v = sign | (exp_max << f.mant_bits) | (1ull << (f.mant_bits - 1)) | (mant >> 1);
        } else if (pick < 84) {  // signalling NaN, random non-zero payload
            v = sign | (exp_max << f.mant_bits) | ((mant >> 1) | 1);
        } else if (pick < 94) {  // subnormal
            v = sign | (mant | 1);
        } else {  // smallest normals and largest finite values
            v = sign | ((pick & 1 ? 1ull : exp_max - 1) << f.mant_bits) | mant;
        }
        put_elem(out + i * es, es, v & width_mask);
    }
}

inline std::string hex(uint64_t v, size_t bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "0x%0*llx", static_cast<int>(2 * bytes),
                  static_cast<unsigned long long>(v));
    return buf;
}

// Compares n elements of es bytes; on a difference, says which element and both values. The extra
// inputs (by element) are printed too, to make a failure reproducible by hand.
inline ::testing::AssertionResult same_elems(const unsigned char* got, const unsigned char* want,
                                             size_t n, size_t es, const std::string& what) {
    for (size_t i = 0; i < n; ++i) {
        if (std::memcmp(got + i * es, want + i * es, es) != 0) {
            return ::testing::AssertionFailure()
                   << what << ": element " << i << " of " << n << " is " << hex(get_elem(got + i * es, es), es)
                   << ", reference " << hex(get_elem(want + i * es, es), es);
        }
    }
    return ::testing::AssertionSuccess();
}

// True if all bytes equal fill.
inline bool all_bytes(const unsigned char* p, size_t n, unsigned char fill) {
    for (size_t i = 0; i < n; ++i) {
        if (p[i] != fill) return false;
    }
    return true;
}

}  // namespace ina::reduce::test
