// SPDX-License-Identifier: Apache-2.0
// INA protocol v1 header: byte layout pinned against a hand-written vector, round trips, and
// every reason a UDP payload on the INA port is refused.
#include "ina/protocol.h"

#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <vector>

namespace ina::proto {
namespace {

// Job 0x01020304, seq 0x0A0B0C0D, data, retransmit flag, sum of fp32, BSL 64 (code 1), SI 0,
// P-BM = BFR-id 3 (bit 3 from the right of the last octet), 2 elements 1.0f and -2.0f.
const std::vector<uint8_t> kVector = {
    0x49, 0x4E, 0x11, 0x01,  // "IN", version 1 | type data, flags retransmit
    0x01, 0x10, 0x00, 0x00,  // op sum(0) | fp32(1), BSL code 1 | rsv, SI 0, rsv
    0x01, 0x02, 0x03, 0x04,  // job id
    0x0A, 0x0B, 0x0C, 0x0D,  // sequence number
    0x00, 0x02, 0x00, 0x00,  // element count 2, reserved
    0x00, 0x00, 0x00, 0x00,  // reserved
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04,  // BitString: BP 3
    0x00, 0x00, 0x80, 0x3F,  // 1.0f little-endian
    0x00, 0x00, 0x00, 0xC0,  // -2.0f little-endian
};

Header vector_header() {
    Header h;
    h.type = PacketType::data;
    h.flags = kFlagRetransmit;
    h.op = 0;
    h.elem_type = 1;
    h.bsl_code = 1;
    h.set_id = 0;
    h.job_id = 0x01020304;
    h.seq = 0x0A0B0C0D;
    h.elem_count = 2;
    return h;
}

TEST(InaProtocol, ParsesTheReferenceVector) {
    auto r = parse(kVector.data(), kVector.size());
    ASSERT_TRUE(r.packet.has_value()) << to_string(r.error);
    const Header& h = r.packet->header;
    EXPECT_EQ(h.type, PacketType::data);
    EXPECT_EQ(h.flags, kFlagRetransmit);
    EXPECT_EQ(h.op, 0);
    EXPECT_EQ(h.elem_type, 1);
    EXPECT_EQ(h.bsl_code, 1);
    EXPECT_EQ(h.bitstring_bytes(), 8);
    EXPECT_EQ(h.job_id, 0x01020304u);
    EXPECT_EQ(h.seq, 0x0A0B0C0Du);
    EXPECT_EQ(h.elem_count, 2);
    EXPECT_EQ(r.packet->bitstring, kVector.data() + 24);
    EXPECT_EQ(r.packet->bitstring[7], 0x04);
    float v[2];
    std::memcpy(v, r.packet->payload, sizeof v);
    EXPECT_EQ(v[0], 1.0f);
    EXPECT_EQ(v[1], -2.0f);
}

TEST(InaProtocol, WritesTheReferenceVector) {
    std::vector<uint8_t> out(kVector.size(), 0xEE);
    const size_t n = write_header(out.data(), vector_header(), kVector.data() + 24);
    ASSERT_EQ(n, 32u);
    std::memcpy(out.data() + n, kVector.data() + n, kVector.size() - n);
    EXPECT_EQ(out, kVector);
}

TEST(InaProtocol, RoundTripsEveryTypeOpElementTypeAndBsl) {
    for (uint8_t type : {1, 2}) {
        for (uint8_t op = 0; op <= kMaxOp; ++op) {
            for (uint8_t et = 0; et <= kMaxElemType; ++et) {
                for (uint8_t bsl = 1; bsl <= 7; ++bsl) {
                    Header h;
                    h.type = static_cast<PacketType>(type);
                    h.flags = kFlagEcnEcho | kFlagFallback;
                    h.op = op;
                    h.elem_type = et;
                    h.bsl_code = bsl;
                    h.set_id = 200;
                    h.job_id = 0xFFFFFFFF;
                    h.seq = 7;
                    h.elem_count = 3;
                    std::vector<uint8_t> bits(h.bitstring_bytes(), 0);
                    bits.back() = 0x01;
                    bits.front() = 0x80;
                    std::vector<uint8_t> pkt(h.total_bytes(), 0x5A);
                    write_header(pkt.data(), h, bits.data());
                    auto r = parse(pkt.data(), pkt.size());
                    ASSERT_TRUE(r.packet.has_value()) << to_string(r.error);
                    const Header& g = r.packet->header;
                    EXPECT_EQ(g.type, h.type);
                    EXPECT_EQ(g.flags, h.flags);
                    EXPECT_EQ(g.op, op);
                    EXPECT_EQ(g.elem_type, et);
                    EXPECT_EQ(g.bsl_code, bsl);
                    EXPECT_EQ(g.set_id, 200);
                    EXPECT_EQ(g.job_id, 0xFFFFFFFFu);
                    EXPECT_EQ(g.elem_count, 3);
                    EXPECT_EQ(std::memcmp(r.packet->bitstring, bits.data(), bits.size()), 0);
                    EXPECT_EQ(r.packet->payload, pkt.data() + 24 + bits.size());
                }
            }
        }
    }
}

TEST(InaProtocol, BslCodePointsAreRfc8296s) {
    EXPECT_EQ(bsl_code_to_bytes(0), 0);
    EXPECT_EQ(bsl_code_to_bytes(1), 8);     // 64 bits
    EXPECT_EQ(bsl_code_to_bytes(3), 32);    // 256 bits
    EXPECT_EQ(bsl_code_to_bytes(7), 512);   // 4096 bits
    EXPECT_EQ(bsl_code_to_bytes(8), 0);
    EXPECT_EQ(bsl_code_to_bytes(15), 0);
}

ParseError error_of(std::vector<uint8_t> pkt) {
    auto r = parse(pkt.data(), pkt.size());
    EXPECT_FALSE(r.packet.has_value());
    return r.error;
}

TEST(InaProtocol, RefusesEachMalformation) {
    auto with = [](size_t at, uint8_t value) {
        auto v = kVector;
        v[at] = value;
        return v;
    };
    EXPECT_EQ(error_of({}), ParseError::truncated);
    EXPECT_EQ(error_of(std::vector<uint8_t>(kVector.begin(), kVector.begin() + 23)),
              ParseError::truncated);
    EXPECT_EQ(error_of(with(0, 'X')), ParseError::bad_magic);
    EXPECT_EQ(error_of(with(1, 'X')), ParseError::bad_magic);
    EXPECT_EQ(error_of(with(2, 0x21)), ParseError::bad_version);
    EXPECT_EQ(error_of(with(2, 0x01)), ParseError::bad_version);
    EXPECT_EQ(error_of(with(2, 0x10)), ParseError::bad_type);
    EXPECT_EQ(error_of(with(2, 0x13)), ParseError::bad_type);
    EXPECT_EQ(error_of(with(3, 0x10)), ParseError::unknown_flags);
    EXPECT_EQ(error_of(with(3, 0x80)), ParseError::unknown_flags);
    EXPECT_EQ(error_of(with(4, 0x41)), ParseError::bad_op);
    EXPECT_EQ(error_of(with(4, 0x06)), ParseError::bad_elem_type);
    EXPECT_EQ(error_of(with(5, 0x00)), ParseError::bad_bsl);
    EXPECT_EQ(error_of(with(5, 0x80)), ParseError::bad_bsl);
    EXPECT_EQ(error_of(with(5, 0x11)), ParseError::reserved_nonzero);
    EXPECT_EQ(error_of(with(7, 0x01)), ParseError::reserved_nonzero);
    EXPECT_EQ(error_of(with(18, 0x01)), ParseError::reserved_nonzero);
    EXPECT_EQ(error_of(with(23, 0x01)), ParseError::reserved_nonzero);
    EXPECT_EQ(error_of(with(17, 0x03)), ParseError::length_mismatch);  // 3 elements claimed
    auto longer = kVector;
    longer.push_back(0);
    EXPECT_EQ(error_of(longer), ParseError::length_mismatch);
    // A BSL that claims more BitString than the packet has.
    EXPECT_EQ(error_of(with(5, 0x30)), ParseError::length_mismatch);
}

// The lowest missing result (flag 0x08, the word at offset 20): read and written only with the
// flag; without it the word is reserved and a non-zero value refused; results never carry it.
TEST(InaProtocol, LowestMissingResultWithTheFlag) {
    auto v = kVector;
    v[3] = kFlagRetransmit | kFlagLowestMissing;
    v[20] = 0x0A;
    v[21] = 0x0B;
    v[22] = 0x0B;
    v[23] = 0xFF;
    auto r = parse(v.data(), v.size());
    ASSERT_TRUE(r.packet.has_value()) << to_string(r.error);
    EXPECT_EQ(r.packet->header.flags, kFlagRetransmit | kFlagLowestMissing);
    EXPECT_EQ(r.packet->header.lowest_missing, 0x0A0B0BFFu);
    // Written back byte for byte.
    Header h = vector_header();
    h.flags = kFlagRetransmit | kFlagLowestMissing;
    h.lowest_missing = 0x0A0B0BFF;
    std::vector<uint8_t> out(v.size());
    const size_t n = write_header(out.data(), h, kVector.data() + 24);
    std::memcpy(out.data() + n, kVector.data() + n, v.size() - n);
    EXPECT_EQ(out, v);
    // In place, as a worker's retransmission updates it.
    set_lowest_missing(out.data(), 7);
    EXPECT_EQ(parse(out.data(), out.size()).packet->header.lowest_missing, 7u);
    // The 16 reserved bits at offset 18 stay reserved with the flag.
    v[18] = 0x01;
    EXPECT_EQ(error_of(v), ParseError::reserved_nonzero);
}

TEST(InaProtocol, LowestMissingResultWithoutTheFlag) {
    // Flag clear: the field is not written (0 on the wire) and reads as 0 ...
    Header h = vector_header();
    h.lowest_missing = 0x12345678;
    std::vector<uint8_t> out(kVector.size());
    const size_t n = write_header(out.data(), h, kVector.data() + 24);
    std::memcpy(out.data() + n, kVector.data() + n, kVector.size() - n);
    EXPECT_EQ(out, kVector);
    EXPECT_EQ(parse(out.data(), out.size()).packet->header.lowest_missing, 0u);
    // ... and a set word without the flag is refused, each of its octets.
    for (size_t at = 20; at < 24; ++at) {
        auto v = kVector;
        v[at] = 0x40;
        EXPECT_EQ(error_of(v), ParseError::reserved_nonzero) << "octet " << at;
    }
    // A result may not carry the flag (only a contributor states what it lacks).
    auto result = kVector;
    result[2] = 0x12;
    EXPECT_TRUE(parse(result.data(), result.size()).packet.has_value());
    result[3] = kFlagLowestMissing;
    EXPECT_EQ(error_of(result), ParseError::unknown_flags);
}

TEST(InaProtocol, InPlaceEdits) {
    auto v = kVector;
    set_type(v.data(), PacketType::result);
    set_flags(v.data(), kFlagEcnEcho);
    auto r = parse(v.data(), v.size());
    ASSERT_TRUE(r.packet.has_value());
    EXPECT_EQ(r.packet->header.type, PacketType::result);
    EXPECT_EQ(r.packet->header.flags, kFlagEcnEcho);
    EXPECT_EQ(bitstring_at(v.data()), v.data() + 24);
}

// parse_into folds every check of the fixed header into one test; parse_error names the first
// failing one. Against a reference that checks field by field, byte by byte, as the protocol
// text states them: every value of every header octet, on the vector with and without the
// lowest missing flag (and as a result), so each field's accepted set is exactly the protocol's.
std::optional<ParseError> reference_error(const std::vector<uint8_t>& v) {
    if (v.size() < 24) return ParseError::truncated;
    if (v[0] != 'I' || v[1] != 'N') return ParseError::bad_magic;
    if ((v[2] >> 4) != 1) return ParseError::bad_version;
    const int type = v[2] & 0x0f;
    if (type != 1 && type != 2) return ParseError::bad_type;
    if ((v[3] & ~0x0f) != 0 || ((v[3] & 0x08) != 0 && type != 1)) {
        return ParseError::unknown_flags;
    }
    if ((v[4] >> 4) > 3) return ParseError::bad_op;
    if ((v[4] & 0x0f) > 5) return ParseError::bad_elem_type;
    const int bsl = v[5] >> 4;
    if (bsl < 1 || bsl > 7) return ParseError::bad_bsl;
    bool reserved = (v[5] & 0x0f) != 0 || v[7] != 0 || v[18] != 0 || v[19] != 0;
    if ((v[3] & 0x08) == 0) {
        reserved = reserved || v[20] != 0 || v[21] != 0 || v[22] != 0 || v[23] != 0;
    }
    if (reserved) return ParseError::reserved_nonzero;
    const size_t sizes[] = {4, 4, 2, 2, 8, 8};
    const size_t want =
        24 + (size_t{8} << (bsl - 1)) + sizes[v[4] & 0x0f] * (size_t{v[16]} << 8 | v[17]);
    if (want != v.size()) return ParseError::length_mismatch;
    return std::nullopt;
}

TEST(InaProtocol, TheFoldedTestAgreesWithTheFieldByFieldReferenceOnEveryOctetValue) {
    auto stated = kVector;
    stated[3] = kFlagLowestMissing;
    stated[23] = 0x07;  // lowest missing result 7
    auto result = kVector;
    result[2] = 0x12;
    for (const auto& base : {kVector, stated, result}) {
        for (size_t at = 0; at < kFixedHeaderBytes; ++at) {
            for (int value = 0; value < 256; ++value) {
                auto v = base;
                v[at] = static_cast<uint8_t>(value);
                const auto want = reference_error(v);
                const ParseResult r = parse(v.data(), v.size());
                ASSERT_EQ(r.packet.has_value(), !want.has_value()) << at << " " << value;
                if (want) {
                    ASSERT_EQ(r.error, *want) << at << " " << value;
                    continue;
                }
                const Header& h = r.packet->header;
                EXPECT_EQ(static_cast<int>(h.type), v[2] & 0x0f);
                EXPECT_EQ(h.flags, v[3]);
                EXPECT_EQ(h.op, v[4] >> 4);
                EXPECT_EQ(h.elem_type, v[4] & 0x0f);
                EXPECT_EQ(h.bsl_code, v[5] >> 4);
                EXPECT_EQ(h.set_id, v[6]);
                EXPECT_EQ(h.job_id, uint32_t{v[8]} << 24 | uint32_t{v[9]} << 16 |
                                        uint32_t{v[10]} << 8 | v[11]);
                EXPECT_EQ(h.seq, uint32_t{v[12]} << 24 | uint32_t{v[13]} << 16 |
                                     uint32_t{v[14]} << 8 | v[15]);
                EXPECT_EQ(h.elem_count, v[16] << 8 | v[17]);
                EXPECT_EQ(h.lowest_missing, uint32_t{v[20]} << 24 | uint32_t{v[21]} << 16 |
                                                uint32_t{v[22]} << 8 | v[23]);
                EXPECT_EQ(r.packet->bitstring, v.data() + 24);
                EXPECT_EQ(r.packet->payload, v.data() + 24 + h.bitstring_bytes());
            }
        }
    }
}

TEST(InaProtocol, ErrorNamesAreDistinct) {
    EXPECT_EQ(to_string(ParseError::bad_magic), "bad_magic");
    EXPECT_EQ(to_string(ParseError::length_mismatch), "length_mismatch");
}

}  // namespace
}  // namespace ina::proto
