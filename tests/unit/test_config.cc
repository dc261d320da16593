// SPDX-License-Identifier: Apache-2.0
// The YAML loader: every key, defaults, every class of error with its file:line:col, and which
// changes need a restart.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>
#include <sstream>
#include <fstream>
#include <string>
#include <vector>

#include "config/config.h"

namespace {

using ina::config::Config;
using ina::config::load_file;
using ina::config::load_string;
using ina::config::LoadResult;
using ina::config::restart_required;
using ina::net::Ipv4Addr;
using ina::net::Ipv4Prefix;
using ina::net::MacAddr;

constexpr const char* kFull = R"(version: 1
eal:
  args: ["-l", "0-2", "--no-pci"]
mempool:
  mbufs: 16383
  cache_size: 128
  data_room: 4096
ports:
  - name: up0
    devargs: "0000:3b:00.0"
    rx_queues: 2
    rx_descriptors: 2048
    tx_descriptors: 512
    mac: 02:00:00:00:00:01
    mtu: 9000
    promiscuous: false
    ipv4: [10.0.1.1/24, 10.0.9.1/30]
  - name: lan0
    devargs: net_null0,no-rx=1
    ipv4: [10.0.2.1/24]
    l2_group: lan
  - name: lan1
    devargs: net_null1
    ipv4: [10.0.2.3/24]
    l2_group: lan
lcores:
  - lcore: 1
    rx:
      - {port: up0, queue: 0}
      - {port: up0, queue: 1}
  - lcore: 2
    rx:
      - port: lan0
      - port: lan1
        queue: 0
dataplane:
  burst_size: 64
  tx_drain_us: 50
  idle_sleep_us: 10
  idle_loops_before_sleep: 1000
routes:
  - prefix: 0.0.0.0/0
    via: 10.0.1.254
  - prefix: 10.8.0.0/16
    port: lan0
  - prefix: 172.16.0.0/12
    via: 10.0.2.9
    port: lan1
neighbours:
  - ip: 10.0.1.254
    mac: 02:aa:bb:cc:dd:01
    port: up0
l2:
  mac_ageing_s: 60
  max_fdb_entries: 1024
arp:
  neighbour_timeout_s: 600
  request_interval_ms: 500
  max_neighbours: 2048
control:
  listen: "0.0.0.0:9100"
  allow_unauthenticated: true
)";

constexpr const char* kMinimal = R"(version: 1
ports:
  - name: p0
    devargs: net_null0
)";

Ipv4Prefix pfx(const char* s) { return *Ipv4Prefix::parse(s); }
Ipv4Addr ip(const char* s) { return *Ipv4Addr::parse(s); }
MacAddr mac(const char* s) { return *MacAddr::parse(s); }

std::string all_errors(const LoadResult& r) { return r.error_text(); }

// Asserts that loading `yaml` fails with an error whose text starts with `prefix` (the exact
// "file:line:col: " position) and contains `part`.
::testing::AssertionResult HasError(const std::string& yaml, const std::string& prefix,
                                    const std::string& part) {
    auto r = load_string(yaml, "t.yaml");
    if (r.ok()) {
        return ::testing::AssertionFailure() << "loaded without errors";
    }
    if (r.config.has_value()) {
        return ::testing::AssertionFailure() << "errors but a config was returned";
    }
    for (const auto& e : r.errors) {
        const auto s = e.str();
        if (s.rfind(prefix, 0) == 0 && s.find(part) != std::string::npos) {
            return ::testing::AssertionSuccess();
        }
    }
    return ::testing::AssertionFailure()
           << "no error starting with '" << prefix << "' containing '" << part << "' in:\n"
           << r.error_text();
}

// ---------------------------------------------------------------------------------------------
// Valid files

TEST(ConfigLoad, EveryKey) {
    auto r = load_string(kFull, "full.yaml");
    ASSERT_TRUE(r.ok()) << all_errors(r);
    ASSERT_TRUE(r.errors.empty());
    const Config& c = *r.config;
    EXPECT_EQ(c.version, 1);
    EXPECT_EQ(c.source, "full.yaml");
    EXPECT_EQ(c.eal_args, (std::vector<std::string>{"-l", "0-2", "--no-pci"}));
    EXPECT_EQ(c.mempool.mbufs, 16383u);
    EXPECT_EQ(c.mempool.cache_size, 128u);
    EXPECT_EQ(c.mempool.data_room, 4096);

    ASSERT_EQ(c.ports.size(), 3u);
    const auto& up = c.ports[0];
    EXPECT_EQ(up.name, "up0");
    EXPECT_EQ(up.devargs, "0000:3b:00.0");
    EXPECT_EQ(up.rx_queues, 2);
    EXPECT_EQ(up.rx_descriptors, 2048);
    EXPECT_EQ(up.tx_descriptors, 512);
    ASSERT_TRUE(up.mac.has_value());
    EXPECT_EQ(*up.mac, mac("02:00:00:00:00:01"));
    EXPECT_EQ(up.mtu, 9000);
    EXPECT_FALSE(up.promiscuous);
    EXPECT_EQ(up.ipv4, (std::vector<Ipv4Prefix>{pfx("10.0.1.1/24"), pfx("10.0.9.1/30")}));
    EXPECT_EQ(up.l2_group, "");
    EXPECT_EQ(up.chunk_steering, ina::config::ChunkSteering::automatic);
    EXPECT_EQ(up.mark.line, 9);
    EXPECT_EQ(up.mark.column, 5);

    EXPECT_EQ(c.ports[1].name, "lan0");
    EXPECT_EQ(c.ports[1].devargs, "net_null0,no-rx=1");
    EXPECT_EQ(c.ports[1].l2_group, "lan");
    EXPECT_EQ(c.ports[1].rx_queues, 1);
    EXPECT_FALSE(c.ports[1].mac.has_value());
    EXPECT_TRUE(c.ports[1].promiscuous);
    EXPECT_EQ(c.ports[1].mark.line, 18);
    EXPECT_EQ(c.ports[2].l2_group, "lan");
    EXPECT_EQ(c.ports[2].ipv4, (std::vector<Ipv4Prefix>{pfx("10.0.2.3/24")}));

    ASSERT_EQ(c.lcores.size(), 2u);
    EXPECT_EQ(c.lcores[0].lcore, 1u);
    ASSERT_EQ(c.lcores[0].rx.size(), 2u);
    EXPECT_EQ(c.lcores[0].rx[0].port, "up0");
    EXPECT_EQ(c.lcores[0].rx[0].queue, 0);
    EXPECT_EQ(c.lcores[0].rx[1].port, "up0");
    EXPECT_EQ(c.lcores[0].rx[1].queue, 1);
    EXPECT_EQ(c.lcores[1].lcore, 2u);
    ASSERT_EQ(c.lcores[1].rx.size(), 2u);
    EXPECT_EQ(c.lcores[1].rx[0].port, "lan0");
    EXPECT_EQ(c.lcores[1].rx[0].queue, 0);
    EXPECT_EQ(c.lcores[1].rx[1].port, "lan1");

    EXPECT_EQ(c.dataplane.burst_size, 64);
    EXPECT_EQ(c.dataplane.tx_drain_us, 50u);
    EXPECT_EQ(c.dataplane.idle_sleep_us, 10u);
    EXPECT_EQ(c.dataplane.idle_loops_before_sleep, 1000u);

    ASSERT_EQ(c.routes.size(), 3u);
    EXPECT_EQ(c.routes[0].prefix, pfx("0.0.0.0/0"));
    ASSERT_TRUE(c.routes[0].via.has_value());
    EXPECT_EQ(*c.routes[0].via, ip("10.0.1.254"));
    EXPECT_EQ(c.routes[0].port, "");
    EXPECT_EQ(c.routes[1].prefix, pfx("10.8.0.0/16"));
    EXPECT_FALSE(c.routes[1].via.has_value());
    EXPECT_EQ(c.routes[1].port, "lan0");
    EXPECT_EQ(*c.routes[2].via, ip("10.0.2.9"));
    EXPECT_EQ(c.routes[2].port, "lan1");
    EXPECT_EQ(c.routes[2].mark.line, 46);

    ASSERT_EQ(c.neighbours.size(), 1u);
    EXPECT_EQ(c.neighbours[0].ip, ip("10.0.1.254"));
    EXPECT_EQ(c.neighbours[0].mac, mac("02:aa:bb:cc:dd:01"));
    EXPECT_EQ(c.neighbours[0].port, "up0");

    EXPECT_EQ(c.l2.mac_ageing_s, 60u);
    EXPECT_EQ(c.l2.max_fdb_entries, 1024u);
    EXPECT_EQ(c.arp.neighbour_timeout_s, 600u);
    EXPECT_EQ(c.arp.request_interval_ms, 500u);
    EXPECT_EQ(c.arp.max_neighbours, 2048u);
    EXPECT_EQ(c.control.listen, "0.0.0.0:9100");

    EXPECT_EQ(c.find_port("lan1"), &c.ports[2]);
    EXPECT_EQ(c.find_port("nope"), nullptr);
    EXPECT_EQ(c.port_index("lan0"), 1);
    EXPECT_EQ(c.port_index("nope"), -1);
}

TEST(ConfigLoad, DefaultsApply) {
    auto r = load_string(kMinimal, "min.yaml");
    ASSERT_TRUE(r.ok()) << all_errors(r);
    const Config& c = *r.config;
    const Config d;
    EXPECT_TRUE(c.eal_args.empty());
    EXPECT_EQ(c.mempool.mbufs, 8191u);
    EXPECT_EQ(c.mempool.cache_size, 256u);
    EXPECT_EQ(c.mempool.data_room, 2176);
    ASSERT_EQ(c.ports.size(), 1u);
    const auto& p = c.ports[0];
    EXPECT_EQ(p.rx_queues, 1);
    EXPECT_EQ(p.rx_descriptors, 1024);
    EXPECT_EQ(p.tx_descriptors, 1024);
    EXPECT_FALSE(p.mac.has_value());
    EXPECT_EQ(p.mtu, 1500);
    EXPECT_TRUE(p.promiscuous);
    EXPECT_TRUE(p.ipv4.empty());
    EXPECT_TRUE(p.l2_group.empty());
    EXPECT_TRUE(c.lcores.empty());
    EXPECT_EQ(c.dataplane.burst_size, 32);
    EXPECT_EQ(c.dataplane.tx_drain_us, 100u);
    EXPECT_EQ(c.dataplane.idle_sleep_us, 0u);
    EXPECT_EQ(c.dataplane.idle_loops_before_sleep, 256u);
    EXPECT_TRUE(c.routes.empty());
    EXPECT_TRUE(c.neighbours.empty());
    EXPECT_EQ(c.l2.mac_ageing_s, 300u);
    EXPECT_EQ(c.l2.max_fdb_entries, 4096u);
    EXPECT_EQ(c.arp.neighbour_timeout_s, 1200u);
    EXPECT_EQ(c.arp.request_interval_ms, 1000u);
    EXPECT_EQ(c.arp.max_neighbours, 4096u);
    EXPECT_EQ(c.control.listen, "127.0.0.1:9464");
    EXPECT_EQ(c.control.listen, d.control.listen);
}

