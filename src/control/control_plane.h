// SPDX-License-Identifier: Apache-2.0
// The control plane: owns the running config, the learned neighbour table and the FDB (the
// in-place ForwardingTables every snapshot points at), turns worker events into table updates
// (a new snapshot only when a config-derived table depends on them), ages entries, sends ARP
// requests, and applies reloads.
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
#include <set>
#include <string>
#include <vector>

#include "config/config.h"
#include "ina/chunk_table.h"
#include "dataplane/counters.h"
#include "metrics/stats.h"
#include "runtime/dataplane.h"
#include "runtime/ports.h"

struct rte_mbuf;

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

class ControlPlane;

// A feature's control piece (src/features/<f>/control*), registered once at start-up (src/app)
// before any ControlPlane exists. Every hook runs with the control plane's lock held, on the
// thread changing or scraping it; none is on the packet path.
struct FeatureControl {
    void* self = nullptr;
    // Before a config is installed: prepare the per-lcore states `next` needs (allocate, take
    // state slots). False with `error` refuses the change (then `abandon`): nothing runs it.
    bool (*prepare)(void* self, ControlPlane& cp, const config::Config& next,
                    std::string& error) = nullptr;
    // The most commands the prepared change sends to one worker (checked against ring room).
    size_t (*commands_needed)(void* self) = nullptr;
    // Once nothing can fail: send the prepared detaches and attaches (detach_locked,
    // attach_locked) and make the prepared states the running ones.
    void (*commit)(void* self, ControlPlane& cp) = nullptr;
    void (*abandon)(void* self, ControlPlane& cp) = nullptr;
    // A snapshot about to be published: write the feature's slots into its view.
    void (*decorate)(void* self, dp::Snapshot& snap) = nullptr;
    // A scrape: add the feature's numbers (metrics::Stats::feature_text).
    void (*stats)(void* self, const ControlPlane& cp, metrics::Stats& out) = nullptr;
    // Optional: the control thread's periodic work of the feature (e.g. the RoCE feature's RDMA
    // CM messages), called by ControlPlane::tick after it drained the workers' event rings and
    // *without* the lock, so it may apply changes (waiting for an API change in progress).
    void (*tick)(void* self, ControlPlane& cp) = nullptr;
    // Optional: states the feature gives up by itself, between config changes (e.g. a leaving
    // RoCE server-to-server job whose connections all ended). Called by ControlPlane::tick with
    // the lock held; the feature detaches them (FeatureStateChanges::commit: detach_locked, the
    // slot given back), at most `command_room` commands to any one worker, and returns true
    // when its part of the published snapshot changed: tick then republishes the running
    // config (every `decorate` runs again). A detached state is freed once its worker counted
    // the detach, as after a config change.
    bool (*release)(void* self, ControlPlane& cp, size_t command_room) = nullptr;
    // Optional: a whole config was loaded (the file on a reload, PUT /api/v1/config) and is
    // about to be validated and applied in place of `running`. The feature carries into `next`
    // what belongs to live connections rather than to a file (e.g. RDMA QPs connected through
    // the API or the RDMA CM) where `next` can hold it. It must never make `next` invalid: what
    // it cannot carry ends with the change, as before.
    void (*carry)(void* self, const config::Config& running, config::Config& next) = nullptr;
};
// False when a hook is missing.
bool register_feature_control(const FeatureControl& fc);

// The per-lcore state changes a feature's `prepare` plans and its `commit` / `abandon` carry
// out: detaches (the old state, kept alive until the worker let go), attaches, and the state
// slots `prepare` took (given back if the change is abandoned). The features' one copy of
// that bookkeeping.
struct FeatureStateChanges {
    struct Detach {
        size_t worker;
        uint16_t slot;
        uint32_t id;
        std::shared_ptr<void> state;
    };
    struct Attach {
        size_t worker;
        uint16_t slot;
        uint32_t id;
        void* state;  // what the feature's stage hooks cast back
    };
    std::vector<Detach> detach;
    std::vector<Attach> attach;
    std::vector<uint16_t> acquired;

