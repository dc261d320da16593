// SPDX-License-Identifier: Apache-2.0
// MAC, IPv4 address and prefix values: parsing, formatting and prefix arithmetic.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "net/addr.h"

namespace {

using ina::net::Ipv4Addr;
using ina::net::Ipv4Prefix;
using ina::net::MacAddr;

TEST(MacAddr, ParsesColonAndDashForms) {
    auto a = MacAddr::parse("02:1a:ff:00:9B:7c");
    ASSERT_TRUE(a.has_value());
    EXPECT_EQ(a->bytes, (std::array<uint8_t, 6>{0x02, 0x1a, 0xff, 0x00, 0x9b, 0x7c}));
    auto b = MacAddr::parse("02-1A-FF-00-9b-7C");
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(*a, *b);
}

TEST(MacAddr, FormatsLowerCaseColonSeparated) {
    MacAddr m{{0x0a, 0xBC, 0x00, 0x01, 0xfe, 0xFF}};
    EXPECT_EQ(m.str(), "0a:bc:00:01:fe:ff");
    EXPECT_EQ(MacAddr{}.str(), "00:00:00:00:00:00");
}

TEST(MacAddr, RoundTrips) {
    for (const char* s : {"00:00:00:00:00:00", "ff:ff:ff:ff:ff:ff", "02:00:00:00:00:01",
                          "de:ad:be:ef:00:42"}) {
        auto m = MacAddr::parse(s);
        ASSERT_TRUE(m.has_value()) << s;
        EXPECT_EQ(m->str(), s);
    }
}

TEST(MacAddr, Rejects) {
    const std::vector<std::string> bad = {
        "",
        "02:00:00:00:00",           // five octets
        "02:00:00:00:00:01:02",     // seven octets
        "02:00:00:00:00:1",         // short last octet
        "2:00:00:00:00:01",         // short first octet
        "02:00:00:00:00:011",       // long
        "02.00.00.00.00.01",        // wrong separator
        "02 00 00 00 00 01",        // wrong separator
        "0200.0000.0001",           // Cisco dotted form
        "020000000001",             // no separators
        "02:00:00:00:00:0g",        // not hex
        "0x:00:00:00:00:01",        // not hex
        "02:00:00:00:00:01 ",       // trailing space
        " 02:00:00:00:00:01",       // leading space
        "02::00:00:00:00:01",       // empty octet
    };
    for (const auto& s : bad) {
        EXPECT_FALSE(MacAddr::parse(s).has_value()) << "'" << s << "'";
    }
}

TEST(MacAddr, MulticastAndZero) {
    EXPECT_TRUE(MacAddr::parse("01:00:5e:00:00:01")->is_multicast());
    EXPECT_TRUE(MacAddr::parse("ff:ff:ff:ff:ff:ff")->is_multicast());
    EXPECT_TRUE(MacAddr::parse("33:33:00:00:00:01")->is_multicast());
    EXPECT_FALSE(MacAddr::parse("02:00:00:00:00:01")->is_multicast());
    EXPECT_FALSE(MacAddr::parse("00:00:00:00:00:00")->is_multicast());
    EXPECT_TRUE(MacAddr::parse("00:00:00:00:00:00")->is_zero());
    EXPECT_FALSE(MacAddr::parse("00:00:00:00:00:01")->is_zero());
}

TEST(Ipv4Addr, ParsesToHostOrder) {
    EXPECT_EQ(Ipv4Addr::parse("10.0.1.2")->value, 0x0a000102u);
    EXPECT_EQ(Ipv4Addr::parse("0.0.0.0")->value, 0u);
    EXPECT_EQ(Ipv4Addr::parse("255.255.255.255")->value, 0xffffffffu);
    EXPECT_EQ(Ipv4Addr::parse("192.168.100.200")->value, 0xc0a864c8u);
    EXPECT_EQ(Ipv4Addr::parse("1.0.0.0")->value, 0x01000000u);
    EXPECT_EQ(Ipv4Addr::parse("0.0.0.1")->value, 1u);
}

TEST(Ipv4Addr, Formats) {
    EXPECT_EQ(Ipv4Addr{0x0a000102u}.str(), "10.0.1.2");
    EXPECT_EQ(Ipv4Addr{0}.str(), "0.0.0.0");
    EXPECT_EQ(Ipv4Addr{0xffffffffu}.str(), "255.255.255.255");
    EXPECT_EQ(Ipv4Addr{0xc0a864c8u}.str(), "192.168.100.200");
}

TEST(Ipv4Addr, RoundTripsManyValues) {
    uint32_t v = 0x12345678u;
    for (int i = 0; i < 1000; ++i) {
        v = v * 1664525u + 1013904223u;  // deterministic LCG
        Ipv4Addr a{v};
        auto back = Ipv4Addr::parse(a.str());
        ASSERT_TRUE(back.has_value()) << a.str();
        EXPECT_EQ(back->value, v);
    }
}

TEST(Ipv4Addr, Rejects) {
    const std::vector<std::string> bad = {
        "",
        "10",
        "10.0",
        "10.0.0",
        "10.0.0.1.",
        "10.0.0.1.5",
        ".10.0.0.1",
        "10..0.1",
        "256.0.0.1",
        "10.0.0.256",
        "10.0.300.1",
        "1000.0.0.1",
        "010.0.0.1",   // octal-looking
        "10.00.0.1",   // octal-looking
        "10.0.0.01",   // octal-looking
        "10.0.0.-1",
        "10.0.0.+1",
        "10.0.0.a",
        "10.0.0.0x1",
        " 10.0.0.1",
        "10.0.0.1 ",
        "10.0.0.1/24",
        "10,0,0,1",
    };
    for (const auto& s : bad) {
        EXPECT_FALSE(Ipv4Addr::parse(s).has_value()) << "'" << s << "'";
    }
}

TEST(Ipv4Addr, Orders) {
    EXPECT_LT(*Ipv4Addr::parse("10.0.0.1"), *Ipv4Addr::parse("10.0.0.2"));
    EXPECT_LT(*Ipv4Addr::parse("9.255.255.255"), *Ipv4Addr::parse("10.0.0.0"));
    EXPECT_EQ(*Ipv4Addr::parse("10.0.0.1"), Ipv4Addr{0x0a000001u});
}

TEST(Ipv4Prefix, ParsesAndKeepsTheAddressAsWritten) {
    auto p = Ipv4Prefix::parse("10.0.1.1/24");
    ASSERT_TRUE(p.has_value());
    EXPECT_EQ(p->addr.value, 0x0a000101u);
    EXPECT_EQ(p->length, 24);
    EXPECT_EQ(p->str(), "10.0.1.1/24");
    EXPECT_EQ(Ipv4Prefix::parse("0.0.0.0/0")->length, 0);
    EXPECT_EQ(Ipv4Prefix::parse("1.2.3.4/32")->length, 32);
    EXPECT_EQ(Ipv4Prefix::parse("0.0.0.0/0")->str(), "0.0.0.0/0");
}

TEST(Ipv4Prefix, Rejects) {
    const std::vector<std::string> bad = {
        "",
        "10.0.0.1",       // missing slash: no silent /32
        "10.0.0.1/",      // empty length
        "/24",            // empty address
        "10.0.0.1/33",
        "10.0.0.1/100",
        "10.0.0.1/-1",
        "10.0.0.1/2a",
        "10.0.0.1/24/8",
        "10.0.0.1/ 24",
        "256.0.0.1/8",
        "010.0.0.1/8",
        "10.0.0/24",
        "10.0.0.1/1234",
    };
    for (const auto& s : bad) {
        EXPECT_FALSE(Ipv4Prefix::parse(s).has_value()) << "'" << s << "'";
    }
}

TEST(Ipv4Prefix, MaskNetworkBroadcast) {
    auto p = *Ipv4Prefix::parse("10.1.2.3/24");
    EXPECT_EQ(p.mask(), 0xffffff00u);
    EXPECT_EQ(p.network(), 0x0a010200u);
    EXPECT_EQ(p.broadcast(), 0x0a0102ffu);

    auto q = *Ipv4Prefix::parse("172.16.200.9/12");
    EXPECT_EQ(q.mask(), 0xfff00000u);
    EXPECT_EQ(q.network(), 0xac100000u);
    EXPECT_EQ(q.broadcast(), 0xac1fffffu);

    auto r = *Ipv4Prefix::parse("192.168.1.5/31");
    EXPECT_EQ(r.mask(), 0xfffffffeu);
    EXPECT_EQ(r.network(), 0xc0a80104u);
    EXPECT_EQ(r.broadcast(), 0xc0a80105u);

    auto one = *Ipv4Prefix::parse("128.0.0.1/1");
    EXPECT_EQ(one.mask(), 0x80000000u);
    EXPECT_EQ(one.network(), 0x80000000u);
    EXPECT_EQ(one.broadcast(), 0xffffffffu);
}

TEST(Ipv4Prefix, ZeroLengthCoversEverything) {
    auto p = *Ipv4Prefix::parse("10.9.8.7/0");
    EXPECT_EQ(p.mask(), 0u);
    EXPECT_EQ(p.network(), 0u);
    EXPECT_EQ(p.broadcast(), 0xffffffffu);
    EXPECT_TRUE(p.contains(Ipv4Addr{0}));
    EXPECT_TRUE(p.contains(Ipv4Addr{0xffffffffu}));
    EXPECT_TRUE(p.contains(*Ipv4Addr::parse("8.8.8.8")));
}

TEST(Ipv4Prefix, HostRouteContainsOnlyItself) {
    auto p = *Ipv4Prefix::parse("10.0.0.5/32");
    EXPECT_EQ(p.mask(), 0xffffffffu);
    EXPECT_EQ(p.network(), 0x0a000005u);
    EXPECT_EQ(p.broadcast(), 0x0a000005u);
    EXPECT_TRUE(p.contains(*Ipv4Addr::parse("10.0.0.5")));
    EXPECT_FALSE(p.contains(*Ipv4Addr::parse("10.0.0.4")));
    EXPECT_FALSE(p.contains(*Ipv4Addr::parse("10.0.0.6")));
}

TEST(Ipv4Prefix, ContainsAtTheEdges) {
    auto p = *Ipv4Prefix::parse("10.0.1.1/24");
    EXPECT_TRUE(p.contains(*Ipv4Addr::parse("10.0.1.0")));
    EXPECT_TRUE(p.contains(*Ipv4Addr::parse("10.0.1.255")));
    EXPECT_TRUE(p.contains(*Ipv4Addr::parse("10.0.1.77")));
    EXPECT_FALSE(p.contains(*Ipv4Addr::parse("10.0.0.255")));
    EXPECT_FALSE(p.contains(*Ipv4Addr::parse("10.0.2.0")));
    EXPECT_FALSE(p.contains(*Ipv4Addr::parse("11.0.1.1")));
}

TEST(Ipv4Prefix, EveryLengthHasAConsistentMask) {
    for (uint8_t len = 0; len <= 32; ++len) {
        Ipv4Prefix p{Ipv4Addr{0xdeadbeefu}, len};
        const uint32_t host_bits = len == 32 ? 0u : (len == 0 ? 0xffffffffu : (1u << (32 - len)) - 1);
        EXPECT_EQ(p.mask(), ~host_bits) << int{len};
        EXPECT_EQ(p.network() & host_bits, 0u) << int{len};
        EXPECT_EQ(p.broadcast(), p.network() | host_bits) << int{len};
        EXPECT_TRUE(p.contains(p.addr)) << int{len};
        EXPECT_TRUE(p.contains(Ipv4Addr{p.network()})) << int{len};
        EXPECT_TRUE(p.contains(Ipv4Addr{p.broadcast()})) << int{len};
        if (len > 0) {
            // Flipping the lowest network bit leaves the prefix.
            EXPECT_FALSE(p.contains(Ipv4Addr{p.addr.value ^ (1u << (32 - len))})) << int{len};
        }
    }
}

}  // namespace
