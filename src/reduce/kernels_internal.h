// SPDX-License-Identifier: Apache-2.0
// The per-ISA kernel tables (internal to the reduce library). Each is constant-initialised, so
// there is no static initialisation order to worry about.
#pragma once

#include "reduce/reduce.h"

namespace ina::reduce::detail {

extern const Kernels scalar_kernels;
#if defined(__x86_64__)
extern const Kernels avx2_kernels;    // AVX2 + F16C
extern const Kernels avx512_kernels;  // AVX512F + AVX512BW (+ AVX2, F16C)
#endif

// Each ISA's kernel file defines, in its anonymous namespace, function templates load<T>,
// accumulate<T, Op> and store<T> over its element types I32, F32, F16, BF16, I64, F64, then names
// its table with this macro: one list, so the order of ElemType and Op cannot drift between ISAs
// (the templates are file-local, so a function template here could not name them).
#define INA_REDUCE_KERNEL_TABLE(table, isa_value)                                                \
    namespace {                                                                                  \
    template <class T>                                                                           \
    constexpr TypeKernels make_type_kernels() {                                                  \
        return TypeKernels{&load<T>,                                                             \
                           {&accumulate<T, Op::sum>, &accumulate<T, Op::prod>,                   \
                            &accumulate<T, Op::min>, &accumulate<T, Op::max>},                   \
                           &store<T>};                                                           \
    }                                                                                            \
    }                                                                                            \
    /* Indexed by ElemType: int32, fp32, fp16, bf16, int64, fp64. */                             \
    constinit const Kernels table {                                                              \
        isa_value, {                                                                             \
            make_type_kernels<I32>(), make_type_kernels<F32>(), make_type_kernels<F16>(),       \
                make_type_kernels<BF16>(), make_type_kernels<I64>(), make_type_kernels<F64>()    \
        }                                                                                        \
    }

// Canonical quiet NaNs: every NaN the kernels put in an accumulator is one of these.
inline constexpr uint32_t kCanonicalNanF32 = 0x7FC00000u;
inline constexpr uint64_t kCanonicalNanF64 = 0x7FF8000000000000ull;

}  // namespace ina::reduce::detail
