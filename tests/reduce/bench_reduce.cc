// SPDX-License-Identifier: Apache-2.0
// bench_reduce: throughput of the reduction kernels per element type, op and ISA, on packet-sized
// payloads (default 1024 bytes: 256 fp32 elements per call) cycling over 64 packets, one
// accumulator. Prints GB/s of wire payload consumed and ns per call, from the fastest of many
// short runs.
//   bench_reduce [--bytes N] [--ms T] [--isa scalar|avx2|avx512] [--all-ops]
// Not a test: timings depend on the machine. Data are normal numbers (no denormal slow paths).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "reduce/fixed_point.h"
#include "reduce/reduce.h"

using namespace ina::reduce;

namespace {

struct Options {
    size_t bytes = 1024;
    double ms = 150;
    std::optional<Isa> only_isa;
    bool all_ops = false;
};

void* aligned(size_t bytes) {
    void* p = std::aligned_alloc(kAccAlign, (bytes + kAccAlign - 1) / kAccAlign * kAccAlign + kAccAlign);
    if (p == nullptr) std::abort();
    std::memset(p, 0, bytes);
    return p;
}

// Wire data of moderate magnitude: products of many of them neither overflow nor go denormal fast
// (the accumulator is reloaded every 64 packets anyway).
void fill(ElemType t, unsigned char* p, size_t n, std::mt19937_64& rng) {
    std::uniform_real_distribution<double> d(0.5, 2.0);
    for (size_t i = 0; i < n; ++i) {
        const double v = (rng() & 1) ? d(rng) : -d(rng);
        switch (t) {
        case ElemType::int32: { const auto x = static_cast<int32_t>(rng()); std::memcpy(p + 4 * i, &x, 4); break; }
        case ElemType::int64: { const auto x = static_cast<int64_t>(rng()); std::memcpy(p + 8 * i, &x, 8); break; }
        case ElemType::fp32: { const auto x = static_cast<float>(v); std::memcpy(p + 4 * i, &x, 4); break; }
        case ElemType::fp64: std::memcpy(p + 8 * i, &v, 8); break;
        case ElemType::fp16:
        case ElemType::bf16: {
            // Take fp32 bits and narrow by truncation: enough for timing purposes.
            const auto f = static_cast<float>(v);
            uint32_t u;
            std::memcpy(&u, &f, 4);
            uint16_t h;
            if (t == ElemType::bf16) {
                h = static_cast<uint16_t>(u >> 16);
            } else {
                const uint32_t e = ((u >> 23) & 0xFF) - 112;  // |v| in [0.5, 2]: normal in fp16
                h = static_cast<uint16_t>(((u >> 16) & 0x8000) | (e << 10) | ((u >> 13) & 0x3FF));
            }
            std::memcpy(p + 2 * i, &h, 2);
            break;
        }
        }
    }
}

// Many short runs (about 100 us each, for ms in total); the fastest run is reported, as the one
// least disturbed by preemption and other load on the machine.
template <class F>
double time_ns_per_call(F&& call, double ms) {
    using clock = std::chrono::steady_clock;
    constexpr double kRunNs = 1e5;
    const int runs = std::max(5, static_cast<int>(ms * 1e6 / kRunNs));
    size_t iters = 16;
    double best = 0;
    for (int run = 0; run < runs;) {
        const auto t0 = clock::now();
        for (size_t i = 0; i < iters; ++i) call(i);
        const double ns = std::chrono::duration<double, std::nano>(clock::now() - t0).count();
        if (ns < kRunNs / 2) {  // calibrate: grow until a run takes about kRunNs
            iters *= 2;
            continue;
        }
        const double per_call = ns / static_cast<double>(iters);
        best = run == 0 ? per_call : std::min(best, per_call);
        ++run;
    }
    return best;
}

}  // namespace

