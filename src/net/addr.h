// SPDX-License-Identifier: Apache-2.0
// Addresses as values: IPv4 addresses and prefixes in host byte order, MAC addresses as six
// octets. Pure code, no DPDK state; parsing never throws and reports failure by std::nullopt.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ina::net {

struct MacAddr {
    std::array<uint8_t, 6> bytes{};

    static std::optional<MacAddr> parse(std::string_view text);
    std::string str() const;
    bool is_multicast() const { return (bytes[0] & 0x01) != 0; }
    bool is_zero() const { return bytes == std::array<uint8_t, 6>{}; }
    auto operator<=>(const MacAddr&) const = default;
};

// IPv4 address in host byte order.
struct Ipv4Addr {
    uint32_t value = 0;

    static std::optional<Ipv4Addr> parse(std::string_view text);
    std::string str() const;
    auto operator<=>(const Ipv4Addr&) const = default;
};

struct Ipv4Prefix {
    Ipv4Addr addr;  // as written: for an interface, the interface's own address
    uint8_t length = 0;

    // "a.b.c.d/len"; a bare address is rejected so that an interface never gets a silent /32.
    static std::optional<Ipv4Prefix> parse(std::string_view text);
    std::string str() const;
    uint32_t mask() const { return length == 0 ? 0 : ~uint32_t{0} << (32 - length); }
    uint32_t network() const { return addr.value & mask(); }
    bool contains(Ipv4Addr a) const { return (a.value & mask()) == network(); }
    uint32_t broadcast() const { return network() | ~mask(); }
    auto operator<=>(const Ipv4Prefix&) const = default;
};

// IPv6 address: sixteen octets in network order.
struct Ipv6Addr {
    std::array<uint8_t, 16> bytes{};

    static std::optional<Ipv6Addr> parse(std::string_view text);  // RFC 4291 text forms
    std::string str() const;                                       // RFC 5952 form
    bool is_multicast() const { return bytes[0] == 0xff; }
    bool is_unspecified() const { return bytes == std::array<uint8_t, 16>{}; }
    bool is_link_local() const { return bytes[0] == 0xfe && (bytes[1] & 0xc0) == 0x80; }
    auto operator<=>(const Ipv6Addr&) const = default;
};

struct Ipv6Prefix {
    Ipv6Addr addr;  // as written: for an interface, the interface's own address
    uint8_t length = 0;

    // "2001:db8::1/64"; a bare address is rejected, as for IPv4.
    static std::optional<Ipv6Prefix> parse(std::string_view text);
    std::string str() const;
    Ipv6Addr network() const {
        Ipv6Addr n = addr;
        for (size_t i = 0; i < 16; ++i) {
            const int keep = static_cast<int>(length) - static_cast<int>(i * 8);
            n.bytes[i] &= keep >= 8 ? 0xff : keep <= 0 ? 0 : static_cast<uint8_t>(0xff << (8 - keep));
        }
        return n;
    }
    bool contains(const Ipv6Addr& a) const {
        const Ipv6Prefix other{a, length};
        return other.network() == network();
    }
    auto operator<=>(const Ipv6Prefix&) const = default;
};

}  // namespace ina::net
