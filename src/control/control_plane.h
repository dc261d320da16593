// SPDX-License-Identifier: Apache-2.0
// The control plane: owns the running config, the learned neighbour table and the FDB, turns
// worker events into new snapshots, ages entries, sends ARP requests, and applies reloads.
// It runs on the EAL main lcore (tick) and serves the HTTP API thread; one mutex guards its
// state, and nothing here is ever on the packet path.
#pragma once

#include <rte_ether.h>

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "config/config.h"
#include "ina/chunk_table.h"
#include "dataplane/counters.h"
#include "runtime/dataplane.h"
#include "runtime/ports.h"

namespace ina::control {

struct ApplyResult {
    bool ok = false;
    uint64_t generation = 0;
    std::vector<std::string> errors;
};

struct NeighbourView {
    net::Ipv4Addr ip;
    net::MacAddr mac;
    std::string port;
    bool is_static = false;
    double age_s = 0;
};

struct FdbView {
    net::MacAddr mac;
    std::string group;
    std::string port;
    double idle_s = 0;
};

}  // namespace ina::control

namespace ina {
class ChunkTable;
}

namespace ina::control {

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
    uint64_t window_violations = 0;
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
    unsigned mempool_available = 0;
    unsigned mempool_in_use = 0;
    unsigned mempool_size = 0;
    std::vector<JobStats> jobs;
    uint8_t bier_sub_domain = 0;
    std::vector<BiftStats> bifts;
};

class ControlPlane {
public:
    ControlPlane(runtime::Dataplane& dataplane, std::vector<runtime::PortRuntime> ports,
                 config::Config running);
    ~ControlPlane();
    ControlPlane(const ControlPlane&) = delete;
    ControlPlane& operator=(const ControlPlane&) = delete;

    // Publishes the first snapshot. Must succeed before workers start.
    bool start(std::string& error);

    // One round of control work: events, ageing, ARP retries, publication, reclamation.
    void tick();

    // Re-reads the file the running config came from (SIGHUP, POST /api/v1/reload).
    ApplyResult reload_file();
    // Parses and applies a whole YAML config (PUT /api/v1/config); errors name `source_name`.
    ApplyResult apply_yaml(const std::string& yaml, const std::string& source_name);
    // Validates `next`, refuses restart-only changes, publishes it. An invalid `next` changes
    // nothing that runs.
    ApplyResult apply(config::Config next);
    ApplyResult add_route(const config::RouteConfig& route);
    ApplyResult remove_route(const net::Ipv4Prefix& prefix);
    ApplyResult add_neighbour(const config::NeighbourConfig& neighbour);
    ApplyResult add_job(const config::InaJobConfig& job);
    ApplyResult remove_job(uint32_t job_id);
    ApplyResult remove_neighbour(net::Ipv4Addr ip);
    ApplyResult set_bier(const config::BierConfig& bier);
    ApplyResult add_bier_group(const config::BierGroupConfig& group);
    ApplyResult remove_bier_group(net::Ipv4Addr group);

    config::Config running_config() const;
    std::vector<NeighbourView> neighbours() const;
    std::vector<FdbView> fdb() const;
    Stats stats() const;
    uint64_t generation() const { return dataplane_.generation(); }
    // True when every worker has received nothing for `idle_ms` and no control work is pending.
    bool idle_for(uint64_t idle_ms) const;

private:
    struct Learned {
        rte_ether_addr mac{};
        uint16_t port = 0;
        uint64_t updated_tsc = 0;
        uint64_t refresh_sent_tsc = 0;
    };
    struct Pending {
        uint16_t port = 0;
        uint64_t last_request_tsc = 0;
        uint32_t attempts = 0;
    };
    struct FdbState {
        uint16_t port = 0;
        uint32_t index = 0;
        uint64_t learned_tsc = 0;
    };

    // The chunk tables a change needs, allocated but not yet sent to any worker.
    struct JobPlan {
        std::vector<uint32_t> detach;  // jobs whose tables leave (removed, or changed)
        std::vector<std::pair<config::InaJobConfig, std::vector<std::unique_ptr<ChunkTable>>>>
            attach;                    // new tables, one per worker
    };

    ApplyResult apply_locked(config::Config next);
    // Makes `next` the running config: prepares everything that can fail (tables, snapshot,
    // room in every command ring) first, and only then attaches, detaches and publishes. On
    // failure nothing that runs has changed.
    bool install_config_locked(config::Config next, std::string& error);
    bool plan_jobs_locked(const config::Config& next, JobPlan& plan, std::string& error) const;
    bool commands_fit_locked(const JobPlan& plan) const;
    void commit_jobs_locked(JobPlan plan, const config::Config& next);
    // Frees the detached tables whose lcores have counted the detach.
    void collect_detached_locked();
    std::unique_ptr<runtime::Published> build_locked(const config::Config& cfg,
                                                     const std::map<uint32_t, Learned>& learned,
                                                     std::string& error);
    void install_locked(std::unique_ptr<runtime::Published> pub);
    ApplyResult apply_loaded(config::LoadResult loaded);
    // Rebuilds the running config's snapshot with the learned state (after events, ageing).
    bool publish_locked(std::string& error);
    void handle_event(const dp::Event& ev, bool& dirty);
    void age_locked(bool& dirty);
    void send_arp_request(uint32_t ip, uint16_t port_id);
    int config_index(uint16_t port_id) const;
    std::string port_name(uint16_t port_id) const;
    const dp::Snapshot& snapshot() const { return *dataplane_.current()->snapshot; }

    mutable std::mutex mu_;
    runtime::Dataplane& dataplane_;
    std::vector<runtime::PortRuntime> ports_;
    config::Config running_;
    uint64_t next_generation_ = 1;
    uint64_t tsc_hz_ = 0;
    uint64_t start_tsc_ = 0;
    std::map<uint32_t, Learned> learned_;
    std::map<uint32_t, Pending> pending_;
    std::map<std::pair<uint64_t, uint16_t>, FdbState> fdb_;  // (mac, group) -> entry
    std::vector<uint32_t> free_fdb_indices_;
    ControlCounters counters_;
    struct Job {
        config::InaJobConfig cfg;
        std::vector<std::unique_ptr<ChunkTable>> tables;  // one per worker, same order
    };
    std::map<uint32_t, Job> jobs_;
    // Per worker, tables detached but not yet counted by the lcore, in the order the detaches
    // were sent, and how many of that worker's detaches have been freed so far.
    std::vector<std::deque<std::unique_ptr<ChunkTable>>> detaching_;
    std::vector<uint64_t> detaches_freed_;
    // Events read from the workers' rings by tick() without the lock, handled once it has the
    // lock: a long API call never lets a ring fill. Touched only by the thread running tick().
    std::vector<dp::Event> backlog_;
    uint64_t backlog_dropped_ = 0;
    unsigned next_tx_worker_ = 0;
    // Per-BIFT counter slots (dp::LcoreCounters::bier), kept per BIFT-id across reloads. A slot
    // freed by a removed BIFT is reused with a baseline, so a new BIFT's counters start at 0.
    struct BierSlot {
        uint32_t bift_id = 0;
        bool in_use = false;
        dp::BierCounters baseline;
    };
    std::array<BierSlot, dp::kBierCounterSlots> bier_slots_{};
    void assign_bier_slots_locked(dp::Snapshot& snap);
    dp::BierCounters bier_slot_total(size_t slot) const;
};

}  // namespace ina::control
