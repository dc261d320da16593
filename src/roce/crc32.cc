// SPDX-License-Identifier: Apache-2.0
// The reflected CRC-32 by carry-less-multiply folding. The model every constant comes from:
//
// - A 16-byte block loaded little-endian into a 128-bit register R stands for the polynomial
//   sum R_m x^(127-m) (the stream's first bit is the highest power: the reflected CRC's order),
//   and the CRC register s (bit i <-> x^(31-i)) continues over a message M as
//   s' = (s x^|M| + M) x^32 mod P. So xoring s into a first block's low 32 bits starts the fold
//   from s, and what is left at the end, one 128-bit R, gives s' = R x^32 mod P (the last
//   step, kFinalHigh below).
// - Folding R forward over T bits (R x^T + R', R' the block T bits later) keeps the remainder
//   mod P: with R = H x^64 + L (H = R's low 64 register bits), R x^T = H x^(T+64) + L x^T, and
//   each half times (x^k mod P), a polynomial below x^32, is below x^96: a 128-bit value to xor
//   into R'. A 64x64 carry-less product of two reflected operands comes out as the product
//   times x (bit m of the product <-> x^(126-m), of a 128-bit register <-> x^(127-m)), so the
//   constants are x^(T+63) mod P and x^(T-1) mod P, each reflected into a 64-bit operand's
//   upper 32 bits (k x^32: bit 63-d <-> x^d).
//
// Constants for T = 128 x n (n = 1..6: what is left of four lanes or registers and up to three
// more blocks is folded straight onto the last block, independent multiplies rather than a
// chain), 1024, 1536 and 2048 (four 512-bit registers) are computed by the compiler from the
// polynomial (constexpr), as are the tables of the scalar path and of the last step.
#include "roce/crc32.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>

// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() (`__m512i __Y = __Y;`), which trips
// a false -Wmaybe-uninitialized once inlined (GCC PR 105593, fixed in GCC 13), and the float
// loads and blends of the fused add a false -Wuninitialized: no undefined lane is read here (the
// broadcast, the extracts and the full-width loads overwrite or ignore every such lane).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif
#endif

