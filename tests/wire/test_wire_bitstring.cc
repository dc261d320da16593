// SPDX-License-Identifier: Apache-2.0
// BSL code points, BFR-id <-> (SI, BP), the wire bit order, BitString and the text forms.
#include <gtest/gtest.h>

#include <ostream>
#include <vector>

#include "wire/bitstring.h"

namespace ina::wire {

// gtest prints BitStrings through this (found by ADL) instead of dumping 520 raw bytes.
void PrintTo(const BitString& bs, std::ostream* os) {
    *os << "BitString(" << bs.bsl_bits() << " bits, 0x" << bs.hex() << ")";
}

namespace {

constexpr uint16_t kAllBsls[] = {64, 128, 256, 512, 1024, 2048, 4096};

// ---- BSL code points (RFC 8296; VPP and scapy are off by one) ----

TEST(BslCodePoints, RfcValuesArePinned) {
    static_assert(bsl_bits_from_code(1) == 64);
    static_assert(bsl_bits_from_code(2) == 128);
    static_assert(bsl_bits_from_code(3) == 256);
    static_assert(bsl_bits_from_code(4) == 512);
    static_assert(bsl_bits_from_code(5) == 1024);
    static_assert(bsl_bits_from_code(6) == 2048);
    static_assert(bsl_bits_from_code(7) == 4096);
    static_assert(bsl_code_from_bits(64) == 1);
    static_assert(bsl_code_from_bits(256) == 3);
    static_assert(bsl_code_from_bits(4096) == 7);
    static_assert(bsl_bytes(256) == 32);
    static_assert(bsl_bytes(4096) == kMaxBitStringBytes);
}

TEST(BslCodePoints, ReservedCodesAndOddLengthsAreRejected) {
    EXPECT_FALSE(bsl_bits_from_code(0));  // VPP/scapy's "64"
    for (unsigned code = 8; code <= 255; ++code) {
        EXPECT_FALSE(bsl_bits_from_code(static_cast<uint8_t>(code))) << code;
    }
    for (const uint16_t bits : {0, 1, 8, 32, 63, 65, 96, 192, 255, 257, 8192, 65535}) {
        EXPECT_FALSE(bsl_code_from_bits(static_cast<uint16_t>(bits))) << bits;
        EXPECT_FALSE(is_valid_bsl_bits(static_cast<uint16_t>(bits))) << bits;
    }
    for (uint8_t code = 1; code <= 7; ++code) {
        EXPECT_EQ(bsl_code_from_bits(*bsl_bits_from_code(code)), code);
    }
}

// ---- BFR-id <-> (SI, BP) ----

TEST(BfrIdMapping, BoundariesForEveryBsl) {
    for (const uint16_t bsl : kAllBsls) {
        SCOPED_TRACE(bsl);
        EXPECT_EQ(bfr_id_to_si_bp(1, bsl), (SiBp{0, 1}));
        EXPECT_EQ(bfr_id_to_si_bp(bsl, bsl), (SiBp{0, bsl}));
        EXPECT_EQ(bfr_id_to_si_bp(static_cast<BfrId>(bsl + 1), bsl), (SiBp{1, 1}));
        // 65535 - 1 = 65534 = (65536 / bsl - 1) * bsl + (bsl - 2), so BP is bsl - 1 in the last SI.
        EXPECT_EQ(bfr_id_to_si_bp(65535, bsl),
                  (SiBp{static_cast<uint16_t>(65536 / bsl - 1), static_cast<uint16_t>(bsl - 1)}));

        EXPECT_EQ(si_bp_to_bfr_id({0, 1}, bsl), 1);
        EXPECT_EQ(si_bp_to_bfr_id({0, bsl}, bsl), bsl);
        EXPECT_EQ(si_bp_to_bfr_id({1, 1}, bsl), bsl + 1);
        EXPECT_EQ(si_bp_to_bfr_id({static_cast<uint16_t>(65536 / bsl - 1),
                                   static_cast<uint16_t>(bsl - 1)}, bsl), 65535);
        // The last BP of the last SI would be BFR-id 65536.
        EXPECT_FALSE(si_bp_to_bfr_id({static_cast<uint16_t>(65536 / bsl - 1), bsl}, bsl));
        EXPECT_FALSE(si_bp_to_bfr_id({0, 0}, bsl));
        EXPECT_FALSE(si_bp_to_bfr_id({0, static_cast<uint16_t>(bsl + 1)}, bsl));
        EXPECT_FALSE(bfr_id_to_si_bp(0, bsl));
    }
    EXPECT_EQ(bfr_id_to_si_bp(65535, 64), (SiBp{1023, 63}));
    EXPECT_FALSE(bfr_id_to_si_bp(1, 0));
    EXPECT_FALSE(bfr_id_to_si_bp(1, 100));
    EXPECT_FALSE(si_bp_to_bfr_id({0, 1}, 32));
}

TEST(BfrIdMapping, RoundTripsEveryIdForEveryBsl) {
    for (const uint16_t bsl : kAllBsls) {
        for (uint32_t id = 1; id <= 65535; ++id) {
            const auto pos = bfr_id_to_si_bp(static_cast<BfrId>(id), bsl);
            ASSERT_TRUE(pos);
            ASSERT_GE(pos->bp, 1);
            ASSERT_LE(pos->bp, bsl);
            ASSERT_EQ(si_bp_to_bfr_id(*pos, bsl), id);
        }
    }
}

// ---- Wire bit order ----

TEST(WireBitOrder, Bp1IsTheLeastSignificantBitOfTheLastOctet) {
    for (const uint16_t bsl : kAllBsls) {
        SCOPED_TRACE(bsl);
        const size_t n = bsl_bytes(bsl);
        auto bs = BitString::zero(bsl).value();
        ASSERT_TRUE(bs.set(1));
        for (size_t i = 0; i + 1 < n; ++i) {
            EXPECT_EQ(bs.data()[i], 0);
        }
        EXPECT_EQ(bs.data()[n - 1], 0x01);

        bs.clear_all();
        bs.set(8);
        EXPECT_EQ(bs.data()[n - 1], 0x80);
        bs.clear_all();
        bs.set(9);
        EXPECT_EQ(bs.data()[n - 2], 0x01);
        bs.clear_all();
        bs.set(bsl);  // the highest BP is the MSB of the first octet
        EXPECT_EQ(bs.data()[0], 0x80);
        EXPECT_EQ(bs.popcount(), 1u);
    }
}

TEST(WireBitOrder, MatchesTheBierMdTestVector) {
    const BfrId ids[] = {1, 3, 256};
    const auto bs = BitString::from_bfr_ids(256, 0, ids).value();
    std::vector<uint8_t> expected(32, 0);
    expected.front() = 0x80;
    expected.back() = 0x05;
    EXPECT_EQ(std::vector<uint8_t>(bs.wire().begin(), bs.wire().end()), expected);
    EXPECT_EQ(bs.hex(), "80000000000000000000000000000000000000000000000000000000000000" "05");
}

// ---- BitString ----

TEST(BitString, DefaultIs256BitsAllClear) {
    const BitString bs;
    EXPECT_EQ(bs.bsl_bits(), 256);
    EXPECT_EQ(bs.size_bytes(), 32u);
    EXPECT_TRUE(bs.is_zero());
    EXPECT_EQ(bs.lowest_set_bp(), 0);
    EXPECT_EQ(bs.popcount(), 0u);
    EXPECT_EQ(bs, BitString::zero(256).value());
}

TEST(BitString, ZeroRejectsInvalidBsl) {
    EXPECT_FALSE(BitString::zero(0));
    EXPECT_FALSE(BitString::zero(32));
    EXPECT_FALSE(BitString::zero(8192));
    for (const uint16_t bsl : kAllBsls) {
        const auto bs = BitString::zero(bsl);
        ASSERT_TRUE(bs);
        EXPECT_EQ(bs->bsl_bits(), bsl);
        EXPECT_EQ(bs->size_bytes(), bsl / 8u);
    }
}

TEST(BitString, SetTestClearByBp) {
    auto bs = BitString::zero(128).value();
    EXPECT_FALSE(bs.set(0));
    EXPECT_FALSE(bs.set(129));
    EXPECT_FALSE(bs.test(0));
    EXPECT_FALSE(bs.test(129));
    EXPECT_FALSE(bs.clear(129));
    EXPECT_TRUE(bs.is_zero());

    EXPECT_TRUE(bs.set(128));
    EXPECT_TRUE(bs.set(65));
    EXPECT_TRUE(bs.set(64));
    EXPECT_TRUE(bs.test(64));
    EXPECT_TRUE(bs.test(65));
    EXPECT_TRUE(bs.test(128));
    EXPECT_FALSE(bs.test(1));
    EXPECT_EQ(bs.popcount(), 3u);
    EXPECT_EQ(bs.lowest_set_bp(), 64);
    EXPECT_TRUE(bs.clear(64));
    EXPECT_EQ(bs.lowest_set_bp(), 65);
    EXPECT_TRUE(bs.clear(65));
    EXPECT_EQ(bs.lowest_set_bp(), 128);
    EXPECT_TRUE(bs.clear(128));
    EXPECT_TRUE(bs.is_zero());
}

TEST(BitString, FromBfrIdsRejectsIdsOutsideTheSi) {
    const BfrId in_si1[] = {257, 300, 512};
    const auto bs = BitString::from_bfr_ids(256, 1, in_si1);
    ASSERT_TRUE(bs);
    EXPECT_TRUE(bs->test(1));
    EXPECT_TRUE(bs->test(44));
    EXPECT_TRUE(bs->test(256));
    EXPECT_EQ(bs->bfr_ids(1), (std::vector<BfrId>{257, 300, 512}));
    // The same bits read as SI 0 are other BFR-ids.
    EXPECT_EQ(bs->bfr_ids(0), (std::vector<BfrId>{1, 44, 256}));

    const BfrId crosses[] = {256, 257};
    EXPECT_FALSE(BitString::from_bfr_ids(256, 0, crosses));
    EXPECT_FALSE(BitString::from_bfr_ids(256, 1, crosses));
    const BfrId zero[] = {0};
    EXPECT_FALSE(BitString::from_bfr_ids(256, 0, zero));
    EXPECT_FALSE(BitString::from_bfr_ids(100, 0, {}));
    EXPECT_TRUE(BitString::from_bfr_ids(64, 5, {}).value().is_zero());
}

TEST(BitString, BfrIdsFailWhenABitHasNoBfrId) {
    auto bs = BitString::zero(256).value();
    bs.set(255);
    EXPECT_EQ(bs.bfr_ids(255), (std::vector<BfrId>{65535}));
    bs.set(256);  // SI 255, BP 256 would be BFR-id 65536
    EXPECT_FALSE(bs.bfr_ids(255));
    EXPECT_FALSE(bs.format_bfr_ids(255));
    EXPECT_EQ(bs.format_bfr_ids(0), "255,256");
}

TEST(BitString, SetAlgebra) {
    const auto a = BitString::parse_bfr_ids(512, 0, "1,2,5-8,300").value();
    const auto b = BitString::parse_bfr_ids(512, 0, "2,6,400").value();
    const auto c = BitString::parse_bfr_ids(512, 0, "1,2,5-8,300,512").value();
    const auto disjoint = BitString::parse_bfr_ids(512, 0, "3,4").value();

    EXPECT_EQ((a | b).format_bfr_ids(0), "1,2,5-8,300,400");
    EXPECT_EQ((a & b).format_bfr_ids(0), "2,6");
    auto d = a;
    d.and_not(b);
    EXPECT_EQ(d.format_bfr_ids(0), "1,5,7,8,300");
    EXPECT_TRUE(a.intersects(b));
    EXPECT_FALSE(a.intersects(disjoint));
    EXPECT_TRUE(a.is_subset_of(c));
    EXPECT_FALSE(c.is_subset_of(a));
    EXPECT_TRUE(a.is_subset_of(a));
    EXPECT_TRUE(BitString::zero(512)->is_subset_of(disjoint));
    EXPECT_FALSE(a.is_subset_of(b));

    EXPECT_EQ(a, a);
    EXPECT_NE(a, c);
    // Same bits, different BSL: not equal.
    EXPECT_NE(BitString::parse_bfr_ids(64, 0, "1").value(),
              BitString::parse_bfr_ids(128, 0, "1").value());
}

TEST(BitString, VatAggregationWalkthrough) {
    // draft-song-ina-00 Fig. 1: s1 aggregates w1,w2; s7 aggregates w3,w4; s6 aggregates both.
    const auto abm_s1 = BitString::parse_bfr_ids(64, 0, "1,2").value();
    const auto abm_s6 = BitString::parse_bfr_ids(64, 0, "1-4").value();
    const auto pbm_w1 = BitString::parse_bfr_ids(64, 0, "1").value();
    const auto pbm_w2 = BitString::parse_bfr_ids(64, 0, "2").value();
    const auto pbm_w3 = BitString::parse_bfr_ids(64, 0, "3").value();

    EXPECT_FALSE(pbm_w3.intersects(abm_s1));  // not s1's: forward toward the root
    auto absorbed = BitString::zero(64).value();
    ASSERT_TRUE(pbm_w1.is_subset_of(abm_s1));
    absorbed |= pbm_w1;
    EXPECT_NE(absorbed, abm_s1);
    absorbed |= pbm_w2;
    EXPECT_EQ(absorbed, abm_s1);  // complete: the result carries P-BM = A-BM(s1)
    EXPECT_TRUE(absorbed.is_subset_of(abm_s6));
}

TEST(BitString, FromWireCopiesBytesAndChecksLength) {
    std::vector<uint8_t> wire(16, 0);
    wire[15] = 0x03;
    wire[0] = 0x40;
    const auto bs = BitString::from_wire(128, wire);
    ASSERT_TRUE(bs);
    EXPECT_EQ(bs->format_bfr_ids(0), "1,2,127");
    EXPECT_FALSE(BitString::from_wire(256, wire));
    EXPECT_FALSE(BitString::from_wire(64, wire));
    EXPECT_FALSE(BitString::from_wire(100, wire));
}

// ---- Text: BFR-id lists ----

TEST(BfrIdListText, ParsesListsAndRanges) {
    EXPECT_EQ(parse_bfr_id_list("1,2,5-8"), (std::vector<BfrId>{1, 2, 5, 6, 7, 8}));
    EXPECT_EQ(parse_bfr_id_list(" 8 , 1 - 2,5-7 "), (std::vector<BfrId>{1, 2, 5, 6, 7, 8}));
    EXPECT_EQ(parse_bfr_id_list("3,3,1-3"), (std::vector<BfrId>{1, 2, 3}));
    EXPECT_EQ(parse_bfr_id_list("65535"), (std::vector<BfrId>{65535}));
    EXPECT_EQ(parse_bfr_id_list("4-4"), (std::vector<BfrId>{4}));
    EXPECT_EQ(parse_bfr_id_list("007"), (std::vector<BfrId>{7}));
    EXPECT_EQ(parse_bfr_id_list(""), (std::vector<BfrId>{}));
    EXPECT_EQ(parse_bfr_id_list("  "), (std::vector<BfrId>{}));
    EXPECT_EQ(parse_bfr_id_list("1-65535")->size(), 65535u);
}

TEST(BfrIdListText, Rejects) {
    for (const char* bad : {"0", "65536", "3-1", "x", "1,", ",1", "1,,2", "-", "1-", "-3", "+1",
                            "1 2", "1-2-3", "0-5", "5-65536", "99999999999999999999", "1.5",
                            "0x10", "1;2", "１"}) {
        EXPECT_FALSE(parse_bfr_id_list(bad)) << '"' << bad << '"';
    }
}

TEST(BfrIdListText, FormatsCanonically) {
    const BfrId ids[] = {8, 7, 6, 5, 2, 1, 1, 0, 10, 11, 65535};
    EXPECT_EQ(format_bfr_id_list(ids), "1,2,5-8,10,11,65535");
    EXPECT_EQ(format_bfr_id_list({}), "");
    const BfrId run[] = {3, 4, 5};
    EXPECT_EQ(format_bfr_id_list(run), "3-5");
}

TEST(BfrIdListText, RoundTrips) {
    for (const char* canonical : {"1,2,5-8", "", "1", "65535", "1-65535", "1,3,5,7", "2,3,9-11,400"}) {
        const auto ids = parse_bfr_id_list(canonical);
        ASSERT_TRUE(ids) << canonical;
        EXPECT_EQ(format_bfr_id_list(*ids), canonical);
    }
    for (const uint16_t bsl : kAllBsls) {
        const auto bs = BitString::parse_bfr_ids(bsl, 1, std::to_string(bsl + 1) + "," +
                                                              std::to_string(2 * bsl)).value();
        EXPECT_EQ(BitString::parse_bfr_ids(bsl, 1, bs.format_bfr_ids(1).value()), bs);
        EXPECT_EQ(bs.popcount(), 2u);
        EXPECT_TRUE(bs.test(1));
        EXPECT_TRUE(bs.test(bsl));
    }
    EXPECT_FALSE(BitString::parse_bfr_ids(256, 0, "257"));  // outside SI 0
    EXPECT_FALSE(BitString::parse_bfr_ids(256, 0, "x"));
}

// ---- Text: hex ----

TEST(BitStringHex, FormatsWireBytes) {
    auto bs = BitString::zero(64).value();
    EXPECT_EQ(bs.hex(), "0000000000000000");
    bs.set(1);
    bs.set(64);
    bs.set(12);
    EXPECT_EQ(bs.hex(), "8000000000000801");
}

TEST(BitStringHex, ParsesAsABigEndianNumber) {
    const auto five = BitString::parse_hex(256, "5").value();
    EXPECT_EQ(five.format_bfr_ids(0), "1,3");
    EXPECT_EQ(BitString::parse_hex(64, "0x8000_0000:0000 0801").value().format_bfr_ids(0), "1,12,64");
    EXPECT_EQ(BitString::parse_hex(64, "0XaBc").value().hex(), "0000000000000abc");
    EXPECT_EQ(BitString::parse_hex(64, "0").value(), BitString::zero(64).value());
    EXPECT_FALSE(BitString::parse_hex(64, ""));
    EXPECT_FALSE(BitString::parse_hex(64, "0x"));
    EXPECT_FALSE(BitString::parse_hex(64, "g"));
    EXPECT_FALSE(BitString::parse_hex(64, "-1"));
    EXPECT_FALSE(BitString::parse_hex(64, "00000000000000001"));  // 17 digits for 16
    EXPECT_FALSE(BitString::parse_hex(100, "1"));
}

TEST(BitStringHex, RoundTripsForEveryBsl) {
    for (const uint16_t bsl : kAllBsls) {
        auto bs = BitString::zero(bsl).value();
        for (uint16_t bp = 1; bp <= bsl; bp = static_cast<uint16_t>(bp * 3 + 1)) {
            bs.set(bp);
        }
        bs.set(bsl);
        const std::string hex = bs.hex();
        EXPECT_EQ(hex.size(), bsl / 4u);
        EXPECT_EQ(BitString::parse_hex(bsl, hex), bs);
        EXPECT_EQ(BitString::parse_hex(bsl, "0x" + hex), bs);
    }
}

}  // namespace
}  // namespace ina::wire