    size_t commands() const { return detach.size() + attach.size(); }
    // Lock held. Gives back the slots taken for an abandoned change.
    void abandon(ControlPlane& cp);
    // Lock held. Sends the detaches (then frees their slots) and the attaches of `feature`.
    void commit(ControlPlane& cp, uint8_t feature);
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
    // A static route added or removed. One that touches nothing a snapshot resolves at build
    // time (route_in_place_locked) changes the published LPM in place: one rte_lpm operation,
    // no snapshot. Others take the reload path (apply). The same validation either way.
    ApplyResult add_route(const config::RouteConfig& route);
    ApplyResult remove_route(const net::Ipv4Prefix& prefix);
    // Removes `del`, then adds `add`, one at a time as remove_route and add_route would, under
    // one lock; stops at the first refused change, whose errors it returns. `applied` counts
    // the changes made (they stay made).
    ApplyResult change_routes(const std::vector<net::Ipv4Prefix>& del,
                              const std::vector<config::RouteConfig>& add, size_t& applied);
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
    metrics::Stats stats() const;
    uint64_t generation() const { return dataplane_.generation(); }
    // True when every worker has received nothing for `idle_ms` and no control work is pending.
    bool idle_for(uint64_t idle_ms) const;

    // For FeatureControl hooks only (the lock is held): worker lcores, per-lcore feature-state
    // slots (the same on every worker), and the commands that attach and detach states. A
    // detached state is kept until its worker has counted the detach, then freed.
    size_t worker_count() const { return dataplane_.workers.size(); }
    uint16_t acquire_state_slot_locked();  // dp::kNoStateSlot when every slot is in use
    void release_state_slot_locked(uint16_t slot);
    void attach_locked(size_t worker, const dp::Command& attach);
    void detach_locked(size_t worker, const dp::Command& detach, std::shared_ptr<void> state);
    // A worker's per-lcore context, for reading its counters at a scrape.
    const pipeline::LcoreContext& lcore_context(size_t worker) const {
        return *dataplane_.workers[worker].ctx;
    }
    uint64_t tsc_hz() const { return tsc_hz_; }
    // For FeatureControl::tick only (the thread running tick(), the control TX rings' one
    // producer): hands a finished frame (m->port set) to a worker to send. False when no worker
    // took it (the caller still owns and frees the mbuf).
    bool transmit(rte_mbuf* m);

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
    ApplyResult add_route_locked(const config::RouteConfig& route);
    ApplyResult remove_route_locked(const net::Ipv4Prefix& prefix);
    // True when `route` can be added to or removed from the published snapshot in place with
    // the same result a rebuild would give: no backup gateways, not /0 or /1, no prefix equal to
    // a connected subnet or port address, no static neighbour or BIER adjacency inside it.
    bool route_in_place_locked(const config::RouteConfig& route) const;
    ApplyResult route_changed_in_place_locked();
    void index_routes_locked();
    // Makes `next` the running config: prepares everything that can fail (tables, snapshot,
    // room in every command ring) first, and only then attaches, detaches and publishes. On
    // failure nothing that runs has changed.
    bool install_config_locked(config::Config next, std::string& error);
    bool plan_jobs_locked(const config::Config& next, JobPlan& plan, std::string& error) const;
    bool commands_fit_locked(const JobPlan& plan) const;
    void commit_jobs_locked(JobPlan plan, const config::Config& next);
    void send_command_locked(size_t worker, const dp::Command& c);
    // Frees the detached tables whose lcores have counted the detach.
    void collect_detached_locked();
    // Lock held: each feature's `release` hook (states it gave up between config changes).
    void release_feature_states_locked(bool& dirty);
    // `neighbours` receives what the forwarding tables must hold when the result is published
    // (sync_neighbours_locked).
    std::unique_ptr<runtime::Published> build_locked(const config::Config& cfg,
                                                     const std::map<uint32_t, Learned>& learned,
                                                     std::vector<dp::DynamicNeighbour>& neighbours,
                                                     std::string& error);
    // Makes the neighbour table hold exactly `neighbours` (a config change).
    void sync_neighbours_locked(const std::vector<dp::DynamicNeighbour>& neighbours);
    // Puts the running config's static IPv6 neighbours into the IPv6 neighbour table and takes
    // out those the previous config listed and this one does not (learned ones stay).
    void sync_neighbours6_locked();
    // Stores neighbour `ip` as `word` (pack_station; 0 removes it) in the neighbour table and
    // in every gateway next hop of the published snapshot that names it. False when the table
    // is full (nothing changed). `rebuild` is set when a table resolved only at build time
    // (a BIER adjacency) names `ip`.
    bool put_neighbour_locked(uint32_t ip, uint64_t word, bool& rebuild);
    // Drops FDB entries whose port is no longer in the entry's L2 group in `next`.
    void purge_fdb_locked(const dp::Snapshot& next);
    void install_locked(std::unique_ptr<runtime::Published> pub);
    // `cfg` with every route that has backups pointed at its first gateway not found down
    // (R11); `cfg` itself when nothing changes. Records the choice for install_locked.
    const config::Config& routes_failed_over_locked(const config::Config& cfg,
                                                    config::Config& storage);
    bool is_route_gateway_locked(uint32_t ip) const;
    // True when `ip` is newly marked down (routes with backups must be rebuilt).
    bool gateway_down_locked(uint32_t ip, uint16_t port_id);
    ApplyResult apply_loaded(config::LoadResult loaded);
    // Rebuilds the running config's snapshot with the learned state (after events, ageing).
    bool publish_locked(std::string& error);
    void handle_event(const dp::Event& ev, bool& dirty);
    void age_locked(bool& dirty);
    // The latest TSC at which any worker forwarded from the entry's MAC (or its learning).
    uint64_t fdb_last_seen(const FdbState& e) const;
    void send_arp_request(uint32_t ip, uint16_t port_id);
    int config_index(uint16_t port_id) const;
    std::string port_name(uint16_t port_id) const;
    // The started ports as the snapshot compiler sees them (id, MAC, TX checksum offload).
    std::vector<dp::PortBinding> port_bindings() const;
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
    // Route gateways found down (R11): their ARP entry expired, or resolving them gave up.
    // Routes with backup_via avoid them; each is probed with an ARP request every request
    // interval, and is up again as soon as it answers (learned again).
    struct DownGateway {
        uint16_t port = 0;
        uint64_t last_probe_tsc = 0;
    };
    std::map<uint32_t, DownGateway> down_gateways_;
    // The gateway each route with backups uses in the published snapshot (prefix -> gateway),
    // and the choice of the snapshot being built, committed by install_locked.
    std::map<net::Ipv4Prefix, uint32_t> route_gateway_;
    std::map<net::Ipv4Prefix, uint32_t> route_gateway_next_;
    // The published snapshot, for in-place route changes (this thread is its one writer; it
    // is retired only by a later install_locked, which replaces this pointer).
    dp::Snapshot* live_ = nullptr;
    // running_.routes by prefix: position in the vector.
    std::map<net::Ipv4Prefix, size_t> route_index_;
    // The learned neighbours and the FDB as workers read them; created by start().
    std::unique_ptr<dp::ForwardingTables> tables_;
    std::map<uint32_t, uint64_t> table_neighbours_;  // what tables_ holds: ip -> station word
    std::set<net::Ipv6Addr> static6_;  // the static IPv6 neighbours tables_ holds
    std::map<std::pair<uint64_t, uint16_t>, FdbState> fdb_;  // (mac, group) -> entry
    std::vector<uint32_t> free_fdb_indices_;
    metrics::ControlCounters counters_;
    struct Job {
        config::InaJobConfig cfg;
        std::vector<std::unique_ptr<ChunkTable>> tables;  // one per worker, same order
        uint16_t slot = dp::kNoStateSlot;  // its feature-state slot, the same on every worker
    };
    std::map<uint32_t, Job> jobs_;
    // Feature-state slots in use (dp::Command::slot). A slot is free again once its detach is
    // sent: the detach precedes any later attach to it in every command ring, and a worker still
    // reading an older snapshot finds (feature, id) no longer in the slot, never another job's.
    std::array<bool, dp::kMaxFeatureStates> state_slot_used_{};
    void assign_state_slots_locked(dp::Snapshot& snap) const;
    // Per worker, tables detached but not yet counted by the lcore, in the order the detaches
    // were sent, and how many of that worker's detaches have been freed so far.
    std::vector<std::deque<std::shared_ptr<void>>> detaching_;
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
