// SPDX-License-Identifier: Apache-2.0
#include "net/addr.h"

#include <charconv>
#include <arpa/inet.h>

#include <cstdio>
#include <cstring>

namespace ina::net {
namespace {

std::optional<unsigned> parse_uint(std::string_view s, unsigned base, unsigned max) {
    if (s.empty() || s.size() > 3) {
        return std::nullopt;
    }
    unsigned v = 0;
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v, static_cast<int>(base));
    if (ec != std::errc{} || ptr != s.data() + s.size() || v > max) {
        return std::nullopt;
    }
    return v;
}

int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

}  // namespace

std::optional<MacAddr> MacAddr::parse(std::string_view text) {
    // Exactly "xx:xx:xx:xx:xx:xx" (or '-' separators), two hex digits per octet.
    if (text.size() != 17) {
        return std::nullopt;
    }
    MacAddr mac;
    for (size_t i = 0; i < 6; ++i) {
        int hi = hex_digit(text[i * 3]);
        int lo = hex_digit(text[i * 3 + 1]);
        if (hi < 0 || lo < 0) {
            return std::nullopt;
        }
        if (i < 5 && text[i * 3 + 2] != ':' && text[i * 3 + 2] != '-') {
            return std::nullopt;
        }
        mac.bytes[i] = static_cast<uint8_t>(hi << 4 | lo);
    }
    return mac;
}

std::string MacAddr::str() const {
    char buf[18];
    std::snprintf(buf, sizeof buf, "%02x:%02x:%02x:%02x:%02x:%02x", bytes[0], bytes[1], bytes[2],
                  bytes[3], bytes[4], bytes[5]);
    return buf;
}

std::optional<Ipv4Addr> Ipv4Addr::parse(std::string_view text) {
    uint32_t value = 0;
    for (int i = 0; i < 4; ++i) {
        size_t dot = text.find('.');
        std::string_view part = i < 3 ? text.substr(0, dot) : text;
        if (i < 3 && dot == std::string_view::npos) {
            return std::nullopt;
        }
        if (part.size() > 1 && part[0] == '0') {
            return std::nullopt;  // no octal-looking octets
        }
        auto octet = parse_uint(part, 10, 255);
        if (!octet) {
            return std::nullopt;
        }
        value = value << 8 | *octet;
        if (i < 3) {
            text.remove_prefix(dot + 1);
        }
    }
    return Ipv4Addr{value};
}

std::string Ipv4Addr::str() const {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%u.%u.%u.%u", value >> 24, (value >> 16) & 0xff,
                  (value >> 8) & 0xff, value & 0xff);
    return buf;
}

std::optional<Ipv4Prefix> Ipv4Prefix::parse(std::string_view text) {
    size_t slash = text.find('/');
    if (slash == std::string_view::npos) {
        return std::nullopt;
    }
    auto addr = Ipv4Addr::parse(text.substr(0, slash));
    auto len = parse_uint(text.substr(slash + 1), 10, 32);
    if (!addr || !len) {
        return std::nullopt;
    }
    return Ipv4Prefix{*addr, static_cast<uint8_t>(*len)};
}

std::string Ipv4Prefix::str() const { return addr.str() + "/" + std::to_string(length); }

std::optional<Ipv6Addr> Ipv6Addr::parse(std::string_view text) {
    if (text.empty() || text.size() >= INET6_ADDRSTRLEN) {
        return std::nullopt;
    }
    char buf[INET6_ADDRSTRLEN] = {};
    std::memcpy(buf, text.data(), text.size());
    Ipv6Addr a;
    if (inet_pton(AF_INET6, buf, a.bytes.data()) != 1) {
        return std::nullopt;
    }
    return a;
}

std::string Ipv6Addr::str() const {
    char buf[INET6_ADDRSTRLEN] = {};
    inet_ntop(AF_INET6, bytes.data(), buf, sizeof(buf));
    return buf;
}

std::optional<Ipv6Prefix> Ipv6Prefix::parse(std::string_view text) {
    const size_t slash = text.find('/');
    if (slash == std::string_view::npos) {
        return std::nullopt;
    }
    auto addr = Ipv6Addr::parse(text.substr(0, slash));
    auto len = parse_uint(text.substr(slash + 1), 10, 128);
    if (!addr || !len) {
        return std::nullopt;
    }
    return Ipv6Prefix{*addr, static_cast<uint8_t>(*len)};
}

std::string Ipv6Prefix::str() const { return addr.str() + "/" + std::to_string(length); }

}  // namespace ina::net
