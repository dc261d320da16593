// SPDX-License-Identifier: Apache-2.0
// Wire enums, sizes, names, CPU detection and kernel selection, including INASWITCH_REDUCE_ISA
// (meson runs this binary with several values of it).
#include <gtest/gtest.h>

#include <immintrin.h>

#include <cstdlib>

#include "reduce_test_util.h"

namespace ina::reduce::test {
namespace {

// The numeric values go on the wire: they must never change.
static_assert(static_cast<uint8_t>(Op::sum) == 0 && static_cast<uint8_t>(Op::prod) == 1 &&
              static_cast<uint8_t>(Op::min) == 2 && static_cast<uint8_t>(Op::max) == 3);
static_assert(static_cast<uint8_t>(ElemType::int32) == 0 && static_cast<uint8_t>(ElemType::fp32) == 1 &&
              static_cast<uint8_t>(ElemType::fp16) == 2 && static_cast<uint8_t>(ElemType::bf16) == 3 &&
              static_cast<uint8_t>(ElemType::int64) == 4 && static_cast<uint8_t>(ElemType::fp64) == 5);
static_assert(elem_size(ElemType::fp16) == 2 && elem_size(ElemType::bf16) == 2 && elem_size(ElemType::fp32) == 4 &&
              elem_size(ElemType::int32) == 4 && elem_size(ElemType::int64) == 8 && elem_size(ElemType::fp64) == 8);
static_assert(acc_elem_size(ElemType::fp16) == 4 && acc_elem_size(ElemType::bf16) == 4 &&
              acc_elem_size(ElemType::fp32) == 4 && acc_elem_size(ElemType::int32) == 4 &&
              acc_elem_size(ElemType::int64) == 8 && acc_elem_size(ElemType::fp64) == 8);
static_assert(acc_bytes(ElemType::fp16, 0) == 0 && acc_bytes(ElemType::fp16, 1) == 64 &&
              acc_bytes(ElemType::fp16, 16) == 64 && acc_bytes(ElemType::fp16, 17) == 128 &&
              acc_bytes(ElemType::fp64, 256) == 2048);
static_assert(op_from_wire(3) == Op::max && !op_from_wire(4));
static_assert(elem_type_from_wire(5) == ElemType::fp64 && !elem_type_from_wire(6) && !elem_type_from_wire(255));

TEST(Names, RoundTrip) {
    for (const Isa isa : all_isas()) EXPECT_EQ(parse_isa(to_string(isa)), isa);
    EXPECT_EQ(to_string(Op::prod), "prod");
    EXPECT_EQ(to_string(ElemType::bf16), "bf16");
    EXPECT_EQ(to_string(Isa::avx512), "avx512");
    EXPECT_EQ(to_string(static_cast<Op>(9)), "?");
    EXPECT_FALSE(parse_isa(""));
    EXPECT_FALSE(parse_isa("AVX2"));
    EXPECT_FALSE(parse_isa("sse4"));
    EXPECT_FALSE(parse_isa("avx512 "));
}

TEST(Choice, FromEnvironmentValue) {
    for (const Isa best : all_isas()) {
        IsaChoice c = choose_isa(nullptr, best);
        EXPECT_EQ(c.isa, best);
        EXPECT_FALSE(c.from_env || c.env_invalid || c.env_capped);
        c = choose_isa("", best);
        EXPECT_EQ(c.isa, best);
        EXPECT_FALSE(c.from_env || c.env_invalid || c.env_capped);
        c = choose_isa("bogus", best);
        EXPECT_EQ(c.isa, best);
        EXPECT_TRUE(c.env_invalid);
        EXPECT_FALSE(c.from_env);
        c = choose_isa("scalar", best);
        EXPECT_EQ(c.isa, Isa::scalar);
        EXPECT_TRUE(c.from_env);
        EXPECT_FALSE(c.env_capped);
        c = choose_isa("avx512", best);
        EXPECT_EQ(c.isa, best);
        EXPECT_TRUE(c.from_env);
        EXPECT_EQ(c.env_capped, best != Isa::avx512);
    }
    const IsaChoice c = choose_isa("avx2", Isa::avx512);
    EXPECT_EQ(c.isa, Isa::avx2);
    EXPECT_TRUE(c.from_env);
}

TEST(Cpu, DetectionIsConsistent) {
    const Isa best = best_isa();
    EXPECT_TRUE(isa_supported(Isa::scalar));
    EXPECT_TRUE(isa_supported(best));
    if (isa_supported(Isa::avx512)) {
        EXPECT_TRUE(isa_supported(Isa::avx2));
    }
    for (const Isa isa : all_isas()) EXPECT_EQ(isa_supported(isa), isa <= best);
    std::printf("[ reduce ] best ISA on this CPU: %s\n", std::string(to_string(best)).c_str());
}

TEST(Select, CapsToSupportedAndTablesAreComplete) {
    for (const Isa isa : all_isas()) {
        const Kernels& k = select_kernels(isa);
        EXPECT_LE(k.isa, isa);
        EXPECT_TRUE(isa_supported(k.isa));
        if (isa_supported(isa)) {
            EXPECT_EQ(k.isa, isa);
        }
        for (const ElemType t : all_types()) {
            EXPECT_NE(k[t].load, nullptr);
            EXPECT_NE(k[t].store, nullptr);
            for (const Op op : all_ops()) EXPECT_NE(k[t].accumulator(op), nullptr);
        }
    }
    // Distinct ISAs give distinct code.
    if (isa_supported(Isa::avx2)) {
        EXPECT_NE(select_kernels(Isa::avx2)[ElemType::fp32].load, select_kernels(Isa::scalar)[ElemType::fp32].load);
    }
}

// Run by meson with INASWITCH_REDUCE_ISA unset, =scalar, =avx2, =avx512 and =bogus.
TEST(Select, ProcessTableFollowsEnvironment) {
    const char* env = std::getenv("INASWITCH_REDUCE_ISA");
    const IsaChoice want = choose_isa(env, best_isa());
    const Kernels& k = kernels();
    EXPECT_EQ(k.isa, want.isa);
    EXPECT_EQ(&k, &select_kernels(want.isa));
    const IsaChoice& got = kernel_choice();
    EXPECT_EQ(got.isa, want.isa);
    EXPECT_EQ(got.from_env, want.from_env);
    EXPECT_EQ(got.env_invalid, want.env_invalid);
    EXPECT_EQ(got.env_capped, want.env_capped);
    EXPECT_EQ(&kernels(), &k);  // fixed after the first call
    std::printf("[ reduce ] INASWITCH_REDUCE_ISA=%s -> %s\n", env ? env : "(unset)",
                std::string(to_string(k.isa)).c_str());
}

TEST(FpEnv, DefaultAndFlushToZeroDetected) {
    EXPECT_TRUE(fp_env_is_default());
    const unsigned saved = _mm_getcsr();
    _mm_setcsr(saved | (1u << 15));  // FTZ
    const bool with_ftz = fp_env_is_default();
    _mm_setcsr(saved | (1u << 6));   // DAZ
    const bool with_daz = fp_env_is_default();
    _mm_setcsr(saved | (1u << 13));  // round down
    const bool rounding_down = fp_env_is_default();
    _mm_setcsr(saved);
    EXPECT_FALSE(with_ftz);
    EXPECT_FALSE(with_daz);
    EXPECT_FALSE(rounding_down);
    EXPECT_TRUE(fp_env_is_default());
}

}  // namespace
}  // namespace ina::reduce::test
