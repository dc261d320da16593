// SPDX-License-Identifier: Apache-2.0
// Reduction kernels for In-Network Aggregation: elementwise sum/prod/min/max of the arrays that
// workers send, into a per-slot accumulator owned by the caller. Pure code (no DPDK), one scalar
// reference implementation plus AVX2 and AVX-512 kernels picked once at run time.
//
// Wire and accumulator formats
//   - Wire elements are LITTLE-endian and may sit at any address (packet buffers): the kernels use
//     unaligned loads/stores on the wire side.
//   - The accumulator is an array owned by the caller, aligned to kAccAlign (64 bytes; at least
//     to acc_elem_size()), acc_elem_size(t) bytes per element (acc_bytes() rounds up a size):
//       int32 -> int32, int64 -> int64, fp32 -> fp32, fp64 -> fp64, fp16 and bf16 -> fp32.
//   - Kernels touch exactly n elements (no over-read or over-write; tails are handled with masks
//     or a bounce buffer); n = 0 is a no-op (the pointers may then be null). acc, in and out
//     must not overlap.
//
// The three operations, per element type
//   load(acc, in, n)            first contribution: widen/copy in[] into acc[]
//   accumulate(acc, in, n, op)  acc[i] = op(acc[i], in[i]) for every i (elementwise, so SIMD and
//                               scalar results are bit-identical)
//   store(out, acc, n)          narrow acc[] to the wire type into out[]
//   store_sum(out, acc, n)      store(), and return the RFC 1071 one's-complement sum (folded to
//                               16 bits, not inverted) of the n * wire-size bytes written, as
//                               16-bit words in memory order from out: a datagram's checksum
//                               over a result in the same pass that writes it (one's-complement
//                               sums are not linear over float addition, so the result's bytes
//                               must be summed; SIMD kernels sum each vector as they store it)
//
// Semantics (identical on every ISA; the scalar kernels are the reference)
//   - Integers: sum and prod wrap modulo 2^32 / 2^64 (two's complement, computed with unsigned
//     arithmetic, no UB); min/max are signed. Exact and independent of order and tree shape.
//   - Floating point sum/prod: one IEEE 754 operation per contribution in the accumulator type,
//     with the CPU's default rounding (round to nearest even); no FTZ/DAZ, denormals are kept.
//     The kernels assume MXCSR has FTZ/DAZ clear and round-to-nearest (the power-on default;
//     DPDK does not change it): fp_env_is_default() checks that.
//   - Floating point min/max are IEEE 754-2019 minimum/maximum: NaN if either operand is NaN,
//     min(-0, +0) = -0, max(-0, +0) = +0. The result does not depend on arrival order.
//   - NaN: every NaN the kernels write to the accumulator is the canonical quiet NaN
//     (fp32 0x7FC00000, fp64 0x7FF8000000000000), whatever NaN (quiet or signaling, any payload)
//     came in or arose (Inf - Inf, 0 * Inf). So store() emits fp16 0x7E00 / bf16 0x7FC0 / the
//     canonical fp32/fp64 NaN, and NaN results are bit-identical whatever the order.
//   - store() for fp16/bf16 rounds once, to nearest even; values too large become +-Inf as
//     IEEE overflow does; subnormal results are produced (not flushed).
//
// Precision of a tree
//   - fp16/bf16 accumulate in fp32 and round once when a switch emits its (partial) result: a
//     single-level tree rounds exactly once (<= 0.5 ulp of the narrow type, plus the fp32 sum
//     error below). In a multi-level tree every level that emits a partial result rounds again,
//     so the error grows with depth: <= depth x 0.5 ulp (relative to the partial sums) plus the
//     fp32 errors. Partial sums can also overflow to Inf (fp16 max 65504) where a flat sum would
//     not.
//   - fp32 (and fp64) sum is not associative: the result can depend on arrival order and tree
//     shape. For n contributions, |error| <= (n - 1) * eps * sum|x_i| (eps = 2^-23 for fp32,
//     2^-52 for fp64; rigorous for n <= 1/eps).
//   - min/max and integer ops are exact whatever the order or tree.
//
// Dispatch: kernels() returns the table for the best ISA this CPU supports (selected once, thread
// safe), unless INASWITCH_REDUCE_ISA=scalar|avx2|avx512 asks for a lower one at that moment.
// select_kernels(isa) gives any ISA's table (capped to what the CPU supports) so tests and
// benchmarks can force each one. Callers on the hot path keep a `const TypeKernels&` per slot and
// call its plain function pointers: no virtual calls, no branches per element.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace ina::reduce {

// Reduction operator. The numeric values go on the wire.
enum class Op : uint8_t { sum = 0, prod = 1, min = 2, max = 3 };
inline constexpr size_t kNumOps = 4;

// Element type of the wire payload. The numeric values go on the wire.
enum class ElemType : uint8_t { int32 = 0, fp32 = 1, fp16 = 2, bf16 = 3, int64 = 4, fp64 = 5 };
inline constexpr size_t kNumElemTypes = 6;

// Instruction set a kernel table is built for, lowest first.
enum class Isa : uint8_t { scalar = 0, avx2 = 1, avx512 = 2 };
inline constexpr size_t kNumIsas = 3;

// Alignment (bytes) the accumulator must have: one cache line.
inline constexpr size_t kAccAlign = 64;

