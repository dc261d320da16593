// SPDX-License-Identifier: Apache-2.0
// Deterministic test tensors for ina-worker: every worker can generate every other worker's data
// from (seed, BFR-id) and so compute the AllReduce reference locally.
//   int32 / int64: uniformly random bit patterns (sum and prod wrap: exact in any order).
//   fp32 / fp64 / fp16 / bf16: k / 1024 for k uniform in [-8192, 8192), i.e. [-8, 8), rounded
//   to the element type. Sums of a few of these are exact in fp32, so order rarely matters.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "reduce/reduce.h"
#include "wire/bitstring.h"

namespace ina::worker {

// n elements of type t in wire format (little-endian) for BFR-id `id`.
std::vector<std::byte> generate(reduce::ElemType t, size_t n, uint64_t seed, wire::BfrId id);

// The reference AllReduce of the data of `ids` (in this order) with the scalar kernels.
std::vector<std::byte> reference(reduce::ElemType t, reduce::Op op, size_t n, uint64_t seed,
                                 std::span<const wire::BfrId> ids);

struct Verification {
    bool ok = true;
    size_t mismatches = 0;
    size_t first_bad = 0;  // index of the first mismatch
    double max_abs_err = 0;
    std::string detail;    // first mismatch, readable
};

// Integer types: bit-exact. Min/max: bit-exact. Floating sum/prod: the switch combines the
// contributions in arrival order, so the result may differ from the reference by the rounding
// of a different order: |got - ref| <= 2 (n - 1) eps S + ulp_t(ref), with n = ids.size(), eps
// the unit roundoff of the accumulator (fp32: 2^-24, fp64: 2^-53), S = sum |x_i| (sum) or
// |ref| (prod), and ulp_t the ulp of the wire type at ref (fp16/bf16 round once at the end). Both
// infinite/NaN: equal if the same class and sign.
Verification verify(reduce::ElemType t, reduce::Op op, size_t n, uint64_t seed,
                    std::span<const wire::BfrId> ids, std::span<const std::byte> ref,
                    std::span<const std::byte> got);

}  // namespace ina::worker
