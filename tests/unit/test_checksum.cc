// SPDX-License-Identifier: Apache-2.0
// Internet checksum (RFC 1071) and its incremental update (RFC 1624).
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "net/checksum.h"

namespace {

using ina::net::checksum_update16;
using ina::net::internet_checksum;
using ina::net::ones_complement_sum;

// The two bytes a raw (memory-order) 16-bit value occupies, read as a big-endian number.
uint16_t wire(uint16_t raw) {
    uint8_t b[2];
    std::memcpy(b, &raw, 2);
    return static_cast<uint16_t>(b[0] << 8 | b[1]);
}

uint16_t raw_word(const uint8_t* p) {
    uint16_t w;
    std::memcpy(&w, p, 2);
    return w;
}

void store_word(uint8_t* p, uint16_t raw) { std::memcpy(p, &raw, 2); }

// A real IPv4 header (the commonly cited example: UDP 192.168.0.1 -> 192.168.0.199) whose
// checksum is 0xb861.
constexpr std::array<uint8_t, 20> kHeader = {0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40,
                                             0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
                                             0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7};

TEST(Checksum, KnownIpv4Header) {
    auto h = kHeader;
    h[10] = h[11] = 0;
    const uint16_t ck = internet_checksum(h.data(), h.size());
    EXPECT_EQ(wire(ck), 0xb861);
    // Stored as is, it lands in the header in the right byte order.
    store_word(&h[10], ck);
    EXPECT_EQ(h, kHeader);
}

TEST(Checksum, ValidHeaderSumsToAllOnes) {
    EXPECT_EQ(ones_complement_sum(kHeader.data(), kHeader.size()), 0xffff);
    EXPECT_EQ(internet_checksum(kHeader.data(), kHeader.size()), 0);
    auto h = kHeader;
    h[8] = 0x3f;  // TTL changed without fixing the checksum
    EXPECT_NE(ones_complement_sum(h.data(), h.size()), 0xffff);
}

TEST(Checksum, Rfc1071Example) {
    // RFC 1071 section 3: the sum of these eight bytes is ddf2 (before complementing).
    const uint8_t data[] = {0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7};
    EXPECT_EQ(wire(ones_complement_sum(data, sizeof data)), 0xddf2);
    EXPECT_EQ(wire(internet_checksum(data, sizeof data)), 0x220d);
}

TEST(Checksum, KnownIcmpEchoRequest) {
    // ICMP echo request, id 0x0001, seq 0x0001, payload "abcd"; checksum computed by hand:
    // 0x0800 + 0x0001 + 0x0001 + 0x6162 + 0x6364 = 0xccc8 -> ~ = 0x3337.
    uint8_t icmp[] = {0x08, 0x00, 0x00, 0x00, 0x00, 0x01, 0x00, 0x01, 'a', 'b', 'c', 'd'};
    EXPECT_EQ(wire(internet_checksum(icmp, sizeof icmp)), 0x3337);
}

TEST(Checksum, OddLengthPadsWithZero) {
    const uint8_t odd[] = {0x01, 0x02, 0x03};
    const uint8_t padded[] = {0x01, 0x02, 0x03, 0x00};
    EXPECT_EQ(wire(ones_complement_sum(odd, sizeof odd)), 0x0402);
    EXPECT_EQ(ones_complement_sum(odd, sizeof odd), ones_complement_sum(padded, sizeof padded));
    const uint8_t one[] = {0xab};
    EXPECT_EQ(wire(ones_complement_sum(one, 1)), 0xab00);
    EXPECT_EQ(wire(internet_checksum(one, 1)), 0x54ff);
}

TEST(Checksum, OddLengthRandomBuffersMatchPaddedOnes) {
    std::mt19937 rng(7);
    for (size_t len = 1; len < 200; len += 2) {
        std::vector<uint8_t> buf(len + 1);
        for (auto& b : buf) {
            b = static_cast<uint8_t>(rng());
        }
        buf[len] = 0;
        EXPECT_EQ(ones_complement_sum(buf.data(), len), ones_complement_sum(buf.data(), len + 1))
            << len;
    }
}

TEST(Checksum, EmptyBufferAndInitialValue) {
    EXPECT_EQ(ones_complement_sum(nullptr, 0), 0);
    EXPECT_EQ(internet_checksum(nullptr, 0), 0xffff);
    // A sum can be continued from a previous partial sum: split at an even offset.
    std::array<uint8_t, 20> h = kHeader;
    const uint16_t first = ones_complement_sum(h.data(), 8);
    EXPECT_EQ(ones_complement_sum(h.data() + 8, 12, first), ones_complement_sum(h.data(), 20));
}

TEST(Checksum, CarriesFoldAcrossManyWords) {
    // 64 KiB of 0xff: every addition carries; the folded sum must stay all ones.
    std::vector<uint8_t> ff(65536, 0xff);
    EXPECT_EQ(ones_complement_sum(ff.data(), ff.size()), 0xffff);
    std::vector<uint8_t> mixed(4096);
    for (size_t i = 0; i < mixed.size(); ++i) {
        mixed[i] = static_cast<uint8_t>(0xf0 | (i & 0x0f));
    }
    // Reference: a naive big-endian sum with end-around carry folded at each step.
    uint32_t ref = 0;
    for (size_t i = 0; i < mixed.size(); i += 2) {
        ref += static_cast<uint32_t>(mixed[i] << 8 | mixed[i + 1]);
        ref = (ref & 0xffff) + (ref >> 16);
    }
    EXPECT_EQ(wire(ones_complement_sum(mixed.data(), mixed.size())), ref);
}

TEST(Checksum, WideWordsMatchNaiveSumAtEveryLengthAndAlignment) {
    // The 64-byte add-with-carry chain (x86-64), the 16-byte steps with their counted carries,
    // the 4-byte tail and the fold agree with a 16-bit big-endian sum folded at each step, for
    // every length around the step sizes, any start alignment, and bytes biased to 0xff so that
    // the 64-bit additions carry often.
    std::mt19937 rng(20261124);
    std::vector<uint8_t> buf(1100);
    for (int round = 0; round < 4; ++round) {
        for (auto& b : buf) {
            b = static_cast<uint8_t>(round % 2 == 0 ? (rng() | 0xf0) : rng());
        }
        for (size_t off = 0; off < 8; ++off) {
            for (size_t len = 0; len + off <= buf.size(); len += (len < 80 ? 1 : 37)) {
                const uint8_t* p = buf.data() + off;
                uint32_t ref = 0;
                for (size_t i = 0; i < len; i += 2) {
                    ref += static_cast<uint32_t>(p[i] << 8 | (i + 1 < len ? p[i + 1] : 0));
                    ref = (ref & 0xffff) + (ref >> 16);
                }
                ASSERT_EQ(wire(ones_complement_sum(p, len)), ref) << "len " << len << " off " << off;
            }
        }
    }
}

// Builds a random IPv4 header of `ihl` words with a correct checksum.
std::vector<uint8_t> random_header(std::mt19937& rng, unsigned ihl) {
    std::vector<uint8_t> h(ihl * 4);
    for (auto& b : h) {
        b = static_cast<uint8_t>(rng());
    }
    h[0] = static_cast<uint8_t>(0x40 | ihl);
    h[10] = h[11] = 0;
    store_word(&h[10], internet_checksum(h.data(), h.size()));
    return h;
}

TEST(Checksum, IncrementalTtlDecrementMatchesFullRecompute) {
    std::mt19937 rng(20221122);
    int checked = 0;
    for (int i = 0; i < 20000; ++i) {
        auto h = random_header(rng, 5 + static_cast<unsigned>(rng() % 11));
        if (h[8] == 0) {
            h[8] = 1;
            h[10] = h[11] = 0;
            store_word(&h[10], internet_checksum(h.data(), h.size()));
        }
        const uint16_t old_word = raw_word(&h[8]);  // TTL and protocol
        --h[8];
        const uint16_t new_word = raw_word(&h[8]);
        const uint16_t incremental = checksum_update16(raw_word(&h[10]), old_word, new_word);

        auto full = h;
        full[10] = full[11] = 0;
        const uint16_t recomputed = internet_checksum(full.data(), full.size());
        ASSERT_EQ(incremental, recomputed) << "iteration " << i;
        store_word(&h[10], incremental);
        ASSERT_EQ(ones_complement_sum(h.data(), h.size()), 0xffff) << "iteration " << i;
        ++checked;
    }
    EXPECT_EQ(checked, 20000);
}

TEST(Checksum, IncrementalUpdateOfAnyWordMatchesFullRecompute) {
    std::mt19937 rng(1624);
    for (int i = 0; i < 20000; ++i) {
        auto h = random_header(rng, 5);
        size_t word = rng() % 10;
        if (word == 5) {
            word = 4;  // not the checksum itself
        }
        const uint16_t old_word = raw_word(&h[word * 2]);
        const uint16_t new_word = static_cast<uint16_t>(rng());
        store_word(&h[word * 2], new_word);
        const uint16_t incremental = checksum_update16(raw_word(&h[10]), old_word, new_word);
        auto full = h;
        full[10] = full[11] = 0;
        ASSERT_EQ(incremental, internet_checksum(full.data(), full.size())) << "iteration " << i;
    }
}

TEST(Checksum, IncrementalUpdateThatLandsOnZero) {
    // Headers built so that the checksum after the TTL decrement is 0x0000: RFC 1624 eqn. 3 must
    // give 0x0000 there too, never 0xffff (-0), or the header would not verify as recomputed.
    std::mt19937 rng(99);
    for (int i = 0; i < 1000; ++i) {
        auto after = random_header(rng, 5);
        if (after[8] == 0xff) {
            after[8] = 0xfe;
        }
        // Choose the identification word so that the header sums to all ones with a zero
        // checksum field, i.e. its checksum is 0x0000.
        after[10] = after[11] = 0;
        after[4] = after[5] = 0;
        const uint16_t rest = ones_complement_sum(after.data(), after.size());
        store_word(&after[4], static_cast<uint16_t>(~rest));
        ASSERT_EQ(internet_checksum(after.data(), after.size()), 0) << i;

        auto before = after;
        ++before[8];
        store_word(&before[10], internet_checksum(before.data(), before.size()));
        const uint16_t incremental =
            checksum_update16(raw_word(&before[10]), raw_word(&before[8]), raw_word(&after[8]));
        ASSERT_EQ(incremental, 0) << i;
    }
    // The sum can carry twice: a zero checksum (sum 0xffff) plus one more needs a second fold.
    EXPECT_EQ(checksum_update16(0x0000, 0x0000, 0x0001), 0xfffe);
    EXPECT_EQ(checksum_update16(0x0000, 0x0000, 0xffff), 0x0000);
    {
        std::mt19937 rng2(5);
        auto h = random_header(rng2, 5);
        h[6] = h[7] = 0;  // flags/fragment word is zero
        h[10] = h[11] = 0;
        h[4] = h[5] = 0;
        const uint16_t rest = ones_complement_sum(h.data(), h.size());
        store_word(&h[4], static_cast<uint16_t>(~rest));
        ASSERT_EQ(internet_checksum(h.data(), h.size()), 0);  // stored checksum stays 0x0000
        const uint16_t old_word = raw_word(&h[6]);
        h[7] = 1;
        const uint16_t incremental = checksum_update16(0, old_word, raw_word(&h[6]));
        EXPECT_EQ(incremental, internet_checksum(h.data(), h.size()));
    }
    // An unchanged word leaves the checksum unchanged.
    EXPECT_EQ(checksum_update16(0x1234, 0xabcd, 0xabcd), 0x1234);
    EXPECT_EQ(checksum_update16(0x0000, 0x0000, 0x0000), 0x0000);
}

}  // namespace
