// SPDX-License-Identifier: Apache-2.0
// Exact fixed-point accumulation for reproducible float sums (an INA job's `deterministic` mode).
//
// A float contribution x is quantized ONCE, by the first switch that adds it, to the integer
//     q(x) = round_half_even(x * 2^F)      (F = the job's fraction_bits)
// saturated to +-kFixedMax. Integer addition is associative and commutative and, with the bound
// below, never overflows, so the sum S of the q's is the same whatever the arrival order, the
// lcore or the tree shape. Partial sums travel between switches as int64 elements; the root
// converts once:  result = RN_T(S * 2^-F)  in the job's float type T.
//
// Bounds: every quantized element satisfies |q| <= kFixedMax = 2^51 - 1 and a job has at most
// 4096 contributors (one BIER set of BSL 4096), so |S| <= 4096 * (2^51 - 1) < 2^63: no sum of a
// job's contributions can overflow int64, and kFixedNan (INT64_MIN) is never a sum.
//
// Special values, all counted per call in FixedStats (never silent):
//   - |x * 2^F| > kFixedMax, and +-Inf: saturate to +-kFixedMax (`saturated`);
//   - a non-zero finite x with q(x) == 0: `underflow` (the value is below the resolution);
//   - NaN: kFixedNan, which is sticky under fixed addition, so the result is the canonical quiet
//     NaN of T (`nan`).
//
// Pure code, scalar loops written so that the compiler can vectorise them; `acc` is an int64
// array (aligned as reduce.h's accumulators), wire arrays may sit anywhere and are little-endian.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

#include "reduce/reduce.h"

namespace ina::reduce {

inline constexpr int kFixedMaxContributorBits = 12;  // 4096 contributors: one set of BSL 4096
inline constexpr int64_t kFixedMax = (int64_t{1} << (63 - kFixedMaxContributorBits)) - 1;
inline constexpr int64_t kFixedNan = std::numeric_limits<int64_t>::min();
// fraction_bits a job may choose: 2^-F must be a normal fp32 (the root's exact rescale).
inline constexpr int kMaxFractionBits = 126;

// The fixed-point element type on the wire: a partial sum is int64 with the job's scale.
inline constexpr ElemType kFixedWireType = ElemType::int64;

// Whether a job of this type and op can be made deterministic: float sums. (Integer ops, and
// float min/max, are order independent already; float prod has no exact integer form.)
constexpr bool fixed_point_applies(ElemType t, Op op) { return is_float(t) && op == Op::sum; }

// The default F: fp16 24 (every finite fp16 value is a multiple of 2^-24 below 2^16, so every
// contribution is exact and only the final rounding remains); fp32, bf16, fp64 32 (range
// +-2^19 = 524288, resolution 2^-32 ~ 2.3e-10).
constexpr int default_fraction_bits(ElemType t) { return t == ElemType::fp16 ? 24 : 32; }

// Elements the quantizers clamped or lost, and NaNs they met. Plain counters (per lcore).
struct FixedStats {
    uint64_t saturated = 0;
    uint64_t underflow = 0;
    uint64_t nan = 0;
};

// acc[i] = q(in[i])                 (first contribution, wire type t)
using QuantizeLoadFn = void (*)(int64_t* acc, const void* in, size_t n, int fraction_bits,
                                FixedStats& stats);
// acc[i] = acc[i] (+) q(in[i])
using QuantizeAddFn = void (*)(int64_t* acc, const void* in, size_t n, int fraction_bits,
                               FixedStats& stats);
// out[i] = RN_t(acc[i] * 2^-F), kFixedNan -> canonical NaN of t
using DequantizeFn = void (*)(void* out, const int64_t* acc, size_t n, int fraction_bits);

struct FixedKernels {
    QuantizeLoadFn quantize_load = nullptr;
    QuantizeAddFn quantize_add = nullptr;
    DequantizeFn dequantize = nullptr;
};

// The kernels for float type t (nullptrs for the integer types), for the process's ISA
// (kernels().isa: fp32 quantizes with AVX-512F there) or a given one (tests; capped to the CPU).
// Every ISA's results are bit-identical.
const FixedKernels& fixed_kernels(ElemType t);
const FixedKernels& fixed_kernels(ElemType t, Isa isa);

// int64 partials on the wire (little-endian): copy in, add (NaN sticky, wrapping, so a corrupt
// partial cannot cause UB), copy out.
void fixed_load(int64_t* acc, const void* in, size_t n);
void fixed_add(int64_t* acc, const void* in, size_t n);
void fixed_store(void* out, const int64_t* acc, size_t n);

// Scalar reference of one element (tests): q(x) for a double x (fp32/fp16/bf16 widen exactly).
int64_t quantize(double x, int fraction_bits, FixedStats& stats);

}  // namespace ina::reduce
