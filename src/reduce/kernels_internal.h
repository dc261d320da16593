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

// Canonical quiet NaNs: every NaN the kernels put in an accumulator is one of these.
inline constexpr uint32_t kCanonicalNanF32 = 0x7FC00000u;
inline constexpr uint64_t kCanonicalNanF64 = 0x7FF8000000000000ull;

}  // namespace ina::reduce::detail