TEST(ConfigLoad, EmptyListenDisablesControl) {
    auto r = load_string(std::string(kMinimal) + "control:\n  listen: \"\"\n", "t.yaml");
    ASSERT_TRUE(r.ok()) << all_errors(r);
    EXPECT_EQ(r.config->control.listen, "");
}

TEST(ConfigLoad, SlashThirtyOneAndThirtyTwoInterfaceAddresses) {
    auto r = load_string(R"(version: 1
ports:
  - name: p0
    devargs: a
    ipv4: [10.0.0.0/31, 10.0.0.9/32]
)",
                         "t.yaml");
    ASSERT_TRUE(r.ok()) << all_errors(r);
    EXPECT_EQ(r.config->ports[0].ipv4.size(), 2u);
}

TEST(ConfigLoad, FileOnDisk) {
    const std::string path = ::testing::TempDir() + "ina_config_test_ok.yaml";
    {
        std::ofstream out(path);
        out << kFull;
    }
    auto r = load_file(path);
    std::remove(path.c_str());
    ASSERT_TRUE(r.ok()) << all_errors(r);
    EXPECT_EQ(r.config->source, path);
    EXPECT_EQ(r.config->ports.size(), 3u);
}

TEST(ConfigLoad, FileErrorsNameTheFile) {
    const std::string path = ::testing::TempDir() + "ina_config_test_bad.yaml";
    {
        std::ofstream out(path);
        out << "version: 1\nports:\n  - name: p0\n    devargs: x\n    mtu: 10\n";
    }
    auto r = load_file(path);
    std::remove(path.c_str());
    ASSERT_FALSE(r.ok());
    ASSERT_EQ(r.errors.size(), 1u);
    EXPECT_EQ(r.errors[0].str(), path + ":5:10: expected mtu: an integer from 68 to 9600, got '10'");
}

TEST(ConfigLoad, MissingFile) {
    auto r = load_file("/nonexistent/dir/inaswitch.yaml");
    ASSERT_FALSE(r.ok());
    ASSERT_EQ(r.errors.size(), 1u);
    EXPECT_EQ(r.errors[0].str(), "/nonexistent/dir/inaswitch.yaml: cannot open file");
    EXPECT_EQ(r.error_text(), "/nonexistent/dir/inaswitch.yaml: cannot open file\n");
}

// ---------------------------------------------------------------------------------------------
// Errors: keys and types

TEST(ConfigErrors, UnknownTopLevelKey) {
    EXPECT_TRUE(HasError("version: 1\nportz: []\nports:\n  - name: p0\n    devargs: x\n",
                         "t.yaml:2:1: ", "unknown key 'portz' in the top level; expected one of:"));
    EXPECT_TRUE(HasError("version: 1\nportz: []\nports:\n  - name: p0\n    devargs: x\n",
                         "t.yaml:2:1: ", " ports "));
}

TEST(ConfigErrors, KebabCaseKeyGetsAHint) {
    EXPECT_TRUE(HasError("version: 1\nports:\n  - name: p0\n    devargs: x\n    rx-queues: 2\n",
                         "t.yaml:5:5: ",
                         "unknown key 'rx-queues' in a port; keys are snake_case: did you mean "
                         "'rx_queues'?"));
    EXPECT_TRUE(HasError(std::string(kMinimal) + "dataplane:\n  burst-size: 8\n", "t.yaml:6:3: ",
                         "did you mean 'burst_size'?"));
    EXPECT_TRUE(HasError(std::string(kMinimal) + "l2:\n  mac-ageing-s: 8\n", "t.yaml:6:3: ",
                         "did you mean 'mac_ageing_s'?"));
}

TEST(ConfigErrors, UnknownKeysInEverySection) {
    const std::string base = kMinimal;
    EXPECT_TRUE(HasError(base + "eal:\n  argz: []\n", "t.yaml:6:3: ", "unknown key 'argz' in eal"));
    EXPECT_TRUE(HasError(base + "mempool:\n  size: 1\n", "t.yaml:6:3: ",
                         "unknown key 'size' in mempool"));
    EXPECT_TRUE(HasError(base + "arp:\n  timeout: 1\n", "t.yaml:6:3: ",
                         "unknown key 'timeout' in arp"));
    EXPECT_TRUE(HasError(base + "control:\n  port: 1\n", "t.yaml:6:3: ",
                         "unknown key 'port' in control"));
    EXPECT_TRUE(HasError(base + "routes:\n  - prefix: 10.0.0.0/8\n    gw: 10.0.0.1\n",
                         "t.yaml:7:5: ", "unknown key 'gw' in a route"));
    EXPECT_TRUE(HasError(base + "neighbours:\n  - {ip: 10.0.0.1, mac: 02:00:00:00:00:01, port: p0, "
                                "vlan: 3}\n",
                         "t.yaml:6:54: ", "unknown key 'vlan' in a neighbour"));
    EXPECT_TRUE(HasError(base + "lcores:\n  - lcore: 1\n    rx: [{port: p0, q: 0}]\n",
                         "t.yaml:7:21: ", "unknown key 'q' in an RX queue"));
}

TEST(ConfigErrors, StringForAnInteger) {
    EXPECT_TRUE(HasError("version: 1\nports:\n  - name: p0\n    devargs: x\n    mtu: big\n",
                         "t.yaml:5:10: ", "expected mtu: an integer from 68 to 9600, got 'big'"));
    EXPECT_TRUE(HasError("version: 1\nports:\n  - name: p0\n    devargs: x\n    rx_queues: 1.5\n",
                         "t.yaml:5:16: ", "expected rx_queues: an integer from 1 to 64, got '1.5'"));
    EXPECT_TRUE(HasError("version: 1\nports:\n  - name: p0\n    devargs: x\n    mtu: -1500\n",
                         "t.yaml:5:10: ", "got '-1500'"));
    EXPECT_TRUE(HasError(std::string(kMinimal) + "mempool:\n  mbufs: lots\n", "t.yaml:6:10: ",
                         "expected mbufs: an integer"));
}

TEST(ConfigErrors, MapWhereAListBelongs) {
    EXPECT_TRUE(HasError("version: 1\nports: {name: p0}\n", "t.yaml:2:8: ",
                         "expected a list of ports (a list)"));
    EXPECT_TRUE(HasError("version: 1\nports:\n  name: p0\n", "t.yaml:3:3: ",
                         "expected a list of ports (a list)"));
    EXPECT_TRUE(HasError(std::string(kMinimal) + "routes:\n  prefix: 10.0.0.0/8\n", "t.yaml:6:3: ",
                         "expected a list of routes (a list)"));
    EXPECT_TRUE(HasError("version: 1\nports:\n  - name: p0\n    devargs: x\n    ipv4: 10.0.0.1/8\n",
                         "t.yaml:5:11: ", "(a list)"));
}

TEST(ConfigErrors, ListOrScalarWhereAMapBelongs) {
    EXPECT_TRUE(HasError(std::string(kMinimal) + "dataplane: [1, 2]\n", "t.yaml:5:12: ",
                         "expected dataplane settings (a mapping)"));
    EXPECT_TRUE(HasError("version: 1\nports:\n  - p0\n", "t.yaml:3:5: ", "expected a port (a mapping)"));
    EXPECT_TRUE(HasError("- 1\n- 2\n", "t.yaml:1:1: ", "expected a configuration document"));
    EXPECT_TRUE(HasError("version: 1\nports:\n  - name: [p0]\n    devargs: x\n", "t.yaml:3:11: ",
                         "expected a port name (a scalar)"));
}

TEST(ConfigErrors, BooleansAreStrict) {
    EXPECT_TRUE(HasError("version: 1\nports:\n  - name: p0\n    devargs: x\n    promiscuous: yes\n",
                         "t.yaml:5:18: ", "expected promiscuous: true or false, got 'yes'"));
}

TEST(Config, ChunkSteeringPerPort) {
    const auto r = load_string("version: 1\nports:\n  - name: p0\n    devargs: x\n"
                               "    chunk_steering: off\n  - name: p1\n    devargs: y\n"
                               "    chunk_steering: auto\n  - name: p2\n    devargs: z\n",
                               "t.yaml");
    ASSERT_TRUE(r.ok()) << r.error_text();
    EXPECT_EQ(r.config->ports[0].chunk_steering, ina::config::ChunkSteering::off);
    EXPECT_EQ(r.config->ports[1].chunk_steering, ina::config::ChunkSteering::automatic);
    EXPECT_EQ(r.config->ports[2].chunk_steering, ina::config::ChunkSteering::automatic);
}

TEST(ConfigErrors, ChunkSteeringIsAutoOrOff) {
    EXPECT_TRUE(HasError("version: 1\nports:\n  - name: p0\n    devargs: x\n"
                         "    chunk_steering: on\n",
                         "t.yaml:5:21: ", "expected chunk_steering: auto or off, got 'on'"));
    EXPECT_TRUE(HasError("version: 1\nports:\n  - name: p0\n    devargs: x\n"
                         "    chunk_steering: [auto]\n",
                         "t.yaml:5:21: ", "chunk_steering"));
}

