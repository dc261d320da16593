// SPDX-License-Identifier: Apache-2.0
// Names, CPU detection and the one-time choice of kernel table.
#include "reduce/reduce.h"

#include <cstdlib>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "reduce/kernels_internal.h"

namespace ina::reduce {

std::string_view to_string(Op op) {
    switch (op) {
    case Op::sum: return "sum";
    case Op::prod: return "prod";
    case Op::min: return "min";
    case Op::max: return "max";
    }
    return "?";
}

std::string_view to_string(ElemType t) {
    switch (t) {
    case ElemType::int32: return "int32";
    case ElemType::fp32: return "fp32";
    case ElemType::fp16: return "fp16";
    case ElemType::bf16: return "bf16";
    case ElemType::int64: return "int64";
    case ElemType::fp64: return "fp64";
    }
    return "?";
}

std::string_view to_string(Isa isa) {
    switch (isa) {
    case Isa::scalar: return "scalar";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
    }
    return "?";
}

std::optional<Isa> parse_isa(std::string_view name) {
    for (const Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512}) {
        if (name == to_string(isa)) return isa;
    }
    return std::nullopt;
}

#if defined(__x86_64__)
namespace {

// F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports has no "f16c", and the
// fuzz targets build this file with clang.
bool has_f16c() {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
}

}  // namespace
#endif

bool isa_supported(Isa isa) {
    switch (isa) {
    case Isa::scalar: return true;
#if defined(__x86_64__)
    // libgcc's checks include the OS (XCR0) having enabled the AVX / AVX-512 register state.
    case Isa::avx2:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx2") && has_f16c();
    case Isa::avx512:
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx2") && has_f16c();
#else
    case Isa::avx2:
    case Isa::avx512: return false;
#endif
    }
    return false;
}

Isa best_isa() {
    if (isa_supported(Isa::avx512)) return Isa::avx512;
    if (isa_supported(Isa::avx2)) return Isa::avx2;
    return Isa::scalar;
}

IsaChoice choose_isa(const char* env_value, Isa best) {
    IsaChoice c;
    c.isa = best;
    if (env_value == nullptr || *env_value == '\0') return c;
    const auto wanted = parse_isa(env_value);
    if (!wanted) {
        c.env_invalid = true;
        return c;
    }
    c.from_env = true;
    if (*wanted > best) {
        c.env_capped = true;
    } else {
        c.isa = *wanted;
    }
    return c;
}

const Kernels& select_kernels(Isa isa) {
#if defined(__x86_64__)
    if (isa >= Isa::avx512 && isa_supported(Isa::avx512)) return detail::avx512_kernels;
    if (isa >= Isa::avx2 && isa_supported(Isa::avx2)) return detail::avx2_kernels;
#else
    (void)isa;
#endif
    return detail::scalar_kernels;
}

namespace {

struct Selected {
    IsaChoice choice;
    const Kernels* table;
};

const Selected& selected() {
    static const Selected s = [] {
        const IsaChoice c = choose_isa(std::getenv("INASWITCH_REDUCE_ISA"), best_isa());
        return Selected{c, &select_kernels(c.isa)};
    }();
    return s;
}

}  // namespace

const Kernels& kernels() { return *selected().table; }

const IsaChoice& kernel_choice() { return selected().choice; }

bool fp_env_is_default() {
#if defined(__x86_64__)
    const unsigned csr = _mm_getcsr();
    const unsigned ftz = 1u << 15, daz = 1u << 6, rounding = 3u << 13;
    return (csr & (ftz | daz | rounding)) == 0;
#else
    return true;
#endif
}

}  // namespace ina::reduce
