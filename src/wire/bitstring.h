// SPDX-License-Identifier: Apache-2.0
// RFC 8279 bit strings, the one bitmap type of the switch: the VAT's A-BM (per switch per job) and
// P-BM (per packet), and BIER's BitString and F-BM all use it (draft-song-ina-00: the VAT bitmap
// "adopts the same specification as BIER"). Pure code, no DPDK.
//
// Encoding (RFC 8279 "Encoding BFR Identifiers in BitStrings"; RFC 8296 header)
//   - BSL (BitStringLength) is 64, 128, 256, 512, 1024, 2048 or 4096 bits; RFC 8296 code points
//     1..7 name them (0 and 8..15 are reserved). VPP and scapy number them from 0: do not copy.
//   - A BFR-id is 1..65535 (0 is not a BFR-id). For a BSL it maps to one (SI, BP):
//       SI = (BFR-id - 1) div BSL,  BP = ((BFR-id - 1) mod BSL) + 1,  BFR-id = SI * BSL + BP.
//   - Wire order: the BitString is a big-endian number whose bit (BP - 1) is BP. So BP 1 is the
//     least-significant bit of the LAST octet, BP 8 its most-significant bit, BP 9 the LSB of the
//     second-to-last octet, and BP BSL the MSB of the first octet. Every buffer in this file
//     (BitString's storage included) holds this order, so bytes move to and from packets by
//     memcpy unchanged.
//
// Hot path
//   The bits_* functions work on raw wire bytes (pointers into packet buffers: any alignment; a
//   length in bytes that is a multiple of 8, at most kMaxBitStringBytes). They load and store 64-bit
//   words with memcpy, never allocate and never throw. For AND/OR/compare the byte order inside a
//   word does not matter; only lowest_set_bp reads words big-endian to find BPs.
//   The dataplane uses them as:
//     VAT:  P-BM & A-BM == 0 -> not ours, forward toward the root  (!bits_intersect)
//           P-BM not within A-BM -> reject                         (!bits_subset(pbm, abm))
//           absorbed |= P-BM; complete when absorbed == A-BM       (bits_or_into, bits_equal)
//     BIER: copy = BS & F-BM per neighbour; BS &= ~F-BM            (bits_and_copy, bits_andnot_into)
#pragma once

#include <array>
#include <bit>
#include <cassert>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ina::wire {

using BfrId = uint16_t;  // 1..65535; 0 is not a BFR-id

inline constexpr uint16_t kMinBslBits = 64;
inline constexpr uint16_t kMaxBslBits = 4096;
inline constexpr size_t kMaxBitStringBytes = kMaxBslBits / 8;  // 512
// Every BFR must support BSL 256 (RFC 8279); it is also BitString's default.
inline constexpr uint16_t kDefaultBslBits = 256;

// ---------------------------------------------------------------------------------------------
// BSL code points (RFC 8296): code k names 2^(k+5) bits, for k = 1..7.

constexpr std::optional<uint16_t> bsl_bits_from_code(uint8_t code) {
    if (code < 1 || code > 7) {
        return std::nullopt;
    }
    return static_cast<uint16_t>(32u << code);
}

constexpr std::optional<uint8_t> bsl_code_from_bits(uint16_t bits) {
    for (uint8_t code = 1; code <= 7; ++code) {
        if ((32u << code) == bits) {
            return code;
        }
    }
    return std::nullopt;
}

constexpr bool is_valid_bsl_bits(uint16_t bits) { return bsl_code_from_bits(bits).has_value(); }

// Bytes of a BitString of `bsl_bits` bits (a valid BSL is a multiple of 64, so this is exact).
constexpr uint16_t bsl_bytes(uint16_t bsl_bits) { return static_cast<uint16_t>(bsl_bits / 8); }

// ---------------------------------------------------------------------------------------------
// BFR-id <-> (SI, BP) for one BSL.

struct SiBp {
    uint16_t si = 0;  // Set Identifier: 0..1023 (BSL 64, BFR-id 65535) at most
    uint16_t bp = 0;  // Bit Position: 1..BSL
    auto operator<=>(const SiBp&) const = default;
};