TEST(ConfigErrors, IntegersOutOfRange) {
    const auto port = [](const std::string& line) {
        return "version: 1\nports:\n  - name: p0\n    devargs: x\n    " + line + "\n";
    };
    EXPECT_TRUE(HasError(port("mtu: 67"), "t.yaml:5:10: ", "from 68 to 9600, got '67'"));
    EXPECT_TRUE(HasError(port("mtu: 9601"), "t.yaml:5:10: ", "from 68 to 9600, got '9601'"));
    EXPECT_TRUE(HasError(port("rx_queues: 0"), "t.yaml:5:16: ", "from 1 to 64, got '0'"));
    EXPECT_TRUE(HasError(port("rx_queues: 65"), "t.yaml:5:16: ", "from 1 to 64, got '65'"));
    EXPECT_TRUE(HasError(port("rx_descriptors: 31"), "t.yaml:5:21: ", "from 32 to 32768"));
    EXPECT_TRUE(HasError(port("tx_descriptors: 40000"), "t.yaml:5:21: ", "from 32 to 32768"));
    EXPECT_TRUE(HasError(port("mtu: 99999999999999999999999"), "t.yaml:5:10: ",
                         "from 68 to 9600"));
    const std::string base = kMinimal;
    EXPECT_TRUE(HasError(base + "dataplane:\n  burst_size: 65\n", "t.yaml:6:15: ",
                         "expected burst_size: an integer from 1 to 64, got '65'"));
    EXPECT_TRUE(HasError(base + "dataplane:\n  burst_size: 0\n", "t.yaml:6:15: ", "from 1 to 64"));
    EXPECT_TRUE(HasError(base + "mempool:\n  mbufs: 1022\n", "t.yaml:6:10: ", "got '1022'"));
    EXPECT_TRUE(HasError(base + "mempool:\n  cache_size: 513\n", "t.yaml:6:15: ", "from 0 to 512"));
    EXPECT_TRUE(HasError(base + "arp:\n  request_interval_ms: 9\n", "t.yaml:6:24: ",
                         "from 10 to 600000"));
    EXPECT_TRUE(HasError(base + "l2:\n  max_fdb_entries: 15\n", "t.yaml:6:20: ", "from 16 to"));
    EXPECT_TRUE(HasError(base + "lcores:\n  - lcore: 1024\n    rx: [{port: p0}]\n", "t.yaml:6:12: ",
                         "expected an lcore id: an integer from 0 to 1023"));
    EXPECT_TRUE(HasError(base + "lcores:\n  - lcore: 1\n    rx: [{port: p0, queue: 64}]\n",
                         "t.yaml:7:28: ", "expected a queue id: an integer from 0 to 63"));
}

TEST(ConfigErrors, BadMac) {
    const auto port = [](const std::string& m) {
        return "version: 1\nports:\n  - name: p0\n    devargs: x\n    mac: " + m + "\n";
    };
    EXPECT_TRUE(HasError(port("02:00:00:00:00"), "t.yaml:5:10: ",
                         "expected a MAC address like 02:00:00:00:00:01, got '02:00:00:00:00'"));
    EXPECT_TRUE(HasError(port("02.00.00.00.00.01"), "t.yaml:5:10: ", "expected a MAC address"));
    EXPECT_TRUE(HasError(port("01:00:5e:00:00:01"), "t.yaml:5:10: ",
                         "expected a unicast, non-zero MAC address, got '01:00:5e:00:00:01'"));
    EXPECT_TRUE(HasError(port("00:00:00:00:00:00"), "t.yaml:5:10: ",
                         "expected a unicast, non-zero MAC address"));
    EXPECT_TRUE(HasError(std::string(kMinimal) +
                             "neighbours:\n  - ip: 10.0.0.1\n    mac: ff:ff:ff:ff:ff:ff\n    port: p0\n",
                         "t.yaml:7:10: ", "expected a unicast, non-zero MAC address"));
}

TEST(ConfigErrors, BadAddressesAndPrefixes) {
    const auto port = [](const std::string& a) {
        return "version: 1\nports:\n  - name: p0\n    devargs: x\n    ipv4: [" + a + "]\n";
    };
    EXPECT_TRUE(HasError(port("10.0.0.1"), "t.yaml:5:12: ",
                         "expected an interface address like 10.0.1.1/24, got '10.0.0.1'"));
    EXPECT_TRUE(HasError(port("10.0.0.1/33"), "t.yaml:5:12: ", "got '10.0.0.1/33'"));
    EXPECT_TRUE(HasError(port("300.0.0.1/24"), "t.yaml:5:12: ", "got '300.0.0.1/24'"));
    EXPECT_TRUE(HasError(port("10.0.0.1/0"), "t.yaml:5:12: ", "expected a prefix length from 1 to 32"));
    EXPECT_TRUE(HasError(port("10.0.0.0/24"), "t.yaml:5:12: ",
                         "expected a host address, got the network or broadcast address "
                         "'10.0.0.0/24'"));
    EXPECT_TRUE(HasError(port("10.0.0.1/24, 10.0.1.255/24"), "t.yaml:5:25: ",
                         "network or broadcast address '10.0.1.255/24'"));
    const std::string base = kMinimal;
    EXPECT_TRUE(HasError(base + "neighbours:\n  - ip: 10.0.0.256\n    mac: 02:00:00:00:00:09\n"
                                "    port: p0\n",
                         "t.yaml:6:9: ", "expected an IPv4 address, got '10.0.0.256'"));
    EXPECT_TRUE(HasError(base + "routes:\n  - prefix: 10.0.0.0\n    port: p0\n", "t.yaml:6:13: ",
                         "expected a prefix like 10.0.3.0/24, got '10.0.0.0'"));
    EXPECT_TRUE(HasError(base + "routes:\n  - prefix: 10.0.0.0/8\n    via: 10.0.0.01\n",
                         "t.yaml:7:10: ", "expected a gateway address like 10.0.2.2, got '10.0.0.01'"));
    EXPECT_TRUE(HasError(base + "control:\n  listen: localhost\n", "t.yaml:6:11: ",
                         "expected a listen address HOST:PORT"));
    EXPECT_TRUE(HasError(base + "control:\n  listen: \"127.0.0.1:70000\"\n", "t.yaml:6:11: ",
                         "expected a listen address HOST:PORT"));
}

TEST(ConfigErrors, RoutePrefixWithHostBits) {
    EXPECT_TRUE(HasError(std::string(kMinimal) + "routes:\n  - prefix: 10.0.3.7/24\n    port: p0\n",
                         "t.yaml:6:13: ",
                         "expected a network address with no host bits set; did you mean "
                         "'10.0.3.0/24'?"));
}

TEST(ConfigErrors, RouteNeedsViaOrPort) {
    EXPECT_TRUE(HasError(std::string(kMinimal) + "routes:\n  - prefix: 10.0.3.0/24\n",
                         "t.yaml:6:5: ", "expected 'via' (a gateway) or 'port'"));
}

TEST(ConfigErrors, MissingRequiredKeys) {
    EXPECT_TRUE(HasError("version: 1\nports:\n  - name: p0\n", "t.yaml:3:5: ",
                         "missing key 'devargs' in a port"));
    EXPECT_TRUE(HasError("version: 1\nports:\n  - devargs: x\n", "t.yaml:3:5: ",
                         "missing key 'name' in a port"));
    EXPECT_TRUE(HasError("version: 1\n", "t.yaml:1:1: ", "missing key 'ports' in the top level"));
    EXPECT_TRUE(HasError(std::string(kMinimal) + "lcores:\n  - lcore: 1\n", "t.yaml:6:5: ",
                         "missing key 'rx' in an lcore"));
}

TEST(ConfigErrors, BadNames) {
    EXPECT_TRUE(HasError("version: 1\nports:\n  - name: \"p 0\"\n    devargs: x\n", "t.yaml:3:11: ",
                         "expected a port name of 1-32 letters"));
    EXPECT_TRUE(HasError("version: 1\nports:\n  - name: \"\"\n    devargs: x\n", "t.yaml:3:11: ",
                         "expected a port name, got an empty string"));
}

TEST(ConfigErrors, Version) {
    EXPECT_TRUE(HasError("ports:\n  - name: p0\n    devargs: x\n", "t.yaml:1:1: ",
                         "missing key 'version' in the top level"));
    EXPECT_TRUE(HasError("version: 2\nports:\n  - name: p0\n    devargs: x\n", "t.yaml:1:10: ",
                         "this build reads version 1"));
    EXPECT_TRUE(HasError("version: 2\nports:\n  - name: p0\n    devargs: x\n", "t.yaml:1:10: ",
                         "got '2'"));
}

TEST(ConfigErrors, YamlSyntaxErrorReportsItsLine) {
    auto r = load_string("version: 1\nports:\n  - name: p0\n    devargs: [x\n", "t.yaml");
    ASSERT_FALSE(r.ok());
    ASSERT_EQ(r.errors.size(), 1u);
    EXPECT_EQ(r.errors[0].mark.line >= 4, true) << r.error_text();
    EXPECT_NE(r.errors[0].str().find("YAML syntax error: "), std::string::npos) << r.error_text();

    auto r2 = load_string("version: 1\nports:\n  - name: p0\n  devargs: x\n bad: [\n", "t.yaml");
    ASSERT_FALSE(r2.ok());
    ASSERT_EQ(r2.errors.size(), 1u);
    EXPECT_TRUE(r2.errors[0].str().rfind("t.yaml:4:", 0) == 0) << r2.error_text();
    EXPECT_NE(r2.errors[0].str().find("YAML syntax error"), std::string::npos);
}

TEST(ConfigErrors, EmptyDocument) {
    auto r = load_string("", "t.yaml");
    ASSERT_FALSE(r.ok());
    ASSERT_FALSE(r.errors.empty());
    EXPECT_NE(r.error_text().find("expected a configuration document (a mapping)"),
              std::string::npos)
        << r.error_text();
}

TEST(ConfigErrors, EveryErrorIsReported) {
    auto r = load_string(R"(version: 1
ports:
  - name: p0
    devargs: x
    mtu: huge
    mac: nope
    colour: red
  - name: p1
dataplane:
  burst_size: 100
)",
                         "t.yaml");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.errors.size(), 5u) << r.error_text();
    const std::string text = r.error_text();
    EXPECT_NE(text.find("t.yaml:5:10: expected mtu"), std::string::npos) << text;
    EXPECT_NE(text.find("t.yaml:6:10: expected a MAC address"), std::string::npos) << text;
    EXPECT_NE(text.find("t.yaml:7:5: unknown key 'colour' in a port"), std::string::npos) << text;
    EXPECT_NE(text.find("t.yaml:8:5: missing key 'devargs' in a port"), std::string::npos) << text;
    EXPECT_NE(text.find("t.yaml:10:15: expected burst_size"), std::string::npos) << text;
    // One error per line, each terminated.
    EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 5);
}

// ---------------------------------------------------------------------------------------------
// Errors: cross-references

TEST(ConfigErrors, DuplicatePortName) {
    EXPECT_TRUE(HasError(R"(version: 1
ports:
  - name: p0
    devargs: a
  - name: p0
    devargs: b
)",
                         "t.yaml:5:5: ", "duplicate port name 'p0'"));
}

