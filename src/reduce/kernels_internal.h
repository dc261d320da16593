// SPDX-License-Identifier: Apache-2.0
// The per-ISA kernel tables (internal to the reduce library). Each is constant-initialised, so
// there is no static initialisation order to worry about.
#pragma once

#include <cstdint>
#include <cstring>

#include "reduce/reduce.h"

namespace ina::reduce::detail {

extern const Kernels scalar_kernels;
#if defined(__x86_64__)
extern const Kernels avx2_kernels;    // AVX2 + F16C
extern const Kernels avx512_kernels;  // AVX512F + AVX512BW (+ AVX2, F16C)
#endif

// Each ISA's kernel file defines, in its anonymous namespace, function templates load<T>,
// accumulate<T, Op>, store<T> and store_sum<T> over its element types I32, F32, F16, BF16, I64, F64, then names
// its table with this macro: one list, so the order of ElemType and Op cannot drift between ISAs
// (the templates are file-local, so a function template here could not name them).
#if defined(__x86_64__)
// The AVX2 byte sum (kernels_avx2.cc), also the AVX-512 table's: summing is load bound, wider
// vectors would not read faster.
uint32_t avx2_sum_bytes(const void* p, size_t len);
#endif
uint32_t scalar_sum_bytes(const void* p, size_t len);

#define INA_REDUCE_KERNEL_TABLE(table, isa_value, sum_bytes_fn)                                  \
    namespace {                                                                                  \
    template <class T>                                                                           \
    constexpr TypeKernels make_type_kernels() {                                                  \
        return TypeKernels{&load<T>,                                                             \
                           {&accumulate<T, Op::sum>, &accumulate<T, Op::prod>,                   \
                            &accumulate<T, Op::min>, &accumulate<T, Op::max>},                   \
                           &store<T>, &store_sum<T>};                                            \
    }                                                                                            \
    }                                                                                            \
    /* Indexed by ElemType: int32, fp32, fp16, bf16, int64, fp64. */                             \
    constinit const Kernels table {                                                              \
        isa_value, {                                                                             \
            make_type_kernels<I32>(), make_type_kernels<F32>(), make_type_kernels<F16>(),       \
                make_type_kernels<BF16>(), make_type_kernels<I64>(), make_type_kernels<F64>()    \
        }, sum_bytes_fn                                                                          \
    }

// The one's-complement sum (RFC 1071) of len bytes at p, as 16-bit words in memory order, plus
// `sum`, unfolded: a value congruent to it modulo 0xffff (2^16 = 1 mod 0xffff), zero only when
// every word is. For the tails of store_sum (< one vector) and the scalar reference.
inline uint64_t add_words16(uint64_t sum, const unsigned char* p, size_t len) {
    for (; len >= 2; p += 2, len -= 2) {
        uint16_t w;
        std::memcpy(&w, p, 2);
        sum += w;
    }
    if (len != 0) {
        uint16_t last = 0;
        std::memcpy(&last, p, 1);
        sum += last;
    }
    return sum;
}

// Folds such a sum to 16 bits (end-around carries): the value RFC 1071's sum has.
inline uint32_t fold_words16(uint64_t sum) {
    sum = (sum & 0xffffffff) + (sum >> 32);
    sum = (sum & 0xffffffff) + (sum >> 32);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    sum = (sum & 0xffff) + (sum >> 16);
    return static_cast<uint32_t>(sum);
}

// Canonical quiet NaNs: every NaN the kernels put in an accumulator is one of these.
inline constexpr uint32_t kCanonicalNanF32 = 0x7FC00000u;
inline constexpr uint64_t kCanonicalNanF64 = 0x7FF8000000000000ull;

}  // namespace ina::reduce::detail
