// SPDX-License-Identifier: Apache-2.0
// Field readers feature sections share on top of config::Reader: unsigned integers written in
// decimal or 0x hex (QPNs, keys and addresses are usually written in hex) within a range, and
// the reduction's op and element type by name. Errors name the value's file:line:col.
#pragma once

#include <array>
#include <charconv>
#include <cstdint>
#include <optional>
#include <string>

#include "config/reader.h"
#include "reduce/fixed_point.h"
#include "reduce/reduce.h"

namespace ina::config {

// Reads `key` of `map` into `out` when present (reported missing when `required`): an integer
// in [min, max], decimal or 0x-prefixed hex.
template <typename T>
void uint_field(Reader& r, const YAML::Node& map, const char* key, const std::string& where,
                T& out, uint64_t min, uint64_t max, bool required) {
    auto read = [&](const YAML::Node& n) {
        std::string s;
        if (!r.scalar(n, key, s)) {
            return;
        }
        const bool hex = s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X');
        uint64_t v = 0;
        auto [ptr, ec] = std::from_chars(s.data() + (hex ? 2 : 0), s.data() + s.size(), v,
                                         hex ? 16 : 10);
        if (s.empty() || ec != std::errc{} || ptr != s.data() + s.size() || v < min || v > max) {
            r.error(n, std::string("expected ") + key + ": an integer from " +
                           std::to_string(min) + " to " + std::to_string(max) +
                           " (decimal or 0x hex), got '" + s + "'");
            return;
        }
        out = static_cast<T>(v);
    };
    if (required) {
        r.required(map, key, where, read);
    } else {
        r.optional(map, key, read);
    }
}

inline constexpr std::array<reduce::Op, 4> kReduceOps = {reduce::Op::sum, reduce::Op::prod,
                                                         reduce::Op::min, reduce::Op::max};
inline constexpr std::array<reduce::ElemType, 6> kReduceTypes = {
    reduce::ElemType::int32, reduce::ElemType::fp32,  reduce::ElemType::fp16,
    reduce::ElemType::bf16,  reduce::ElemType::int64, reduce::ElemType::fp64};

// Reads `key` (optional) as one of `values` by reduce::to_string name.
template <typename E, size_t N>
void reduce_enum_field(Reader& r, const YAML::Node& map, const char* key,
                       const std::string& where, const std::array<E, N>& values, E& out) {
    r.optional(map, key, [&](const YAML::Node& v) {
        std::string s;
        if (!r.string_value(v, key, s)) {
            return;
        }
        std::string names;
        for (E e : values) {
            if (reduce::to_string(e) == s) {
                out = e;
                return;
            }
            names += ' ';
            names += reduce::to_string(e);
        }
        r.error(v, std::string("expected ") + key + " in " + where + ": one of" + names +
                       ", got '" + s + "'");
    });
}

// `deterministic: true | false | {fraction_bits: N}` of a job reducing `type` with `op` (read
// after both). Refused where it could change nothing (integer types, min/max: already order
// free) or cannot apply (prod: no exact integer product), so a config never promises a
// reproducibility it does not get. `fraction_bits` stays unset unless written.
inline void read_deterministic(Reader& r, const YAML::Node& v, reduce::ElemType type,
                               reduce::Op op, bool& deterministic,
                               std::optional<uint8_t>& fraction_bits) {
    if (v.IsMap()) {
        r.check_keys(v, {"fraction_bits"}, "deterministic");
        deterministic = true;
        r.optional(v, "fraction_bits", [&](const YAML::Node& x) {
            uint8_t bits = 0;
            if (r.uint_value(x, "fraction_bits", bits, 0,
                             static_cast<uint64_t>(reduce::kMaxFractionBits))) {
                fraction_bits = bits;
            }
        });
    } else if (!r.bool_value(v, "deterministic (or {fraction_bits: N})", deterministic)) {
        return;
    }
    if (!deterministic) {
        return;
    }
    if (!reduce::is_float(type)) {
        r.error(v, "deterministic on an " + std::string(reduce::to_string(type)) +
                       " job: integer reductions are exact and order free already; drop it");
    } else if (op != reduce::Op::sum) {
        r.error(v, "deterministic on op " + std::string(reduce::to_string(op)) +
                       (op == reduce::Op::prod
                            ? ": a float product has no exact fixed-point form; only sum"
                            : ": float min/max are order free already; drop it"));
    }
}

}  // namespace ina::config
