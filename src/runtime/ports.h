// SPDX-License-Identifier: Apache-2.0
// Ports from config: probe by devargs (PCI address or vdev string), configure queues and RSS,
// start, and stop/close (which is what makes net_pcap write its TX file).
#pragma once

#include <rte_ether.h>
#include <rte_mempool.h>

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"
#include "runtime/chunk_steering.h"

namespace ina::runtime {

struct PortRuntime {
    std::string name;
    std::string devargs;
    std::string driver;
    uint16_t port_id = 0;
    rte_ether_addr mac{};
    uint16_t rx_queues = 1;
    uint16_t tx_queues = 1;
    bool rss = false;
    // UDP checksums of sent IPv4 frames computed by the device (enabled when it offers it).
    bool tx_udp_checksum = false;
    // Chunk steering (runtime/chunk_steering.h), set by install_chunk_steering: the mode, why
    // not rte_flow (empty when it is), and how many rules the device holds.
    SteeringMode chunk_steering = SteeringMode::hand_off;
    std::string chunk_steering_reason;
    uint16_t chunk_steering_rules = 0;
};

// Probes and starts every configured port with `tx_queues` TX queues (one per worker lcore).
// On failure returns false with `error` naming the port and the cause; ports already started are
// left for stop_ports().
bool start_ports(const config::Config& cfg, rte_mempool* pool, uint16_t tx_queues,
                 std::vector<PortRuntime>& out, std::string& error);

void stop_ports(const std::vector<PortRuntime>& ports);

}  // namespace ina::runtime
