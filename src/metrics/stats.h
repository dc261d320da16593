// SPDX-License-Identifier: Apache-2.0
// What a scrape reads: the switch's counters summed across lcores and jobs, copied out by the
// control plane under its lock. Exposition (metrics.cc, telemetry.cc) reads only this, so
// metrics never include the control plane.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dataplane/counters.h"
#include "ina/chunk_table.h"
#include "runtime/ports.h"

namespace ina::metrics {

// One INA job's counters summed over the lcores' chunk tables.
struct JobStats {
    uint32_t job_id = 0;
    bool is_root = false;
    std::array<uint64_t, 12> verdicts{};  // indexed by ina::Verdict
    uint64_t slot_timeouts = 0;
    uint64_t rx_retransmit = 0;
    uint64_t rx_fallback_flag = 0;
    uint64_t fallback_no_slot = 0;
    uint64_t fallback_sticky = 0;
    std::array<uint64_t, ina::kNumRejectReasons> rejected{};
    size_t slots_in_use = 0;
    size_t capacity = 0;
};

struct ControlCounters {
    uint64_t reloads_ok = 0;
    uint64_t reloads_failed = 0;
    uint64_t snapshots_published = 0;
    uint64_t events_processed = 0;
    uint64_t arp_requests_sent = 0;
    uint64_t arp_requests_failed = 0;  // no mbuf or the worker's control ring was full
    uint64_t neighbours_expired = 0;
    uint64_t fdb_expired = 0;
    uint64_t neighbour_table_full = 0;
    uint64_t fdb_table_full = 0;
    uint64_t events_dropped_backlog = 0;  // events read while the backlog was full
    uint64_t route_failovers = 0;  // a route with backups moved off its down primary gateway
    uint64_t route_failbacks = 0;  // and back once the primary answered again
};

// One BIFT as configured and resolved, with its counters summed over lcores.
struct BiftStats {
    uint32_t bift_id = 0;
    uint16_t bsl_bits = 0;
    uint16_t set_id = 0;
    std::vector<std::pair<std::string, bool>> neighbours;  // (address, MAC resolved), by index
    size_t local_bits = 0;
    dp::BierCounters counters;
};

// Everything a scrape needs, copied out under the lock (counters summed across lcores).
struct Stats {
    uint64_t generation = 0;
    double uptime_s = 0;
    std::vector<runtime::PortRuntime> ports;
    dp::LcoreCounters total;
    std::vector<std::pair<unsigned, dp::LcoreCounters>> per_lcore;
    ControlCounters control;
    size_t static_neighbours = 0;
    size_t learned_neighbours = 0;
    size_t fdb_entries = 0;
    size_t routes = 0;
    size_t gateways_down = 0;
    unsigned mempool_available = 0;
    unsigned mempool_in_use = 0;
    unsigned mempool_size = 0;
    std::vector<JobStats> jobs;
    uint8_t bier_sub_domain = 0;
    std::vector<BiftStats> bifts;
};

}  // namespace ina::metrics
