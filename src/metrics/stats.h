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
#include "runtime/sched_watch.h"

namespace ina::metrics {

// One INA job's chunk-table counters (ina::ChunkCounters) summed over the job's lcores, in the
// list form of dataplane/counters.h. The list mirrors ina::ChunkCounters member for member; the
// static_assert below fails the build when a member is added there but not here. Exposition
// per_job_role labels job and role; per_job labels job only (the metric carries its reason).
#define INA_JOB_COUNTERS(S, A)                                                                    \
    A(verdicts, uint64_t, ina::kNumVerdicts, "ina_job_contributions_total",                       \
      "INA data packets of a job by what its chunk table did with them")                          \
    S(slot_timeouts, per_job_role, "ina_job_slot_timeouts_total",                                 \
      "Slots freed because their chunk went idle")                                                \
    S(obsolete_evictions, per_job_role, "ina_job_obsolete_evictions_total",                       \
      "Complete slots reclaimed for a chunk two windows newer")                                   \
    S(rx_retransmit, per_job_role, "ina_job_retransmitted_total",                                 \
      "Contributions carrying the retransmit flag")                                               \
    S(rx_fallback_flag, per_job_role, "ina_job_fallback_flagged_total",                           \
      "Contributions arriving with the fallback flag (a child sent them on unaggregated)")         \
    S(fallback_no_slot, per_job, "ina_job_fallbacks_total{reason=\"no_slot\"}",                   \
      "Contributions sent on to the root unaggregated, by reason")                                \
    S(fallback_sticky, per_job, "ina_job_fallbacks_total{reason=\"chunk_fell_back\"}",            \
      "Contributions sent on to the root unaggregated, by reason")                                \
    S(window_violations, per_job_role, "ina_job_window_violations_total",                         \
      "Contributions from a worker beyond the job's worker_window")                              \
    S(result_cache_hits, per_job, "ina_job_result_cache_total{outcome=\"hit\"}",                \
      "Contributions for released chunks at a root, by whether its result cache still held the " \
      "result (hit: answered with it) or not (miss: stale)")                                     \
    S(result_cache_misses, per_job, "ina_job_result_cache_total{outcome=\"miss\"}",             \
      "Contributions for released chunks at a root, by whether its result cache still held the " \
      "result (hit: answered with it) or not (miss: stale)")                                     \
    S(overrun_refusals, per_job, "ina_job_overruns_total{action=\"refused\"}",                   \
      "Root, a worker beyond 2 x the window: contributions refused (no_slot, it retransmits) or " \
      "partials preempted (discarded so that a pending chunk gets their entry)")                  \
    S(overrun_preemptions, per_job, "ina_job_overruns_total{action=\"preempted\"}",              \
      "Root, a worker beyond 2 x the window: contributions refused (no_slot, it retransmits) or " \
      "partials preempted (discarded so that a pending chunk gets their entry)")                  \
    A(rejected, uint64_t, ina::kNumRejectReasons, "ina_job_rejected_total",                       \
      "Contributions of a job refused before its chunk table, by reason")                         \
    S(fixed_saturated, per_job, "ina_job_fixed_point_total{event=\"saturated\"}",              \
      "Deterministic jobs: contribution elements quantized to fixed point, by event")             \
    S(fixed_underflow, per_job, "ina_job_fixed_point_total{event=\"underflow\"}",              \
      "Deterministic jobs: contribution elements quantized to fixed point, by event")             \
    S(fixed_nan, per_job, "ina_job_fixed_point_total{event=\"nan\"}",                          \
      "Deterministic jobs: contribution elements quantized to fixed point, by event")

#define INA_COUNTER_BYTES(member, ...) +sizeof(uint64_t)
#define INA_COUNTER_ARRAY_BYTES(member, type, count, ...) +sizeof(type) * (count)
static_assert(sizeof(ina::ChunkCounters) ==
                  0 INA_JOB_COUNTERS(INA_COUNTER_BYTES, INA_COUNTER_ARRAY_BYTES),
              "ina::ChunkCounters has a counter INA_JOB_COUNTERS does not list");

struct JobStats {
    uint32_t job_id = 0;
    bool is_root = false;
    INA_JOB_COUNTERS(INA_COUNTER_MEMBER, INA_COUNTER_ARRAY_MEMBER)
    size_t slots_in_use = 0;
    size_t capacity = 0;

