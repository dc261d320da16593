// SPDX-License-Identifier: Apache-2.0
// RFC 8296 header parse and write (see bier_header.h for the layout and the checks).
#include "wire/bier_header.h"

#include <cstring>

namespace ina::wire {

namespace {

uint32_t load_be32(const uint8_t* p) {
    return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

void store_be32(uint8_t* p, uint32_t v) {
    p[0] = static_cast<uint8_t>(v >> 24);
    p[1] = static_cast<uint8_t>(v >> 16);
    p[2] = static_cast<uint8_t>(v >> 8);
    p[3] = static_cast<uint8_t>(v);
}

BierHeader decode_fixed(const uint8_t* p) {
    const uint32_t w0 = load_be32(p);
    const uint32_t w1 = load_be32(p + 4);
    const uint32_t w2 = load_be32(p + 8);
    BierHeader h;
    h.bift_id = w0 >> 12;
    h.tc = static_cast<uint8_t>((w0 >> 9) & 0x7u);
    h.s = static_cast<uint8_t>((w0 >> 8) & 0x1u);
    h.ttl = static_cast<uint8_t>(w0);
    h.nibble = static_cast<uint8_t>(w1 >> 28);
    h.version = static_cast<uint8_t>((w1 >> 24) & 0xFu);
    h.bsl = static_cast<uint8_t>((w1 >> 20) & 0xFu);
    h.entropy = w1 & kMaxEntropy;
    h.oam = static_cast<uint8_t>(w2 >> 30);
    h.rsv = static_cast<uint8_t>((w2 >> 28) & 0x3u);
    h.dscp = static_cast<uint8_t>((w2 >> 22) & 0x3Fu);
    h.proto = static_cast<uint8_t>((w2 >> 16) & 0x3Fu);
    h.bfir_id = static_cast<uint16_t>(w2);
    return h;
}

BierParseResult failure(BierParseError e) { return BierParseResult{std::nullopt, e}; }

}  // namespace

bool BierHeader::fields_fit() const noexcept {
    return bift_id <= kMaxBiftId && tc <= 0x7 && s <= 0x1 && nibble <= 0xF && version <= 0xF &&
           bsl <= 0xF && entropy <= kMaxEntropy && oam <= 0x3 && rsv <= 0x3 && dscp <= 0x3F &&
           proto <= 0x3F;
}

std::string_view to_string(BierParseError e) {
    switch (e) {
        case BierParseError::truncated: return "truncated";
        case BierParseError::bad_nibble: return "bad_nibble";
        case BierParseError::bad_version: return "bad_version";
        case BierParseError::reserved_bsl: return "reserved_bsl";
        case BierParseError::bsl_mismatch: return "bsl_mismatch";
        case BierParseError::invalid_expected_bsl: return "invalid_expected_bsl";
    }
    return "unknown";
}

BitString BierParsed::bitstring_value() const {
    const auto bsl_bits = static_cast<uint16_t>(bitstring_bytes * 8);
    // parse_bier_header only produces valid lengths; a default-constructed BierParsed has none.
    return BitString::from_wire(bsl_bits, {bitstring, bitstring_bytes}).value_or(BitString{});
}

BierParseResult parse_bier_header(const uint8_t* p, size_t len, uint16_t expected_bsl_bits) noexcept {
    if (len < kBierFixedBytes) {
        return failure(BierParseError::truncated);
    }
    const BierHeader h = decode_fixed(p);
    if (h.nibble != kBierNibble) {
        return failure(BierParseError::bad_nibble);
    }
    if (h.version != kBierVersion) {
        return failure(BierParseError::bad_version);
    }
    const auto field_bits = bsl_bits_from_code(h.bsl);
    if (!field_bits) {
        return failure(BierParseError::reserved_bsl);
    }
    if (!is_valid_bsl_bits(expected_bsl_bits)) {
        return failure(BierParseError::invalid_expected_bsl);
    }
    if (*field_bits != expected_bsl_bits) {
        return failure(BierParseError::bsl_mismatch);
    }
    // The length comes from the BIFT-id's BSL (RFC 8296), equal to the field's by now.
    const uint16_t bitstring_bytes = bsl_bytes(expected_bsl_bits);
    if (len < kBierFixedBytes + bitstring_bytes) {
        return failure(BierParseError::truncated);
    }
    BierParsed parsed;
    parsed.header = h;
    parsed.bitstring = p + kBierFixedBytes;
    parsed.bitstring_bytes = bitstring_bytes;
    parsed.payload = p + kBierFixedBytes + bitstring_bytes;
    return BierParseResult{parsed, BierParseError::truncated};
}

bool write_bier_fixed(uint8_t* p, size_t capacity, const BierHeader& h) noexcept {
    if (capacity < kBierFixedBytes || !h.fields_fit()) {
        return false;
    }
    store_be32(p, (h.bift_id << 12) | (uint32_t{h.tc} << 9) | (uint32_t{h.s} << 8) | h.ttl);
    store_be32(p + 4, (uint32_t{h.nibble} << 28) | (uint32_t{h.version} << 24) |
                          (uint32_t{h.bsl} << 20) | h.entropy);
    store_be32(p + 8, (uint32_t{h.oam} << 30) | (uint32_t{h.rsv} << 28) | (uint32_t{h.dscp} << 22) |
                          (uint32_t{h.proto} << 16) | h.bfir_id);
    return true;
}

std::optional<size_t> write_bier_header(uint8_t* p, size_t capacity, const BierHeader& h,
                                        const BitString& bitstring) noexcept {
    const size_t total = kBierFixedBytes + bitstring.size_bytes();
    if (capacity < total || bsl_code_from_bits(bitstring.bsl_bits()) != h.bsl ||
        !write_bier_fixed(p, capacity, h)) {
        return std::nullopt;
    }
    std::memcpy(p + kBierFixedBytes, bitstring.data(), bitstring.size_bytes());
    return total;
}

}  // namespace ina::wire
