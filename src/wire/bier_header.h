// SPDX-License-Identifier: Apache-2.0
// The RFC 8296 BIER header in its non-MPLS form over Ethernet (ethertype 0xAB37). Pure code: the
// parser reads bytes and the writer writes bytes; neither allocates nor throws.
//
//  0                   1                   2                   3
//  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
// |              BIFT-id                  | TC  |S|     TTL       |  word 0
// |Nibble |  Ver  |  BSL  |              Entropy                  |  word 1
// |OAM|Rsv|    DSCP   |   Proto   |            BFIR-id            |  word 2
// |                BitString (BSL bits, wire order)               ~  kBierFixedBytes onwards
// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
// All words are big-endian. The BitString's bit order is described in wire/bitstring.h.
//
// Length: RFC 8296 says a BFR MUST infer the BitString length from the BIFT-id and MUST NOT
// infer it from the BSL field, which exists for offline tools. So the parser takes the BSL the
// caller's BIFT-id table gives (peek_bift_id reads the BIFT-id first) and drops the packet when
// the BSL field disagrees or is reserved.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "wire/bitstring.h"

namespace ina::wire {

inline constexpr uint16_t kBierEthertype = 0xAB37;
inline constexpr size_t kBierFixedBytes = 12;     // the three words before the BitString
inline constexpr uint8_t kBierNibble = 0b0101;    // keeps MPLS ECMP from taking it for IP
inline constexpr uint8_t kBierVersion = 0;        // the only version RFC 8296 defines
inline constexpr uint32_t kMaxBiftId = 0xFFFFF;   // 20 bits
inline constexpr uint32_t kMaxEntropy = 0xFFFFF;  // 20 bits
inline constexpr size_t kBierTtlOffset = 3;       // the TTL is the last octet of word 0

// IANA "BIER Next Protocol Identifiers" (registry set up by RFC 8296). VPP and scapy use 5 for IPv6
// (and 8 for OAM): wrong. The INA payload has no code point of its own.
namespace bier_proto {
inline constexpr uint8_t kMplsDownstream = 1;  // MPLS packet, downstream-assigned label on top
inline constexpr uint8_t kMplsUpstream = 2;    // MPLS packet, upstream-assigned label on top
inline constexpr uint8_t kEthernet = 3;
inline constexpr uint8_t kIpv4 = 4;
inline constexpr uint8_t kOam = 5;
inline constexpr uint8_t kIpv6 = 6;
inline constexpr uint8_t kVxlan = 7;   // VXLAN header without IP/UDP
inline constexpr uint8_t kNvgre = 8;   // NVGRE header without IP
inline constexpr uint8_t kGeneve = 9;  // Geneve header without IP/UDP
}  // namespace bier_proto

// Every field of the fixed header, decoded; one member per field, in wire order. The writer
// rejects a value that does not fit its field width (see fields_fit) rather than truncating it.
struct BierHeader {
    uint32_t bift_id = 0;            // 20 bits: which BIFT, i.e. (SD, BSL, SI), by configuration
    uint8_t tc = 0;                  // 3 bits: traffic class
    uint8_t s = 1;                   // 1 bit: MPLS bottom-of-stack; sent as 1 (as scapy, eBIERpf)
    uint8_t ttl = 0;                 // 8 bits
    uint8_t nibble = kBierNibble;    // 4 bits
    uint8_t version = kBierVersion;  // 4 bits
    uint8_t bsl = 0;                 // 4 bits: BSL code point (1..7; see bsl_bits_from_code)
    uint32_t entropy = 0;            // 20 bits: ECMP hash input
    uint8_t oam = 0;                 // 2 bits
    uint8_t rsv = 0;                 // 2 bits: sent as 0, ignored on receipt
    uint8_t dscp = 0;                // 6 bits
    uint8_t proto = 0;               // 6 bits: bier_proto::*
    uint16_t bfir_id = 0;            // BFR-id of the ingress BFR

    // True when every member fits its field width.
    bool fields_fit() const noexcept;
    bool operator==(const BierHeader&) const = default;
};

// Why a frame is not an acceptable BIER header. Each is a drop-counter reason.
enum class BierParseError : uint8_t {
    truncated,             // shorter than the fixed header, or than fixed header + BitString
    bad_nibble,            // first nibble of word 1 is not 0101
    bad_version,           // version other than 0
    reserved_bsl,          // BSL field is 0 or 8..15
    bsl_mismatch,          // BSL field differs from the BSL the BIFT-id maps to
    invalid_expected_bsl,  // the caller's expected BSL is not 64..4096 (a configuration bug)
};

std::string_view to_string(BierParseError e);

struct BierParsed {
    BierHeader header;
    const uint8_t* bitstring = nullptr;  // into the parsed buffer, bitstring_bytes long, wire order
    uint16_t bitstring_bytes = 0;
    const uint8_t* payload = nullptr;  // right after the BitString (Proto says what it is)

