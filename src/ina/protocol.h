// SPDX-License-Identifier: Apache-2.0
// The INA wire protocol, version 1 (docs/protocol.md): a header carried in UDP, followed by the
// P-BM as an RFC 8279 BitString and the chunk's elements. Pure code: parsing reads bytes,
// building writes bytes; neither allocates nor throws, so the packet path can call both.
#pragma once

#include <cstddef>
#include <cstdint>
#include <array>
#include <cstring>
#include <optional>
#include <string_view>

#include "wire/bitstring.h"

namespace ina::proto {

inline constexpr uint16_t kDefaultUdpPort = 9470;

// Chunk steering (docs/operations.md "Chunk steering"): a sender may send chunk `seq` from UDP
// source port base | (seq & (ports - 1)) (ports a power of two up to kMaxSteerPorts, base a
// multiple of it), so that a NIC rule on the source port's low bits puts every chunk on the
// lcore owning it (runtime/chunk_steering.h). Workers steer when asked (--steer-ports); a
// switch's partials always leave from kDefaultSteerBasePort | (seq & (kMaxSteerPorts - 1)), so a
// parent switch's rules steer them for any lane count up to 64.
inline constexpr uint32_t kMaxSteerPorts = 64;
inline constexpr uint32_t kDefaultSteerBasePort = 40960;  // 0xA000: aligned to any N <= 64
constexpr uint16_t steer_source_port(uint32_t base, uint32_t ports, uint32_t seq) {
    return static_cast<uint16_t>(base | (seq & (ports - 1)));
}
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

// Bytes per element and of the BitString, indexed by the header's 4-bit fields: 0 marks a
// reserved value, so one load both decodes and validates the field on the packet path.
inline constexpr std::array<uint8_t, 16> kElemBytesByCode = [] {
    std::array<uint8_t, 16> t{};
    for (uint8_t c = 0; c < 16; ++c) t[c] = static_cast<uint8_t>(elem_bytes(c));
    return t;
}();
inline constexpr std::array<uint16_t, 16> kBslBytesByCode = [] {
    std::array<uint16_t, 16> t{};
    for (uint8_t c = 0; c < 16; ++c) t[c] = bsl_code_to_bytes(c);
    return t;
}();

// Why `p` (`len` bytes), which parse_into refused, is not a valid INA packet: the first failing
// check in the order of the ParseError list. Out of line: only refused packets come here.
ParseError parse_error(const uint8_t* p, size_t len);

// The big-endian 64-bit word at `p` (any alignment): the fixed header is read as three.
[[gnu::always_inline]] inline uint64_t header_word(const uint8_t* p) {
    uint64_t w;
    std::memcpy(&w, p, sizeof w);
    return __builtin_bswap64(w);
}

// The packet path's parse: true, with `out` filled, when the whole UDP payload `p` (`len`
// bytes, exactly the UDP payload) is a valid INA packet. Every field check of the fixed header
// is folded into one test and one branch (the words are read once, the reserved codes of the
// 4-bit fields are zeros of the tables above); which check failed is parse_error()'s to say.
// Always inline, into a caller whose `out` is a local: its fields then stay in registers (an
// out-of-line parse returned ~48 bytes through memory and cost ~125 instructions a packet).
[[gnu::always_inline]] inline bool parse_into(const uint8_t* p, size_t len, Parsed& out) {
    if (len < kFixedHeaderBytes) [[unlikely]] {
        return false;
    }
    // Octets 0..7 as one big-endian word: magic(16) ver|type(8) flags(8) op|elem(8)
    // bsl|rsv(8) set_id(8) rsv(8); 8..15 job_id, seq; 16..23 elem_count(16), reserved(16),
    // lowest missing(32: reserved unless kFlagLowestMissing).
    const uint64_t w0 = header_word(p);
    const uint64_t w1 = header_word(p + 8);
    const uint64_t w2 = header_word(p + 16);
    const auto type = static_cast<uint8_t>((w0 >> 40) & 0x0f);
    const auto flags = static_cast<uint8_t>(w0 >> 32);
    const auto op = static_cast<uint8_t>((w0 >> 28) & 0x0f);
    const auto elem_type = static_cast<uint8_t>((w0 >> 24) & 0x0f);
    const auto bsl_code = static_cast<uint8_t>((w0 >> 20) & 0x0f);
    const uint16_t bs_bytes = kBslBytesByCode[bsl_code];
    const uint8_t esize = kElemBytesByCode[elem_type];
    const auto elem_count = static_cast<uint16_t>(w2 >> 48);
    const bool lowest = (flags & kFlagLowestMissing) != 0;
    const uint64_t reserved_w2 = lowest ? 0xFFFF00000000ull : 0xFFFFFFFFFFFFull;
    // Magic and version (20 bits), a known type, known flags (the lowest missing result on data
    // only: it is a contributor's statement), op, element type and BSL codes, zero reserved
    // bits (octet 5's low nibble, octet 7, octets 18..23 as the flag says), and the length.
    const bool ok =
        static_cast<int>((w0 >> 44) == (uint64_t{kMagic0} << 12 | uint64_t{kMagic1} << 4 |
                                        kVersion)) &
        static_cast<int>(static_cast<uint8_t>(type - 1) < 2) &
        static_cast<int>((flags & ~kKnownFlags) == 0) &
        static_cast<int>(!lowest || type == static_cast<uint8_t>(PacketType::data)) &
        static_cast<int>(op <= kMaxOp) & static_cast<int>(esize != 0) &
        static_cast<int>(bs_bytes != 0) & static_cast<int>((w0 & 0x0F00FFull) == 0) &
        static_cast<int>((w2 & reserved_w2) == 0) &
        static_cast<int>(kFixedHeaderBytes + bs_bytes + size_t{esize} * elem_count == len);
    if (!ok) [[unlikely]] {
        return false;
    }
    out.header.type = static_cast<PacketType>(type);
    out.header.flags = flags;
    out.header.op = op;
    out.header.elem_type = elem_type;
    out.header.bsl_code = bsl_code;
    out.header.set_id = static_cast<uint8_t>(w0 >> 8);
    out.header.job_id = static_cast<uint32_t>(w1 >> 32);
    out.header.seq = static_cast<uint32_t>(w1);
    out.header.elem_count = elem_count;
    out.header.lowest_missing = static_cast<uint32_t>(w2);  // 0 unless the flag is set
    out.bitstring = p + kFixedHeaderBytes;
    out.payload = p + kFixedHeaderBytes + bs_bytes;
    return true;
}

// A first look at a contribution, before any parse: true, with its job and chunk, when the 16
// bytes at `p` begin an INA v1 data header (magic, version and type; nothing else is checked).
// For deciding where a packet goes (the lcore that owns its chunk), which then parses it whole.
[[gnu::always_inline]] inline bool peek_data(const uint8_t* p, uint32_t& job_id, uint32_t& seq) {
    const uint64_t w0 = header_word(p);
    const uint64_t w1 = header_word(p + 8);
    constexpr uint64_t kDataHead = (uint64_t{kMagic0} << 12 | uint64_t{kMagic1} << 4 | kVersion)
                                       << 4 |
                                   static_cast<uint64_t>(PacketType::data);
    job_id = static_cast<uint32_t>(w1 >> 32);
    seq = static_cast<uint32_t>(w1);
    return (w0 >> 40) == kDataHead;
}

// Parses a whole UDP payload. `len` must be exactly the UDP payload length. The tools' and
// tests' form of parse_into, with the reason when it fails.
inline ParseResult parse(const uint8_t* p, size_t len) {
    Parsed out;
    if (parse_into(p, len, out)) [[likely]] {
        return ParseResult{out, ParseError::truncated};
    }
    return ParseResult{std::nullopt, parse_error(p, len)};
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