namespace ina::roce {

namespace {

// The CRC-32 polynomial without its x^32 term, bit d <-> x^d (0x04C11DB7 reflected is 0xEDB88320).
constexpr uint32_t kPoly = 0x04C11DB7u;

// x^n mod P, bit d <-> x^d.
constexpr uint32_t xpow_mod(unsigned n) {
    uint32_t r = 1;
    for (unsigned i = 0; i < n; ++i) {
        r = (r & 0x80000000u) != 0 ? (r << 1) ^ kPoly : r << 1;
    }
    return r;
}

constexpr uint32_t reflect32(uint32_t v) {
    uint32_t r = 0;
    for (int i = 0; i < 32; ++i) {
        r |= ((v >> i) & 1u) << (31 - i);
    }
    return r;
}

// The 64-bit operand of x^n mod P (see the model above).
constexpr uint64_t operand(unsigned n) { return uint64_t{reflect32(xpow_mod(n))} << 32; }

// The two operands that fold a 128-bit register forward over T bits: low half, high half.
struct FoldPair {
    uint64_t lo;
    uint64_t hi;
};
constexpr FoldPair fold_pair(unsigned t) { return {operand(t + 63), operand(t - 1)}; }

// Folds over n whole blocks (n x 128 bits), n = 1..6; n = 0 is no operand (zero).
constexpr std::array<FoldPair, 7> kBlocks = {FoldPair{0, 0}, fold_pair(128), fold_pair(256),
                                             fold_pair(384),  fold_pair(512), fold_pair(640),
                                             fold_pair(768)};
constexpr FoldPair kFold1024 = fold_pair(1024);
constexpr FoldPair kFold1536 = fold_pair(1536);
constexpr FoldPair kFold2048 = fold_pair(2048);

// A 512-bit register's four lanes followed by k = 0..3 whole blocks: lanes 0..2 fold over
// 3 - j + k blocks; lane 3 is joined with the k blocks on its own (join_blocks), so its operands
// are zero.
struct alignas(64) LaneOperands {
    std::array<uint64_t, 8> q{};
};
constexpr std::array<LaneOperands, 4> make_lane_operands() {
    std::array<LaneOperands, 4> v{};
    for (size_t k = 0; k < v.size(); ++k) {
        for (size_t j = 0; j < 3; ++j) {
            v[k].q[2 * j] = kBlocks[3 - j + k].lo;
            v[k].q[2 * j + 1] = kBlocks[3 - j + k].hi;
        }
    }
    return v;
}
constexpr std::array<LaneOperands, 4> kLaneOperands = make_lane_operands();

// The last step: a 128-bit R = H1 x^96 + H0 x^64 + L (H1, H0: R's register bits 0..31, 32..63)
// is congruent to U = H1 (x^96 mod P) + H0 (x^64 mod P) + L, below x^64; each product comes out
// of the multiply times x (the model's shift), so the operands are x^95 and x^63 mod P with
// H1, H0 in a 64-bit operand's upper half, and U lands in the product's upper 64 bits. The
// register is then U x^32 mod P: the table CRC of U's 8 bytes from zero.
constexpr uint64_t kFinalHigh = operand(95);
constexpr uint64_t kFinalLow = operand(63);

// The model's sanity, checked by the compiler: P's reflection is the table polynomial, and
// x^32 mod P is P's low part.
static_assert(reflect32(kPoly) == 0xEDB88320u);
static_assert(xpow_mod(32) == kPoly && xpow_mod(31) == 0x80000000u);

// Slice-by-8 tables: t[0] is the byte table (reg = reg >> 8 ^ t[0][(reg ^ byte) & 0xFF]), t[k]
// the register's change from a byte k positions further back.
using Tables = std::array<std::array<uint32_t, 256>, 8>;
constexpr Tables make_tables() {
    Tables t{};
    for (uint32_t i = 0; i < 256; ++i) {
        uint32_t r = i;
        for (int k = 0; k < 8; ++k) {
            r = (r & 1) != 0 ? (r >> 1) ^ 0xEDB88320u : r >> 1;
        }
        t[0][i] = r;
    }
    for (size_t k = 1; k < t.size(); ++k) {
        for (uint32_t i = 0; i < 256; ++i) {
            t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFF];
        }
    }
    return t;
}
constexpr Tables kTables = make_tables();

// The register's change from 8 bytes w entering a zero register (little-endian).
inline uint32_t table_step8(uint64_t w) {
    return kTables[7][w & 0xFF] ^ kTables[6][(w >> 8) & 0xFF] ^ kTables[5][(w >> 16) & 0xFF] ^
           kTables[4][(w >> 24) & 0xFF] ^ kTables[3][(w >> 32) & 0xFF] ^
           kTables[2][(w >> 40) & 0xFF] ^ kTables[1][(w >> 48) & 0xFF] ^ kTables[0][w >> 56];
}
static_assert(crc32_delta_byte(1, 0) == kTables[0][1] && crc32_delta_byte(0x80, 7) == kTables[7][0x80]);

// The register (not complemented) continued over len bytes, 8 at a time.
inline uint32_t table_update(uint32_t s, const uint8_t* p, size_t len) {
    for (; len >= 8; p += 8, len -= 8) {
        uint64_t w;
        std::memcpy(&w, p, 8);
        s = table_step8(w ^ s);
    }
    for (; len != 0; ++p, --len) {
        s = (s >> 8) ^ kTables[0][(s ^ *p) & 0xFF];
    }
    return s;
}

#if defined(__x86_64__)

#define INA_PCLMUL __attribute__((target("pclmul,sse4.1")))
#define INA_VPCLMUL512 __attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.1")))

INA_PCLMUL inline __m128i pair128(FoldPair k) {
    return _mm_set_epi64x(static_cast<long long>(k.hi), static_cast<long long>(k.lo));
}

INA_PCLMUL inline __m128i fold(__m128i r, FoldPair k) {
    const __m128i kk = pair128(k);
    return _mm_xor_si128(_mm_clmulepi64_si128(r, kk, 0x00), _mm_clmulepi64_si128(r, kk, 0x11));
}

INA_PCLMUL inline __m128i load128(const uint8_t* p) {
    return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// pshufb masks for a tail of t = 1..15 bytes (0x80: a zero byte): from kShift + t, a register's
// first t bytes moved to its end behind zeros; from kShift + 16 + t, its last 16 - t bytes
// moved to its front, 0x80 (also the blend's select bit) in the t bytes after them.
alignas(16) constexpr std::array<uint8_t, 48> kShift = {
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
    0,    1,    2,    3,    4,    5,    6,    7,    8,    9,    10,   11,   12,   13,   14,   15,
    0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80};

// The register from a 128-bit fold register r (see kFinalHigh).
INA_PCLMUL inline uint32_t finish(__m128i r) {
    const __m128i k = _mm_set_epi64x(static_cast<long long>(kFinalLow),
                                     static_cast<long long>(kFinalHigh));
    const __m128i h1 = _mm_slli_epi64(r, 32);  // lane 0: H1 in the upper half
    const __m128i h0 = _mm_and_si128(r, _mm_set_epi64x(0, static_cast<long long>(0xFFFFFFFF00000000ull)));
    const __m128i u = _mm_xor_si128(
        _mm_xor_si128(_mm_clmulepi64_si128(h1, k, 0x00), _mm_clmulepi64_si128(h0, k, 0x10)), r);
    return table_step8(static_cast<uint64_t>(_mm_extract_epi64(u, 1)));
}

// r followed by the last t < 16 bytes of the input, which end at `end` (at least 16 bytes of the
// input lie before end - t, so the 16 bytes before end are readable): as one 16-byte stream
// r[0..t) | r[t..16) tail, whose first t bytes are a block of leading zeros and r[0..t) (the
// register carries no start value any more, so leading zeros change nothing) folded over one
// block onto the last 16 bytes. No byte-at-a-time loop.
INA_PCLMUL inline uint32_t finish(__m128i r, const uint8_t* end, size_t t) {
    if (t == 0) {
        return finish(r);
    }
    const __m128i to_back = load128(kShift.data() + t);       // byte i = r[i - 16 + t] or 0
    const __m128i to_front = load128(kShift.data() + 16 + t); // byte i = r[i + t], or 0x80 past
    const __m128i head = _mm_shuffle_epi8(r, to_back);
    const __m128i last = _mm_blendv_epi8(_mm_shuffle_epi8(r, to_front), load128(end - 16), to_front);
    return finish(_mm_xor_si128(fold(head, kBlocks[1]), last));
}

// r, one block, followed by k = 0..3 whole blocks at p: the 128-bit register they fold to, each
// block folded straight to the last (independent multiplies, no chain).
INA_PCLMUL inline __m128i join_blocks(__m128i r, const uint8_t* p, size_t k) {
    if (k == 0) {
        return r;
    }
    r = fold(r, kBlocks[k]);
    for (size_t i = 0; i + 1 < k; ++i) {
        r = _mm_xor_si128(r, fold(load128(p + 16 * i), kBlocks[k - 1 - i]));
    }
    return _mm_xor_si128(r, load128(p + 16 * (k - 1)));
}

// `mask` (nullptr, or 64 bytes when len >= 64): ORed into the first 64 bytes as they are loaded.
INA_PCLMUL uint32_t pclmul_update(uint32_t s, const uint8_t* p, size_t len,
                                  const uint8_t* mask = nullptr) {
    if (len < 16) {
        return table_update(s, p, len);
    }
    const __m128i start = _mm_cvtsi32_si128(static_cast<int>(s));
    if (len < 64) {
        const size_t k = (len - 16) / 16;
        return finish(join_blocks(_mm_xor_si128(load128(p), start), p + 16, k), p + len,
                      len - 16 - 16 * k);
    }
    // Four registers 64 bytes apart, each folded over 512 bits: four independent chains.
    __m128i x0 = load128(p);
    __m128i x1 = load128(p + 16);
    __m128i x2 = load128(p + 32);
    __m128i x3 = load128(p + 48);
    if (mask != nullptr) {
        x0 = _mm_or_si128(x0, load128(mask));
        x1 = _mm_or_si128(x1, load128(mask + 16));
        x2 = _mm_or_si128(x2, load128(mask + 32));
        x3 = _mm_or_si128(x3, load128(mask + 48));
    }
    x0 = _mm_xor_si128(x0, start);  // after the mask: the data is masked, not the start value
    p += 64;
    len -= 64;
    for (; len >= 64; p += 64, len -= 64) {
        x0 = _mm_xor_si128(fold(x0, kBlocks[4]), load128(p));
        x1 = _mm_xor_si128(fold(x1, kBlocks[4]), load128(p + 16));
        x2 = _mm_xor_si128(fold(x2, kBlocks[4]), load128(p + 32));
        x3 = _mm_xor_si128(fold(x3, kBlocks[4]), load128(p + 48));
    }
    const size_t k = len / 16;
    const __m128i r =
        _mm_xor_si128(_mm_xor_si128(fold(x0, kBlocks[3 + k]), fold(x1, kBlocks[2 + k])),
                      _mm_xor_si128(fold(x2, kBlocks[1 + k]), join_blocks(x3, p, k)));
    return finish(r, p + len, len - 16 * k);
}

// x's four lanes each folded by k's operands (two multiplies per lane), xored with d: one
// three-way xor.
INA_VPCLMUL512 inline __m512i fold512(__m512i x, __m512i k, __m512i d) {
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00),
                                     _mm512_clmulepi64_epi128(x, k, 0x11), d, 0x96);
}

