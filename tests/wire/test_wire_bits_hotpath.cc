// SPDX-License-Identifier: Apache-2.0
// Differential tests of the word-wise raw-byte operations in bitstring.h against a naive
// bit-by-bit reference, over every BSL, at every pointer misalignment 0..7, with bit densities
// from empty to full, and with guard bytes that catch writes outside [dst, dst + len).
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "wire/bitstring.h"

namespace ina::wire {
namespace {

constexpr uint16_t kAllBsls[] = {64, 128, 256, 512, 1024, 2048, 4096};
constexpr size_t kGuard = 16;
constexpr uint8_t kGuardByte = 0xA5;

// The reference: a BitString as a vector of bools indexed by BP (index 0 unused), read straight
// from the definition "the BitString is a big-endian number and BP k is its bit k-1".
std::vector<bool> to_bits(const uint8_t* p, size_t len) {
    std::vector<bool> bits(len * 8 + 1, false);
    for (size_t byte = 0; byte < len; ++byte) {
        const size_t weight = (len - 1 - byte) * 8;  // number bit of this byte's LSB
        for (unsigned b = 0; b < 8; ++b) {
            bits[weight + b + 1] = ((p[byte] >> b) & 1u) != 0;
        }
    }
    return bits;
}

// A buffer with kGuard guard bytes before it and after it, whose data starts `misalign` bytes past
// a 64-byte boundary.
class GuardedBuffer {
public:
    GuardedBuffer(size_t len, size_t misalign)
        : storage_(kGuard + 64 + len + kGuard, kGuardByte), len_(len) {
        const auto base = reinterpret_cast<uintptr_t>(storage_.data() + kGuard);
        const size_t to_boundary = (64 - base % 64) % 64;
        offset_ = kGuard + to_boundary + misalign;
        std::memset(data(), 0, len);
    }
    uint8_t* data() { return storage_.data() + offset_; }
    bool guards_intact() const {
        for (size_t i = 0; i < storage_.size(); ++i) {
            const bool inside = i >= offset_ && i < offset_ + len_;
            if (!inside && storage_[i] != kGuardByte) {
                return false;
            }
        }
        return true;
    }

private:
    std::vector<uint8_t> storage_;
    size_t len_;
    size_t offset_ = 0;
};

class RandomBits {
public:
    explicit RandomBits(uint32_t seed) : rng_(seed) {}

