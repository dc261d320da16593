// SPDX-License-Identifier: Apache-2.0
// RFC 8296 header: the bier.md test vector byte for byte (write and parse), pinned code points,
// every parse error, field widths, in-place TTL rewrite and the optional BIFT-id encoding.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "wire/bier_header.h"

namespace ina::wire {
namespace {

// bier.md §1: BIFT-id 0x30000, TC 0, S 1, TTL 64, Ver 0, BSL 3, Entropy 0x12345, Proto 4,
// BFIR-id 7, BFR-ids {1, 3, 256}.
BierHeader vector_header() {
    BierHeader h;
    h.bift_id = 0x30000;
    h.tc = 0;
    h.s = 1;
    h.ttl = 64;
    h.version = 0;
    h.bsl = 3;
    h.entropy = 0x12345;
    h.proto = bier_proto::kIpv4;
    h.bfir_id = 7;
    return h;
}

BitString vector_bitstring() {
    const BfrId ids[] = {1, 3, 256};
    return BitString::from_bfr_ids(256, 0, ids).value();
}

std::vector<uint8_t> vector_bytes() {
    std::vector<uint8_t> bytes = {0x30, 0x00, 0x01, 0x40, 0x50, 0x31, 0x23, 0x45,
                                  0x00, 0x04, 0x00, 0x07};
    std::vector<uint8_t> bitstring(32, 0);
    bitstring.front() = 0x80;
    bitstring.back() = 0x05;
    bytes.insert(bytes.end(), bitstring.begin(), bitstring.end());
    return bytes;
}

TEST(BierConstants, ProtoAndEthertypeArePinned) {
    static_assert(kBierEthertype == 0xAB37);
    static_assert(bier_proto::kMplsDownstream == 1);
    static_assert(bier_proto::kMplsUpstream == 2);
    static_assert(bier_proto::kEthernet == 3);
    static_assert(bier_proto::kIpv4 == 4);
    static_assert(bier_proto::kOam == 5);   // scapy/VPP: 5 is IPv6 there
    static_assert(bier_proto::kIpv6 == 6);  // scapy/VPP: 5
    static_assert(bier_proto::kVxlan == 7);
    static_assert(bier_proto::kNvgre == 8);
    static_assert(bier_proto::kGeneve == 9);
    static_assert(kBierFixedBytes == 12);
    static_assert(kBierNibble == 0x5);
    EXPECT_EQ(BierHeader{}.nibble, 0x5);
    EXPECT_EQ(BierHeader{}.s, 1);
}

TEST(BierTestVector, WriteIsByteForByte) {
    std::array<uint8_t, 64> buf{};
    const auto written = write_bier_header(buf.data(), buf.size(), vector_header(), vector_bitstring());
    ASSERT_EQ(written, 44u);
    EXPECT_EQ(std::vector<uint8_t>(buf.begin(), buf.begin() + 44), vector_bytes());
    EXPECT_TRUE(std::all_of(buf.begin() + 44, buf.end(), [](uint8_t b) { return b == 0; }));
}

TEST(BierTestVector, ParseGivesEveryField) {
    auto bytes = vector_bytes();
    const uint8_t payload[] = {0x45, 0x00};
    bytes.insert(bytes.end(), std::begin(payload), std::end(payload));
    const auto result = parse_bier_header(bytes.data(), bytes.size(), 256);
    ASSERT_TRUE(result.packet) << to_string(result.error);
    const BierParsed& p = *result.packet;
    EXPECT_EQ(p.header, vector_header());
    EXPECT_EQ(p.header.bift_id, 0x30000u);
    EXPECT_EQ(p.header.tc, 0);
    EXPECT_EQ(p.header.s, 1);
    EXPECT_EQ(p.header.ttl, 64);
    EXPECT_EQ(p.header.nibble, 5);
    EXPECT_EQ(p.header.version, 0);
    EXPECT_EQ(p.header.bsl, 3);
    EXPECT_EQ(p.header.entropy, 0x12345u);
    EXPECT_EQ(p.header.oam, 0);
    EXPECT_EQ(p.header.rsv, 0);
    EXPECT_EQ(p.header.dscp, 0);
    EXPECT_EQ(p.header.proto, bier_proto::kIpv4);
    EXPECT_EQ(p.header.bfir_id, 7);
    EXPECT_EQ(p.bitstring, bytes.data() + 12);
    EXPECT_EQ(p.bitstring_bytes, 32);
    EXPECT_EQ(p.header_bytes(), 44u);
    EXPECT_EQ(p.payload, bytes.data() + 44);
    EXPECT_EQ(p.payload[0], 0x45);
    EXPECT_EQ(p.bitstring_value(), vector_bitstring());
    EXPECT_EQ(p.bitstring_value().format_bfr_ids(0), "1,3,256");
    EXPECT_EQ(peek_bift_id(bytes.data(), bytes.size()), 0x30000u);
    EXPECT_EQ(bier_entropy(bytes.data()), 0x12345u);
    EXPECT_EQ(decode_bift_id(p.header.bift_id), (BiftIdFields{3, 0, 0}));
}

TEST(BierHeader, EveryFieldAtItsMaximumRoundTrips) {
    BierHeader h;
    h.bift_id = 0xFFFFF;
    h.tc = 7;
    h.s = 1;
    h.ttl = 255;
    h.nibble = 5;
    h.version = 0;
    h.bsl = 7;
    h.entropy = 0xFFFFF;
    h.oam = 3;
    h.rsv = 3;
    h.dscp = 63;
    h.proto = 63;
    h.bfir_id = 0xFFFF;
    std::vector<uint8_t> buf(kBierFixedBytes + 512);
    auto bs = BitString::zero(4096).value();
    bs.set(4096);
    bs.set(1);
    ASSERT_EQ(write_bier_header(buf.data(), buf.size(), h, bs), buf.size());
    for (size_t i = 0; i < 12; ++i) {
        // Word 1 holds nibble 0101, version 0 and BSL 0111; everything else is all ones.
        const uint8_t expected = i == 4 ? 0x50 : i == 5 ? 0x7F : 0xFF;
        EXPECT_EQ(buf[i], expected) << i;
    }
    const auto result = parse_bier_header(buf.data(), buf.size(), 4096);
    ASSERT_TRUE(result.packet);
    EXPECT_EQ(result.packet->header, h);
    EXPECT_EQ(result.packet->bitstring_value(), bs);
}

TEST(BierHeader, EachFieldLandsInItsOwnBits) {
    // Set one field at a time to all ones and check exactly its mask is set in the three words.
    struct Case {
        const char* name;
        void (*set)(BierHeader&);
        uint32_t w0, w1, w2;
    };
    const Case cases[] = {
        {"bift_id", [](BierHeader& h) { h.bift_id = 0xFFFFF; }, 0xFFFFF000, 0, 0},
        {"tc", [](BierHeader& h) { h.tc = 7; }, 0x00000E00, 0, 0},
        {"s", [](BierHeader& h) { h.s = 1; }, 0x00000100, 0, 0},
        {"ttl", [](BierHeader& h) { h.ttl = 0xFF; }, 0x000000FF, 0, 0},
        {"nibble", [](BierHeader& h) { h.nibble = 0xF; }, 0, 0xF0000000, 0},
        {"version", [](BierHeader& h) { h.version = 0xF; }, 0, 0x0F000000, 0},
        {"bsl", [](BierHeader& h) { h.bsl = 0xF; }, 0, 0x00F00000, 0},
        {"entropy", [](BierHeader& h) { h.entropy = 0xFFFFF; }, 0, 0x000FFFFF, 0},
        {"oam", [](BierHeader& h) { h.oam = 3; }, 0, 0, 0xC0000000},
        {"rsv", [](BierHeader& h) { h.rsv = 3; }, 0, 0, 0x30000000},
        {"dscp", [](BierHeader& h) { h.dscp = 0x3F; }, 0, 0, 0x0FC00000},
        {"proto", [](BierHeader& h) { h.proto = 0x3F; }, 0, 0, 0x003F0000},
        {"bfir_id", [](BierHeader& h) { h.bfir_id = 0xFFFF; }, 0, 0, 0x0000FFFF},
    };
    for (const Case& c : cases) {
        BierHeader h;
        h.s = 0;
        h.nibble = 0;
        c.set(h);
        std::array<uint8_t, 12> buf{};
        ASSERT_TRUE(write_bier_fixed(buf.data(), buf.size(), h)) << c.name;
        const auto word = [&](size_t i) {
            return (uint32_t{buf[i]} << 24) | (uint32_t{buf[i + 1]} << 16) |
                   (uint32_t{buf[i + 2]} << 8) | buf[i + 3];
        };
        EXPECT_EQ(word(0), c.w0) << c.name;
        EXPECT_EQ(word(4), c.w1) << c.name;
        EXPECT_EQ(word(8), c.w2) << c.name;
    }
}

TEST(BierHeader, WriteRejectsFieldsWiderThanTheirWidth) {
    const auto bs = vector_bitstring();
    std::array<uint8_t, 64> buf{};
    const auto rejects = [&](void (*poison)(BierHeader&), const char* name) {
        BierHeader h = vector_header();
        poison(h);
        EXPECT_FALSE(h.fields_fit()) << name;
        buf.fill(0xEE);
        EXPECT_FALSE(write_bier_header(buf.data(), buf.size(), h, bs)) << name;
        EXPECT_FALSE(write_bier_fixed(buf.data(), buf.size(), h)) << name;
        EXPECT_TRUE(std::all_of(buf.begin(), buf.end(), [](uint8_t b) { return b == 0xEE; }))
            << name << ": wrote despite failing";
    };
    rejects([](BierHeader& h) { h.bift_id = 0x100000; }, "bift_id");
    rejects([](BierHeader& h) { h.tc = 8; }, "tc");
    rejects([](BierHeader& h) { h.s = 2; }, "s");
    rejects([](BierHeader& h) { h.nibble = 0x10; }, "nibble");
    rejects([](BierHeader& h) { h.version = 0x10; }, "version");
    rejects([](BierHeader& h) { h.bsl = 0x13; }, "bsl");
    rejects([](BierHeader& h) { h.entropy = 0x100000; }, "entropy");
    rejects([](BierHeader& h) { h.oam = 4; }, "oam");
    rejects([](BierHeader& h) { h.rsv = 4; }, "rsv");
    rejects([](BierHeader& h) { h.dscp = 64; }, "dscp");
    rejects([](BierHeader& h) { h.proto = 64; }, "proto");
}

TEST(BierHeader, WriteChecksCapacityAndBslAgreement) {
    std::array<uint8_t, 64> buf{};
    const auto bs = vector_bitstring();
    EXPECT_FALSE(write_bier_header(buf.data(), 43, vector_header(), bs));
    EXPECT_TRUE(write_bier_header(buf.data(), 44, vector_header(), bs));
    EXPECT_FALSE(write_bier_fixed(buf.data(), 11, vector_header()));
    EXPECT_TRUE(write_bier_fixed(buf.data(), 12, vector_header()));

    BierHeader h = vector_header();
    h.bsl = 2;  // says 128 bits, BitString has 256
    EXPECT_FALSE(write_bier_header(buf.data(), buf.size(), h, bs));
    h.bsl = 0;
    EXPECT_FALSE(write_bier_header(buf.data(), buf.size(), h, bs));
}

// ---- Every parse error ----

struct ParseCase {
    const char* name;
    void (*mutate)(std::vector<uint8_t>&);
    uint16_t expected_bsl;
    BierParseError error;
};

TEST(BierParse, EveryMalformedHeaderReason) {
    const ParseCase cases[] = {
        {"empty", [](std::vector<uint8_t>& b) { b.clear(); }, 256, BierParseError::truncated},
        {"11 bytes", [](std::vector<uint8_t>& b) { b.resize(11); }, 256, BierParseError::truncated},
        {"fixed only", [](std::vector<uint8_t>& b) { b.resize(12); }, 256, BierParseError::truncated},
        {"one BitString byte short", [](std::vector<uint8_t>& b) { b.resize(43); }, 256,
         BierParseError::truncated},
        {"nibble 0100 (IPv4-like)", [](std::vector<uint8_t>& b) { b[4] = 0x40 | (b[4] & 0x0F); }, 256,
         BierParseError::bad_nibble},
        {"nibble 0110 (IPv6-like)", [](std::vector<uint8_t>& b) { b[4] = 0x60 | (b[4] & 0x0F); }, 256,
         BierParseError::bad_nibble},
        {"nibble 0000", [](std::vector<uint8_t>& b) { b[4] &= 0x0F; }, 256, BierParseError::bad_nibble},
        {"version 1", [](std::vector<uint8_t>& b) { b[4] = 0x51; }, 256, BierParseError::bad_version},
        {"version 15", [](std::vector<uint8_t>& b) { b[4] = 0x5F; }, 256, BierParseError::bad_version},
        {"BSL 0 (VPP/scapy's 64)", [](std::vector<uint8_t>& b) { b[5] &= 0x0F; }, 256,
         BierParseError::reserved_bsl},
        {"BSL 8", [](std::vector<uint8_t>& b) { b[5] = 0x80 | (b[5] & 0x0F); }, 256,
         BierParseError::reserved_bsl},
        {"BSL 15", [](std::vector<uint8_t>& b) { b[5] |= 0xF0; }, 256, BierParseError::reserved_bsl},
        {"field 256, BIFT-id 128", [](std::vector<uint8_t>&) {}, 128, BierParseError::bsl_mismatch},
        {"field 256, BIFT-id 512", [](std::vector<uint8_t>&) {}, 512, BierParseError::bsl_mismatch},
        {"field 128, BIFT-id 256", [](std::vector<uint8_t>& b) { b[5] = 0x20 | (b[5] & 0x0F); }, 256,
         BierParseError::bsl_mismatch},
        {"expected BSL 0", [](std::vector<uint8_t>&) {}, 0, BierParseError::invalid_expected_bsl},
        {"expected BSL 100", [](std::vector<uint8_t>&) {}, 100, BierParseError::invalid_expected_bsl},
        {"expected BSL 8192", [](std::vector<uint8_t>&) {}, 8192, BierParseError::invalid_expected_bsl},
    };
    for (const ParseCase& c : cases) {
        auto bytes = vector_bytes();
        c.mutate(bytes);
        // Parse from a heap copy of exactly the given size so ASan/valgrind catch any over-read.
        std::vector<uint8_t> exact(bytes);
        const auto result = parse_bier_header(exact.data(), exact.size(), c.expected_bsl);
        EXPECT_FALSE(result.packet) << c.name;
        EXPECT_EQ(result.error, c.error)
            << c.name << ": got " << to_string(result.error) << ", want " << to_string(c.error);
    }
}

TEST(BierParse, FieldsTheParserDoesNotJudge) {
    // TTL 0, S 0, OAM/Rsv/DSCP set, an unassigned Proto: parsed as-is (forwarding decides).
    auto bytes = vector_bytes();
    bytes[2] &= 0xFE;  // S = 0
    bytes[3] = 0;      // TTL 0
    bytes[8] = 0xFF;   // OAM 3, Rsv 3, DSCP high bits
    bytes[9] = 0xFF;   // DSCP low bits, Proto 63
    const auto result = parse_bier_header(bytes.data(), bytes.size(), 256);
    ASSERT_TRUE(result.packet);
    EXPECT_EQ(result.packet->header.s, 0);
    EXPECT_EQ(result.packet->header.ttl, 0);
    EXPECT_EQ(result.packet->header.oam, 3);
    EXPECT_EQ(result.packet->header.rsv, 3);
    EXPECT_EQ(result.packet->header.dscp, 63);
    EXPECT_EQ(result.packet->header.proto, 63);
}

TEST(BierParse, EveryBslAtItsExactLength) {
    for (uint8_t code = 1; code <= 7; ++code) {
        const uint16_t bsl = *bsl_bits_from_code(code);
        BierHeader h = vector_header();
        h.bsl = code;
        h.bift_id = *encode_bift_id({code, 1, 2});
        auto bs = BitString::zero(bsl).value();
        bs.set(bsl);
        bs.set(2);
        std::vector<uint8_t> buf(kBierFixedBytes + bsl / 8);
        ASSERT_EQ(write_bier_header(buf.data(), buf.size(), h, bs), buf.size());
        const auto bift_id = peek_bift_id(buf.data(), buf.size());
        ASSERT_TRUE(bift_id);
        const auto fields = decode_bift_id(*bift_id);
        ASSERT_TRUE(fields);
        const auto result = parse_bier_header(buf.data(), buf.size(), *bsl_bits_from_code(fields->bsl));
        ASSERT_TRUE(result.packet) << to_string(result.error);
        EXPECT_EQ(result.packet->header, h);
        EXPECT_EQ(result.packet->bitstring_value(), bs);
        EXPECT_EQ(result.packet->payload, buf.data() + buf.size());
        EXPECT_EQ(parse_bier_header(buf.data(), buf.size() - 1, bsl).error, BierParseError::truncated);
    }
}

TEST(BierInPlace, TtlRewriteAndBitStringAccess) {
    auto bytes = vector_bytes();
    EXPECT_EQ(bier_ttl(bytes.data()), 64);
    bier_set_ttl(bytes.data(), 63);
    EXPECT_EQ(bier_ttl(bytes.data()), 63);
    EXPECT_EQ(bytes[3], 63);
    EXPECT_EQ(bytes[2], 0x01);  // S and the BIFT-id untouched
    auto expected = vector_bytes();
    expected[3] = 63;
    EXPECT_EQ(bytes, expected);

    // A BIER copy's private header: BS & F-BM written straight into the header.
    const auto fbm = BitString::parse_bfr_ids(256, 0, "3,200-256").value();
    bits_and_into(bier_bitstring(bytes.data()), fbm.data(), 32);
    const auto result = parse_bier_header(bytes.data(), bytes.size(), 256);
    ASSERT_TRUE(result.packet);
    EXPECT_EQ(result.packet->bitstring_value().format_bfr_ids(0), "3,256");
    EXPECT_EQ(result.packet->header.ttl, 63);
    const std::vector<uint8_t> const_bytes = bytes;
    EXPECT_EQ(bier_bitstring(const_bytes.data()), const_bytes.data() + 12);
}

TEST(BierPeek, NeedsFourBytes) {
    const auto bytes = vector_bytes();
    EXPECT_FALSE(peek_bift_id(bytes.data(), 3));
    EXPECT_EQ(peek_bift_id(bytes.data(), 4), 0x30000u);
    const uint8_t all_ones[] = {0xFF, 0xFF, 0xFF, 0xFF};
    EXPECT_EQ(peek_bift_id(all_ones, 4), 0xFFFFFu);
}

TEST(BiftIdEncoding, OptionalDraftEncoding) {
    static_assert(encode_bift_id({3, 0, 0}) == 0x30000u);
    static_assert(encode_bift_id({1, 0xAB, 0xCD}) == 0x1ABCDu);
    static_assert(encode_bift_id({7, 0xFF, 0xFF}) == 0x7FFFFu);
    static_assert(!encode_bift_id({0, 0, 0}));
    static_assert(!encode_bift_id({8, 0, 0}));
    for (uint8_t code = 1; code <= 7; ++code) {
        for (const unsigned sd : {0u, 1u, 255u}) {
            for (const unsigned si : {0u, 7u, 255u}) {
                const BiftIdFields f{code, static_cast<uint8_t>(sd), static_cast<uint8_t>(si)};
                const auto id = encode_bift_id(f);
                ASSERT_TRUE(id);
                EXPECT_GT(*id, 15u);  // never an MPLS reserved label value
                EXPECT_EQ(decode_bift_id(*id), f);
            }
        }
    }
    EXPECT_FALSE(decode_bift_id(0x0ABCD));   // BSL nibble 0
    EXPECT_FALSE(decode_bift_id(0x8ABCD));   // BSL nibble 8
    EXPECT_FALSE(decode_bift_id(0x130000));  // more than 20 bits
}

TEST(BierParseError, Names) {
    EXPECT_EQ(to_string(BierParseError::truncated), "truncated");
    EXPECT_EQ(to_string(BierParseError::bad_nibble), "bad_nibble");
    EXPECT_EQ(to_string(BierParseError::bad_version), "bad_version");
    EXPECT_EQ(to_string(BierParseError::reserved_bsl), "reserved_bsl");
    EXPECT_EQ(to_string(BierParseError::bsl_mismatch), "bsl_mismatch");
    EXPECT_EQ(to_string(BierParseError::invalid_expected_bsl), "invalid_expected_bsl");
}

}  // namespace
}  // namespace ina::wire
