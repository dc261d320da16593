// SPDX-License-Identifier: Apache-2.0
// Every SIMD kernel against the scalar reference, bit for bit: every op x element type x ISA this
// CPU runs, random data (fixed seeds) of many lengths, unaligned wire pointers, three
// contributions per slot, and guard bytes around every array to catch over-reads/writes.
#include <gtest/gtest.h>

#include <tuple>

#include "reduce_test_util.h"

namespace ina::reduce::test {
namespace {

constexpr size_t kLengths[] = {0,  1,  2,  3,  7,  8,  9,   15,  16,  17,  31,  32,   33,
                               63, 64, 65, 100, 127, 128, 129, 255, 256, 257, 512, 1023, 1024, 1025};
constexpr size_t kWireOffsets[] = {0, 1, 2, 3, 5};  // bytes past a 64-byte boundary
constexpr unsigned char kGuard = 0xA5;
constexpr size_t kGuardBytes = 64;

using Param = std::tuple<Isa, ElemType, Op>;

class KernelVsScalar : public ::testing::TestWithParam<Param> {};

// One slot's life on two kernel tables side by side: load A, accumulate B and C, store; every
// intermediate accumulator and the output must be identical, and guard bytes untouched.
TEST_P(KernelVsScalar, BitExactOnRandomData) {
    const auto [isa, type, op] = GetParam();
    if (!isa_supported(isa)) GTEST_SKIP() << to_string(isa) << " not supported on this CPU";
    const Kernels& k = select_kernels(isa);
    const Kernels& ref = select_kernels(Isa::scalar);
    ASSERT_EQ(k.isa, isa);
    ASSERT_EQ(ref.isa, Isa::scalar);

    const size_t es = elem_size(type);
    const size_t as = acc_elem_size(type);
    std::mt19937_64 rng(0x5EED0000u + 16u * static_cast<unsigned>(type) + static_cast<unsigned>(op));
    size_t checked = 0;
    for (const size_t n : kLengths) {
        for (const size_t off : kWireOffsets) {
            // The accumulator sits at a 64-byte boundary, or one element past it (the kernels do
            // not rely on more than element alignment, though callers must give 64).
            for (const size_t acc_off : {size_t{0}, as}) {
                const std::string where = std::string(to_string(isa)) + " " +
                                          std::string(to_string(type)) + " " +
                                          std::string(to_string(op)) + " n=" + std::to_string(n) +
                                          " wire+" + std::to_string(off) + " acc+" +
                                          std::to_string(acc_off);
                AlignedBuf a(n * es + 64), b(n * es + 64), c(n * es + 64);
                fill_random(type, a.data() + off, n, rng);
                fill_random(type, b.data() + off, n, rng, a.data() + off);
                fill_random(type, c.data() + off, n, rng, b.data() + off);

                const size_t acc_len = acc_off + n * as + kGuardBytes;
                AlignedBuf acc_k(acc_len), acc_r(acc_len);
                std::memset(acc_k.data(), kGuard, acc_len);
                std::memset(acc_r.data(), kGuard, acc_len);
                unsigned char* ak = acc_k.data() + acc_off;
                unsigned char* ar = acc_r.data() + acc_off;

                k.load(type, ak, a.data() + off, n);
                ref.load(type, ar, a.data() + off, n);
                ASSERT_TRUE(same_elems(ak, ar, n, as, where + " after load"));

                k.accumulate(type, ak, b.data() + off, n, op);
                ref.accumulate(type, ar, b.data() + off, n, op);
                ASSERT_TRUE(same_elems(ak, ar, n, as, where + " after 2nd contribution"));

                k[type].accumulator(op)(ak, c.data() + off, n);
                ref[type].accumulator(op)(ar, c.data() + off, n);
                ASSERT_TRUE(same_elems(ak, ar, n, as, where + " after 3rd contribution"));
                ASSERT_TRUE(all_bytes(acc_k.data(), acc_off, kGuard)) << where << ": wrote before acc";
                ASSERT_TRUE(all_bytes(ak + n * as, kGuardBytes, kGuard)) << where << ": wrote past acc";

                const size_t out_len = off + n * es + kGuardBytes;
                AlignedBuf out_k(out_len), out_r(out_len);
                std::memset(out_k.data(), kGuard, out_len);
                std::memset(out_r.data(), kGuard, out_len);
                k.store(type, out_k.data() + off, ak, n);
                ref.store(type, out_r.data() + off, ar, n);
                ASSERT_TRUE(same_elems(out_k.data() + off, out_r.data() + off, n, es, where + " store"));
                ASSERT_TRUE(all_bytes(out_k.data(), off, kGuard)) << where << ": wrote before out";
                ASSERT_TRUE(all_bytes(out_k.data() + off + n * es, kGuardBytes, kGuard))
                    << where << ": wrote past out";
                ++checked;
            }
        }
    }
    EXPECT_EQ(checked, std::size(kLengths) * std::size(kWireOffsets) * 2);
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
    const auto [isa, type, op] = info.param;
    return std::string(to_string(isa)) + "_" + std::string(to_string(type)) + "_" +
           std::string(to_string(op));
}

INSTANTIATE_TEST_SUITE_P(AllIsasTypesOps, KernelVsScalar,
                         ::testing::Combine(::testing::ValuesIn(all_isas()), ::testing::ValuesIn(all_types()),
                                            ::testing::ValuesIn(all_ops())),
                         param_name);

using RoundTripParam = std::tuple<Isa, ElemType>;
std::string isa_type_name(const ::testing::TestParamInfo<RoundTripParam>& p) {
    return std::string(to_string(std::get<0>(p.param))) + "_" +
           std::string(to_string(std::get<1>(p.param)));
}
class LoadStore : public ::testing::TestWithParam<RoundTripParam> {};

// A store of what load wrote gives the input back, for every non-NaN value (the widening is
// exact); NaNs come back as the canonical quiet NaN.
TEST_P(LoadStore, RoundTrip) {
    const auto [isa, type] = GetParam();
    if (!isa_supported(isa)) GTEST_SKIP() << to_string(isa) << " not supported on this CPU";
    const Kernels& k = select_kernels(isa);
    const size_t es = elem_size(type);
    std::mt19937_64 rng(0xC0FFEEu + static_cast<unsigned>(type));
    for (const size_t n : kLengths) {
        AlignedBuf in(n * es + 64), out(n * es + 64);
        AlignedBuf acc(acc_bytes(type, n) + 64);
        fill_random(type, in.data() + 3, n, rng);
        k.load(type, acc.data(), in.data() + 3, n);
        k.store(type, out.data() + 1, acc.data(), n);
        for (size_t i = 0; i < n; ++i) {
            const uint64_t x = get_elem(in.data() + 3 + i * es, es);
            const uint64_t y = get_elem(out.data() + 1 + i * es, es);
            if (is_float(type)) {
                const FloatFormat f = format_of(type);
                const uint64_t mag = x & ~(1ull << (f.width - 1));
                const uint64_t inf = ((1ull << f.exp_bits) - 1) << f.mant_bits;
                if (mag > inf) {  // NaN in: the canonical quiet NaN out
                    const uint64_t canon = inf | (1ull << (f.mant_bits - 1));
                    ASSERT_EQ(y, canon) << to_string(type) << " n=" << n << " i=" << i;
                    continue;
                }
            }
            ASSERT_EQ(y, x) << to_string(isa) << " " << to_string(type) << " n=" << n << " i=" << i;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(AllIsasTypes, LoadStore,
                         ::testing::Combine(::testing::ValuesIn(all_isas()), ::testing::ValuesIn(all_types())),
                         isa_type_name);

class SingleNan : public ::testing::TestWithParam<RoundTripParam> {};

// AVX2's fp32 sum tests four vectors at a time for a NaN and canonicalises only then: a single
// NaN (signalling or quiet, either sign) at any position of the loaded or of the added
// contribution comes out as the scalar reference's canonical NaN on every ISA, and every finite
// element around it stays bit-exact. 277 elements: four-vector steps, single vectors and a tail
// for every vector width and element size.
TEST_P(SingleNan, AtEveryPositionOfTheLoadedOrTheAddedContribution) {
    const auto [isa, type] = GetParam();
    if (!isa_supported(isa)) GTEST_SKIP() << to_string(isa) << " not supported on this CPU";
    const Kernels& k = select_kernels(isa);
    const Kernels& ref = select_kernels(Isa::scalar);
    constexpr size_t n = 277;
    const size_t es = elem_size(type);
    const size_t as = acc_elem_size(type);
    const FloatFormat f = format_of(type);
    const uint64_t exp_max = (uint64_t{1} << f.exp_bits) - 1;
    const uint64_t top_exp_bit = uint64_t{1} << (f.mant_bits + f.exp_bits - 1);
    std::mt19937_64 rng(0x5EEDA000u + static_cast<unsigned>(type));
    AlignedBuf a(n * es + 64), b(n * es + 64);
    fill_random(type, a.data() + 1, n, rng);
    fill_random(type, b.data() + 1, n, rng, a.data() + 1);
    for (unsigned char* buf : {a.data() + 1, b.data() + 1}) {  // finite: no Inf, no NaN
        for (size_t i = 0; i < n; ++i) {
            const uint64_t v = get_elem(buf + i * es, es);
            if (((v >> f.mant_bits) & exp_max) == exp_max) put_elem(buf + i * es, es, v & ~top_exp_bit);
        }
    }
    AlignedBuf acc_k(n * as + 64), acc_r(n * as + 64);
    size_t checked = 0;
    for (const bool in_loaded : {true, false}) {
        for (size_t pos = 0; pos < n; ++pos) {
            unsigned char* at = (in_loaded ? a.data() : b.data()) + 1 + pos * es;
            const uint64_t saved = get_elem(at, es);
            const uint64_t sign = pos % 2 ? uint64_t{1} << (f.width - 1) : 0;
            const uint64_t payload = pos % 3 == 0 ? uint64_t{1}                          // signalling
                                                  : uint64_t{1} << (f.mant_bits - 1);  // quiet
            put_elem(at, es, sign | (exp_max << f.mant_bits) | payload);
            k.load(type, acc_k.data(), a.data() + 1, n);
            ref.load(type, acc_r.data(), a.data() + 1, n);
            k.accumulate(type, acc_k.data(), b.data() + 1, n, Op::sum);
            ref.accumulate(type, acc_r.data(), b.data() + 1, n, Op::sum);
            put_elem(at, es, saved);
            const std::string where = std::string(to_string(isa)) + " " +
                                      std::string(to_string(type)) + " NaN at " +
                                      std::to_string(pos) + (in_loaded ? " loaded" : " added");
            ASSERT_TRUE(same_elems(acc_k.data(), acc_r.data(), n, as, where));
            ++checked;
        }
    }
    EXPECT_EQ(checked, 2 * n);
}

INSTANTIATE_TEST_SUITE_P(AllIsasFloatTypes, SingleNan,
                         ::testing::Combine(::testing::ValuesIn(all_isas()),
                                            ::testing::Values(ElemType::fp32, ElemType::fp64,
                                                              ElemType::fp16, ElemType::bf16)),
                         isa_type_name);

// RFC 1071 written out: 16-bit words of the bytes in memory order (little-endian host), an odd
// last byte as a word's first byte, end-around carries folded one at a time.
uint32_t naive_ones_complement_sum(const unsigned char* p, size_t len) {
    uint32_t sum = 0;
    for (size_t i = 0; i < len; i += 2) {
        sum += p[i] | (i + 1 < len ? p[i + 1] << 8 : 0);
        while (sum > 0xffff) sum = (sum & 0xffff) + (sum >> 16);
    }
    return sum;
}

class StoreSum : public ::testing::TestWithParam<RoundTripParam> {};

// store_sum writes exactly what store writes (no byte before or past out), and returns the naive
// one's-complement sum of those bytes: every length up to four vectors and more, every output
// alignment within a 64-byte line, random elements and (integers) all-ones elements, whose
// 0xff bytes carry out of every word.
TEST_P(StoreSum, WritesWhatStoreWritesAndSumsItAtEveryLengthAndAlignment) {
    const auto [isa, type] = GetParam();
    if (!isa_supported(isa)) GTEST_SKIP() << to_string(isa) << " not supported on this CPU";
    const Kernels& k = select_kernels(isa);
    ASSERT_NE(k[type].store_sum, nullptr);
    const size_t es = elem_size(type);
    std::mt19937_64 rng(0x5A5Au + static_cast<unsigned>(type));
    size_t checked = 0;
    for (const bool ones : {false, true}) {
        if (ones && is_float(type)) continue;
        for (size_t n = 0; n <= 300; n = n < 80 ? n + 1 : n + 7) {
            AlignedBuf in(n * es + 64);
            AlignedBuf acc(acc_bytes(type, n) + 64);
            if (ones) {
                std::memset(in.data(), 0xff, n * es);
            } else {
                fill_random(type, in.data(), n, rng);
            }
            k.load(type, acc.data(), in.data(), n);
            for (size_t off = 0; off < 64; ++off) {
                const std::string where = std::string(to_string(isa)) + " " +
                                          std::string(to_string(type)) + " n=" +
                                          std::to_string(n) + " out+" + std::to_string(off) +
                                          (ones ? " all-ones" : "");
                const size_t out_len = off + n * es + kGuardBytes;
                AlignedBuf want(out_len), got(out_len);
                std::memset(want.data(), kGuard, out_len);
                std::memset(got.data(), kGuard, out_len);
                k.store(type, want.data() + off, acc.data(), n);
                const uint32_t sum = k[type].store_sum(got.data() + off, acc.data(), n);
                ASSERT_EQ(std::memcmp(got.data(), want.data(), out_len), 0) << where;
                ASSERT_EQ(sum, naive_ones_complement_sum(want.data() + off, n * es)) << where;
                ++checked;
            }
        }
    }
    EXPECT_GT(checked, 64u * 100);
}

INSTANTIATE_TEST_SUITE_P(AllIsasTypes, StoreSum,
                         ::testing::Combine(::testing::ValuesIn(all_isas()), ::testing::ValuesIn(all_types())),
                         isa_type_name);

// sum_bytes (a received datagram's checksum) against the naive RFC 1071 sum: every length up to
// past four vectors and a 1 KiB datagram's, every start within a 64-byte line, random bytes and
// all-ones bytes (whose words carry out of every lane), on every ISA the CPU runs.
TEST(SumBytes, MatchesNaiveSumAtEveryLengthAndAlignment) {
    std::mt19937_64 rng(0xC5C5u);
    size_t checked = 0;
    for (const Isa isa : all_isas()) {
        if (!isa_supported(isa)) continue;
        const Kernels& k = select_kernels(isa);
        ASSERT_NE(k.sum_bytes, nullptr) << to_string(isa);
        for (const bool ones : {false, true}) {
            for (size_t len = 0; len <= 1100; len = len < 300 ? len + 1 : len + 37) {
                AlignedBuf buf(len + 64);
                for (size_t i = 0; i < len + 64; ++i) {
                    buf.data()[i] = ones ? 0xff : static_cast<unsigned char>(rng());
                }
                for (size_t off = 0; off < 64; ++off) {
                    ASSERT_EQ(k.sum_bytes(buf.data() + off, len),
                              naive_ones_complement_sum(buf.data() + off, len))
                        << to_string(isa) << " len " << len << " +" << off
                        << (ones ? " all-ones" : "");
                    ++checked;
                }
            }
        }
    }
    EXPECT_GT(checked, 2u * 64 * 300);
}

}  // namespace
}  // namespace ina::reduce::test
