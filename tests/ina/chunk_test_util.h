// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the chunk table tests: bitmaps from BFR-ids, job parameters, deterministic
// per-(worker, seq, element) values and a reference int32 sum.
#pragma once

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <vector>

#include "ina/chunk_table.h"
#include "reduce/reduce.h"
#include "wire/bitstring.h"

namespace ina::test {

inline constexpr uint16_t kBsl = 64;  // 8-byte BitStrings

inline wire::BitString ids(std::initializer_list<wire::BfrId> list, uint16_t bsl = kBsl) {
    const std::vector<wire::BfrId> v(list);
    return *wire::BitString::from_bfr_ids(bsl, 0, v);
}

inline wire::BitString first_n(unsigned n, uint16_t bsl = kBsl) {
    std::vector<wire::BfrId> v;
    for (unsigned i = 1; i <= n; ++i) v.push_back(static_cast<wire::BfrId>(i));
    return *wire::BitString::from_bfr_ids(bsl, 0, v);
}

inline JobParams make_job(Role role, uint32_t window, unsigned workers = 4,
                          reduce::ElemType t = reduce::ElemType::int32, uint32_t max_elems = 64,
                          reduce::Op op = reduce::Op::sum) {
    JobParams p;
    p.job_id = 7;
    p.abm = first_n(workers);
    p.set_id = 0;
    p.op = op;
    p.elem_type = t;
    p.max_elems = max_elems;
    p.window = window;
    p.role = role;
    p.idle_timeout = 1000;
    return p;
}

inline uint64_t mix(uint64_t x) {  // splitmix64 finaliser
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

// Worker `w`'s int32 contribution to chunk `seq`: n elements, little-endian wire bytes.
inline std::vector<uint8_t> int32_payload(unsigned w, uint32_t seq, uint32_t n) {
    std::vector<uint8_t> out(n * 4);
    for (uint32_t i = 0; i < n; ++i) {
        const auto v = static_cast<uint32_t>(mix(uint64_t{w} << 48 ^ uint64_t{seq} << 16 ^ i));
        std::memcpy(out.data() + 4 * i, &v, 4);  // x86: native order is the wire's little-endian
    }
    return out;
}

// Sum (mod 2^32) of the contributions of workers in `ws`, as wire bytes.
inline std::vector<uint8_t> int32_sum(std::initializer_list<unsigned> ws, uint32_t seq, uint32_t n) {
    std::vector<uint32_t> acc(n, 0);
    for (unsigned w : ws) {
        const std::vector<uint8_t> p = int32_payload(w, seq, n);
        for (uint32_t i = 0; i < n; ++i) {
            uint32_t v;
            std::memcpy(&v, p.data() + 4 * i, 4);
            acc[i] += v;
        }
    }
    std::vector<uint8_t> out(n * 4);
    std::memcpy(out.data(), acc.data(), out.size());
    return out;
}

}  // namespace ina::test