INA_VPCLMUL512 inline __m512i load512(const uint8_t* p) { return _mm512_loadu_si512(p); }

INA_VPCLMUL512 inline __m512i pair512(FoldPair k) {
    return _mm512_broadcast_i32x4(_mm_set_epi64x(static_cast<long long>(k.hi), static_cast<long long>(k.lo)));
}

// What vpclmul512_fold does beside the multiplies: step() once per 256-byte step of its main
// loop, rest() once after it (the fused add below); nothing for the plain CRC.
struct NoSide {
    void step() {}
    void rest() {}
};

// The register continued over len bytes at p (`mask`: nullptr, or ORed into the first 64 bytes),
// with `side`'s work interleaved with the folding.
template <class Side>
[[gnu::always_inline]] INA_VPCLMUL512 inline uint32_t vpclmul512_fold(uint32_t s, const uint8_t* p, size_t len,
                                               const uint8_t* mask, Side& side) {
    if (len < 64) {
        side.rest();
        return pclmul_update(s, p, len);
    }
    const __m512i start = _mm512_zextsi128_si512(_mm_cvtsi32_si128(static_cast<int>(s)));
    const __m512i k512 = pair512(kBlocks[4]);
    __m512i x = load512(p);
    if (mask != nullptr) {
        x = _mm512_or_si512(x, load512(mask));
    }
    x = _mm512_xor_si512(x, start);  // after the mask, as in pclmul_update
    p += 64;
    len -= 64;
    if (len >= 192) {
        // Four 512-bit registers 256 bytes apart (sixteen 128-bit chains), joined in one step.
        __m512i x1 = load512(p);
        __m512i x2 = load512(p + 64);
        __m512i x3 = load512(p + 128);
        p += 192;
        len -= 192;
        const __m512i k2048 = pair512(kFold2048);
        for (; len >= 256; p += 256, len -= 256) {
            x = fold512(x, k2048, load512(p));
            x1 = fold512(x1, k2048, load512(p + 64));
            x2 = fold512(x2, k2048, load512(p + 128));
            x3 = fold512(x3, k2048, load512(p + 192));
            side.step();
        }
        x = _mm512_xor_si512(
            fold512(x, pair512(kFold1536), x3),
            fold512(x1, pair512(kFold1024), fold512(x2, k512, _mm512_setzero_si512())));
    }
    for (; len >= 64; p += 64, len -= 64) {
        x = fold512(x, k512, load512(p));
    }
    side.rest();
    const size_t k = len / 16;
    const __m512i y = fold512(x, _mm512_load_si512(kLaneOperands[k].q.data()), _mm512_setzero_si512());
    const __m128i r = _mm_xor_si128(
        _mm_xor_si128(_mm512_castsi512_si128(y), _mm512_extracti32x4_epi32(y, 1)),
        _mm_xor_si128(_mm512_extracti32x4_epi32(y, 2),
                      join_blocks(_mm512_extracti32x4_epi32(x, 3), p, k)));
    return finish(r, p + len, len - 16 * k);
}