    // Adds one lcore's table counters.
    JobStats& operator+=(const ina::ChunkCounters& c) {
        INA_JOB_COUNTERS(INA_COUNTER_ADD_FROM, INA_COUNTER_ARRAY_ADD_FROM)
        return *this;
    }
};

// The control plane's own counters. Metrics with a label are written as in the exposition text.
#define INA_CONTROL_COUNTERS(S, A)                                                                \
    S(reloads_ok, total, "config_reloads_total{result=\"ok\"}", "Config reloads by result")       \
    S(reloads_failed, total, "config_reloads_total{result=\"failed\"}", "Config reloads by result") \
    S(snapshots_published, total, "snapshots_published_total",                                    \
      "Forwarding snapshots published (config or learning)")                                      \
    S(events_processed, total, "control_events_total", "Worker events processed by the control plane") \
    S(arp_requests_sent, total, "arp_requests_sent_total", "ARP requests sent to resolve next hops") \
    S(arp_requests_failed, total, "arp_requests_failed_total",                                    \
      "ARP requests not sent (no mbuf or ring full)")                                             \
    S(neighbours_expired, total, "neighbours_expired_total", "Learned neighbours removed by ageing") \
    S(fdb_expired, total, "fdb_expired_total", "FDB entries removed by ageing")                   \
    S(neighbours_learned, total, "neighbours_learned_total",                                      \
      "Neighbours learned (each one insert into the in-place neighbour table)")                   \
    S(fdb_learned, total, "fdb_learned_total",                                                    \
      "MAC addresses learned (each one insert into the in-place FDB)")                            \
    S(neighbour_table_full, total, "table_full_total{table=\"neighbours\"}",                      \
      "Learning refused because a table was full")                                                \
    S(neighbour6_table_full, total, "table_full_total{table=\"neighbours6\"}",                    \
      "Learning refused because a table was full")                                                \
    S(neighbours6_learned, total, "neighbours6_learned_total",                                    \
      "IPv6 neighbours learned or changed by ND (each one insert into the in-place table)")       \
    S(fdb_table_full, total, "table_full_total{table=\"fdb\"}",                                   \
      "Learning refused because a table was full")                                                \
    S(route_table_full, total, "table_full_total{table=\"routes\"}",                             \
      "Learning refused because a table was full")                                                \
    S(routes_changed_in_place, total, "routes_changed_in_place_total",                            \
      "API route changes applied in place on the published route table (no snapshot)")            \
    S(events_dropped_backlog, total, "control_events_lost_total", "Worker events lost to a full ring") \
    S(route_failovers, total, "route_failovers_total",                                            \
      "Routes moved from a down gateway to a backup_via gateway")                                 \
    S(route_failbacks, total, "route_failbacks_total", "Routes moved back to their primary gateway")

struct ControlCounters {
    INA_COUNTER_STRUCT_BODY(ControlCounters, INA_CONTROL_COUNTERS)
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
    // Each worker thread's scheduler counters, read from /proc at the scrape.
    std::vector<std::pair<unsigned, runtime::ThreadSched>> lcore_threads;
    ControlCounters control;
    size_t static_neighbours = 0;
    size_t learned_neighbours = 0;
    size_t fdb_entries = 0;
    size_t routes = 0;
    size_t gateways_down = 0;
    // Occupancy of the forwarding tables workers read: entries in use and room.
    struct Occupancy {
        size_t used = 0;
        size_t capacity = 0;
    };
    Occupancy neighbour_table;  // static and learned neighbours
    Occupancy fdb_table;
    Occupancy route_table;      // prefixes in the published LPM
    Occupancy nexthop_table;    // shared next hops of the published snapshot
    Occupancy neighbour6_table;  // IPv6 neighbours learned by ND
    Occupancy route6_table;      // IPv6 routes (next hops) in the published LPM6
    unsigned mempool_available = 0;
    unsigned mempool_in_use = 0;
    unsigned mempool_size = 0;
    std::vector<JobStats> jobs;
    uint8_t bier_sub_domain = 0;
    std::vector<BiftStats> bifts;
    // Features' own metric families in the Prometheus text format (their metrics* pieces
    // render them), appended to the exposition as they are.
    std::string feature_text;
};

}  // namespace ina::metrics