// Wire size of one element, in bytes.
constexpr size_t elem_size(ElemType t) {
    switch (t) {
    case ElemType::fp16:
    case ElemType::bf16: return 2;
    case ElemType::int32:
    case ElemType::fp32: return 4;
    case ElemType::int64:
    case ElemType::fp64: return 8;
    }
    return 0;
}

// Accumulator size of one element, in bytes (fp16/bf16 accumulate in fp32).
constexpr size_t acc_elem_size(ElemType t) {
    switch (t) {
    case ElemType::int32:
    case ElemType::fp32:
    case ElemType::fp16:
    case ElemType::bf16: return 4;
    case ElemType::int64:
    case ElemType::fp64: return 8;
    }
    return 0;
}

// Bytes of accumulator for n elements, rounded up to a whole number of cache lines.
constexpr size_t acc_bytes(ElemType t, size_t n) {
    return (n * acc_elem_size(t) + kAccAlign - 1) / kAccAlign * kAccAlign;
}

constexpr bool is_float(ElemType t) { return t != ElemType::int32 && t != ElemType::int64; }

// Wire byte -> enum; std::nullopt for values this version does not know.
constexpr std::optional<Op> op_from_wire(uint8_t v) {
    if (v < kNumOps) return static_cast<Op>(v);
    return std::nullopt;
}
constexpr std::optional<ElemType> elem_type_from_wire(uint8_t v) {
    if (v < kNumElemTypes) return static_cast<ElemType>(v);
    return std::nullopt;
}

// Names: "sum", "fp16", "avx512", ... ("?" for out-of-range values).
std::string_view to_string(Op op);
std::string_view to_string(ElemType t);
std::string_view to_string(Isa isa);
// "scalar" | "avx2" | "avx512" (exact, lower case) -> Isa.
std::optional<Isa> parse_isa(std::string_view name);

// Kernel signatures. acc is the caller's accumulator (see the alignment rule above); in and out
// are wire arrays (any alignment, little-endian); n is a number of elements.
using LoadFn = void (*)(void* acc, const void* in, size_t n);
using AccumulateFn = void (*)(void* acc, const void* in, size_t n);
using StoreFn = void (*)(void* out, const void* acc, size_t n);
using StoreSumFn = uint32_t (*)(void* out, const void* acc, size_t n);
// The RFC 1071 one's-complement sum (folded to 16 bits, not inverted) of `len` bytes at `p` (any
// alignment), as 16-bit words in memory order: a received datagram's checksum verification.
using SumBytesFn = uint32_t (*)(const void* p, size_t len);

// The kernels for one element type.
struct TypeKernels {
    LoadFn load = nullptr;
    std::array<AccumulateFn, kNumOps> accumulate_fn{};  // indexed by Op
    StoreFn store = nullptr;
    StoreSumFn store_sum = nullptr;  // store, returning the written bytes' one's-complement sum

    // acc = op(acc, in), elementwise. op must be a valid Op (check wire bytes with op_from_wire).
    void accumulate(void* acc, const void* in, size_t n, Op op) const {
        accumulate_fn[static_cast<size_t>(op)](acc, in, n);
    }
    AccumulateFn accumulator(Op op) const { return accumulate_fn[static_cast<size_t>(op)]; }
};

// The kernels for every element type, for one ISA.
struct Kernels {
    Isa isa = Isa::scalar;
    std::array<TypeKernels, kNumElemTypes> types{};  // indexed by ElemType
    // Not per type: the bytes' one's-complement sum (AVX-512 tables use the AVX2 kernel).
    SumBytesFn sum_bytes = nullptr;

    const TypeKernels& operator[](ElemType t) const { return types[static_cast<size_t>(t)]; }
    void load(ElemType t, void* acc, const void* in, size_t n) const { (*this)[t].load(acc, in, n); }
    void accumulate(ElemType t, void* acc, const void* in, size_t n, Op op) const {
        (*this)[t].accumulate(acc, in, n, op);
    }
    void store(ElemType t, void* out, const void* acc, size_t n) const {
        (*this)[t].store(out, acc, n);
    }
};

// The best ISA this CPU (and OS) supports: avx512 needs AVX512F + AVX512BW (+ AVX2, F16C), avx2
// needs AVX2 + F16C. Always scalar on non-x86 builds.
Isa best_isa();
bool isa_supported(Isa isa);

// How kernels() chose its ISA.
struct IsaChoice {
    Isa isa = Isa::scalar;     // the ISA in use
    bool from_env = false;     // INASWITCH_REDUCE_ISA was set, valid and honoured (maybe capped)
    bool env_invalid = false;  // INASWITCH_REDUCE_ISA was set to something not recognised: ignored
    bool env_capped = false;   // it asked for an ISA this CPU lacks: the best available is used
};
// Pure: the choice for an environment value (nullptr or "" = unset) on a CPU whose best is best.
IsaChoice choose_isa(const char* env_value, Isa best);

// The table for isa, or for the best supported ISA below it if the CPU lacks isa. The returned
// table's .isa says which one it is.
const Kernels& select_kernels(Isa isa);

// The process-wide table: chosen on first call from best_isa() and INASWITCH_REDUCE_ISA, then
// fixed. Thread safe.
const Kernels& kernels();
// How that table was chosen (calls kernels() first).
const IsaChoice& kernel_choice();

// True when the floating point environment is the one the kernels' semantics assume: MXCSR with
// FTZ and DAZ clear and round to nearest (always true on non-x86 builds).
bool fp_env_is_default();

}  // namespace ina::reduce