TEST(ConfigErrors, UnknownPortInRoute) {
    EXPECT_TRUE(HasError(std::string(kMinimal) + "routes:\n  - prefix: 10.0.0.0/8\n    port: p9\n",
                         "t.yaml:6:5: ", "unknown port 'p9' in route 10.0.0.0/8"));
}

TEST(ConfigErrors, UnknownPortForNeighbour) {
    EXPECT_TRUE(HasError(std::string(kMinimal) +
                             "neighbours:\n  - ip: 10.0.0.1\n    mac: 02:00:00:00:00:09\n    port: p9\n",
                         "t.yaml:6:5: ", "unknown port 'p9' for neighbour 10.0.0.1"));
}

TEST(ConfigErrors, UnknownPortInLcoreRx) {
    EXPECT_TRUE(HasError(std::string(kMinimal) +
                             "lcores:\n  - lcore: 1\n    rx:\n      - {port: p0}\n      - {port: p9}\n",
                         "t.yaml:9:9: ", "unknown port 'p9'; expected a name from 'ports'"));
}

TEST(ConfigErrors, QueueBeyondThePortsQueues) {
    EXPECT_TRUE(HasError(std::string(kMinimal) +
                             "lcores:\n  - lcore: 1\n    rx:\n      - {port: p0, queue: 1}\n",
                         "t.yaml:8:9: ", "port 'p0' has 1 RX queue(s); expected a queue from 0 to 0"));
}

TEST(ConfigErrors, QueuePolledTwice) {
    EXPECT_TRUE(HasError(std::string(kMinimal) +
                             "lcores:\n  - lcore: 1\n    rx: [{port: p0}]\n"
                             "  - lcore: 2\n    rx: [{port: p0, queue: 0}]\n",
                         "t.yaml:9:10: ", "port 'p0' queue 0 is polled by more than one lcore"));
}

TEST(ConfigErrors, LcoreListedTwice) {
    EXPECT_TRUE(HasError(R"(version: 1
ports:
  - name: p0
    devargs: x
    rx_queues: 2
lcores:
  - lcore: 1
    rx: [{port: p0, queue: 0}]
  - lcore: 1
    rx: [{port: p0, queue: 1}]
)",
                         "t.yaml:9:5: ", "lcore 1 is listed twice"));
}

TEST(ConfigErrors, QueuePolledByNobody) {
    const std::string yaml = R"(version: 1
ports:
  - name: p0
    devargs: x
    rx_queues: 2
  - name: p1
    devargs: y
lcores:
  - lcore: 1
    rx: [{port: p0, queue: 1}]
)";
    EXPECT_TRUE(HasError(yaml, "t.yaml:3:5: ",
                         "port 'p0' queue 0 is polled by no lcore; expected it in some lcore's rx "
                         "list"));
    EXPECT_TRUE(HasError(yaml, "t.yaml:6:5: ", "port 'p1' queue 0 is polled by no lcore"));
    // Without an lcores section the runtime assigns queues itself: no error.
    EXPECT_TRUE(load_string(R"(version: 1
ports:
  - name: p0
    devargs: x
    rx_queues: 2
)",
                            "t.yaml")
                    .ok());
}

TEST(ConfigErrors, OverlappingSubnetsOnRoutedPorts) {
    EXPECT_TRUE(HasError(R"(version: 1
ports:
  - name: p0
    devargs: a
    ipv4: [10.0.0.1/16]
  - name: p1
    devargs: b
    ipv4: [10.0.5.1/24]
)",
                         "t.yaml:6:5: ",
                         "prefix 10.0.5.1/24 on port 'p1' overlaps 10.0.0.1/16 on port 'p0'; "
                         "expected distinct subnets on routed ports"));
    EXPECT_TRUE(HasError(R"(version: 1
ports:
  - name: p0
    devargs: a
    ipv4: [10.0.0.1/24]
    l2_group: g
  - name: p1
    devargs: b
    ipv4: [10.0.0.2/24]
    l2_group: h
  - name: p2
    devargs: c
    l2_group: g
  - name: p3
    devargs: d
    l2_group: h
)",
                         "t.yaml:7:5: ", "overlaps 10.0.0.1/24 on port 'p0'"));
}

TEST(ConfigErrors, SameAddressTwice) {
    EXPECT_TRUE(HasError(R"(version: 1
ports:
  - name: p0
    devargs: a
    ipv4: [10.0.0.1/24]
    l2_group: g
  - name: p1
    devargs: b
    ipv4: [10.0.0.1/24]
    l2_group: g
)",
                         "t.yaml:7:5: ", "address 10.0.0.1 on port 'p1' is already used on port 'p0'"));
}

TEST(ConfigLoad, OverlapAllowedWithinOneL2Group) {
    auto r = load_string(R"(version: 1
ports:
  - name: p0
    devargs: a
    ipv4: [10.0.0.1/24]
    l2_group: g
  - name: p1
    devargs: b
    ipv4: [10.0.0.2/24]
    l2_group: g
  - name: p2
    devargs: c
    ipv4: [10.0.1.1/24, 10.0.1.2/25]
)",
                         "t.yaml");
    EXPECT_TRUE(r.ok()) << all_errors(r);
}

TEST(ConfigErrors, L2GroupWithOnePort) {
    EXPECT_TRUE(HasError(R"(version: 1
ports:
  - name: p0
    devargs: a
  - name: p1
    devargs: b
    l2_group: lonely
)",
                         "t.yaml:5:5: ",
                         "L2 group 'lonely' has one port; expected at least two ports per group"));
}

TEST(ConfigErrors, L2GroupPortsMustBePromiscuous) {
    EXPECT_TRUE(HasError(R"(version: 1
ports:
  - name: p0
    devargs: a
    l2_group: g
  - name: p1
    devargs: b
    l2_group: g
    promiscuous: false
)",
                         "t.yaml:6:5: ", "port 'p1' is in L2 group 'g' and must be promiscuous"));
}

TEST(ConfigErrors, AtMostEightAddressesPerPort) {
    std::string list;
    for (int i = 1; i <= 9; ++i) {
        list += (i > 1 ? ", " : "") + ("10.0." + std::to_string(i) + ".1/24");
    }
    // The ninth address is the one reported: "    ipv4: [" is 11 characters, each earlier
    // entry "10.0.N.1/24, " 13.
    EXPECT_TRUE(HasError("version: 1\nports:\n  - name: p0\n    devargs: x\n    ipv4: [" + list +
                             "]\n",
                         "t.yaml:5:" + std::to_string(12 + 8 * 13) + ": ",
                         "expected at most 8 interface addresses per port"));
    std::string eight = list.substr(0, list.rfind(", "));
    EXPECT_TRUE(load_string("version: 1\nports:\n  - name: p0\n    devargs: x\n    ipv4: [" + eight +
                                "]\n",
                            "t.yaml")
                    .ok());
}

TEST(ConfigErrors, LcorePollsTooManyQueues) {
    std::string yaml = "version: 1\nports:\n  - name: p0\n    devargs: x\n    rx_queues: 33\n"
                       "lcores:\n  - lcore: 1\n    rx:\n";
    for (int q = 0; q < 33; ++q) {
        yaml += "      - {port: p0, queue: " + std::to_string(q) + "}\n";
    }
    EXPECT_TRUE(HasError(yaml, "t.yaml:7:5: ", "lcore 1 polls 33 RX queues; expected at most 32"));
}

TEST(ConfigLoad, RouteBackupGateways) {
    const auto r = load_string(R"(version: 1
ports:
  - name: p0
    devargs: a
    ipv4: [10.0.0.1/24]
  - name: p1
    devargs: b
    ipv4: [10.0.1.1/24]
routes:
  - {prefix: 10.9.0.0/16, via: 10.0.0.2, backup_via: [10.0.1.2, 10.0.0.3]}
  - {prefix: 10.8.0.0/16, via: 10.0.0.2, backup_via: 10.0.1.2}
)",
                               "t.yaml");
    ASSERT_TRUE(r.ok()) << r.error_text();
    ASSERT_EQ(r.config->routes.size(), 2U);
    ASSERT_EQ(r.config->routes[0].backup_via.size(), 2U);
    EXPECT_EQ(r.config->routes[0].backup_via[0].str(), "10.0.1.2");
    EXPECT_EQ(r.config->routes[0].backup_via[1].str(), "10.0.0.3");
    ASSERT_EQ(r.config->routes[1].backup_via.size(), 1U);
    EXPECT_EQ(r.config->routes[1].backup_via[0].str(), "10.0.1.2");
}

TEST(ConfigErrors, RouteBackupGateways) {
    const char* head = R"(version: 1
ports:
  - name: p0
    devargs: a
    ipv4: [10.0.0.1/24]
routes:
)";
    EXPECT_TRUE(HasError(std::string(head) + "  - {prefix: 10.9.0.0/16, via: 10.0.0.2, backup_via: 10.7.0.1}\n",
                         "t.yaml:7:5: ",
                         "backup gateway 10.7.0.1 of route 10.9.0.0/16 is in no connected subnet"));
    EXPECT_TRUE(HasError(std::string(head) + "  - {prefix: 10.9.0.0/16, via: 10.0.0.2, backup_via: [10.0.0.2]}\n",
                         "t.yaml:7:5: ", "repeats a gateway of the route"));
    EXPECT_TRUE(HasError(std::string(head) + "  - {prefix: 10.9.0.0/16, port: p0, backup_via: 10.0.0.3}\n",
                         "t.yaml:7:5: ", "expected 'backup_via' only beside a gateway 'via'"));
    EXPECT_TRUE(HasError(std::string(head) + "  - {prefix: 10.9.0.0/16, via: 10.0.0.2, backup_via: [x]}\n",
                         "t.yaml:7:55: ", "a backup gateway address"));
}

TEST(ConfigErrors, GatewayOutsideConnectedSubnets) {
    EXPECT_TRUE(HasError(R"(version: 1
ports:
  - name: p0
    devargs: a
    ipv4: [10.0.0.1/24]
routes:
  - prefix: 0.0.0.0/0
    via: 10.9.9.9
)",
                         "t.yaml:7:5: ", "gateway 10.9.9.9 of route 0.0.0.0/0 is in no connected subnet"));
}

TEST(ConfigErrors, DuplicateRouteAndNeighbour) {
    const std::string yaml = R"(version: 1
ports:
  - name: p0
    devargs: a
    ipv4: [10.0.0.1/24]
routes:
  - {prefix: 10.1.0.0/16, via: 10.0.0.2}
  - {prefix: 10.1.0.0/16, via: 10.0.0.3}
neighbours:
  - {ip: 10.0.0.2, mac: 02:00:00:00:00:02, port: p0}
  - {ip: 10.0.0.2, mac: 02:00:00:00:00:03, port: p0}
)";
    EXPECT_TRUE(HasError(yaml, "t.yaml:8:5: ", "duplicate route 10.1.0.0/16"));
    EXPECT_TRUE(HasError(yaml, "t.yaml:11:5: ", "duplicate neighbour 10.0.0.2"));
}