// nullopt if id is 0 or bsl_bits is not a valid BSL.
constexpr std::optional<SiBp> bfr_id_to_si_bp(BfrId id, uint16_t bsl_bits) {
    if (id == 0 || !is_valid_bsl_bits(bsl_bits)) {
        return std::nullopt;
    }
    const unsigned zero_based = id - 1u;
    return SiBp{static_cast<uint16_t>(zero_based / bsl_bits),
                static_cast<uint16_t>(zero_based % bsl_bits + 1u)};
}

// nullopt if bsl_bits is not a valid BSL, bp is not 1..BSL, or SI * BSL + BP exceeds 65535.
constexpr std::optional<BfrId> si_bp_to_bfr_id(SiBp pos, uint16_t bsl_bits) {
    if (!is_valid_bsl_bits(bsl_bits) || pos.bp == 0 || pos.bp > bsl_bits) {
        return std::nullopt;
    }
    const uint32_t id = uint32_t{pos.si} * bsl_bits + pos.bp;
    if (id > 0xFFFFu) {
        return std::nullopt;
    }
    return static_cast<BfrId>(id);
}

// ---------------------------------------------------------------------------------------------
// Hot-path operations on raw wire bytes. Preconditions (asserted in debug builds): len is a
// multiple of 8 and at most kMaxBitStringBytes; every buffer holds len bytes. dst and src may be
// the same buffer but must not partially overlap.

