// SPDX-License-Identifier: Apache-2.0
// The folding CRC-32 (src/roce/crc32.h) on every path this CPU has, against zlib's crc32 and
// DPDK's rte_net_crc (CRC32_ETH) on every length 0..4200 at every alignment 0..63, continued
// from other CRCs and split at every point; and the ICRC of reference/rocev2.md's vectors (a)
// and (b) as one continued CRC over the masked headers and the rest in place.
#include <gtest/gtest.h>
#include <rte_net_crc.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <array>
#include <random>
#include <string>
#include <vector>

#include "rocev2_vectors.h"
#include "roce/crc32.h"
#include "roce/icrc.h"
#include "reduce/reduce.h"

namespace ina::roce {
namespace {

constexpr size_t kMaxLen = 4200;
constexpr size_t kAligns = 64;

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
    std::mt19937 g(seed);
    std::vector<uint8_t> v(n);
    for (auto& b : v) {
        b = static_cast<uint8_t>(g());
    }
    return v;
}

std::vector<CrcIsa> paths() {
    std::vector<CrcIsa> v;
    for (CrcIsa isa : {CrcIsa::table, CrcIsa::pclmul, CrcIsa::vpclmul512}) {
        if (crc32_isa_supported(isa)) {
            v.push_back(isa);
        }
    }
    return v;
}

TEST(RoceCrc32, ChoosesTheWidestSupportedPath) {
    EXPECT_TRUE(crc32_isa_supported(CrcIsa::table));
    EXPECT_EQ(crc32_isa(), paths().back());
    std::printf("crc32 paths on this CPU: %zu, chosen %s\n", paths().size(),
                std::string(to_string(crc32_isa())).c_str());
}

TEST(RoceCrc32, EveryLengthAndAlignmentMatchesZlibAndRteNetCrc) {
    rte_net_crc_set_alg(RTE_NET_CRC_AVX512);  // its best path allowed here; any is a reference
    const auto src = random_bytes(kMaxLen, 1);
    std::vector<uint32_t> want(kMaxLen + 1);
    for (size_t len = 0; len <= kMaxLen; ++len) {
        want[len] = static_cast<uint32_t>(crc32(0, src.data(), static_cast<uInt>(len)));
        ASSERT_EQ(rte_net_crc_calc(src.data(), static_cast<uint32_t>(len), RTE_NET_CRC32_ETH),
                  want[len])
            << "zlib and rte_net_crc disagree at " << len;
    }
    std::vector<uint8_t> buf(kMaxLen + kAligns + 64);
    for (CrcIsa isa : paths()) {
        for (size_t a = 0; a < kAligns; ++a) {
            std::copy(src.begin(), src.end(), buf.begin() + static_cast<ptrdiff_t>(a));
            for (size_t len = 0; len <= kMaxLen; ++len) {
                ASSERT_EQ(crc32_update_with(isa, 0, buf.data() + a, len), want[len])
                    << to_string(isa) << " length " << len << " alignment " << a;
            }
        }
    }
}

TEST(RoceCrc32, ContinuesFromAnyCrcAndSplitsAnywhere) {
    const auto src = random_bytes(kMaxLen, 2);
    for (CrcIsa isa : paths()) {
        for (uint32_t start : {0u, 1u, 0xFFFFFFFFu, 0x12345678u}) {
            for (size_t len : {size_t{0}, size_t{1}, size_t{15}, size_t{16}, size_t{63},
                               size_t{64}, size_t{127}, size_t{128}, size_t{255}, size_t{256},
                               size_t{1092}, size_t{4164}, kMaxLen}) {
                EXPECT_EQ(crc32_update_with(isa, start, src.data(), len),
                          static_cast<uint32_t>(crc32(start, src.data(), static_cast<uInt>(len))))
                    << to_string(isa) << " from " << start << " over " << len;
            }
        }
        const size_t len = 1100;
        const uint32_t whole = crc32_update_with(isa, 0, src.data(), len);
        for (size_t cut = 0; cut <= len; ++cut) {
            const uint32_t head = crc32_update_with(isa, 0, src.data(), cut);
            ASSERT_EQ(crc32_update_with(isa, head, src.data() + cut, len - cut), whole)
                << to_string(isa) << " cut at " << cut;
        }
    }
}

// The first 64 bytes masked as they are read: the CRC of a copy with the mask ORed in, on
// every path, from any CRC, at every length from 0 past the four-register loop (under 64: the
// mask's first len bytes), any alignment; the bytes themselves untouched.
TEST(RoceCrc32, MaskedFirst64BytesAreTheCrcOfTheMaskedCopy) {
    const auto src = random_bytes(kMaxLen + 64, 3);
    const auto mask = random_bytes(64, 4);
    std::vector<uint8_t> masked(src);
    for (size_t i = 0; i < 64; ++i) {
        masked[i] = static_cast<uint8_t>(src[i] | mask[i]);
    }
    for (CrcIsa isa : paths()) {
        for (size_t a : {size_t{0}, size_t{1}, size_t{13}, size_t{63}}) {
            std::vector<uint8_t> buf(a + src.size());
            std::copy(src.begin(), src.end(), buf.begin() + static_cast<ptrdiff_t>(a));
            const std::vector<uint8_t> before = buf;
            for (size_t len = 0; len <= 1300; ++len) {
                for (uint32_t start : {0u, 0x9E3779B9u}) {
                    ASSERT_EQ(crc32_update_masked_with(isa, start, buf.data() + a, len, mask.data()),
                              static_cast<uint32_t>(crc32(start, masked.data(), static_cast<uInt>(len))))
                        << to_string(isa) << " length " << len << " alignment " << a;
                }
            }
            ASSERT_EQ(buf, before);
        }
        EXPECT_EQ(crc32_update_masked_with(isa, 0, src.data(), 4164, mask.data()),
                  static_cast<uint32_t>(crc32(0, masked.data(), 4164)));
    }
}

// The ICRC as the packet path sums it: 8 ones and the masked IP, UDP and BTH from a copy, then
// the rest where it lies, continued from that CRC.
TEST(RoceCrc32, ReferenceIcrcsAsOneContinuedCrc) {
    using namespace test_vectors;  // NOLINT: the vectors are this test's subject
    const Bytes cnp(kCnpFrame.begin() + 14, kCnpFrame.end());
    for (const Bytes* ip : {&cnp, &kUcSend}) {
        std::array<uint8_t, 8 + kIpv4 + kUdp + 12> head{};
        std::fill_n(head.begin(), 8, 0xFF);
        std::copy_n(ip->begin(), kIpv4 + kUdp + 12, head.begin() + 8);
        head[8 + 1] = head[8 + 8] = head[8 + 10] = head[8 + 11] = 0xFF;  // TOS, TTL, checksum
        head[8 + kIpv4 + 6] = head[8 + kIpv4 + 7] = 0xFF;                 // UDP checksum
        head[8 + kIpv4 + kUdp + 4] = 0xFF;                                // FECN, BECN
        const size_t rest = ip->size() - (kIpv4 + kUdp + 12) - 4;
        for (CrcIsa isa : paths()) {
            const uint32_t h = crc32_update_with(isa, 0, head.data(), head.size());
            EXPECT_EQ(crc32_update_with(isa, h, ip->data() + kIpv4 + kUdp + 12, rest),
                      read_icrc(ip->data() + ip->size()))
                << to_string(isa);
        }
    }
}

}  // namespace
}  // namespace ina::roce