TEST(ConfigErrors, EverySemanticErrorIsReported) {
    auto r = load_string(R"(version: 1
ports:
  - name: p0
    devargs: a
  - name: p0
    devargs: b
    l2_group: solo
routes:
  - prefix: 10.0.0.0/8
    port: nope
neighbours:
  - {ip: 10.0.0.2, mac: 02:00:00:00:00:02, port: gone}
)",
                         "t.yaml");
    ASSERT_FALSE(r.ok());
    const std::string text = r.error_text();
    EXPECT_EQ(r.errors.size(), 4u) << text;
    EXPECT_NE(text.find("t.yaml:5:5: duplicate port name 'p0'"), std::string::npos) << text;
    // Both ports are named p0, so the group error points at the first of them.
    EXPECT_NE(text.find(":5: L2 group 'solo' has one port"), std::string::npos) << text;
    EXPECT_NE(text.find("t.yaml:9:5: unknown port 'nope' in route"), std::string::npos) << text;
    EXPECT_NE(text.find("t.yaml:12:5: unknown port 'gone' for neighbour"), std::string::npos) << text;
}

// ---------------------------------------------------------------------------------------------
// restart_required

class RestartRequired : public ::testing::Test {
protected:
    void SetUp() override {
        auto r = load_string(kFull, "full.yaml");
        ASSERT_TRUE(r.ok()) << r.error_text();
        base = *r.config;
    }
    // Asserts that `change` applied to a copy of the base needs a restart, naming `what`.
    void ExpectRestart(const std::function<void(Config&)>& change, const std::string& what) {
        Config next = base;
        change(next);
        auto reasons = restart_required(base, next);
        ASSERT_FALSE(reasons.empty()) << what;
        bool found = false;
        for (const auto& s : reasons) {
            found = found || s.find(what) != std::string::npos;
        }
        EXPECT_TRUE(found) << "no reason mentions '" << what << "'; first: " << reasons[0];
    }
    Config base;
};

TEST_F(RestartRequired, IdenticalConfigsNeedNone) {
    EXPECT_TRUE(restart_required(base, base).empty());
    auto again = load_string(kFull, "other-name.yaml");
    ASSERT_TRUE(again.ok());
    EXPECT_TRUE(restart_required(base, *again.config).empty());
}

TEST_F(RestartRequired, EachRestartOnlyChange) {
    ExpectRestart([](Config& c) { c.eal_args.push_back("--no-telemetry"); }, "eal.args");
    ExpectRestart([](Config& c) { c.mempool.mbufs = 32767; }, "mempool");
    ExpectRestart([](Config& c) { c.mempool.cache_size = 0; }, "mempool");
    ExpectRestart([](Config& c) { c.mempool.data_room = 2176; }, "mempool");
    ExpectRestart([](Config& c) { c.ports[1].chunk_steering = ina::config::ChunkSteering::off; },
                  "port 'lan0' hardware settings");
    ExpectRestart([](Config& c) { c.ports.pop_back(); }, "the set of ports");
    ExpectRestart([](Config& c) { c.ports.push_back(c.ports[0]); }, "the set of ports");
    ExpectRestart([](Config& c) { c.ports[1].name = "lanX"; }, "hardware settings");
    ExpectRestart([](Config& c) { c.ports[1].devargs = "net_null7"; }, "port 'lan0'");
    ExpectRestart([](Config& c) { c.ports[0].rx_queues = 1; }, "port 'up0' hardware settings");
    ExpectRestart([](Config& c) { c.ports[0].rx_descriptors = 1024; }, "port 'up0'");
    ExpectRestart([](Config& c) { c.ports[0].tx_descriptors = 1024; }, "port 'up0'");
    ExpectRestart([](Config& c) { c.ports[0].mac = mac("02:00:00:00:00:99"); }, "port 'up0'");
    ExpectRestart([](Config& c) { c.ports[0].mac.reset(); }, "port 'up0'");
    ExpectRestart([](Config& c) { c.ports[2].mtu = 9000; }, "port 'lan1'");
    ExpectRestart([](Config& c) { c.ports[0].promiscuous = true; }, "port 'up0'");
    ExpectRestart([](Config& c) { c.lcores[0].lcore = 3; }, "lcores");
    ExpectRestart([](Config& c) { std::swap(c.lcores[0].rx[0], c.lcores[1].rx[0]); }, "lcores");
    ExpectRestart([](Config& c) { c.lcores[1].rx[1].queue = 1; }, "lcores");
    ExpectRestart([](Config& c) { c.lcores.clear(); }, "lcores");
    ExpectRestart([](Config& c) { c.control.listen = "127.0.0.1:1"; }, "control.listen");
    ExpectRestart([](Config& c) { c.l2.max_fdb_entries = 2048; }, "table sizes");
    ExpectRestart([](Config& c) { c.arp.max_neighbours = 4096; }, "table sizes");
}

TEST_F(RestartRequired, ReportsEveryChangedPort) {
    Config next = base;
    next.ports[0].mtu = 1500;
    next.ports[2].mtu = 9000;
    next.mempool.mbufs = 8191;
    auto reasons = restart_required(base, next);
    EXPECT_EQ(reasons.size(), 3u);
}

TEST_F(RestartRequired, RoutesNeighboursAndTunablesReloadLive) {
    Config next = base;
    next.routes.pop_back();
    next.routes[0].via = ip("10.0.1.253");
    ina::config::RouteConfig extra;
    extra.prefix = pfx("10.200.0.0/16");
    extra.via = ip("10.0.1.250");
    next.routes.push_back(extra);
    next.neighbours.clear();
    ina::config::NeighbourConfig nb;
    nb.ip = ip("10.0.2.77");
    nb.mac = mac("02:00:00:00:00:77");
    nb.port = "lan0";
    next.neighbours.push_back(nb);
    next.ports[0].ipv4.push_back(pfx("10.0.50.1/24"));
    next.l2.mac_ageing_s = 10;
    next.arp.request_interval_ms = 100;
    next.arp.neighbour_timeout_s = 60;
    EXPECT_TRUE(restart_required(base, next).empty());

    // The same, written as a file and loaded: a routes/neighbours edit is a live reload.
    std::string edited = kFull;
    const auto at = edited.find("  - prefix: 10.8.0.0/16");
    ASSERT_NE(at, std::string::npos);
    edited.insert(at, "  - prefix: 192.168.0.0/16\n    via: 10.0.1.9\n");
    auto r = load_string(edited, "edited.yaml");
    ASSERT_TRUE(r.ok()) << r.error_text();
    EXPECT_EQ(r.config->routes.size(), 4u);
    EXPECT_TRUE(restart_required(base, *r.config).empty());
}

}  // namespace

namespace ina::config {
namespace {

const std::string kInaBase = std::string(kMinimal) + R"(ina:
  udp_port: 9471
  jobs:
)";

TEST(InaConfig, AggregatorAndRootJobsLoad) {
    auto r = load_string(kInaBase + R"(    - job_id: 7
      role: aggregator
      bsl: 64
      abm: "1-2"
      op: sum
      elem_type: fp32
      max_elements: 354
      window: 64
      root: 10.0.9.1
      parent: 10.0.5.1
      ingress: {ports: [p0], sources: [10.0.1.0/24]}
      on_reject: drop
    - job_id: 8
      role: root
      abm: "1,3"
      op: max
      elem_type: bf16
      root: 10.0.9.1
      workers: [{bfr_id: 1, ip: 10.0.1.2}, {bfr_id: 3, ip: 10.0.1.4}]
)",
                         "t.yaml");
    ASSERT_TRUE(r.ok()) << r.error_text();
    const auto& ina = r.config->ina;
    EXPECT_EQ(ina.udp_port, 9471);
    ASSERT_EQ(ina.jobs.size(), 2u);
    const auto& a = ina.jobs[0];
    EXPECT_EQ(a.job_id, 7u);
    EXPECT_EQ(a.role, InaRole::aggregator);
    EXPECT_EQ(a.bsl_bits, 64);
    EXPECT_EQ(a.abm, (std::vector<uint16_t>{1, 2}));
    EXPECT_EQ(a.op, 0);
    EXPECT_EQ(a.elem_type, 1);
    EXPECT_EQ(a.max_elements, 354);
    EXPECT_EQ(a.window, 64u);
    EXPECT_EQ(a.root.str(), "10.0.9.1");
    ASSERT_TRUE(a.parent.has_value());
    EXPECT_EQ(a.parent->str(), "10.0.5.1");
    EXPECT_EQ(a.ingress_ports, (std::vector<std::string>{"p0"}));
    ASSERT_EQ(a.ingress_sources.size(), 1u);
    EXPECT_EQ(a.on_reject, RejectAction::drop);
    const auto& b = ina.jobs[1];
    EXPECT_EQ(b.role, InaRole::root);
    EXPECT_EQ(b.bsl_bits, 256);  // default
    EXPECT_EQ(b.op, 3);
    EXPECT_EQ(b.elem_type, 3);
    EXPECT_EQ(b.window, 256u);
    ASSERT_EQ(b.workers.size(), 2u);
    EXPECT_EQ(b.workers[1].bfr_id, 3);
    EXPECT_EQ(b.on_reject, RejectAction::forward);
}

std::string job(const std::string& extra) {
    return kInaBase + "    - job_id: 1\n      role: aggregator\n      abm: \"1-2\"\n      op: sum\n"
                      "      elem_type: int32\n      root: 10.0.9.1\n" + extra;
}

