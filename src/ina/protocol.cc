// SPDX-License-Identifier: Apache-2.0
#include "ina/protocol.h"

#include <cstring>

namespace ina::proto {

// Layout (network byte order), docs/protocol.md:
//   0: magic 'I' 'N'   2: version(4) | type(4)   3: flags
//   4: op(4) | elem_type(4)   5: bsl_code(4) | reserved(4)   6: set_id   7: reserved
//   8: job_id(32)   12: seq(32)   16: elem_count(16)   18: reserved(16)
//   20: lowest missing result(32), with flag 0x08 (data only), else reserved
//   24: BitString, then elements

namespace {

// v big-endian at p (any alignment; the host is little-endian, as parse() assumes).
void store64(uint8_t* p, uint64_t v) {
    v = __builtin_bswap64(v);
    std::memcpy(p, &v, sizeof v);
}
void store32(uint8_t* p, uint32_t v) {
    p[0] = static_cast<uint8_t>(v >> 24);
    p[1] = static_cast<uint8_t>(v >> 16);
    p[2] = static_cast<uint8_t>(v >> 8);
    p[3] = static_cast<uint8_t>(v);
}

}  // namespace

std::string_view to_string(ParseError e) {
    switch (e) {
    case ParseError::truncated: return "truncated";
    case ParseError::bad_magic: return "bad_magic";
    case ParseError::bad_version: return "bad_version";
    case ParseError::bad_type: return "bad_type";
    case ParseError::bad_op: return "bad_op";
    case ParseError::bad_elem_type: return "bad_elem_type";
    case ParseError::bad_bsl: return "bad_bsl";
    case ParseError::unknown_flags: return "unknown_flags";
    case ParseError::reserved_nonzero: return "reserved_nonzero";
    case ParseError::length_mismatch: return "length_mismatch";
    }
    return "unknown";
}

ParseError parse_error(const uint8_t* p, size_t len) {
    if (len < kFixedHeaderBytes) {
        return ParseError::truncated;
    }
    const uint64_t w0 = header_word(p);
    const uint64_t w2 = header_word(p + 16);
    const auto octet = [w0](int i) { return static_cast<uint8_t>(w0 >> (56 - 8 * i)); };
    if ((w0 >> 48) != (uint64_t{kMagic0} << 8 | kMagic1)) {
        return ParseError::bad_magic;
    }
    if ((octet(2) >> 4) != kVersion) {
        return ParseError::bad_version;
    }
    const uint8_t type = octet(2) & 0x0f;
    if (type != static_cast<uint8_t>(PacketType::data) &&
        type != static_cast<uint8_t>(PacketType::result)) {
        return ParseError::bad_type;
    }
    const uint8_t flags = octet(3);
    if ((flags & ~kKnownFlags) != 0 ||
        ((flags & kFlagLowestMissing) != 0 && type != static_cast<uint8_t>(PacketType::data))) {
        return ParseError::unknown_flags;
    }
    if ((octet(4) >> 4) > kMaxOp) {
        return ParseError::bad_op;
    }
    const uint8_t elem_type = octet(4) & 0x0f;
    if (elem_type > kMaxElemType) {
        return ParseError::bad_elem_type;
    }
    const uint16_t bs_bytes = bsl_code_to_bytes(octet(5) >> 4);
    if (bs_bytes == 0) {
        return ParseError::bad_bsl;
    }
    const uint64_t reserved_w2 =
        (flags & kFlagLowestMissing) != 0 ? 0xFFFF00000000ull : 0xFFFFFFFFFFFFull;
    if ((octet(5) & 0x0f) != 0 || octet(7) != 0 || (w2 & reserved_w2) != 0) {
        return ParseError::reserved_nonzero;
    }
    // Every field is sound: what parse_into refused is the length.
    return ParseError::length_mismatch;
}

size_t write_header(uint8_t* p, const Header& h, const uint8_t* bitstring) {
    // Three big-endian words, as parse() reads them: octets 0..7, 8..15, 16..23.
    const uint64_t w0 = uint64_t{kMagic0} << 56 | uint64_t{kMagic1} << 48 |
                        uint64_t{static_cast<uint8_t>(kVersion << 4 |
                                                      (static_cast<uint8_t>(h.type) & 0x0f))}
                            << 40 |
                        uint64_t{h.flags} << 32 |
                        uint64_t{static_cast<uint8_t>((h.op & 0x0f) << 4 | (h.elem_type & 0x0f))}
                            << 24 |
                        uint64_t{static_cast<uint8_t>((h.bsl_code & 0x0f) << 4)} << 16 |
                        uint64_t{h.set_id} << 8;
    const uint64_t w1 = uint64_t{h.job_id} << 32 | h.seq;
    const uint64_t w2 = uint64_t{h.elem_count} << 48 |
                        ((h.flags & kFlagLowestMissing) != 0 ? h.lowest_missing : 0);
    store64(p, w0);
    store64(p + 8, w1);
    store64(p + 16, w2);
    const uint16_t bs = h.bitstring_bytes();
    if (bs == 8) {
        std::memcpy(p + kFixedHeaderBytes, bitstring, 8);  // BSL 64: one word, no call
    } else {
        std::memcpy(p + kFixedHeaderBytes, bitstring, bs);
    }
    return kFixedHeaderBytes + bs;
}

void set_type(uint8_t* header, PacketType type) {
    header[2] = static_cast<uint8_t>((header[2] & 0xf0) | (static_cast<uint8_t>(type) & 0x0f));
}

void set_flags(uint8_t* header, uint8_t flags) { header[3] = flags; }

void set_lowest_missing(uint8_t* header, uint32_t seq) { store32(header + 20, seq); }

}  // namespace ina::proto
