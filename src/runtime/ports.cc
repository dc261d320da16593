// SPDX-License-Identifier: Apache-2.0
#include "runtime/ports.h"

#include <rte_bus.h>
#include <rte_dev.h>
#include <rte_ethdev.h>
#include <rte_log.h>

#include <cstring>

namespace ina::runtime {

namespace {

// Finds the ethdev whose name or underlying device name is `name`.
bool find_port(const std::string& name, uint16_t& port_id) {
    if (rte_eth_dev_get_port_by_name(name.c_str(), &port_id) == 0) {
        return true;
    }
    for (uint64_t pid = rte_eth_find_next(0); pid < RTE_MAX_ETHPORTS;
         pid = rte_eth_find_next(static_cast<uint16_t>(pid + 1))) {
        rte_eth_dev_info info{};
        if (rte_eth_dev_info_get(static_cast<uint16_t>(pid), &info) == 0 &&
            info.device != nullptr) {
            const std::string dev = rte_dev_name(info.device);
            // "3b:00.0" names the same PCI function as "0000:3b:00.0".
            if (dev == name || (dev.size() > name.size() &&
                                dev.compare(dev.size() - name.size(), name.size(), name) == 0 &&
                                dev[dev.size() - name.size() - 1] == ':')) {
                port_id = static_cast<uint16_t>(pid);
                return true;
            }
        }
    }
    return false;
}

std::string err(const std::string& port, const std::string& what, int rc) {
    return "port '" + port + "': " + what + ": " + std::strerror(rc < 0 ? -rc : rc);
}

}  // namespace

bool start_ports(const config::Config& cfg, rte_mempool* pool, uint16_t tx_queues,
                 std::vector<PortRuntime>& out, std::string& error) {
    for (const auto& pc : cfg.ports) {
        PortRuntime pr;
        pr.name = pc.name;
        pr.devargs = pc.devargs;
        pr.rx_queues = pc.rx_queues;
        pr.tx_queues = tx_queues;
        const std::string dev_name = pc.devargs.substr(0, pc.devargs.find(','));
        if (!find_port(dev_name, pr.port_id)) {
            int rc = rte_dev_probe(pc.devargs.c_str());
            if (rc != 0 && rc != -EEXIST) {
                error = err(pc.name, "cannot probe devargs '" + pc.devargs + "'", rc);
                return false;
            }
            if (!find_port(dev_name, pr.port_id)) {
                error = "port '" + pc.name + "': devargs '" + pc.devargs +
                        "' probed but created no ethdev named '" + dev_name + "'";
                return false;
            }
        }
        for (const auto& other : out) {
            if (other.port_id == pr.port_id) {
                error = "ports '" + other.name + "' and '" + pc.name + "' are the same device";
                return false;
            }
        }
        rte_eth_dev_info info{};
        int rc = rte_eth_dev_info_get(pr.port_id, &info);
        if (rc != 0) {
            error = err(pc.name, "cannot read device info", rc);
            return false;
        }
        pr.driver = info.driver_name != nullptr ? info.driver_name : "";
        if (pc.rx_queues > info.max_rx_queues || tx_queues > info.max_tx_queues) {
            error = "port '" + pc.name + "' (" + pr.driver + ") supports " +
                    std::to_string(info.max_rx_queues) + " RX and " +
                    std::to_string(info.max_tx_queues) + " TX queues; the config needs " +
                    std::to_string(pc.rx_queues) + " RX and " + std::to_string(tx_queues) +
                    " TX (one per worker lcore)";
            return false;
        }
        rte_eth_conf conf{};
        const uint64_t rss_hf = info.flow_type_rss_offloads &
                                (RTE_ETH_RSS_IP | RTE_ETH_RSS_TCP | RTE_ETH_RSS_UDP);
        if (pc.rx_queues > 1 && rss_hf != 0) {
            conf.rxmode.mq_mode = RTE_ETH_MQ_RX_RSS;
            conf.rx_adv_conf.rss_conf.rss_hf = rss_hf;
            pr.rss = true;
        }
        if (info.rx_offload_capa & RTE_ETH_RX_OFFLOAD_IPV4_CKSUM) {
            conf.rxmode.offloads |= RTE_ETH_RX_OFFLOAD_IPV4_CKSUM;
        }
        // The device's verdict on a received datagram's UDP checksum (RTE_MBUF_F_RX_L4_CKSUM_*)
        // spares the INA stage its software check.
        if (info.rx_offload_capa & RTE_ETH_RX_OFFLOAD_UDP_CKSUM) {
            conf.rxmode.offloads |= RTE_ETH_RX_OFFLOAD_UDP_CKSUM;
        }
        // The switch's own datagrams (INA partials and unicast results) leave their UDP
        // checksum to the device when every port can (dp::Snapshot::udp_checksum_offload).
        constexpr uint64_t kUdpChecksumTx = RTE_ETH_TX_OFFLOAD_IPV4_CKSUM |
                                            RTE_ETH_TX_OFFLOAD_UDP_CKSUM;
        if ((info.tx_offload_capa & kUdpChecksumTx) == kUdpChecksumTx) {
            conf.txmode.offloads |= kUdpChecksumTx;
            pr.tx_udp_checksum = true;
        }
        // A frame the MTU allows but one mbuf does not hold (a data room below the MTU) must
        // arrive as a chain: the device is told to scatter it where it can. Without that a
        // device receives only what fits (net_tap drops the rest of such a frame as an error).
        const uint32_t max_frame =
            uint32_t{pc.mtu} + RTE_ETHER_HDR_LEN + RTE_ETHER_CRC_LEN + RTE_VLAN_HLEN;
        const uint32_t mbuf_room = rte_pktmbuf_data_room_size(pool) - RTE_PKTMBUF_HEADROOM;
        if (max_frame > mbuf_room && (info.rx_offload_capa & RTE_ETH_RX_OFFLOAD_SCATTER)) {
            conf.rxmode.offloads |= RTE_ETH_RX_OFFLOAD_SCATTER;
        }
        // BIER copies are a private header mbuf chained to a shared payload. Software PMDs
        // (pcap, af_packet, ring, null) take chains without asking; hardware must be told.
        if (info.tx_offload_capa & RTE_ETH_TX_OFFLOAD_MULTI_SEGS) {
            conf.txmode.offloads |= RTE_ETH_TX_OFFLOAD_MULTI_SEGS;
        }
        rc = rte_eth_dev_configure(pr.port_id, pc.rx_queues, tx_queues, &conf);
        if (rc != 0) {
            error = err(pc.name, "cannot configure", rc);
            return false;
        }
        uint16_t rxd = pc.rx_descriptors;
        uint16_t txd = pc.tx_descriptors;
        rc = rte_eth_dev_adjust_nb_rx_tx_desc(pr.port_id, &rxd, &txd);
        if (rc != 0) {
            error = err(pc.name, "cannot adjust descriptor counts", rc);
            return false;
        }
        const int socket = rte_eth_dev_socket_id(pr.port_id);
        const unsigned sock = socket < 0 ? SOCKET_ID_ANY : static_cast<unsigned>(socket);
        for (uint16_t q = 0; q < pc.rx_queues; ++q) {
            rte_eth_rxconf rxconf = info.default_rxconf;
            rxconf.offloads = conf.rxmode.offloads;
            rc = rte_eth_rx_queue_setup(pr.port_id, q, rxd, sock, &rxconf, pool);
            if (rc != 0) {
                error = err(pc.name, "cannot set up RX queue " + std::to_string(q), rc);
                return false;
            }
        }
        for (uint16_t q = 0; q < tx_queues; ++q) {
            rc = rte_eth_tx_queue_setup(pr.port_id, q, txd, sock, &info.default_txconf);
            if (rc != 0) {
                error = err(pc.name, "cannot set up TX queue " + std::to_string(q), rc);
                return false;
            }
        }
        rc = rte_eth_dev_set_mtu(pr.port_id, pc.mtu);
        if (rc != 0 && rc != -ENOTSUP) {
            RTE_LOG(WARNING, USER1, "port '%s': cannot set MTU %u (%s); the dataplane still drops "
                                    "packets above it\n",
                    pc.name.c_str(), pc.mtu, std::strerror(-rc));
        }
        rc = rte_eth_dev_start(pr.port_id);
        if (rc != 0) {
            error = err(pc.name, "cannot start", rc);
            return false;
        }
        if (pc.promiscuous) {
            rc = rte_eth_promiscuous_enable(pr.port_id);
            if (rc != 0 && rc != -ENOTSUP) {
                RTE_LOG(WARNING, USER1, "port '%s': cannot enable promiscuous mode: %s\n",
                        pc.name.c_str(), std::strerror(-rc));
            }
        }
        if (pc.mac) {
            rte_ether_addr mac;
            std::memcpy(mac.addr_bytes, pc.mac->bytes.data(), 6);
            rc = rte_eth_dev_default_mac_addr_set(pr.port_id, &mac);
            if (rc != 0 && rc != -ENOTSUP) {
                RTE_LOG(WARNING, USER1, "port '%s': cannot set MAC %s on the device: %s\n",
                        pc.name.c_str(), pc.mac->str().c_str(), std::strerror(-rc));
            }
        }
        rte_eth_macaddr_get(pr.port_id, &pr.mac);
        out.push_back(pr);
    }
    return true;
}

void stop_ports(const std::vector<PortRuntime>& ports) {
    for (const auto& p : ports) {
        flush_chunk_steering(p);
        rte_eth_dev_stop(p.port_id);
        rte_eth_dev_close(p.port_id);
    }
}

}  // namespace ina::runtime