    size_t header_bytes() const noexcept { return kBierFixedBytes + bitstring_bytes; }
    // An owning copy of the BitString (e.g. for the control plane or tests).
    BitString bitstring_value() const;
};

struct BierParseResult {
    std::optional<BierParsed> packet;
    BierParseError error = BierParseError::truncated;  // meaningful when !packet
};

// Parses the BIER header at p (the octet after the Ethernet type), len bytes available.
// expected_bsl_bits: the BSL the header's BIFT-id maps to. Checks, in this order: len >= 12
// (truncated), nibble, version, BSL field reserved, BSL field == expected (bsl_mismatch),
// len >= 12 + BitString (truncated). TTL, S, OAM, Rsv, DSCP and Proto are not judged here.
BierParseResult parse_bier_header(const uint8_t* p, size_t len, uint16_t expected_bsl_bits) noexcept;

// The BIFT-id of the header at p without parsing the rest (to look up the expected BSL);
// nullopt if len < 4.
inline std::optional<uint32_t> peek_bift_id(const uint8_t* p, size_t len) noexcept {
    if (len < 4) {
        return std::nullopt;
    }
    return (uint32_t{p[0]} << 12) | (uint32_t{p[1]} << 4) | (uint32_t{p[2]} >> 4);
}

// Writes the fixed header and the BitString at p. Returns the bytes written (12 + BitString), or
// nullopt, having written nothing, if capacity is too small, a field does not fit its width, or
// h.bsl is not the code point of bitstring.bsl_bits().
std::optional<size_t> write_bier_header(uint8_t* p, size_t capacity, const BierHeader& h,
                                        const BitString& bitstring) noexcept;

// Writes only the 12 fixed bytes, every field as given (including a nibble, version or BSL code
// a parser would reject: tests and tools need those). The caller writes the BitString at
// p + kBierFixedBytes, e.g. bits_and_copy(p + kBierFixedBytes, bs, fbm, len) for a BIER copy.
// False, having written nothing, if capacity < 12 or a field does not fit its width.
bool write_bier_fixed(uint8_t* p, size_t capacity, const BierHeader& h) noexcept;

// In-place access to a header already validated by parse_bier_header (hdr = its first octet).
// Each replicated copy carries a private header, so the dataplane rewrites these per copy.
inline uint8_t bier_ttl(const uint8_t* hdr) noexcept { return hdr[kBierTtlOffset]; }
inline void bier_set_ttl(uint8_t* hdr, uint8_t ttl) noexcept { hdr[kBierTtlOffset] = ttl; }
inline uint8_t* bier_bitstring(uint8_t* hdr) noexcept { return hdr + kBierFixedBytes; }
inline const uint8_t* bier_bitstring(const uint8_t* hdr) noexcept { return hdr + kBierFixedBytes; }
inline uint32_t bier_entropy(const uint8_t* hdr) noexcept {
    return ((uint32_t{hdr[5]} & 0x0Fu) << 16) | (uint32_t{hdr[6]} << 8) | hdr[7];
}

// Optional BIFT-id encoding of draft-ietf-bier-non-mpls-bift-encoding (expired):
// BIFT-id = BSL(4) | SD(8) | SI(8), BSL as an RFC 8296 code point (so 0x30000 is BSL 256, SD 0,
// SI 0; VPP encodes the same way but with its own BSL numbering). Because the BSL code is 1..7,
// encoded BIFT-ids never fall in 0..15, the MPLS reserved labels. The switch maps BIFT-ids by
// configuration; this is a convenience for building that configuration.
struct BiftIdFields {
    uint8_t bsl = 0;  // RFC 8296 BSL code point, 1..7
    uint8_t sd = 0;   // sub-domain
    uint8_t si = 0;   // set identifier (only 0..255 fit this encoding)
    auto operator<=>(const BiftIdFields&) const = default;
};

// nullopt if the BSL code is reserved.
constexpr std::optional<uint32_t> encode_bift_id(BiftIdFields f) {
    if (!bsl_bits_from_code(f.bsl)) {
        return std::nullopt;
    }
    return (uint32_t{f.bsl} << 16) | (uint32_t{f.sd} << 8) | f.si;
}

// nullopt if bift_id has more than 20 bits or its BSL nibble is reserved.
constexpr std::optional<BiftIdFields> decode_bift_id(uint32_t bift_id) {
    const auto bsl = static_cast<uint8_t>(bift_id >> 16);
    if (bift_id > kMaxBiftId || !bsl_bits_from_code(bsl)) {
        return std::nullopt;
    }
    return BiftIdFields{bsl, static_cast<uint8_t>(bift_id >> 8), static_cast<uint8_t>(bift_id)};
}

}  // namespace ina::wire
