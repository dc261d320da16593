// SPDX-License-Identifier: Apache-2.0
#include "metrics/telemetry.h"

#include <rte_telemetry.h>

#include <atomic>

namespace ina::metrics {

namespace {

// Telemetry callbacks are plain C functions; the source outlives every call because the process
// exits (ending the telemetry thread) before it is destroyed.
std::atomic<const StatsSource*> g_source{nullptr};

int stats_cmd(const char*, const char*, rte_tel_data* d) {
    const auto* source = g_source.load();
    if (source == nullptr) {
        return -1;
    }
    const auto s = (*source)();
    rte_tel_data_start_dict(d);
    rte_tel_data_add_dict_u64(d, "generation", s.generation);
    rte_tel_data_add_dict_u64(d, "routed", s.total.routed);
    rte_tel_data_add_dict_u64(d, "bridged", s.total.bridged);
    rte_tel_data_add_dict_u64(d, "flooded", s.total.flooded);
    rte_tel_data_add_dict_u64(d, "arp_replies", s.total.arp_replies);
    rte_tel_data_add_dict_u64(d, "icmp_echo_replies", s.total.icmp_echo_replies);
    rte_tel_data_add_dict_u64(d, "loops", s.total.loops);
    rte_tel_data_add_dict_u64(d, "busy_loops", s.total.busy_loops);
    rte_tel_data_add_dict_u64(d, "learned_neighbours", s.learned_neighbours);
    rte_tel_data_add_dict_u64(d, "fdb_entries", s.fdb_entries);
    rte_tel_data_add_dict_u64(d, "reloads_ok", s.control.reloads_ok);
    rte_tel_data_add_dict_u64(d, "reloads_failed", s.control.reloads_failed);
    return 0;
}

int drops_cmd(const char*, const char*, rte_tel_data* d) {
    const auto* source = g_source.load();
    if (source == nullptr) {
        return -1;
    }
    const auto s = (*source)();
    rte_tel_data_start_dict(d);
    for (size_t i = 0; i < dp::kDropReasonCount; ++i) {
        rte_tel_data_add_dict_u64(d, std::string(dp::kDropReasonNames[i]).c_str(),
                                  s.total.drops[i]);
    }
    return 0;
}

int ports_cmd(const char*, const char*, rte_tel_data* d) {
    const auto* source = g_source.load();
    if (source == nullptr) {
        return -1;
    }
    const auto s = (*source)();
    rte_tel_data_start_dict(d);
    for (const auto& p : s.ports) {
        rte_tel_data* port = rte_tel_data_alloc();
        if (port == nullptr) {
            return -1;
        }
        rte_tel_data_start_dict(port);
        const auto& pc = s.total.ports[p.port_id];
        rte_tel_data_add_dict_u64(port, "port_id", p.port_id);
        rte_tel_data_add_dict_u64(port, "rx_packets", pc.rx_packets);
        rte_tel_data_add_dict_u64(port, "rx_bytes", pc.rx_bytes);
        rte_tel_data_add_dict_u64(port, "tx_packets", pc.tx_packets);
        rte_tel_data_add_dict_u64(port, "tx_bytes", pc.tx_bytes);
        rte_tel_data_add_dict_u64(port, "tx_dropped", pc.tx_dropped);
        rte_tel_data_add_dict_container(d, p.name.c_str(), port, 0);
    }
    return 0;
}

}  // namespace

void register_telemetry(const StatsSource& source) {
    g_source.store(&source);
    rte_telemetry_register_cmd("/inaswitch/stats", stats_cmd,
                               "Switch totals. Takes no parameters");
    rte_telemetry_register_cmd("/inaswitch/drops", drops_cmd,
                               "Dataplane drops by reason. Takes no parameters");
    rte_telemetry_register_cmd("/inaswitch/ports", ports_cmd,
                               "Per-port dataplane counters. Takes no parameters");
}

}  // namespace ina::metrics