INA_VPCLMUL512 uint32_t vpclmul512_update(uint32_t s, const uint8_t* p, size_t len,
                                          const uint8_t* mask = nullptr) {
    NoSide none;
    return vpclmul512_fold(s, p, len, mask, none);
}

// The reduce library's sum (src/reduce/README.md), or with kFirst its load, of n elements of
// type kType (a multiple of 64) into their accumulators, 256 packet bytes' worth a step of the
// CRC's main loop and the rest after it: the adds' loads, adds and stores run beside the
// multiplies. fp32, fp16 and bf16 accumulate in fp32 (the 16-bit types widened exactly), one
// IEEE add, a NaN result the canonical quiet NaN 0x7FC00000; int32 wraps.
template <FusedAdd kType, bool kFirst>
struct AddStep {
    static constexpr size_t kWire = kType == FusedAdd::fp16 || kType == FusedAdd::bf16 ? 2 : 4;
    // 64 elements a unit; a step takes the units whose wire bytes match the CRC's 256.
    static constexpr size_t kUnitsPerStep = 256 / (64 * kWire);
    void* acc;
    const uint8_t* in;
    size_t n;
    size_t done = 0;

    [[gnu::always_inline]] INA_VPCLMUL512 static __m512 widen(const uint8_t* p) {
        if constexpr (kType == FusedAdd::fp16) {
            return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
        } else if constexpr (kType == FusedAdd::bf16) {
            const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
            return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
        } else {
            return _mm512_loadu_ps(p);
        }
    }
    [[gnu::always_inline]] INA_VPCLMUL512 void add64() {
        for (size_t j = 0; j < 4; ++j) {
            const size_t e = done + 16 * j;
            const uint8_t* w = in + kWire * e;
            if constexpr (kType == FusedAdd::int32) {
                auto* a = static_cast<int32_t*>(acc) + e;
                const __m512i v = _mm512_loadu_si512(w);
                _mm512_storeu_si512(a, kFirst ? v : _mm512_add_epi32(_mm512_loadu_si512(a), v));
            } else {
                const __m512 nan = _mm512_castsi512_ps(_mm512_set1_epi32(0x7FC00000));
                auto* a = static_cast<float*>(acc) + e;
                const __m512 v = widen(w);
                const __m512 r = kFirst ? v : _mm512_add_ps(_mm512_loadu_ps(a), v);
                _mm512_storeu_ps(a, _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask(r, r, _CMP_UNORD_Q),
                                                       nan));
            }
        }
        done += 64;
    }
    [[gnu::always_inline]] INA_VPCLMUL512 void step() {
        for (size_t u = 0; u < kUnitsPerStep && done < n; ++u) {
            add64();
        }
    }
    [[gnu::always_inline]] INA_VPCLMUL512 void rest() {
        while (done < n) {
            add64();
        }
    }
};