TEST(InaConfig, ErrorsNameTheirPlace) {
    // Lines: 1-4 minimal, 5 "ina:", 6 udp_port, 7 "jobs:", 8 "- job_id", 9 role, 10 abm,
    // 11 op, 12 elem_type, 13 root, 14 the extra line.
    EXPECT_TRUE(HasError(job("      window: 48\n"), "t.yaml:14:15: ", "a power of two"));
    EXPECT_TRUE(HasError(job("      bsl: 100\n"), "t.yaml:14:12: ", "64, 128, 256"));
    EXPECT_TRUE(HasError(job("      worker_window: 48\n"), "t.yaml:14:22: ",
                         "a power of two at least 'window' (256)"));
    EXPECT_TRUE(HasError(job("      worker_window: 128\n"), "t.yaml:14:22: ", "got 128"));
    // A root takes no worker_window above its window (issue 9 defect 5: it could deadlock).
    std::string root_job = job("      window: 64\n      worker_window: 128\n");
    root_job.replace(root_job.find("role: aggregator"), 16, "role: root      ");
    EXPECT_TRUE(HasError(root_job, "t.yaml:15:22: ", "at a root"));
    EXPECT_FALSE(HasError(job("      window: 64\n      worker_window: 128\n"), "t.yaml:15:22: ",
                          "at a root"));
    // The root result cache (issue 9, defect 5): 0..2 entries per slot index, roots only.
    EXPECT_TRUE(HasError(job("      result_cache: 1\n"), "t.yaml:14:21: ",
                         "only a root keeps results"));
    EXPECT_FALSE(HasError(job("      result_cache: 0\n"), "t.yaml:14:21: ", "only a root"));
    std::string root_cache = job("      result_cache: 3\n");
    root_cache.replace(root_cache.find("role: aggregator"), 16, "role: root      ");
    EXPECT_TRUE(HasError(root_cache, "t.yaml:14:21: ", "an integer from 0 to 2, got '3'"));
    EXPECT_TRUE(HasError(job("      on_reject: ignore\n"), "t.yaml:14:18: ", "forward or drop"));
    EXPECT_TRUE(HasError(job("      colour: red\n"), "t.yaml:14:7: ", "unknown key 'colour'"));
    EXPECT_TRUE(HasError(job("      ingress: {ports: [p7]}\n"), "t.yaml:8:7: ", "unknown port 'p7'"));
    EXPECT_TRUE(HasError(job("      workers: [{bfr_id: 1, ip: 10.0.1.2}]\n"), "t.yaml:8:7: ",
                         "'workers' is for the root"));
    auto bad_field = [](const std::string& key, const std::string& value) {
        std::string y = job("");
        const auto at = y.find("      " + key + ": ");
        const auto end = y.find('\n', at);
        return y.replace(at, end - at, "      " + key + ": " + value);
    };
    EXPECT_TRUE(HasError(bad_field("role", "leaf"), "t.yaml:9:13: ", "aggregator or root"));
    EXPECT_TRUE(HasError(bad_field("abm", "\"0-2\""), "t.yaml:10:12: ", "list of BFR-ids"));
    EXPECT_TRUE(HasError(bad_field("abm", "\"\""), "t.yaml:10:12: ", "got an empty string"));
    EXPECT_TRUE(HasError(bad_field("abm", "\"1,300\""), "t.yaml:10:12: ", "in set 0 of BSL 256"));
    EXPECT_TRUE(HasError(bad_field("op", "mean"), "t.yaml:11:11: ", "sum, prod, min or max"));
    EXPECT_TRUE(HasError(bad_field("elem_type", "fp8"), "t.yaml:12:18: ", "int32, fp32"));
    EXPECT_TRUE(HasError(bad_field("root", "10.0.9"), "t.yaml:13:13: ", "IPv4 address"));
}

// `deterministic` (issue 15 item 4): true or {fraction_bits: N} on float sums; refused where it
// could change nothing or cannot apply, at its file:line:col.
TEST(InaConfig, DeterministicJobs) {
    const auto fp = [](const std::string& type, const std::string& op, const std::string& extra) {
        std::string y = job(extra);
        y.replace(y.find("elem_type: int32"), 16, "elem_type: " + type);
        y.replace(y.find("op: sum"), 7, "op: " + op);
        return y;
    };
    auto r = load_string(fp("fp32", "sum", "      deterministic: true\n"), "t.yaml");
    ASSERT_TRUE(r.ok()) << r.error_text();
    EXPECT_TRUE(r.config->ina.jobs[0].deterministic);
    EXPECT_EQ(ina_fraction_bits(r.config->ina.jobs[0]), 32);
    r = load_string(fp("fp16", "sum", "      deterministic: {fraction_bits: 20}\n"), "t.yaml");
    ASSERT_TRUE(r.ok()) << r.error_text();
    EXPECT_EQ(ina_fraction_bits(r.config->ina.jobs[0]), 20);
    r = load_string(fp("fp16", "sum", "      deterministic: true\n"), "t.yaml");
    ASSERT_TRUE(r.ok()) << r.error_text();
    EXPECT_EQ(ina_fraction_bits(r.config->ina.jobs[0]), 24);
    r = load_string(fp("bf16", "sum", "      deterministic: false\n"), "t.yaml");
    ASSERT_TRUE(r.ok()) << r.error_text();
    EXPECT_FALSE(r.config->ina.jobs[0].deterministic);
    EXPECT_EQ(ina_fraction_bits(r.config->ina.jobs[0]), 0);
    // A deterministic job's accumulators are int64 (twice an fp32 job's).
    auto plain = load_string(fp("fp32", "sum", ""), "t.yaml");
    auto det = load_string(fp("fp32", "sum", "      deterministic: true\n"), "t.yaml");
    ASSERT_TRUE(plain.ok() && det.ok());
    EXPECT_GT(ina_table_bytes(det.config->ina.jobs[0]), ina_table_bytes(plain.config->ina.jobs[0]));

    EXPECT_TRUE(HasError(job("      deterministic: true\n"), "t.yaml:14:22: ",
                         "integer reductions are exact and order free already"));
    EXPECT_TRUE(HasError(fp("fp32", "prod", "      deterministic: true\n"), "t.yaml:14:22: ",
                         "no exact fixed-point form"));
    EXPECT_TRUE(HasError(fp("fp32", "max", "      deterministic: true\n"), "t.yaml:14:22: ",
                         "order free already"));
    EXPECT_TRUE(HasError(fp("fp32", "sum", "      deterministic: yes\n"), "t.yaml:14:22: ",
                         "true or false"));
    EXPECT_TRUE(HasError(fp("fp32", "sum", "      deterministic: {fraction_bits: 127}\n"),
                         "t.yaml:14:38: ", "from 0 to 126"));
    EXPECT_TRUE(HasError(fp("fp32", "sum", "      deterministic: {bits: 3}\n"), "t.yaml:14:23: ",
                         "unknown key 'bits'"));
}

TEST(InaConfig, RootNeedsAWorkerForEveryBit) {
    const std::string root = kInaBase +
        "    - job_id: 1\n      role: root\n      abm: \"1-2\"\n      op: sum\n"
        "      elem_type: int32\n      root: 10.0.9.1\n";
    EXPECT_TRUE(HasError(root + "      workers: [{bfr_id: 1, ip: 10.0.1.2}]\n", "t.yaml:8:7: ",
                         "a worker address for every BFR-id"));
    EXPECT_TRUE(HasError(root + "      workers: [{bfr_id: 1, ip: 10.0.1.2}, {bfr_id: 5, ip: 10.0.1.3}]\n",
                         "t.yaml:14:44: ", "not in the job's abm"));
}

TEST(InaConfig, DuplicateJobIdsAndPortChangeNeedsRestart) {
    EXPECT_TRUE(HasError(job("    - {job_id: 1, role: aggregator, abm: \"3\", op: sum, elem_type: "
                             "int32, root: 10.0.9.1}\n"),
                         "t.yaml:14:7: ", "duplicate INA job_id 1"));
    auto a = load_string(job(""), "t.yaml");
    ASSERT_TRUE(a.ok()) << a.error_text();
    Config b = *a.config;
    b.ina.udp_port = 9999;
    auto reasons = restart_required(*a.config, b);
    ASSERT_EQ(reasons.size(), 1u);
    EXPECT_NE(reasons[0].find("ina.udp_port"), std::string::npos);
    Config c = *a.config;
    c.ina.jobs.clear();  // jobs come and go without a restart
    EXPECT_TRUE(restart_required(*a.config, c).empty());
}


// ---------------------------------------------------------------------------------------------
// BIER

const std::string kBierPorts = R"(version: 1
ports:
  - {name: p0, devargs: net_null0, ipv4: [10.0.1.1/24]}
  - {name: p1, devargs: net_null1, ipv4: [10.0.2.1/24]}
)";

TEST(BierConfig, BiftsGroupsAndBierResultsLoad) {
    auto r = load_string(kBierPorts + R"(bier:
  sub_domain: 2
  bfr_id: 100
  ttl: 16
  bifts:
    - bsl: 64
      set_id: 1
      neighbours:
        - {via: 10.0.1.2, bfr_ids: "65-66"}
        - {via: 10.0.2.2, bfr_ids: "66-67"}
      local:
        - {bfr_id: 70, host: 10.0.2.9}
    - bsl: 64
      bift_id: 4242
      neighbours: [{via: 10.0.1.2, bfr_ids: "1-4"}]
  groups:
    - {group: 239.1.1.1, bfr_ids: "1,65"}
ina:
  jobs:
    - {job_id: 3, role: root, bsl: 64, abm: "1-4", op: sum, elem_type: fp32,
       root: 10.0.1.1, results: bier}
)",
                         "t.yaml");
    ASSERT_TRUE(r.ok()) << r.error_text();
    const auto& b = r.config->bier;
    EXPECT_EQ(b.sub_domain, 2);
    EXPECT_EQ(b.bfr_id, 100);
    EXPECT_EQ(b.ttl, 16);
    ASSERT_EQ(b.bifts.size(), 2u);
    EXPECT_EQ(b.bifts[0].bift_id, 0x10201u) << "BSL code 1, sub-domain 2, set 1";
    EXPECT_EQ(b.bifts[1].bift_id, 4242u);
    EXPECT_EQ(b.bifts[0].neighbours[1].bfr_ids, (std::vector<uint16_t>{66, 67}));
    EXPECT_EQ(b.bifts[0].local[0].host, ip("10.0.2.9"));
    ASSERT_EQ(b.groups.size(), 1u);
    EXPECT_EQ(b.groups[0].bfr_ids, (std::vector<uint16_t>{1, 65}));
    EXPECT_EQ(r.config->ina.jobs[0].results, ResultDelivery::bier);
    EXPECT_EQ(bier_job_bsl(b, 64), 64);
    EXPECT_EQ(bier_job_bsl(b, 256), 64) << "the BIFTs' one BSL";
    EXPECT_NE(find_bift(b, 64, 1), nullptr);
    EXPECT_EQ(find_bift(b, 64, 2), nullptr);
}