namespace detail {

inline uint64_t load64(const uint8_t* p) noexcept {
    uint64_t v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

inline void store64(uint8_t* p, uint64_t v) noexcept { std::memcpy(p, &v, sizeof v); }

// The 8 bytes at p as a big-endian number: bit i of the result is bit (i mod 8) of byte 7 - i/8.
inline uint64_t load_be64(const uint8_t* p) noexcept {
    const uint64_t v = load64(p);
    if constexpr (std::endian::native == std::endian::little) {
        return __builtin_bswap64(v);
    } else {
        return v;
    }
}

inline void check_len(size_t len) noexcept {
    assert(len % 8 == 0 && len <= kMaxBitStringBytes);
    static_cast<void>(len);
}

}  // namespace detail

// a & b != 0
inline bool bits_intersect(const uint8_t* a, const uint8_t* b, size_t len) noexcept {
    detail::check_len(len);
    for (size_t i = 0; i < len; i += 8) {
        if ((detail::load64(a + i) & detail::load64(b + i)) != 0) {
            return true;
        }
    }
    return false;
}

// a ⊆ b, i.e. a & ~b == 0
inline bool bits_subset(const uint8_t* a, const uint8_t* b, size_t len) noexcept {
    detail::check_len(len);
    for (size_t i = 0; i < len; i += 8) {
        if ((detail::load64(a + i) & ~detail::load64(b + i)) != 0) {
            return false;
        }
    }
    return true;
}

inline bool bits_equal(const uint8_t* a, const uint8_t* b, size_t len) noexcept {
    detail::check_len(len);
    for (size_t i = 0; i < len; i += 8) {
        if (detail::load64(a + i) != detail::load64(b + i)) {
            return false;
        }
    }
    return true;
}

inline bool bits_is_zero(const uint8_t* a, size_t len) noexcept {
    detail::check_len(len);
    for (size_t i = 0; i < len; i += 8) {
        if (detail::load64(a + i) != 0) {
            return false;
        }
    }
    return true;
}

// dst |= src
inline void bits_or_into(uint8_t* dst, const uint8_t* src, size_t len) noexcept {
    detail::check_len(len);
    for (size_t i = 0; i < len; i += 8) {
        detail::store64(dst + i, detail::load64(dst + i) | detail::load64(src + i));
    }
}

// dst &= src
inline void bits_and_into(uint8_t* dst, const uint8_t* src, size_t len) noexcept {
    detail::check_len(len);
    for (size_t i = 0; i < len; i += 8) {
        detail::store64(dst + i, detail::load64(dst + i) & detail::load64(src + i));
    }
}

// dst &= ~src
inline void bits_andnot_into(uint8_t* dst, const uint8_t* src, size_t len) noexcept {
    detail::check_len(len);
    for (size_t i = 0; i < len; i += 8) {
        detail::store64(dst + i, detail::load64(dst + i) & ~detail::load64(src + i));
    }
}

// dst = a & b: writes a BIER copy's BitString (BS & F-BM) straight into its header. dst may be a
// or b.
inline void bits_and_copy(uint8_t* dst, const uint8_t* a, const uint8_t* b, size_t len) noexcept {
    detail::check_len(len);
    for (size_t i = 0; i < len; i += 8) {
        detail::store64(dst + i, detail::load64(a + i) & detail::load64(b + i));
    }
}

// The lowest set BP (1-based), or 0 if every bit is clear. Walks words from the last octet, where
// BP 1 lives.
inline uint16_t lowest_set_bp(const uint8_t* a, size_t len) noexcept {
    detail::check_len(len);
    unsigned first_bp_of_word = 1;
    for (size_t end = len; end >= 8; end -= 8, first_bp_of_word += 64) {
        const uint64_t word = detail::load_be64(a + end - 8);
        if (word != 0) {
            return static_cast<uint16_t>(first_bp_of_word +
                                         static_cast<unsigned>(std::countr_zero(word)));
        }
    }
    return 0;
}

inline size_t bits_popcount(const uint8_t* a, size_t len) noexcept {
    detail::check_len(len);
    size_t count = 0;
    for (size_t i = 0; i < len; i += 8) {
        count += static_cast<size_t>(std::popcount(detail::load64(a + i)));
    }
    return count;
}

// popcount(a & ~b): e.g. the bits of a BitString that no F-BM or own bit covers.
inline size_t bits_popcount_andnot(const uint8_t* a, const uint8_t* b, size_t len) noexcept {
    detail::check_len(len);
    size_t count = 0;
    for (size_t i = 0; i < len; i += 8) {
        count += static_cast<size_t>(
            std::popcount(detail::load64(a + i) & ~detail::load64(b + i)));
    }
    return count;
}

// Single bits by BP. A bp outside 1..len*8 tests false; set/clear then change nothing and return
// false.
inline bool bits_test_bp(const uint8_t* a, size_t len, uint16_t bp) noexcept {
    if (bp == 0 || bp > len * 8) {
        return false;
    }
    const unsigned zero_based = bp - 1u;
    return ((a[len - 1 - zero_based / 8] >> (zero_based % 8)) & 1u) != 0;
}

inline bool bits_set_bp(uint8_t* a, size_t len, uint16_t bp) noexcept {
    if (bp == 0 || bp > len * 8) {
        return false;
    }
    const unsigned zero_based = bp - 1u;
    a[len - 1 - zero_based / 8] |= static_cast<uint8_t>(1u << (zero_based % 8));
    return true;
}

inline bool bits_clear_bp(uint8_t* a, size_t len, uint16_t bp) noexcept {
    if (bp == 0 || bp > len * 8) {
        return false;
    }
    const unsigned zero_based = bp - 1u;
    a[len - 1 - zero_based / 8] &= static_cast<uint8_t>(~(1u << (zero_based % 8)));
    return true;
}

// ---------------------------------------------------------------------------------------------
// BFR-id lists as text, for configuration: comma-separated BFR-ids and inclusive ranges,
// e.g. "1,2,5-8". Spaces and tabs around items and around '-' are allowed; "" (or blanks) is the
// empty set. Rejected: 0, numbers above 65535, a range whose end is below its start, signs,
// empty items ("1,,2", "1,"), anything that is not a decimal number.

// Sorted, without duplicates; nullopt on malformed text.
std::optional<std::vector<BfrId>> parse_bfr_id_list(std::string_view text);

// The canonical text of a set of BFR-ids: ascending, runs of three or more written as "a-b"
// (so "1,2,5-8"). The input need not be sorted; duplicates and 0 are ignored.
std::string format_bfr_id_list(std::span<const BfrId> ids);

// ---------------------------------------------------------------------------------------------
// An owning bit string: a valid BSL plus its bytes in wire order, stored inline (no heap), so it
// can live in tables and be copied into a packet with memcpy(dst, bs.data(), bs.size_bytes()).
// Invariant: bytes beyond size_bytes() are zero.
class BitString {
public:
    // kDefaultBslBits (256) bits, all clear.
    BitString() = default;

