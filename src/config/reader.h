// SPDX-License-Identifier: Apache-2.0
// The YAML reading helpers of the config loader (config.cc) and of feature sections
// (src/features/<f>/config*): every error names file:line:col and what was expected, and a
// document is read whole, collecting every error rather than stopping at the first.
#pragma once

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <charconv>
#include <functional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "wire/bitstring.h"

namespace ina::config {

inline Mark mark_of(const YAML::Node& n) {
    auto m = n.Mark();
    if (m.line < 0) {
        return {};
    }
    return Mark{m.line + 1, m.column + 1};
}

// Walks a YAML document, collecting every error rather than stopping at the first, so an
// operator fixes a file in one pass.
class Reader {
public:
    Reader(std::string file, std::vector<Error>& errors) : file_(std::move(file)), errors_(errors) {}

    void error(Mark m, std::string message) { errors_.push_back({file_, m, std::move(message)}); }
    void error(const YAML::Node& n, std::string message) { error(mark_of(n), std::move(message)); }

    bool expect_map(const YAML::Node& n, const std::string& what) {
        if (!n.IsMap()) {
            error(n, "expected " + what + " (a mapping)");
            return false;
        }
        return true;
    }

    bool expect_seq(const YAML::Node& n, const std::string& what) {
        if (!n.IsSequence()) {
            error(n, "expected " + what + " (a list)");
            return false;
        }
        return true;
    }

    // Reject keys outside `allowed`; keys are snake_case and a kebab-case spelling gets a hint.
    void check_keys(const YAML::Node& map, std::initializer_list<std::string_view> allowed,
                    const std::string& where) {
        check_keys(map, std::vector<std::string_view>(allowed), where);
    }
    void check_keys(const YAML::Node& map, const std::vector<std::string_view>& allowed,
                    const std::string& where) {
        // yaml-cpp keeps both pairs of a repeated key and looks up the first: a second value
        // would be silently ignored, so a repeated key is an error at its second occurrence.
        std::set<std::string> seen;
        for (auto it = map.begin(); it != map.end(); ++it) {
            if (!it->first.IsScalar()) {
                error(it->first, "expected a key name in " + where);
                continue;
            }
            const auto key = it->first.Scalar();
            if (!seen.insert(key).second) {
                error(it->first, "duplicate key '" + key + "' in " + where +
                                     "; expected each key once");
                continue;
            }
            if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) {
                continue;
            }
            std::string message = "unknown key '" + key + "' in " + where;
            std::string snake = key;
            std::replace(snake.begin(), snake.end(), '-', '_');
            if (snake != key && std::find(allowed.begin(), allowed.end(), snake) != allowed.end()) {
                message += "; keys are snake_case: did you mean '" + snake + "'?";
            } else {
                message += "; expected one of:";
                for (auto a : allowed) {
                    message += ' ';
                    message += a;
                }
            }
            error(it->first, message);
        }
    }

    bool scalar(const YAML::Node& n, const std::string& what, std::string& out) {
        if (!n.IsScalar()) {
            error(n, "expected " + what + " (a scalar)");
            return false;
        }
        out = n.Scalar();
        return true;
    }

    template <typename T>
    bool uint_value(const YAML::Node& n, const std::string& what, T& out, uint64_t min,
                    uint64_t max) {
        std::string s;
        if (!scalar(n, what, s)) {
            return false;
        }
        uint64_t v = 0;
        auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (s.empty() || ec != std::errc{} || ptr != s.data() + s.size() || v < min || v > max) {
            error(n, "expected " + what + ": an integer from " + std::to_string(min) + " to " +
                         std::to_string(max) + ", got '" + s + "'");
            return false;
        }
        out = static_cast<T>(v);
        return true;
    }

    bool bool_value(const YAML::Node& n, const std::string& what, bool& out) {
        std::string s;
        if (!scalar(n, what, s)) {
            return false;
        }
        if (s == "true") {
            out = true;
        } else if (s == "false") {
            out = false;
        } else {
            error(n, "expected " + what + ": true or false, got '" + s + "'");
            return false;
        }
        return true;
    }

    bool string_value(const YAML::Node& n, const std::string& what, std::string& out,
                      bool allow_empty = false) {
        if (!scalar(n, what, out)) {
            return false;
        }
        if (!allow_empty && out.empty()) {
            error(n, "expected " + what + ", got an empty string");
            return false;
        }
        return true;
    }

    template <typename T, typename Parse>
    bool parsed(const YAML::Node& n, const std::string& what, T& out, Parse parse) {
        std::string s;
        if (!scalar(n, what, s)) {
            return false;
        }
        auto v = parse(s);
        if (!v) {
            error(n, "expected " + what + ", got '" + s + "'");
            return false;
        }
        out = *v;
        return true;
    }

    // Calls `fn(value)` when `key` is present in `map`.
    void optional(const YAML::Node& map, const char* key,
                  const std::function<void(const YAML::Node&)>& fn) {
        const YAML::Node v = map[key];
        if (v.IsDefined()) {
            fn(v);
        }
    }

    bool required(const YAML::Node& map, const char* key, const std::string& where,
                  const std::function<void(const YAML::Node&)>& fn) {
        const YAML::Node v = map[key];
        if (!v.IsDefined()) {
            error(map, "missing key '" + std::string(key) + "' in " + where);
            return false;
        }
        fn(v);
        return true;
    }

private:
    std::string file_;
    std::vector<Error>& errors_;
};

// Shared by ina.jobs and the feature sections that name BFR-ids (rdma jobs' abm).
// A non-empty BFR-id list like "1,2,5-8" (see wire::parse_bfr_id_list) into `out`, sorted.
inline bool bfr_id_list(Reader& r, const YAML::Node& v, const std::string& what,
                        std::vector<uint16_t>& out) {
    std::string text;
    if (!r.string_value(v, what + ": BFR-ids like \"1-4\"", text)) {
        return false;
    }
    auto ids = wire::parse_bfr_id_list(text);
    if (!ids || ids->empty()) {
        r.error(v, "expected " + what + ": a non-empty list of BFR-ids like \"1,2,5-8\", got '" +
                       text + "'");
        return false;
    }
    out = *ids;
    return true;
}

// Every id of the sorted list `ids` lies in set `set_id` of BSL `bsl_bits`.
inline bool check_in_set(Reader& r, const YAML::Node& v, const std::string& what,
                         const std::vector<uint16_t>& ids, uint16_t bsl_bits,
                         uint16_t set_id) {
    const uint32_t first = uint32_t{set_id} * bsl_bits + 1;
    const uint32_t last = first + bsl_bits - 1;
    if (ids.front() < first || ids.back() > last) {
        r.error(v, "expected every BFR-id of " + what + " in set " + std::to_string(set_id) +
                       " of BSL " + std::to_string(bsl_bits) + ": " + std::to_string(first) +
                       " to " + std::to_string(last));
        return false;
    }
    return true;
}

inline void read_bsl(Reader& r, const YAML::Node& v, uint16_t& bsl_bits) {
    if (r.uint_value(v, "bsl (bits)", bsl_bits, 64, 4096) && !wire::is_valid_bsl_bits(bsl_bits)) {
        r.error(v, "expected bsl: 64, 128, 256, 512, 1024, 2048 or 4096 bits");
    }
}

}  // namespace ina::config
