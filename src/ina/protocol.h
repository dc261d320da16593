// SPDX-License-Identifier: Apache-2.0
// The INA wire protocol, version 1 (docs/protocol.md): a header carried in UDP, followed by the
// P-BM as an RFC 8279 BitString and the chunk's elements. Pure code: parsing reads bytes,
// building writes bytes; neither allocates nor throws, so the packet path can call both.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include "wire/bitstring.h"

namespace ina::proto {

inline constexpr uint16_t kDefaultUdpPort = 9470;
inline constexpr uint8_t kMagic0 = 0x49;  // 'I'
inline constexpr uint8_t kMagic1 = 0x4E;  // 'N'
inline constexpr uint8_t kVersion = 1;
inline constexpr size_t kFixedHeaderBytes = 24;

enum class PacketType : uint8_t {
    data = 1,    // a contribution (one worker's chunk, or a switch's partial aggregate) to the root
    result = 2,  // the aggregated chunk, from the root back to the workers
};

// Flag bits (header octet 3).
inline constexpr uint8_t kFlagRetransmit = 0x01;  // sender already sent this chunk once
inline constexpr uint8_t kFlagEcnEcho = 0x02;     // congestion seen on the way (echoed back)
inline constexpr uint8_t kFlagFallback = 0x04;    // forwarded unaggregated (no slot): root reduces it
// Data packets only: the word at offset 20 holds the sender's lowest missing result (the lowest
// chunk seq whose result it has not received). Clear: the word must be 0 (senders before it).
inline constexpr uint8_t kFlagLowestMissing = 0x08;
inline constexpr uint8_t kKnownFlags =
    kFlagRetransmit | kFlagEcnEcho | kFlagFallback | kFlagLowestMissing;

// Wire values of the reduce op and element type; they match ina::reduce::Op and ElemType.
inline constexpr uint8_t kMaxOp = 3;        // sum, prod, min, max
inline constexpr uint8_t kMaxElemType = 5;  // int32, fp32, fp16, bf16, int64, fp64

constexpr size_t elem_bytes(uint8_t elem_type) {
    constexpr uint8_t sizes[] = {4, 4, 2, 2, 8, 8};
    return elem_type <= kMaxElemType ? sizes[elem_type] : 0;
}

// RFC 8296 BSL code points (wire/bitstring.h): bytes of the BitString, 0 for a reserved code.
constexpr uint16_t bsl_code_to_bytes(uint8_t code) {
    const auto bits = wire::bsl_bits_from_code(code);
    return bits ? wire::bsl_bytes(*bits) : 0;
}

struct Header {
    PacketType type = PacketType::data;
    uint8_t flags = 0;
    uint8_t op = 0;
    uint8_t elem_type = 0;
    uint8_t bsl_code = 1;  // RFC 8296 code point of the P-BM's length
    uint8_t set_id = 0;    // SI of the P-BM (BFR-ids ((SI*BSL)+1) .. ((SI+1)*BSL))
    uint32_t job_id = 0;
    uint32_t seq = 0;            // chunk sequence number within the job
    uint16_t elem_count = 0;
    // With kFlagLowestMissing (data only): the sender holds the result of every chunk before
    // this seq (serial order) and lacks this one's. Written as 0 when the flag is clear.
    uint32_t lowest_missing = 0;