    // All clear; nullopt if bsl_bits is not a valid BSL.
    static std::optional<BitString> zero(uint16_t bsl_bits);
    // A copy of wire bytes; nullopt unless bsl_bits is valid and wire.size() == bsl_bytes(bsl_bits).
    static std::optional<BitString> from_wire(uint16_t bsl_bits, std::span<const uint8_t> wire);
    // The bits of `ids` within set `si`; nullopt if the BSL is invalid or an id is 0 or not in SI.
    static std::optional<BitString> from_bfr_ids(uint16_t bsl_bits, uint16_t si,
                                                 std::span<const BfrId> ids);
    // from_bfr_ids over parse_bfr_id_list(text).
    static std::optional<BitString> parse_bfr_ids(uint16_t bsl_bits, uint16_t si,
                                                  std::string_view text);
    // Hex digits of the BitString as a big-endian number, i.e. in wire order: "0x" prefix
    // optional, ' ', ':' and '_' ignored, case-insensitive. Fewer digits than the BSL holds are
    // zero-extended on the left (so "5" is BPs 1 and 3); more digits, even if leading zeros, are
    // rejected.
    static std::optional<BitString> parse_hex(uint16_t bsl_bits, std::string_view text);

    uint16_t bsl_bits() const noexcept { return bsl_bits_; }
    size_t size_bytes() const noexcept { return bsl_bytes(bsl_bits_); }
    const uint8_t* data() const noexcept { return bytes_.data(); }
    // Any byte pattern in [data(), data() + size_bytes()) is a valid BitString, so raw writes
    // there (e.g. memcpy from a packet) are fine; bytes past size_bytes() must stay zero.
    uint8_t* data() noexcept { return bytes_.data(); }
    std::span<const uint8_t> wire() const noexcept { return {bytes_.data(), size_bytes()}; }

    // bp outside 1..BSL: test is false; set/clear change nothing and return false.
    bool test(uint16_t bp) const noexcept { return bits_test_bp(data(), size_bytes(), bp); }
    bool set(uint16_t bp) noexcept { return bits_set_bp(data(), size_bytes(), bp); }
    bool clear(uint16_t bp) noexcept { return bits_clear_bp(data(), size_bytes(), bp); }
    void clear_all() noexcept { bytes_.fill(0); }

    uint16_t lowest_set_bp() const noexcept { return ina::wire::lowest_set_bp(data(), size_bytes()); }
    size_t popcount() const noexcept { return bits_popcount(data(), size_bytes()); }
    bool is_zero() const noexcept { return bits_is_zero(data(), size_bytes()); }

    // The BFR-ids of the set bits, read as set `si`, ascending. nullopt if a set bit has no
    // BFR-id there (SI * BSL + BP > 65535).
    std::optional<std::vector<BfrId>> bfr_ids(uint16_t si) const;
    // format_bfr_id_list(bfr_ids(si)).
    std::optional<std::string> format_bfr_ids(uint16_t si) const;
    // Lowercase hex of the wire bytes, 2 digits per byte, no prefix or separators.
    std::string hex() const;

    // Binary operations. Precondition (asserted in debug builds): both have the same BSL. A
    // release build that breaks it stays memory-safe (the storage is always kMaxBitStringBytes)
    // but the result is meaningless, since BP 1 sits at a different offset in each.
    BitString& operator|=(const BitString& other) noexcept;
    BitString& operator&=(const BitString& other) noexcept;
    BitString& and_not(const BitString& other) noexcept;  // *this &= ~other
    bool intersects(const BitString& other) const noexcept;
    bool is_subset_of(const BitString& other) const noexcept;  // *this ⊆ other

    // Same BSL and same bits. BitStrings of different BSL are never equal.
    friend bool operator==(const BitString& a, const BitString& b) noexcept {
        return a.bsl_bits_ == b.bsl_bits_ && bits_equal(a.data(), b.data(), a.size_bytes());
    }

private:
    explicit BitString(uint16_t bsl_bits) noexcept : bsl_bits_(bsl_bits) {}

    alignas(8) std::array<uint8_t, kMaxBitStringBytes> bytes_{};
    uint16_t bsl_bits_ = kDefaultBslBits;
};

inline BitString operator|(BitString a, const BitString& b) noexcept { return a |= b; }
inline BitString operator&(BitString a, const BitString& b) noexcept { return a &= b; }

}  // namespace ina::wire
