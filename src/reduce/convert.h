// SPDX-License-Identifier: Apache-2.0
// Scalar conversions between fp32 and the 16-bit float formats, on raw bit patterns. These are the
// reference the SIMD kernels are tested against (fp16 both ways also against F16C hardware).
//   - fp16 -> fp32 and bf16 -> fp32 are exact. A NaN keeps its sign and payload and is made quiet
//     (as F16C's VCVTPH2PS does).
//   - fp32 -> fp16 and fp32 -> bf16 round to nearest, ties to even; overflow gives +-Inf, tiny
//     values become subnormals or +-0 (never flushed). A NaN keeps its sign and the top payload
//     bits and is made quiet (as F16C's VCVTPS2PH does).
// Pure integer code: independent of MXCSR, constexpr.
#pragma once

#include <bit>
#include <cstdint>

namespace ina::reduce {

constexpr float fp16_to_fp32(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1Fu;
    const uint32_t mant = h & 0x3FFu;
    uint32_t bits = 0;
    if (exp == 0x1F) {  // Inf or NaN; NaN made quiet
        bits = sign | 0x7F800000u | (mant << 13) | (mant != 0 ? 0x00400000u : 0u);
    } else if (exp != 0) {  // normal: rebias 15 -> 127
        bits = sign | ((exp + 112u) << 23) | (mant << 13);
    } else if (mant == 0) {  // +-0
        bits = sign;
    } else {  // subnormal: mant * 2^-24 = 1.f * 2^(p - 24), p = index of the top set bit
        const int p = 31 - std::countl_zero(mant);
        bits = sign | (static_cast<uint32_t>(p + 103) << 23) | ((mant << (23 - p)) & 0x7FFFFFu);
    }
    return std::bit_cast<float>(bits);
}

constexpr uint16_t fp32_to_fp16(float f) {
    const uint32_t u = std::bit_cast<uint32_t>(f);
    const uint32_t sign = (u >> 16) & 0x8000u;
    const uint32_t a = u & 0x7FFFFFFFu;
    uint32_t h = 0;
    if (a > 0x7F800000u) {  // NaN: quiet, top 10 payload bits kept
        h = 0x7E00u | ((a >> 13) & 0x3FFu);
    } else if (a >= 0x477FF000u) {  // >= 65520 = 65504 + half an ulp: rounds to Inf (or is Inf)
        h = 0x7C00u;
    } else if (a >= 0x38800000u) {  // >= 2^-14: normal half. Rebias 127 -> 15, round 13 bits.
        h = (a - 0x38000000u) >> 13;
        const uint32_t rem = a & 0x1FFFu;
        if (rem > 0x1000u || (rem == 0x1000u && (h & 1u) != 0)) ++h;  // may carry into exponent
    } else if (a > 0x33000000u) {  // (2^-25, 2^-14): subnormal half, in units of 2^-24
        const uint32_t e = a >> 23;                       // 102..112
        const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;   // value = m * 2^(e - 150)
        const uint32_t shift = 126u - e;                  // 14..24
        h = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1u);
        const uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (h & 1u) != 0)) ++h;  // may reach 0x400 (min normal)
    }  // else <= 2^-25 (the tie rounds to even, 0): +-0
    return static_cast<uint16_t>(sign | h);
}

constexpr float bf16_to_fp32(uint16_t b) {
    uint32_t bits = static_cast<uint32_t>(b) << 16;
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u) bits |= 0x00400000u;  // NaN made quiet
    return std::bit_cast<float>(bits);
}

constexpr uint16_t fp32_to_bf16(float f) {
    const uint32_t u = std::bit_cast<uint32_t>(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) {  // NaN: quiet, top payload bits kept
        return static_cast<uint16_t>((u >> 16) | 0x0040u);
    }
    // Round to nearest even on the low 16 bits; a carry moves into the exponent, and from the
    // largest finite binade into Inf (0x7F80), which is IEEE overflow under round to nearest.
    const uint32_t lsb = (u >> 16) & 1u;
    return static_cast<uint16_t>((u + 0x7FFFu + lsb) >> 16);
}

}  // namespace ina::reduce