    uint16_t bitstring_bytes() const { return bsl_code_to_bytes(bsl_code); }
    size_t payload_bytes() const { return elem_bytes(elem_type) * elem_count; }
    size_t total_bytes() const { return kFixedHeaderBytes + bitstring_bytes() + payload_bytes(); }
};

// Why a UDP payload on the INA port is not a valid INA packet. Each is a counter reason.
enum class ParseError : uint8_t {
    truncated,        // shorter than the fixed header
    bad_magic,        // not "IN": some other protocol on the INA port
    bad_version,
    bad_type,
    bad_op,
    bad_elem_type,
    bad_bsl,          // reserved BSL code point
    unknown_flags,
    reserved_nonzero,
    length_mismatch,  // UDP payload length differs from header + BitString + elements
};

inline constexpr size_t kNumParseErrors = static_cast<size_t>(ParseError::length_mismatch) + 1;
std::string_view to_string(ParseError e);

struct Parsed {
    Header header;
    const uint8_t* bitstring = nullptr;  // P-BM, header.bitstring_bytes() long, wire order
    const uint8_t* payload = nullptr;    // elements, little-endian
};

struct ParseResult {
    std::optional<Parsed> packet;
    ParseError error = ParseError::truncated;  // meaningful when !packet
};

// Parses a whole UDP payload. `len` must be exactly the UDP payload length.
// Inline: every INA packet is parsed on the packet path, and an out-of-line version assembled
// the result on the stack byte by byte and copied it out (a store-forwarding stall that cost a
// quarter of the aggregation path); inlined, the fields stay in registers.
inline ParseResult parse(const uint8_t* p, size_t len) {
    const auto fail = [](ParseError e) { return ParseResult{std::nullopt, e}; };
    if (len < kFixedHeaderBytes) {
        return fail(ParseError::truncated);
    }
    // Octets 0..7 as one big-endian word: magic(16) ver|type(8) flags(8) op|elem(8)
    // bsl|rsv(8) set_id(8) rsv(8).
    uint64_t w0;
    std::memcpy(&w0, p, sizeof w0);
    w0 = __builtin_bswap64(w0);
    const auto octet = [w0](int i) { return static_cast<uint8_t>(w0 >> (56 - 8 * i)); };
    if ((w0 >> 48) != (uint64_t{kMagic0} << 8 | kMagic1)) {
        return fail(ParseError::bad_magic);
    }
    if ((octet(2) >> 4) != kVersion) {
        return fail(ParseError::bad_version);
    }
    const uint8_t type = octet(2) & 0x0f;
    if (type != static_cast<uint8_t>(PacketType::data) &&
        type != static_cast<uint8_t>(PacketType::result)) {
        return fail(ParseError::bad_type);
    }
    const uint8_t flags = octet(3);
    // The lowest missing result is a contributor's statement: a result carrying it is refused.
    if ((flags & ~kKnownFlags) != 0 ||
        ((flags & kFlagLowestMissing) != 0 && type != static_cast<uint8_t>(PacketType::data))) {
        return fail(ParseError::unknown_flags);
    }
    const uint8_t op = octet(4) >> 4;
    const uint8_t elem_type = octet(4) & 0x0f;
    if (op > kMaxOp) {
        return fail(ParseError::bad_op);
    }
    if (elem_type > kMaxElemType) {
        return fail(ParseError::bad_elem_type);
    }
    const uint8_t bsl_code = octet(5) >> 4;
    const uint16_t bs_bytes = bsl_code_to_bytes(bsl_code);
    if (bs_bytes == 0) {
        return fail(ParseError::bad_bsl);
    }
    // Octets 8..15 (job_id, seq) and 16..23 (elem_count, reserved 16, lowest missing 32: reserved
    // unless kFlagLowestMissing).
    uint64_t w1;
    uint64_t w2;
    std::memcpy(&w1, p + 8, sizeof w1);
    std::memcpy(&w2, p + 16, sizeof w2);
    w1 = __builtin_bswap64(w1);
    w2 = __builtin_bswap64(w2);
    const uint64_t reserved_w2 =
        (flags & kFlagLowestMissing) != 0 ? 0xFFFF00000000ull : 0xFFFFFFFFFFFFull;
    if ((octet(5) & 0x0f) != 0 || octet(7) != 0 || (w2 & reserved_w2) != 0) {
        return fail(ParseError::reserved_nonzero);
    }
    const auto elem_count = static_cast<uint16_t>(w2 >> 48);
    if (kFixedHeaderBytes + bs_bytes + elem_bytes(elem_type) * elem_count != len) {
        return fail(ParseError::length_mismatch);
    }
    // Built whole, in one expression: member-by-member construction made the compiler zero the
    // struct first (a `rep stos` per packet).
    Header h;
    h.type = static_cast<PacketType>(type);
    h.flags = flags;
    h.op = op;
    h.elem_type = elem_type;
    h.bsl_code = bsl_code;
    h.set_id = octet(6);
    h.job_id = static_cast<uint32_t>(w1 >> 32);
    h.seq = static_cast<uint32_t>(w1);
    h.elem_count = elem_count;
    h.lowest_missing = static_cast<uint32_t>(w2);  // 0 unless the flag is set (checked above)
    return ParseResult{Parsed{h, p + kFixedHeaderBytes, p + kFixedHeaderBytes + bs_bytes},
                       ParseError::truncated};
}

// Writes the fixed header and the BitString (`bitstring`, header.bitstring_bytes() long) at
// `p`; the caller places the payload after them. Returns bytes written (header + BitString).
size_t write_header(uint8_t* p, const Header& h, const uint8_t* bitstring);

// In-place edits the packet path needs without a full rewrite.
inline uint8_t* bitstring_at(uint8_t* header) { return header + kFixedHeaderBytes; }
void set_type(uint8_t* header, PacketType type);
void set_flags(uint8_t* header, uint8_t flags);
// The word at offset 20: the sender's lowest missing result (set kFlagLowestMissing with it).
void set_lowest_missing(uint8_t* header, uint32_t seq);

}  // namespace ina::proto