// crc32_masked_with_add on the VPCLMULQDQ path (len >= 256, n a multiple of 64).
template <FusedAdd kType, bool kFirst>
INA_VPCLMUL512 uint32_t vpclmul512_fold_add(const uint8_t* p, size_t len, const uint8_t* mask,
                                            void* acc, const uint8_t* in, size_t n) {
    AddStep<kType, kFirst> add{acc, in, n};
    return ~vpclmul512_fold(~0u, p, len, mask, add);
}

template <FusedAdd kType>
INA_VPCLMUL512 uint32_t vpclmul512_fold_add(const uint8_t* p, size_t len, const uint8_t* mask,
                                            void* acc, const uint8_t* in, size_t n, bool first) {
    return first ? vpclmul512_fold_add<kType, true>(p, len, mask, acc, in, n)
                 : vpclmul512_fold_add<kType, false>(p, len, mask, acc, in, n);
}

#undef INA_PCLMUL
#undef INA_VPCLMUL512

#endif  // __x86_64__

// `mask` as pclmul_update's.
[[gnu::always_inline]] inline uint32_t update_register(CrcIsa isa, uint32_t s, const uint8_t* p,
                                                      size_t len, const uint8_t* mask = nullptr) {
    if (mask != nullptr && (len < 64 || isa == CrcIsa::table)) [[unlikely]] {
        // The folding paths mask their first 64-byte load; anything shorter is masked here.
        uint8_t head[64];
        const size_t n = len < sizeof head ? len : sizeof head;
        for (size_t i = 0; i < n; ++i) {
            head[i] = static_cast<uint8_t>(p[i] | mask[i]);
        }
        return table_update(table_update(s, head, n), p + n, len - n);
    }
    switch (isa) {
#if defined(__x86_64__)
    case CrcIsa::vpclmul512: return vpclmul512_update(s, p, len, mask);
    case CrcIsa::pclmul: return pclmul_update(s, p, len, mask);
#endif
    default: return table_update(s, p, len);
    }
}