    // Fills p with one of several shapes, so that every predicate comes out both true and false.
    void fill(uint8_t* p, size_t len) {
        switch (pick(6)) {
            case 0: std::memset(p, 0, len); break;
            case 1: std::memset(p, 0xFF, len); break;
            case 2:  // dense
                for (size_t i = 0; i < len; ++i) p[i] = static_cast<uint8_t>(rng_());
                break;
            default: {  // sparse: a few bits anywhere, often near either end
                std::memset(p, 0, len);
                const size_t count = pick(4);
                for (size_t i = 0; i < count; ++i) {
                    const size_t bit = pick(3) == 0 ? pick(16) : pick(len * 8);
                    const size_t at = pick(2) == 0 ? bit : len * 8 - 1 - bit;
                    p[at / 8] = static_cast<uint8_t>(p[at / 8] | (1u << (at % 8)));
                }
                break;
            }
        }
    }
    // b derived from a: equal, a subset of a, or a superset of a.
    void derive(const uint8_t* a, uint8_t* b, size_t len) {
        std::vector<uint8_t> noise(len);
        fill(noise.data(), len);
        for (size_t i = 0; i < len; ++i) {
            switch (pick(3)) {
                case 0: b[i] = a[i]; break;
                case 1: b[i] = static_cast<uint8_t>(a[i] & noise[i]); break;
                default: b[i] = static_cast<uint8_t>(a[i] | noise[i]); break;
            }
        }
    }
    size_t pick(size_t n) { return std::uniform_int_distribution<size_t>(0, n - 1)(rng_); }

private:
    std::mt19937 rng_;
};

class HotPath : public ::testing::TestWithParam<uint16_t> {};

TEST_P(HotPath, MatchesBitByBitReference) {
    const uint16_t bsl = GetParam();
    const size_t len = bsl_bytes(bsl);
    RandomBits random(0xB1E5u + bsl);
    size_t intersect_true = 0, subset_true = 0, equal_true = 0, zero_true = 0;

    for (int iteration = 0; iteration < 3000; ++iteration) {
        GuardedBuffer a(len, random.pick(8));
        GuardedBuffer b(len, random.pick(8));
        GuardedBuffer dst(len, random.pick(8));
        random.fill(a.data(), len);
        if (random.pick(2) == 0) {
            random.derive(a.data(), b.data(), len);
        } else {
            random.fill(b.data(), len);
        }
        const auto ra = to_bits(a.data(), len);
        const auto rb = to_bits(b.data(), len);

        bool ref_intersect = false, ref_subset = true, ref_equal = true, ref_zero = true;
        uint16_t ref_lowest = 0;
        size_t ref_popcount = 0;
        for (size_t bp = 1; bp <= bsl; ++bp) {
            ref_intersect |= ra[bp] && rb[bp];
            ref_subset &= !ra[bp] || rb[bp];
            ref_equal &= ra[bp] == rb[bp];
            ref_zero &= !ra[bp];
            if (ra[bp]) {
                ++ref_popcount;
                if (ref_lowest == 0) ref_lowest = static_cast<uint16_t>(bp);
            }
        }
        ASSERT_EQ(bits_intersect(a.data(), b.data(), len), ref_intersect);
        ASSERT_EQ(bits_subset(a.data(), b.data(), len), ref_subset);
        ASSERT_EQ(bits_equal(a.data(), b.data(), len), ref_equal);
        ASSERT_EQ(bits_is_zero(a.data(), len), ref_zero);
        ASSERT_EQ(lowest_set_bp(a.data(), len), ref_lowest);
        ASSERT_EQ(bits_popcount(a.data(), len), ref_popcount);
        for (uint16_t bp = 0; bp <= bsl + 1; bp = static_cast<uint16_t>(bp + 1 + random.pick(40))) {
            ASSERT_EQ(bits_test_bp(a.data(), len, bp), bp >= 1 && bp <= bsl && ra[bp]) << bp;
        }
        intersect_true += ref_intersect;
        subset_true += ref_subset;
        equal_true += ref_equal;
        zero_true += ref_zero;

        const auto check_into = [&](auto op, auto ref_op, const char* name) {
            std::memcpy(dst.data(), a.data(), len);
            op(dst.data(), b.data(), len);
            const auto got = to_bits(dst.data(), len);
            for (size_t bp = 1; bp <= bsl; ++bp) {
                ASSERT_EQ(got[bp], ref_op(ra[bp], rb[bp])) << name << " bp " << bp;
            }
            ASSERT_TRUE(dst.guards_intact()) << name;
        };
        check_into(bits_or_into, [](bool x, bool y) { return x || y; }, "or");
        check_into(bits_and_into, [](bool x, bool y) { return x && y; }, "and");
        check_into(bits_andnot_into, [](bool x, bool y) { return x && !y; }, "andnot");
        check_into([](uint8_t* d, const uint8_t* s, size_t n) { bits_and_copy(d, d, s, n); },
                   [](bool x, bool y) { return x && y; }, "and_copy in place");

        // Three-operand AND into a fresh buffer, as a BIER copy's header is written.
        std::memset(dst.data(), 0x5A, len);
        bits_and_copy(dst.data(), a.data(), b.data(), len);
        const auto got = to_bits(dst.data(), len);
        for (size_t bp = 1; bp <= bsl; ++bp) {
            ASSERT_EQ(got[bp], ra[bp] && rb[bp]) << "and_copy bp " << bp;
        }
        ASSERT_TRUE(dst.guards_intact());
        // The read-only operands were never written.
        ASSERT_TRUE(a.guards_intact());
        ASSERT_TRUE(b.guards_intact());
        ASSERT_EQ(to_bits(a.data(), len), ra);
        ASSERT_EQ(to_bits(b.data(), len), rb);
    }
    // The generator reached both outcomes of every predicate.
    EXPECT_GT(intersect_true, 100u);
    EXPECT_GT(subset_true, 100u);
    EXPECT_GT(equal_true, 100u);
    EXPECT_GT(zero_true, 100u);
}

TEST_P(HotPath, SetAndClearSingleBitsAtEveryBpAndAlignment) {
    const uint16_t bsl = GetParam();
    const size_t len = bsl_bytes(bsl);
    for (size_t misalign = 0; misalign < 8; ++misalign) {
        GuardedBuffer buf(len, misalign);
        for (unsigned bp = 1; bp <= bsl; ++bp) {
            ASSERT_TRUE(bits_set_bp(buf.data(), len, static_cast<uint16_t>(bp)));
            ASSERT_EQ(lowest_set_bp(buf.data(), len), bp);
            ASSERT_EQ(bits_popcount(buf.data(), len), 1u);
            const auto bits = to_bits(buf.data(), len);
            ASSERT_TRUE(bits[bp]);
            ASSERT_TRUE(bits_clear_bp(buf.data(), len, static_cast<uint16_t>(bp)));
            ASSERT_TRUE(bits_is_zero(buf.data(), len));
        }
        ASSERT_FALSE(bits_set_bp(buf.data(), len, 0));
        ASSERT_FALSE(bits_set_bp(buf.data(), len, static_cast<uint16_t>(bsl + 1)));
        ASSERT_FALSE(bits_clear_bp(buf.data(), len, static_cast<uint16_t>(bsl + 1)));
        ASSERT_TRUE(bits_is_zero(buf.data(), len));
        ASSERT_EQ(lowest_set_bp(buf.data(), len), 0);
        ASSERT_TRUE(buf.guards_intact());
    }
}

// The RFC 8279 §6.5 forwarding loop over raw bytes, as the dataplane will run it: every copy
// carries BS & F-BM, BS &= ~F-BM after each copy, and every BFER is reached exactly once.
TEST_P(HotPath, BierReplicationLoopReachesEachBferOnce) {
    const uint16_t bsl = GetParam();
    const size_t len = bsl_bytes(bsl);
    RandomBits random(42u + bsl);
    constexpr size_t kNeighbours = 5;
    // F-BMs: each BP is behind one random neighbour (the F-BMs partition the BPs).
    std::vector<std::vector<uint8_t>> fbm(kNeighbours, std::vector<uint8_t>(len, 0));
    for (uint16_t bp = 1; bp <= bsl; ++bp) {
        bits_set_bp(fbm[random.pick(kNeighbours)].data(), len, bp);
    }
    for (int iteration = 0; iteration < 200; ++iteration) {
        GuardedBuffer packet_bs(len, random.pick(8));
        random.fill(packet_bs.data(), len);
        const auto original = to_bits(packet_bs.data(), len);
        std::vector<int> delivered(bsl + 1u, 0);
        std::vector<uint8_t> copy(len);
        while (const uint16_t bp = lowest_set_bp(packet_bs.data(), len)) {
            size_t nbr = 0;
            while (!bits_test_bp(fbm[nbr].data(), len, bp)) ++nbr;
            bits_and_copy(copy.data(), packet_bs.data(), fbm[nbr].data(), len);
            for (uint16_t k = 1; k <= bsl; ++k) {
                delivered[k] += bits_test_bp(copy.data(), len, k);
            }
            bits_andnot_into(packet_bs.data(), fbm[nbr].data(), len);
        }
        for (uint16_t k = 1; k <= bsl; ++k) {
            ASSERT_EQ(delivered[k], original[k] ? 1 : 0) << k;
        }
        ASSERT_TRUE(packet_bs.guards_intact());
    }
}

INSTANTIATE_TEST_SUITE_P(AllBsls, HotPath, ::testing::ValuesIn(kAllBsls));

}  // namespace
}  // namespace ina::wire
