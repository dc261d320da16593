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

}  // namespace ina::net
