// SPDX-License-Identifier: Apache-2.0
// The non-hot-path half of bitstring.h: construction, text forms and the BitString operators.
#include "wire/bitstring.h"

#include <algorithm>
#include <charconv>
#include <system_error>

namespace ina::wire {

namespace {

std::string_view trim_blanks(std::string_view s) {
    const auto is_blank = [](char c) { return c == ' ' || c == '\t'; };
    while (!s.empty() && is_blank(s.front())) {
        s.remove_prefix(1);
    }
    while (!s.empty() && is_blank(s.back())) {
        s.remove_suffix(1);
    }
    return s;
}

// A decimal BFR-id, 1..65535, digits only (no sign, no blanks).
std::optional<BfrId> parse_bfr_id(std::string_view s) {
    if (s.empty() || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        return std::nullopt;
    }
    uint32_t value = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
    if (ec != std::errc{} || end != s.data() + s.size() || value == 0 || value > 0xFFFFu) {
        return std::nullopt;
    }
    return static_cast<BfrId>(value);
}

std::optional<uint8_t> hex_digit_value(char c) {
    if (c >= '0' && c <= '9') {
        return static_cast<uint8_t>(c - '0');
    }
    if (c >= 'a' && c <= 'f') {
        return static_cast<uint8_t>(c - 'a' + 10);
    }
    if (c >= 'A' && c <= 'F') {
        return static_cast<uint8_t>(c - 'A' + 10);
    }
    return std::nullopt;
}

}  // namespace

std::optional<std::vector<BfrId>> parse_bfr_id_list(std::string_view text) {
    std::vector<BfrId> ids;
    if (trim_blanks(text).empty()) {
        return ids;
    }
    while (true) {
        const size_t comma = text.find(',');
        const std::string_view item = trim_blanks(text.substr(0, comma));
        const size_t dash = item.find('-');
        if (dash == std::string_view::npos) {
            const auto id = parse_bfr_id(item);
            if (!id) {
                return std::nullopt;
            }
            ids.push_back(*id);
        } else {
            const auto first = parse_bfr_id(trim_blanks(item.substr(0, dash)));
            const auto last = parse_bfr_id(trim_blanks(item.substr(dash + 1)));
            if (!first || !last || *last < *first) {
                return std::nullopt;
            }
            for (uint32_t id = *first; id <= *last; ++id) {
                ids.push_back(static_cast<BfrId>(id));
            }
        }
        if (comma == std::string_view::npos) {
            break;
        }
        text.remove_prefix(comma + 1);
    }
    std::sort(ids.begin(), ids.end());
    ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
    return ids;
}

std::string format_bfr_id_list(std::span<const BfrId> ids) {
    std::vector<BfrId> sorted(ids.begin(), ids.end());
    std::sort(sorted.begin(), sorted.end());
    sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
    sorted.erase(std::remove(sorted.begin(), sorted.end(), BfrId{0}), sorted.end());

    std::string out;
    for (size_t i = 0; i < sorted.size();) {
        size_t run_end = i + 1;  // one past the run of consecutive ids that starts at i
        while (run_end < sorted.size() && sorted[run_end] == sorted[run_end - 1] + 1) {
            ++run_end;
        }
        const size_t run_length = run_end - i;
        if (!out.empty()) {
            out += ',';
        }
        if (run_length >= 3) {
            out += std::to_string(sorted[i]) + '-' + std::to_string(sorted[run_end - 1]);
            i = run_end;
        } else {
            out += std::to_string(sorted[i]);
            ++i;
        }
    }
    return out;
}

std::optional<BitString> BitString::zero(uint16_t bsl_bits) {
    if (!is_valid_bsl_bits(bsl_bits)) {
        return std::nullopt;
    }
    return BitString(bsl_bits);
}

std::optional<BitString> BitString::from_wire(uint16_t bsl_bits, std::span<const uint8_t> wire) {
    auto bs = zero(bsl_bits);
    if (!bs || wire.size() != bs->size_bytes()) {
        return std::nullopt;
    }
    std::memcpy(bs->data(), wire.data(), wire.size());
    return bs;
}

std::optional<BitString> BitString::from_bfr_ids(uint16_t bsl_bits, uint16_t si,
                                                 std::span<const BfrId> ids) {
    auto bs = zero(bsl_bits);
    if (!bs) {
        return std::nullopt;
    }
    for (const BfrId id : ids) {
        const auto pos = bfr_id_to_si_bp(id, bsl_bits);
        if (!pos || pos->si != si) {
            return std::nullopt;
        }
        bs->set(pos->bp);
    }
    return bs;
}

std::optional<BitString> BitString::parse_bfr_ids(uint16_t bsl_bits, uint16_t si,
                                                  std::string_view text) {
    const auto ids = parse_bfr_id_list(text);
    if (!ids) {
        return std::nullopt;
    }
    return from_bfr_ids(bsl_bits, si, *ids);
}

std::optional<BitString> BitString::parse_hex(uint16_t bsl_bits, std::string_view text) {
    auto bs = zero(bsl_bits);
    if (!bs) {
        return std::nullopt;
    }
    text = trim_blanks(text);
    if (text.starts_with("0x") || text.starts_with("0X")) {
        text.remove_prefix(2);
    }
    std::vector<uint8_t> digits;  // most significant first
    for (const char c : text) {
        if (c == ' ' || c == '\t' || c == ':' || c == '_') {
            continue;
        }
        const auto value = hex_digit_value(c);
        if (!value) {
            return std::nullopt;
        }
        digits.push_back(*value);
    }
    const size_t len = bs->size_bytes();
    if (digits.empty() || digits.size() > 2 * len) {
        return std::nullopt;
    }
    // Fill from the least-significant digit, which belongs in the low nibble of the last octet.
    for (size_t i = 0; i < digits.size(); ++i) {
        const uint8_t digit = digits[digits.size() - 1 - i];
        uint8_t& byte = bs->bytes_[len - 1 - i / 2];
        byte = static_cast<uint8_t>(byte | (i % 2 == 0 ? digit : digit << 4));
    }
    return bs;
}

std::optional<std::vector<BfrId>> BitString::bfr_ids(uint16_t si) const {
    std::vector<BfrId> ids;
    for (uint16_t bp = 1; bp <= bsl_bits_; ++bp) {
        if (!test(bp)) {
            continue;
        }
        const auto id = si_bp_to_bfr_id(SiBp{si, bp}, bsl_bits_);
        if (!id) {
            return std::nullopt;
        }
        ids.push_back(*id);
    }
    return ids;
}

std::optional<std::string> BitString::format_bfr_ids(uint16_t si) const {
    const auto ids = bfr_ids(si);
    if (!ids) {
        return std::nullopt;
    }
    return format_bfr_id_list(*ids);
}

std::string BitString::hex() const {
    static constexpr char kDigits[] = "0123456789abcdef";
    std::string out;
    out.reserve(2 * size_bytes());
    for (const uint8_t byte : wire()) {
        out += kDigits[byte >> 4];
        out += kDigits[byte & 0x0F];
    }
    return out;
}

BitString& BitString::operator|=(const BitString& other) noexcept {
    assert(bsl_bits_ == other.bsl_bits_);
    bits_or_into(data(), other.data(), size_bytes());
    return *this;
}

BitString& BitString::operator&=(const BitString& other) noexcept {
    assert(bsl_bits_ == other.bsl_bits_);
    bits_and_into(data(), other.data(), size_bytes());
    return *this;
}

BitString& BitString::and_not(const BitString& other) noexcept {
    assert(bsl_bits_ == other.bsl_bits_);
    bits_andnot_into(data(), other.data(), size_bytes());
    return *this;
}

bool BitString::intersects(const BitString& other) const noexcept {
    assert(bsl_bits_ == other.bsl_bits_);
    return bits_intersect(data(), other.data(), size_bytes());
}

bool BitString::is_subset_of(const BitString& other) const noexcept {
    assert(bsl_bits_ == other.bsl_bits_);
    return bits_subset(data(), other.data(), size_bytes());
}

}  // namespace ina::wire