int main(int argc, char** argv) {
    Options o;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--bytes" && i + 1 < argc) {
            o.bytes = std::strtoull(argv[++i], nullptr, 10);
        } else if (a == "--ms" && i + 1 < argc) {
            o.ms = std::strtod(argv[++i], nullptr);
        } else if (a == "--isa" && i + 1 < argc) {
            o.only_isa = parse_isa(argv[++i]);
            if (!o.only_isa) {
                std::fprintf(stderr, "unknown ISA %s\n", argv[i]);
                return 2;
            }
        } else if (a == "--all-ops") {
            o.all_ops = true;
        } else {
            std::fprintf(stderr, "usage: %s [--bytes N] [--ms T] [--isa scalar|avx2|avx512] [--all-ops]\n", argv[0]);
            return 2;
        }
    }

    std::printf("best ISA: %s; payload %zu bytes per call; FTZ/DAZ off: %s\n",
                std::string(to_string(best_isa())).c_str(), o.bytes, fp_env_is_default() ? "yes" : "NO");
    std::printf("%-6s %-5s %-7s %6s %9s %8s\n", "type", "op", "isa", "elems", "ns/call", "GB/s");

    constexpr size_t kPackets = 64;
    std::mt19937_64 rng(42);
    double sink = 0;
    const ElemType types[] = {ElemType::int32, ElemType::fp32, ElemType::fp16, ElemType::bf16, ElemType::int64,
                              ElemType::fp64};
    for (const ElemType t : types) {
        const size_t es = elem_size(t);
        const size_t n = o.bytes / es;
        const size_t stride = (n * es + 63) / 64 * 64 + 64;  // distinct cache lines per packet
        auto* in = static_cast<unsigned char*>(aligned(stride * kPackets));
        for (size_t p = 0; p < kPackets; ++p) fill(t, in + p * stride + 2, n, rng);  // unaligned, like a packet
        auto* acc = static_cast<unsigned char*>(aligned(acc_bytes(t, n)));
        auto* out = static_cast<unsigned char*>(aligned(stride));

        for (const Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512}) {
            if (!isa_supported(isa) || (o.only_isa && *o.only_isa != isa)) continue;
            const TypeKernels& k = select_kernels(isa)[t];
            const auto report = [&](const char* what, double ns) {
                std::printf("%-6s %-5s %-7s %6zu %9.1f %8.2f\n", std::string(to_string(t)).c_str(), what,
                            std::string(to_string(isa)).c_str(), n, ns, static_cast<double>(n * es) / ns);
            };
            const Op ops[] = {Op::sum, Op::prod, Op::min, Op::max};
            for (const Op op : ops) {
                if (op != Op::sum && !o.all_ops) continue;
                const AccumulateFn fn = k.accumulator(op);
                k.load(acc, in + 2, n);
                const double ns = time_ns_per_call(
                    [&](size_t i) {
                        const size_t p = i % kPackets;
                        if (p == 0) k.load(acc, in + 2, n);  // keep products in range
                        else fn(acc, in + p * stride + 2, n);
                    },
                    o.ms);
                report(std::string(to_string(op)).c_str(), ns);
            }
            report("load", time_ns_per_call([&](size_t i) { k.load(acc, in + (i % kPackets) * stride + 2, n); }, o.ms));
            report("store", time_ns_per_call([&](size_t) { k.store(out + 2, acc, n); }, o.ms));
            sink += static_cast<double>(acc[0]) + static_cast<double>(out[2]);
        }
        // Deterministic jobs (fixed_point.h): quantize-and-add a float contribution, add an int64
        // partial, and the root's dequantize, at the type's default fraction bits (scalar code
        // the compiler vectorises; no ISA table).
        if (const FixedKernels& fk = fixed_kernels(t); fk.quantize_add != nullptr) {
            const int f = default_fraction_bits(t);
            auto* fixed = static_cast<int64_t*>(aligned(n * 8));
            auto* partial = static_cast<unsigned char*>(aligned(n * 8 + 64));
            FixedStats st;
            const auto report = [&](const char* what, double ns) {
                std::printf("%-6s %-5s %-7s %6zu %9.1f %8.2f\n", std::string(to_string(t)).c_str(), what,
                            "fixed", n, ns, static_cast<double>(n * es) / ns);
            };
            fk.quantize_load(fixed, in + 2, n, f, st);
            report("sum", time_ns_per_call([&](size_t i) { fk.quantize_add(fixed, in + (i % kPackets) * stride + 2, n, f, st); }, o.ms));
            report("int64", time_ns_per_call([&](size_t) { fixed_add(fixed, partial + 2, n); }, o.ms));
            report("store", time_ns_per_call([&](size_t) { fk.dequantize(out + 2, fixed, n, f); }, o.ms));
            sink += static_cast<double>(fixed[0] & 1) + static_cast<double>(st.saturated);
            std::free(fixed);
            std::free(partial);
        }
        std::free(in);
        std::free(acc);
        std::free(out);
    }
    std::printf("(checksum %g)\n", sink);
    return 0;
}