namespace ina::roce {
namespace {

// The fused check-and-add gives the masked CRC crc32_update_masked gives and the sums the reduce
// library's kernels give (every ISA's: they are bit-identical), bit for bit, for each element
// type it adds: NaNs of any payload made canonical, infinities, signed zeros and subnormals as
// IEEE adds them, int32 wrapping; for every length it takes, the add shorter or longer than the
// CRC's main loop, first or not.
struct FusedCase {
    FusedAdd type;
    reduce::ElemType elem;
    size_t wire;  // bytes of one element on the wire
};
constexpr FusedCase kFusedCases[] = {{FusedAdd::fp32, reduce::ElemType::fp32, 4},
                                     {FusedAdd::int32, reduce::ElemType::int32, 4},
                                     {FusedAdd::fp16, reduce::ElemType::fp16, 2},
                                     {FusedAdd::bf16, reduce::ElemType::bf16, 2}};

// A random wire element of `wire` bytes, one in eight a special value of its type (the 16-bit
// ones: NaNs with payloads, infinities, signed zeros, subnormals, the largest finite).
uint32_t random_element(std::mt19937& rng, FusedAdd type) {
    static constexpr uint32_t k32[] = {0x7FC00000, 0x7F800001, 0xFFC12345, 0x7F800000,
                                       0xFF800000, 0x80000000, 0x00000000, 0x00000001,
                                       0x807FFFFF, 0x7F7FFFFF};
    static constexpr uint32_t kHalf[] = {0x7E00, 0x7C01, 0xFE12, 0x7C00, 0xFC00,
                                         0x8000, 0x0000, 0x0001, 0x83FF, 0x7BFF};
    static constexpr uint32_t kBf16[] = {0x7FC0, 0x7F81, 0xFFC1, 0x7F80, 0xFF80,
                                         0x8000, 0x0000, 0x0001, 0x807F, 0x7F7F};
    const bool special = rng() % 8 == 0;
    switch (type) {
    case FusedAdd::fp16: return special ? kHalf[rng() % 10] : rng() & 0xFFFF;
    case FusedAdd::bf16: return special ? kBf16[rng() % 10] : rng() & 0xFFFF;
    case FusedAdd::int32: return special ? 0x7FFFFFFFu + rng() % 3 : rng();
    default: return special ? k32[rng() % 10] : rng();
    }
}

TEST(RoceCrc32, FusedCheckAndAddIsTheCrcAndTheReduceLibrarysSum) {
    if (crc32_isa() != CrcIsa::vpclmul512) {
        uint32_t crc = 0;
        float acc[64] = {};
        uint8_t bytes[512] = {};
        for (const FusedCase& c : kFusedCases) {
            EXPECT_FALSE(crc32_masked_with_add(crc, bytes, sizeof bytes, bytes, c.type, acc,
                                               bytes, 64, false));
        }
        GTEST_SKIP() << "no VPCLMULQDQ: the fused pass declines (checked above)";
    }
    std::mt19937 rng(11);
    std::array<uint8_t, 64> mask{};
    for (size_t i = 0; i < mask.size(); ++i) {
        mask[i] = static_cast<uint8_t>(rng() % 3 == 0 ? rng() : 0);
    }
    for (const FusedCase& c : kFusedCases) {
        const auto& sum = reduce::kernels()[c.elem];
        const auto& scalar = reduce::select_kernels(reduce::Isa::scalar)[c.elem];
        for (const size_t len : {256u, 300u, 511u, 1092u, 1100u, 4164u, 8200u}) {
            for (const size_t n : {64u, 192u, 256u, 1024u, 2048u}) {
                for (const bool first : {true, false}) {
                    const std::string where = std::to_string(static_cast<int>(c.type)) + " " +
                                              std::to_string(len) + " " + std::to_string(n) +
                                              (first ? " first" : "");
                    std::vector<uint8_t> bytes(len + 1);
                    for (auto& b : bytes) {
                        b = static_cast<uint8_t>(rng());
                    }
                    // Unaligned input (a payload behind 60 bytes of headers).
                    std::vector<uint8_t> wire(c.wire * n + 3);
                    for (size_t i = 0; i < n; ++i) {
                        const uint32_t e = random_element(rng, c.type);
                        std::memcpy(wire.data() + 3 + c.wire * i, &e, c.wire);
                    }
                    // Accumulators (4 bytes an element: fp32 or int32) 64-byte aligned, as the
                    // reduce kernels' contract asks, starting from the library's own load of
                    // random elements (so they hold what a slot can hold).
                    std::vector<uint8_t> start(c.wire * n);
                    for (size_t i = 0; i < n; ++i) {
                        const uint32_t e = random_element(rng, c.type);
                        std::memcpy(start.data() + c.wire * i, &e, c.wire);
                    }
                    std::vector<uint32_t> room(3 * n + 16);
                    const auto base = reinterpret_cast<uintptr_t>(room.data());
                    auto* fused = reinterpret_cast<uint32_t*>((base + 63) / 64 * 64);
                    uint32_t* ref = fused + n;
                    uint32_t* ref_scalar = ref + n;
                    for (uint32_t* a : {fused, ref, ref_scalar}) {
                        scalar.load(a, start.data(), n);
                    }
                    uint32_t crc = 0;
                    const uint8_t* p = bytes.data() + 1;
                    ASSERT_TRUE(crc32_masked_with_add(crc, p, len, mask.data(), c.type, fused,
                                                      wire.data() + 3, n, first))
                        << where;
                    EXPECT_EQ(crc, crc32_update_masked(0, p, len, mask.data())) << where;
                    if (first) {
                        sum.load(ref, wire.data() + 3, n);
                        scalar.load(ref_scalar, wire.data() + 3, n);
                    } else {
                        sum.accumulate(ref, wire.data() + 3, n, reduce::Op::sum);
                        scalar.accumulate(ref_scalar, wire.data() + 3, n, reduce::Op::sum);
                    }
                    EXPECT_EQ(std::memcmp(fused, ref, 4 * n), 0) << where;
                    EXPECT_EQ(std::memcmp(fused, ref_scalar, 4 * n), 0) << where;
                }
            }
        }
    }
    // What it declines, it leaves untouched.
    uint32_t crc = 0x1234;
    alignas(64) float acc[64] = {1.0f};
    uint8_t bytes[300] = {};
    EXPECT_FALSE(crc32_masked_with_add(crc, bytes, 255, mask.data(), FusedAdd::fp32, acc, bytes,
                                       64, false));
    EXPECT_FALSE(crc32_masked_with_add(crc, bytes, 300, mask.data(), FusedAdd::bf16, acc, bytes,
                                       63, false));
    EXPECT_EQ(crc, 0x1234u);
    EXPECT_EQ(acc[0], 1.0f);
}

}  // namespace
}  // namespace ina::roce