TEST(BierConfig, ErrorsNameTheirPlace) {
    auto bift = [](const std::string& body) {
        return kBierPorts + "bier:\n  bfr_id: 9\n  bifts:\n    - bsl: 64\n" + body;
    };
    // Lines: 1-4 ports, 5 bier, 6 bfr_id, 7 bifts, 8 "- bsl", 9.. body.
    EXPECT_TRUE(HasError(bift("      neighbours: [{via: 10.0.9.2, bfr_ids: \"1\"}]\n"),
                         "t.yaml:9:20: ", "not on a connected subnet"));
    EXPECT_TRUE(HasError(bift("      neighbours: [{via: 10.0.1.1, bfr_ids: \"1\"}]\n"),
                         "t.yaml:9:20: ", "not on a connected subnet"));
    EXPECT_TRUE(HasError(bift("      neighbours: [{via: 10.0.1.2, bfr_ids: \"1,65\"}]\n"),
                         "t.yaml:9:45: ", "in set 0 of BSL 64: 1 to 64"));
    EXPECT_TRUE(HasError(bift("      neighbours: [{via: 10.0.1.2, bfr_ids: \"0\"}]\n"),
                         "t.yaml:9:45: ", "list of BFR-ids"));
    EXPECT_TRUE(HasError(bift("      local: [{bfr_id: 3, host: 10.0.1.5}]\n"
                              "      neighbours: [{via: 10.0.1.2, bfr_ids: \"3\"}]\n"),
                         "t.yaml:9:15: ", "local and also reached through a neighbour"));
    EXPECT_TRUE(HasError(bift("      set_id: 300\n"), "t.yaml:9:15: ",
                         "at most 255 without an explicit bift_id"));
    EXPECT_TRUE(HasError(kBierPorts + "bier:\n  bifts:\n    - bsl: 100\n", "t.yaml:7:12: ",
                         "64, 128, 256"));
    EXPECT_TRUE(HasError(bift("      hops: 3\n"), "t.yaml:9:7: ", "unknown key 'hops'"));
    EXPECT_TRUE(HasError(kBierPorts + "bier:\n  groups: [{group: 10.1.1.1, bfr_ids: \"1\"}]\n",
                         "t.yaml:6:20: ", "IPv4 multicast address"));
    EXPECT_TRUE(HasError(kBierPorts + "bier:\n  groups: [{group: 239.1.1.1, bfr_ids: \"1\"}]\n",
                         "t.yaml:6:12: ", "expected bier.bfr_id"));
    EXPECT_TRUE(HasError(bift("      neighbours: [{via: 10.0.1.2, bfr_ids: \"1\"}]\n"
                              "  groups: [{group: 239.1.1.1, bfr_ids: \"1,70\"}]\n"),
                         "t.yaml:10:12: ", "expected a BIFT with bsl: 64 and set_id: 1"));
}

TEST(BierConfig, EcmpPlanesAreBounded) {
    std::string y = kBierPorts + "bier:\n  bifts:\n    - bsl: 64\n      neighbours:\n";
    // Bit 1 over 3 paths, bit 2 over 2, bit 3 over 5: lcm 30 > 16.
    const char* vias[] = {"10.0.1.2", "10.0.1.3", "10.0.1.4", "10.0.1.5", "10.0.1.6"};
    for (int k = 0; k < 5; ++k) {
        std::string ids = "3";
        if (k < 3) ids += ",1";
        if (k < 2) ids += ",2";
        y += "        - {via: " + std::string(vias[k]) + ", bfr_ids: \"" + ids + "\"}\n";
    }
    EXPECT_TRUE(HasError(y, "t.yaml:7:7: ", "30 entropy planes"));
}

TEST(BierConfig, BierResultsNeedARootAndABift) {
    const std::string job = kBierPorts +
        "ina:\n  jobs:\n    - {job_id: 3, role: ROLE, bsl: 64, abm: \"1-4\", op: sum, "
        "elem_type: fp32, root: 10.0.1.1, results: bier}\n";
    auto with_role = [&](const std::string& role) {
        std::string y = job;
        return y.replace(y.find("ROLE"), 4, role);
    };
    EXPECT_TRUE(HasError(with_role("aggregator"), "t.yaml:7:7: ", "'results: bier' is for the root"));
    EXPECT_TRUE(HasError(with_role("root"), "t.yaml:7:7: ", "expected a BIFT to send it with"));
    EXPECT_TRUE(HasError(with_role("root"), "t.yaml:7:7: ", "expected bier.bfr_id"));
}

}  // namespace
}  // namespace ina::config

// ---------------------------------------------------------------------------------------------
// Limits the dataplane holds a config to: --check-config refuses what a reload would refuse.

namespace {

std::string with_jobs(size_t n, const std::string& job_extra = "",
                      const std::string& ina_extra = "") {
    std::string y =
        std::string(kMinimal) + "    ipv4: [10.0.1.1/24]\nina:\n" + ina_extra + "  jobs:\n";
    for (size_t i = 0; i < n; ++i) {
        y += "    - {job_id: " + std::to_string(i + 1) +
             ", role: aggregator, abm: \"1-2\", op: sum, elem_type: fp32, root: 10.0.1.9" + job_extra +
             "}\n";
    }
    return y;
}

}  // namespace

TEST(ConfigLimits, SixtyFourJobsLoadTheSixtyFifthIsRefusedAtItsLine) {
    EXPECT_TRUE(load_string(with_jobs(64), "t.yaml").ok())
        << load_string(with_jobs(64), "t.yaml").error_text();
    // Line 8 holds the first job, so the 65th is on line 72.
    EXPECT_TRUE(HasError(with_jobs(65), "t.yaml:72:7:", "at most 64 INA jobs"));
}

TEST(ConfigLimits, ChunkTablesOverTheMemoryBudgetAreRefused) {
    // window 4096 x max_elements 65535 fp32: 2 x 4096 x 256 KiB = 2 GiB per lcore for one job.
    const std::string big = with_jobs(1, ", window: 4096, max_elements: 65535");
    EXPECT_TRUE(HasError(big, "t.yaml:8:7:", "over ina.table_memory_mb (1024)"));
    // The same job fits a larger budget; the default jobs fit the default budget.
    EXPECT_TRUE(load_string(with_jobs(1, ", window: 4096, max_elements: 65535",
                                      "  table_memory_mb: 4096\n"),
                            "t.yaml")
                    .ok());
    EXPECT_TRUE(load_string(with_jobs(8), "t.yaml").ok());
    // Each job adds to the same lcore's tables: jobs of just over 128 MiB exceed 1 GiB at the
    // eighth (line 15).
    const std::string eight = with_jobs(8, ", window: 1024, max_elements: 16384");
    EXPECT_TRUE(HasError(eight, "t.yaml:15:7:", "over ina.table_memory_mb"));
    EXPECT_TRUE(load_string(with_jobs(7, ", window: 1024, max_elements: 16384"), "t.yaml").ok());
}

TEST(ConfigLimits, TableBytesFollowWindowElementsAndBsl) {
    ina::config::InaJobConfig j;
    j.window = 256;
    j.max_elements = 256;
    j.elem_type = 1;  // fp32: 4-byte accumulator
    j.bsl_bits = 256;
    const uint64_t base = ina::config::ina_table_bytes(j);
    EXPECT_GE(base, 2u * 256 * (256 * 4 + 2 * 32));
    // An aggregator (the default role) keeps a lowest-missing word + flag per contributor bit,
    // whatever the window.
    const uint64_t per_bit = 256u * 5;
    j.window = 512;
    EXPECT_GT(ina::config::ina_table_bytes(j), 2 * (base - per_bit) - 128);
    j.window = 256;
    j.elem_type = 4;  // int64: twice the accumulator
    EXPECT_GT(ina::config::ina_table_bytes(j), base + 2u * 256 * 256 * 4 - 1);
    // A root keeps result_cache released results per index (default 2), in the wire type.
    j.elem_type = 1;
    j.role = ina::config::InaRole::root;
    EXPECT_EQ(ina::config::ina_result_cache(j), 2u);
    EXPECT_GE(ina::config::ina_table_bytes(j), base + 2u * 256 * 256 * 4);
    j.result_cache = 0;
    EXPECT_EQ(ina::config::ina_table_bytes(j), base - per_bit);
    j.result_cache = 1;
    EXPECT_GE(ina::config::ina_table_bytes(j), base + 256u * 256 * 4);
}

TEST(ConfigLimits, DataRoomMustHoldABiftsHeaderAndTheInnerHeaders) {
    const std::string y = std::string(R"(version: 1
mempool: {data_room: 640}
ports:
  - name: p0
    devargs: net_null0
    ipv4: [10.0.1.1/24]
bier:
  bfr_id: 1
  bifts:
    - bsl: 4096
      neighbours:
        - {via: 10.0.1.2, bfr_ids: "2"}
)");
    // 128 headroom + 14 + 12 + 512 + 128 = 794 bytes.
    EXPECT_TRUE(HasError(y, "t.yaml:10:7:", "BSL 4096 needs mbufs of 794 bytes"));
    std::string ok = y;
    ok.replace(ok.find("640"), 3, "794");
    EXPECT_TRUE(load_string(ok, "t.yaml").ok()) << load_string(ok, "t.yaml").error_text();
}

TEST(ConfigLimits, MoreUnicastWorkersThanARootFansOutToAreRefused) {
    std::string y = std::string(kMinimal) +
                    "    ipv4: [10.0.0.1/16]\nina:\n  jobs:\n    - job_id: 1\n      role: root\n"
                    "      abm: \"1-33\"\n      op: sum\n      elem_type: fp32\n"
                    "      root: 10.0.0.1\n      workers:\n";
    for (int i = 1; i <= 33; ++i) {
        y += "        - {bfr_id: " + std::to_string(i) + ", ip: 10.0.1." + std::to_string(i) + "}\n";
    }
    EXPECT_TRUE(HasError(y, "t.yaml:8:7:", "at most 32 workers get unicast results"));
}

TEST(ConfigStrict, RepeatedKeyIsAnErrorAtItsSecondOccurrence) {
    EXPECT_TRUE(HasError(std::string(kMinimal) + "    devargs: net_null1\n", "t.yaml:5:5:",
                         "duplicate key 'devargs'"));
    EXPECT_TRUE(HasError("version: 1\nversion: 1\nports:\n  - {name: p0, devargs: net_null0}\n",
                         "t.yaml:2:1:", "duplicate key 'version'"));
    EXPECT_TRUE(HasError(std::string(kMinimal) + "    ipv4: [10.0.1.1/24]\nina:\n  jobs:\n"
                         "    - {job_id: 1, role: root, role: aggregator, abm: \"1\", op: sum,"
                         " elem_type: fp32, root: 10.0.1.1}\n",
                         "t.yaml:8:", "duplicate key 'role'"));
}