CrcIsa best_isa() {
    if (crc32_isa_supported(CrcIsa::vpclmul512)) return CrcIsa::vpclmul512;
    if (crc32_isa_supported(CrcIsa::pclmul)) return CrcIsa::pclmul;
    return CrcIsa::table;
}

// Chosen once at load; a call before dynamic initialisation sees CrcIsa::table (zero), which
// every CPU runs.
const CrcIsa g_isa = best_isa();

}  // namespace

bool crc32_isa_supported(CrcIsa isa) {
    switch (isa) {
    case CrcIsa::table: return true;
#if defined(__x86_64__)
    case CrcIsa::pclmul: {
        unsigned a = 0, b = 0, c = 0, d = 0;
        return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_PCLMUL) != 0 &&
               (c & bit_SSE4_1) != 0;
    }
    case CrcIsa::vpclmul512: {
        unsigned a = 0, b = 0, c = 0, d = 0;
        // libgcc's avx512f check includes the OS having enabled the AVX-512 register state.
        __builtin_cpu_init();
        return crc32_isa_supported(CrcIsa::pclmul) && __builtin_cpu_supports("avx512f") &&
               __get_cpuid_count(7, 0, &a, &b, &c, &d) != 0 && (c & bit_VPCLMULQDQ) != 0;
    }
#endif
    default: return false;
    }
}

CrcIsa crc32_isa() { return g_isa; }

std::string_view to_string(CrcIsa isa) {
    switch (isa) {
    case CrcIsa::pclmul: return "pclmul";
    case CrcIsa::vpclmul512: return "vpclmul512";
    default: return "table";
    }
}

uint32_t crc32_update_with(CrcIsa isa, uint32_t crc, const uint8_t* p, size_t len) {
    return ~update_register(isa, ~crc, p, len);
}

uint32_t crc32_delta8(uint64_t w) { return table_step8(w); }

uint32_t crc32_update(uint32_t crc, const uint8_t* p, size_t len) {
    return ~update_register(g_isa, ~crc, p, len);
}

uint32_t crc32_update_masked(uint32_t crc, const uint8_t* p, size_t len, const uint8_t* mask) {
    return ~update_register(g_isa, ~crc, p, len, mask);
}

bool crc32_masked_with_add(uint32_t& crc, const uint8_t* p, size_t len, const uint8_t* mask,
                           FusedAdd type, void* acc, const void* in, size_t n, bool first) {
#if defined(__x86_64__)
    if (g_isa == CrcIsa::vpclmul512 && len >= 256 && n % 64 == 0) {
        const auto* w = static_cast<const uint8_t*>(in);
        // Indexed by FusedAdd.
        using FoldAdd = uint32_t (*)(const uint8_t*, size_t, const uint8_t*, void*,
                                     const uint8_t*, size_t, bool);
        static constexpr FoldAdd kFoldAdd[] = {
            &vpclmul512_fold_add<FusedAdd::fp32>, &vpclmul512_fold_add<FusedAdd::int32>,
            &vpclmul512_fold_add<FusedAdd::fp16>, &vpclmul512_fold_add<FusedAdd::bf16>};
        crc = kFoldAdd[static_cast<size_t>(type)](p, len, mask, acc, w, n, first);
        return true;
    }
#endif
    (void)p, (void)len, (void)mask, (void)type, (void)acc, (void)in, (void)n, (void)first;
    return false;
}

uint32_t crc32_update_masked_with(CrcIsa isa, uint32_t crc, const uint8_t* p, size_t len,
                                  const uint8_t* mask) {
    return ~update_register(isa, ~crc, p, len, mask);
}

}  // namespace ina::roce
