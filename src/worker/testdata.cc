// SPDX-License-Identifier: Apache-2.0
#include "worker/testdata.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <new>

#include "reduce/convert.h"

namespace ina::worker {

namespace {

// splitmix64 to seed, xorshift64* to draw.
uint64_t splitmix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

struct Rng {
    uint64_t s;
    Rng(uint64_t seed, wire::BfrId id) : s(splitmix(seed * 0x100000001B3ull + id) | 1) {}
    uint64_t next() {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        return s * 0x2545F4914F6CDD1Dull;
    }
    double small() {  // k / 1024, k in [-8192, 8192)
        const auto k = static_cast<int64_t>(next() >> 50) - 8192;  // 14 bits
        return static_cast<double>(k) / 1024.0;
    }
};

template <typename T>
void put(std::byte* p, T v) {
    std::memcpy(p, &v, sizeof v);
}
template <typename T>
T get(const std::byte* p) {
    T v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

// A 64-byte aligned accumulator.
struct AlignedBuf {
    std::byte* p;
    explicit AlignedBuf(size_t bytes)
        : p(static_cast<std::byte*>(::operator new(bytes, std::align_val_t{reduce::kAccAlign}))) {}
    ~AlignedBuf() { ::operator delete(p, std::align_val_t{reduce::kAccAlign}); }
    AlignedBuf(const AlignedBuf&) = delete;
    AlignedBuf& operator=(const AlignedBuf&) = delete;
};

// Element i of a wire array as a double (fp16/bf16 widened exactly).
double as_double(reduce::ElemType t, const std::byte* base, size_t i) {
    switch (t) {
    case reduce::ElemType::int32: return get<int32_t>(base + 4 * i);
    case reduce::ElemType::int64: return static_cast<double>(get<int64_t>(base + 8 * i));
    case reduce::ElemType::fp32: return get<float>(base + 4 * i);
    case reduce::ElemType::fp64: return get<double>(base + 8 * i);
    case reduce::ElemType::fp16: return reduce::fp16_to_fp32(get<uint16_t>(base + 2 * i));
    case reduce::ElemType::bf16: return reduce::bf16_to_fp32(get<uint16_t>(base + 2 * i));
    }
    return 0;
}

// ulp of the wire type at |x| (for fp16/bf16: their own ulp; else 0, covered by eps).
double narrow_ulp(reduce::ElemType t, double x) {
    const int bits = t == reduce::ElemType::fp16 ? 10 : t == reduce::ElemType::bf16 ? 7 : -1;
    if (bits < 0) {
        return 0;
    }
    const double ax = std::fabs(x);
    const int e = ax > 0 ? std::ilogb(ax) : -14;
    return std::ldexp(1.0, std::max(e, -14) - bits);
}

}  // namespace

std::vector<std::byte> generate(reduce::ElemType t, size_t n, uint64_t seed, wire::BfrId id) {
    const size_t es = reduce::elem_size(t);
    std::vector<std::byte> out(n * es);
    Rng r(seed, id);
    std::byte* p = out.data();
    for (size_t i = 0; i < n; ++i, p += es) {
        switch (t) {
        case reduce::ElemType::int32: put(p, static_cast<uint32_t>(r.next() >> 32)); break;
        case reduce::ElemType::int64: put(p, r.next()); break;
        case reduce::ElemType::fp32: put(p, static_cast<float>(r.small())); break;
        case reduce::ElemType::fp64: put(p, r.small()); break;
        case reduce::ElemType::fp16:
            put(p, reduce::fp32_to_fp16(static_cast<float>(r.small())));
            break;
        case reduce::ElemType::bf16:
            put(p, reduce::fp32_to_bf16(static_cast<float>(r.small())));
            break;
        }
    }
    return out;
}

std::vector<std::byte> reference(reduce::ElemType t, reduce::Op op, size_t n, uint64_t seed,
                                 std::span<const wire::BfrId> ids) {
    const auto& k = reduce::select_kernels(reduce::Isa::scalar);
    std::vector<std::byte> out(n * reduce::elem_size(t));
    if (ids.empty() || n == 0) {
        return out;
    }
    AlignedBuf acc(reduce::acc_bytes(t, n));
    for (size_t i = 0; i < ids.size(); ++i) {
        const auto data = generate(t, n, seed, ids[i]);
        if (i == 0) {
            k.load(t, acc.p, data.data(), n);
        } else {
            k.accumulate(t, acc.p, data.data(), n, op);
        }
    }
    k.store(t, out.data(), acc.p, n);
    return out;
}

Verification verify(reduce::ElemType t, reduce::Op op, size_t n, uint64_t seed,
                    std::span<const wire::BfrId> ids, std::span<const std::byte> ref,
                    std::span<const std::byte> got) {
    Verification v;
    const size_t es = reduce::elem_size(t);
    if (ref.size() != n * es || got.size() != n * es) {
        v.ok = false;
        v.detail = "size mismatch";
        return v;
    }
    const bool exact = !reduce::is_float(t) || op == reduce::Op::min || op == reduce::Op::max;
    std::vector<double> abs_sum;  // S per element, floating sum only
    if (!exact && op == reduce::Op::sum) {
        abs_sum.assign(n, 0.0);
        for (const auto id : ids) {
            const auto data = generate(t, n, seed, id);
            for (size_t i = 0; i < n; ++i) {
                abs_sum[i] += std::fabs(as_double(t, data.data(), i));
            }
        }
    }
    const double eps = (t == reduce::ElemType::fp64) ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
    const double nm1 = ids.empty() ? 0.0 : static_cast<double>(ids.size() - 1);
    for (size_t i = 0; i < n; ++i) {
        const bool same_bits = std::memcmp(ref.data() + i * es, got.data() + i * es, es) == 0;
        if (same_bits) {
            continue;
        }
        bool bad = exact;
        double err = 0;
        double tol = 0;
        if (!bad) {
            const double r = as_double(t, ref.data(), i);
            const double g = as_double(t, got.data(), i);
            if (!std::isfinite(r) || !std::isfinite(g)) {
                bad = !(std::isnan(r) && std::isnan(g)) && r != g;
            } else {
                err = std::fabs(g - r);
                const double s = op == reduce::Op::sum ? abs_sum[i] : std::fabs(r);
                tol = 2.0 * nm1 * eps * s + narrow_ulp(t, r);
                bad = err > tol;
                v.max_abs_err = std::max(v.max_abs_err, err);
            }
        }
        if (bad) {
            if (v.mismatches == 0) {
                v.first_bad = i;
                v.detail = "element " + std::to_string(i) + ": got " +
                           std::to_string(as_double(t, got.data(), i)) + ", expected " +
                           std::to_string(as_double(t, ref.data(), i)) +
                           (exact ? " (must be bit-exact)" : " (tolerance " + std::to_string(tol) + ")");
            }
            ++v.mismatches;
            v.ok = false;
        }
    }
    return v;
}

}  // namespace ina::worker