TEST(ConfigStrict, GarbledMultiDocumentInputTerminates) {
    // Found by tests/fuzz: yaml-cpp's LoadAll never returns on this text. The loader must answer
    // (with an error); meson's timeout fails the test if it hangs.
    std::ifstream in(INA_FUZZ_CORPUS "/fuzz_config/regress-loadall-hang.yaml");
    std::stringstream text;
    text << in.rdbuf();
    ASSERT_FALSE(text.str().empty());
    EXPECT_FALSE(load_string(text.str(), "t.yaml").ok());
}

TEST(ConfigStrict, SecondDocumentIsRefused) {
    EXPECT_TRUE(HasError(std::string(kMinimal) + "---\nversion: 1\n", "t.yaml:5:1:",
                         "a second YAML document"));
    EXPECT_TRUE(load_string(std::string("---\n") + kMinimal, "t.yaml").ok());
}

// control: the API's listeners, clients and limits

std::string control_yaml(const std::string& body) { return std::string(kMinimal) + "control:\n" + body; }

TEST(ConfigControl, DefaultsAndEveryKey) {
    const std::string token = testing::TempDir() + "/config_api.token";
    std::ofstream(token) << "0123456789abcdef0123\n";
    const auto r = load_string(control_yaml(
        "  listen: 0.0.0.0:9464\n"
        "  metrics_listen: 0.0.0.0:9465\n"
        "  clients:\n"
        "    - {name: automation, role: write, token_file: " + token + "}\n"
        "    - {name: prom, role: read, token_sha256: " + std::string(64, 'A') + "}\n"
        "  allowed_origins: [https://ops.example]\n"
        "  allowed_hosts: [switch1.example]\n"
        "  max_body_bytes: 65536\n  max_connections: 10\n  max_connections_per_client: 2\n"
        "  threads: 2\n  header_timeout_ms: 1000\n  request_timeout_ms: 2000\n"
        "  idle_timeout_ms: 3000\n  audit_log: /var/log/inaswitch-audit.log\n"), "t.yaml");
    ASSERT_TRUE(r.ok()) << r.error_text();
    const auto& c = r.config->control;
    EXPECT_EQ(c.metrics_listen, "0.0.0.0:9465");
    ASSERT_EQ(c.clients.size(), 2u);
    EXPECT_EQ(c.clients[0].role, ina::config::ApiRole::write);
    EXPECT_EQ(c.clients[1].token_sha256, std::string(64, 'a'));  // lower-cased
    EXPECT_EQ(c.max_body_bytes, 65536u);
    EXPECT_EQ(c.threads, 2u);
    EXPECT_EQ(c.audit_log, "/var/log/inaswitch-audit.log");
    const Config d = *load_string(kMinimal, "t.yaml").config;
    EXPECT_EQ(d.control.listen, "127.0.0.1:9464");
    EXPECT_TRUE(d.control.clients.empty());
    EXPECT_EQ(d.control.max_body_bytes, 1u << 20);
}

TEST(ConfigControl, NonLoopbackWithoutClientsIsRefused) {
    EXPECT_TRUE(HasError(control_yaml("  listen: 0.0.0.0:9464\n"), "t.yaml:6:11:",
                         "is not loopback and control.clients is empty"));
    EXPECT_TRUE(HasError(control_yaml("  metrics_listen: 10.0.0.1:9465\n"), "t.yaml:6:19:",
                         "is not loopback"));
    EXPECT_TRUE(load_string(control_yaml("  listen: 0.0.0.0:9464\n  allow_unauthenticated: true\n"),
                            "t.yaml").ok());
    EXPECT_TRUE(load_string(control_yaml("  listen: 127.0.0.2:9464\n"), "t.yaml").ok());
    EXPECT_TRUE(load_string(control_yaml("  listen: \"[::1]:9464\"\n"), "t.yaml").ok());
}

TEST(ConfigControl, ClientErrorsNameTheirPlace) {
    // Line 7 is the client entry "    - {name: a, role: ...}".
    const auto client = [](const std::string& fields) {
        return control_yaml("  clients:\n    - {name: a, role: " + fields + "}\n");
    };
    EXPECT_TRUE(HasError(client("admin, token_sha256: " + std::string(64, '0')), "t.yaml:7:",
                         "expected role read"));
    EXPECT_TRUE(HasError(client("read"), "t.yaml:7:7:",
                         "exactly one of token_file, token_sha256 or cert_cn"));
    EXPECT_TRUE(HasError(client("read, token_sha256: abc"), "t.yaml:7:", "64 hex digits"));
    EXPECT_TRUE(HasError(client("read, cert_cn: ops"), "t.yaml:7:",
                         "cert_cn needs control.tls.client_ca"));
    EXPECT_TRUE(HasError(client("read, token_file: /nonexistent"), "t.yaml:7:",
                         "cannot read token file"));
    const std::string short_token = testing::TempDir() + "/config_api_short.token";
    std::ofstream(short_token) << "short\n";
    EXPECT_TRUE(HasError(client("read, token_file: " + short_token), "t.yaml:7:",
                         "at least 16 characters"));
    EXPECT_TRUE(HasError(control_yaml("  tls: {cert: /nonexistent.crt}\n"), "t.yaml:6:15:",
                         "cannot read cert file"));
    EXPECT_TRUE(HasError(control_yaml("  max_body_bytes: 10\n"), "t.yaml:6:19:",
                         "max_body_bytes"));
    EXPECT_TRUE(HasError(control_yaml("  metrics_listen: 127.0.0.1:9464\n"), "t.yaml:6:",
                         "differ from listen"));
    EXPECT_TRUE(HasError(control_yaml("  token: x\n"), "t.yaml:6:3:", "unknown key 'token'"));
}

TEST(ConfigControl, EveryControlChangeNeedsARestart) {
    const Config base = *load_string(kMinimal, "t.yaml").config;
    Config next = base;
    next.control.max_body_bytes = 2 << 20;
    const auto reasons = restart_required(base, next);
    ASSERT_EQ(reasons.size(), 1u);
    EXPECT_NE(reasons[0].find("control settings changed"), std::string::npos);
    EXPECT_TRUE(restart_required(base, base).empty());
}

// ---------------------------------------------------------------------------------------------
// IPv6 (docs/configuration.md: ports[].ipv6, ipv6_routes)

namespace {
const char* const kIpv6Ports = R"(version: 1
ports:
  - name: p0
    devargs: a
    ipv6: [2001:db8:1::1/64]
  - name: p1
    devargs: b
    ipv6: [2001:db8:2::1/64, fd00::1/64]
)";
}  // namespace

TEST(ConfigIpv6, AddressesAndRoutesLoad) {
    auto r = load_string(std::string(kIpv6Ports) + R"(ipv6_routes:
  - prefix: 2001:db8:100::/48
    via: 2001:db8:2::2
  - prefix: "::/0"
    port: p0
)",
                         "t.yaml");
    ASSERT_TRUE(r.ok()) << all_errors(r);
    ASSERT_EQ(r.config->ports[1].ipv6.size(), 2u);
    EXPECT_EQ(r.config->ports[1].ipv6[1].str(), "fd00::1/64");
    ASSERT_EQ(r.config->ipv6_routes.size(), 2u);
    EXPECT_EQ(r.config->ipv6_routes[0].via->str(), "2001:db8:2::2");
    EXPECT_EQ(r.config->ipv6_routes[1].prefix.length, 0);
    EXPECT_EQ(r.config->ipv6_routes[1].port, "p0");
}

TEST(ConfigIpv6, BadAddressesNameTheirPosition) {
    auto port = [](const std::string& addr) {
        return "version: 1\nports:\n  - name: p0\n    devargs: a\n    ipv6: [" + addr + "]\n";
    };
    EXPECT_TRUE(HasError(port("2001:db8::1"), "t.yaml:5:12:", "IPv6 interface address"));
    EXPECT_TRUE(HasError(port("2001:db8::g/64"), "t.yaml:5:12:", "IPv6 interface address"));
    EXPECT_TRUE(HasError(port("fe80::1/64"), "t.yaml:5:12:", "global or unique-local"));
    EXPECT_TRUE(HasError(port("ff02::1/64"), "t.yaml:5:12:", "global or unique-local"));
    EXPECT_TRUE(HasError(port("2001:db8::/64"), "t.yaml:5:12:", "subnet-router anycast"));
    EXPECT_TRUE(HasError(port("2001:db8::1/0"), "t.yaml:5:12:", "prefix length from 1 to 128"));
}

TEST(ConfigIpv6, CrossChecks) {
    EXPECT_TRUE(HasError(std::string(kIpv6Ports) +
                             "ipv6_routes:\n  - prefix: 2001:db8:100::1/48\n    via: 2001:db8:2::2\n",
                         "t.yaml:10:13:", "did you mean '2001:db8:100::/48'"));
    EXPECT_TRUE(HasError(std::string(kIpv6Ports) +
                             "ipv6_routes:\n  - prefix: 2001:db8:100::/48\n    via: 2001:db8:9::2\n",
                         "t.yaml:10:5:", "in no connected subnet"));
    EXPECT_TRUE(HasError(std::string(kIpv6Ports) +
                             "ipv6_routes:\n  - prefix: 2001:db8:100::/48\n    port: nope\n",
                         "t.yaml:10:5:", "unknown port 'nope'"));
    EXPECT_TRUE(HasError(std::string(kIpv6Ports) +
                             "ipv6_routes:\n  - prefix: 2001:db8:100::/48\n",
                         "t.yaml:10:5:", "expected 'via' (a gateway) or 'port'"));
    EXPECT_TRUE(HasError(std::string(kIpv6Ports) +
                             "ipv6_routes:\n  - prefix: 2001:db8:100::/48\n    port: p0\n"
                             "  - prefix: 2001:db8:100::/48\n    port: p1\n",
                         "t.yaml:12:5:", "duplicate IPv6 route"));
    EXPECT_TRUE(HasError("version: 1\nports:\n  - name: p0\n    devargs: a\n"
                         "    ipv6: [2001:db8:1::1/64]\n  - name: p1\n    devargs: b\n"
                         "    ipv6: [2001:db8:1::2/64]\n",
                         "t.yaml:6:5:", "overlaps"));
    EXPECT_TRUE(HasError("version: 1\nports:\n  - name: p0\n    devargs: a\n    l2_group: g\n"
                         "    ipv6: [2001:db8:1::1/64]\n  - name: p1\n    devargs: b\n"
                         "    l2_group: g\n",
                         "t.yaml:3:5:", "expected IPv6 addresses only on routed ports"));
}
