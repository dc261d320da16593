// SPDX-License-Identifier: Apache-2.0
#include "control/control_plane.h"
#include "control/ageing.h"

#include <rte_arp.h>
#include <rte_cycles.h>
#include <rte_log.h>
#include <rte_mbuf.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "compile/snapshot_build.h"
#include "ina/chunk_table.h"
#include "wire/bitstring.h"

namespace ina::control {

namespace {

uint64_t mac_key(const uint8_t* mac) {
    uint64_t k = 0;
    std::memcpy(&k, mac, 6);
    return k;
}

rte_ether_addr mac_of_key(uint64_t k) {
    rte_ether_addr m;
    std::memcpy(m.addr_bytes, &k, 6);
    return m;
}

net::MacAddr to_mac(const rte_ether_addr& e) {
    net::MacAddr m;
    std::memcpy(m.bytes.data(), e.addr_bytes, 6);
    return m;
}

runtime::LoopSettings loop_settings(const config::Config& cfg) {
    runtime::LoopSettings s;
    s.burst_size = cfg.dataplane.burst_size;
    s.drain_tsc = rte_get_tsc_hz() * cfg.dataplane.tx_drain_us / 1000000;
    s.idle_sleep_us = cfg.dataplane.idle_sleep_us;
    s.idle_loops_before_sleep = cfg.dataplane.idle_loops_before_sleep;
    return s;
}

ina::JobParams job_params(const config::InaJobConfig& j) {
    ina::JobParams p;
    p.job_id = j.job_id;
    p.abm = wire::BitString::from_bfr_ids(j.bsl_bits, j.set_id, j.abm).value_or(wire::BitString{});
    p.set_id = j.set_id;
    p.op = static_cast<reduce::Op>(j.op);
    p.elem_type = static_cast<reduce::ElemType>(j.elem_type);
    p.max_elems = j.max_elements;
    p.window = j.window;
    p.worker_window = j.worker_window;
    p.result_cache = config::ina_result_cache(j);
    p.role = j.role == config::InaRole::root ? ina::Role::root : ina::Role::aggregator;
    p.idle_timeout = j.slot_timeout_ms * rte_get_tsc_hz() / 1000;
    p.deterministic = j.deterministic;
    p.fraction_bits = config::ina_fraction_bits(j);
    return p;
}

// Whether two configs of the same job need different chunk tables.
bool same_tables(const config::InaJobConfig& a, const config::InaJobConfig& b) {
    return a.role == b.role && a.bsl_bits == b.bsl_bits && a.set_id == b.set_id &&
           a.abm == b.abm && a.op == b.op && a.elem_type == b.elem_type &&
           a.max_elements == b.max_elements && a.window == b.window &&
           a.worker_window == b.worker_window &&
           config::ina_result_cache(a) == config::ina_result_cache(b) &&
           a.slot_timeout_ms == b.slot_timeout_ms && a.deterministic == b.deterministic &&
           config::ina_fraction_bits(a) == config::ina_fraction_bits(b);
}

std::vector<FeatureControl>& feature_controls() {
    static std::vector<FeatureControl> fcs;
    return fcs;
}

ApplyResult failure(std::vector<std::string> errors) {
    ApplyResult r;
    r.errors = std::move(errors);
    return r;
}

}  // namespace

bool register_feature_control(const FeatureControl& fc) {
    if (fc.prepare == nullptr || fc.commands_needed == nullptr || fc.commit == nullptr ||
        fc.abandon == nullptr || fc.decorate == nullptr || fc.stats == nullptr) {
        return false;
    }
    feature_controls().push_back(fc);
    return true;
}

uint16_t ControlPlane::acquire_state_slot_locked() {
    const auto it = std::find(state_slot_used_.begin(), state_slot_used_.end(), false);
    if (it == state_slot_used_.end()) {
        return dp::kNoStateSlot;
    }
    *it = true;
    return static_cast<uint16_t>(it - state_slot_used_.begin());
}

void FeatureStateChanges::abandon(ControlPlane& cp) {
    for (uint16_t s : acquired) {
        cp.release_state_slot_locked(s);
    }
}

void FeatureStateChanges::commit(ControlPlane& cp, uint8_t feature) {
    for (auto& d : detach) {
        cp.detach_locked(d.worker,
                         dp::Command{dp::CommandType::detach, feature, d.slot, d.id, nullptr},
                         std::move(d.state));
        cp.release_state_slot_locked(d.slot);
    }
    for (const auto& a : attach) {
        cp.attach_locked(a.worker,
                         dp::Command{dp::CommandType::attach, feature, a.slot, a.id, a.state});
    }
}

void ControlPlane::release_state_slot_locked(uint16_t slot) {
    if (slot < state_slot_used_.size()) {
        state_slot_used_[slot] = false;
    }
}

void ControlPlane::send_command_locked(size_t worker, const dp::Command& c) {
    if (rte_ring_sp_enqueue_elem(dataplane_.workers[worker].commands, const_cast<dp::Command*>(&c),
                                 sizeof c) != 0) {
        // commands_fit_locked said there was room: this cannot happen.
        RTE_LOG(ERR, USER1, "command ring of worker %zu full despite the check\n", worker);
    }
}

void ControlPlane::attach_locked(size_t worker, const dp::Command& attach) {
    send_command_locked(worker, attach);
}

void ControlPlane::detach_locked(size_t worker, const dp::Command& detach,
                                 std::shared_ptr<void> state) {
    send_command_locked(worker, detach);
    detaching_[worker].push_back(std::move(state));
}

ControlPlane::ControlPlane(runtime::Dataplane& dataplane, std::vector<runtime::PortRuntime> ports,
                           config::Config running)
    : dataplane_(dataplane), ports_(std::move(ports)), running_(std::move(running)) {
    tsc_hz_ = rte_get_tsc_hz();
    start_tsc_ = rte_rdtsc();
    for (uint32_t i = running_.l2.max_fdb_entries; i > 0; --i) {
        free_fdb_indices_.push_back(i - 1);
    }
}

ControlPlane::~ControlPlane() = default;

bool ControlPlane::start(std::string& error) {
    std::lock_guard lock(mu_);
    // Names of DPDK objects are process-wide: one control plane per process, so a fixed name.
    tables_ = dp::ForwardingTables::create("cp", running_.arp.max_neighbours,
                                           running_.l2.max_fdb_entries, dataplane_.qsbr, error);
    if (!tables_) {
        return false;
    }
    return install_config_locked(running_, error);
}

bool ControlPlane::plan_jobs_locked(const config::Config& next, JobPlan& plan,
                                    std::string& error) const {
    for (const auto& [id, job] : jobs_) {
        const auto& cfgs = next.ina.jobs;
        auto found = std::find_if(cfgs.begin(), cfgs.end(),
                                  [&](const auto& j) { return j.job_id == id; });
        if (found == cfgs.end() || !same_tables(*found, job.cfg)) {
            plan.detach.push_back(id);
        }
    }
    for (const auto& j : next.ina.jobs) {
        auto kept = jobs_.find(j.job_id);
        if (kept != jobs_.end() && same_tables(j, kept->second.cfg)) {
            continue;
        }
        ina::JobParams params = job_params(j);
        params.lanes = static_cast<uint16_t>(dataplane_.workers.size());
        const auto why = ina::validate(params);
        if (!why.empty()) {
            error = "INA job " + std::to_string(j.job_id) + ": " + std::string(why);
            return false;
        }
        std::vector<std::unique_ptr<ChunkTable>> tables;
        for (size_t w = 0; w < dataplane_.workers.size(); ++w) {
            params.lane = static_cast<uint16_t>(w);  // worker w's share of the job's slots
            tables.push_back(std::make_unique<ina::ChunkTable>(params));
        }
        plan.attach.emplace_back(j, std::move(tables));
    }
    return true;
}

bool ControlPlane::commands_fit_locked(const JobPlan& plan) const {
    // Only this thread (holding the lock) enqueues, so room seen here cannot shrink before the
    // commit: every command of the change is sent, or none is.
    size_t needed = plan.detach.size() + plan.attach.size();
    for (const auto& fc : feature_controls()) {
        needed += fc.commands_needed(fc.self);
    }
    return std::all_of(dataplane_.workers.begin(), dataplane_.workers.end(), [&](const auto& w) {
        return rte_ring_free_count(w.commands) >= needed;
    });
}

void ControlPlane::commit_jobs_locked(JobPlan plan, const config::Config& next) {
    auto send = [&](size_t w, const dp::Command& c) { send_command_locked(w, c); };
    static_assert(dp::kMaxInaJobs <= dp::kMaxFeatureStates);
    // Detaches first: their slots serve the attaches that follow, and a change never needs more
    // slots than the job limit, so one is always free.
    for (uint32_t id : plan.detach) {
        auto it = jobs_.find(id);
        const uint16_t slot = it->second.slot;
        for (size_t w = 0; w < it->second.tables.size(); ++w) {
            send(w, dp::Command{dp::CommandType::detach, dp::kFeatureIna, slot, id, nullptr});
            detaching_[w].push_back(std::move(it->second.tables[w]));
        }
        state_slot_used_[slot] = false;
        jobs_.erase(it);
    }
    for (auto& [cfg, tables] : plan.attach) {
        const auto free_slot = static_cast<uint16_t>(
            std::find(state_slot_used_.begin(), state_slot_used_.end(), false) -
            state_slot_used_.begin());
        state_slot_used_[free_slot] = true;
        for (size_t w = 0; w < tables.size(); ++w) {
            send(w, dp::Command{dp::CommandType::attach, dp::kFeatureIna, free_slot, cfg.job_id,
                                tables[w].get()});
        }
        jobs_.emplace(cfg.job_id, Job{cfg, std::move(tables), free_slot});
    }
    for (const auto& j : next.ina.jobs) {
        jobs_.at(j.job_id).cfg = j;  // same tables, other settings (ingress, parent, ...)
    }
}

void ControlPlane::collect_detached_locked() {
    for (size_t w = 0; w < detaching_.size(); ++w) {
        const uint64_t done =
            dataplane_.workers[w].ctx->detaches_done.load(std::memory_order_acquire);
        while (detaches_freed_[w] < done && !detaching_[w].empty()) {
            detaching_[w].pop_front();  // frees the table: its lcore has let go of it
            ++detaches_freed_[w];
        }
    }
}

bool ControlPlane::install_config_locked(config::Config next, std::string& error) {
    detaching_.resize(dataplane_.workers.size());
    detaches_freed_.resize(dataplane_.workers.size());
    try {
        collect_detached_locked();
        JobPlan plan;
        if (!plan_jobs_locked(next, plan, error)) {
            return false;
        }
        // Features prepare theirs; on any failure below, every prepared one is abandoned.
        size_t prepared = 0;
        struct Abandon {
            ControlPlane& cp;
            size_t& prepared;
            bool armed = true;
            ~Abandon() {
                for (size_t i = 0; armed && i < prepared; ++i) {
                    feature_controls()[i].abandon(feature_controls()[i].self, cp);
                }
            }
        } abandon{*this, prepared};
        for (const auto& fc : feature_controls()) {
            if (!fc.prepare(fc.self, *this, next, error)) {
                fc.abandon(fc.self, *this);
                return false;
            }
            ++prepared;
        }
        // Learned neighbours that left their port's subnets are forgotten with the old config.
        std::map<uint32_t, Learned> learned;
        for (const auto& [ip, l] : learned_) {
            const bool keep = std::any_of(next.ports.begin(), next.ports.end(), [&](const auto& p) {
                return std::any_of(p.ipv4.begin(), p.ipv4.end(),
                                   [&](const auto& a) { return a.contains(net::Ipv4Addr{ip}); });
            });
            if (keep) {
                learned.emplace(ip, l);
            }
        }
        std::vector<dp::DynamicNeighbour> neighbours;
        auto pub = build_locked(next, learned, neighbours, error);
        if (!pub) {
            return false;
        }
        if (!commands_fit_locked(plan)) {
            error = "a worker lcore has not taken its previous table commands yet (is it "
                    "stalled?); nothing changed, try again";
            return false;
        }
        // Nothing below fails: the change takes effect whole.
        commit_jobs_locked(std::move(plan), next);
        abandon.armed = false;
        for (const auto& fc : feature_controls()) {
            fc.commit(fc.self, *this);
        }
        learned_ = std::move(learned);
        running_ = std::move(next);
        index_routes_locked();
        sync_neighbours_locked(neighbours);
        sync_neighbours6_locked();
        purge_fdb_locked(*pub->snapshot);
        install_locked(std::move(pub));
        return true;
    } catch (const std::bad_alloc&) {
        error = "out of memory while preparing the change; nothing changed";
    } catch (const std::exception& e) {
        error = std::string("cannot prepare the change: ") + e.what() + "; nothing changed";
    }
    return false;
}

int ControlPlane::config_index(uint16_t port_id) const {
    for (size_t i = 0; i < ports_.size(); ++i) {
        if (ports_[i].port_id == port_id) {
            return static_cast<int>(i);
        }
    }
    return -1;
}

std::string ControlPlane::port_name(uint16_t port_id) const {
    int i = config_index(port_id);
    return i < 0 ? std::to_string(port_id) : ports_[static_cast<size_t>(i)].name;
}

std::vector<dp::PortBinding> ControlPlane::port_bindings() const {
    std::vector<dp::PortBinding> bindings;
    for (const auto& p : ports_) {
        bindings.push_back({p.port_id, p.mac, p.tx_udp_checksum});
    }
    return bindings;
}

std::unique_ptr<runtime::Published> ControlPlane::build_locked(
    const config::Config& cfg, const std::map<uint32_t, Learned>& learned_state,
    std::vector<dp::DynamicNeighbour>& neighbours, std::string& error) {
    const std::vector<dp::PortBinding> bindings = port_bindings();
    std::vector<dp::DynamicNeighbour> learned;
    for (const auto& [ip, l] : learned_state) {
        learned.push_back({ip, l.mac, l.port});
    }
    neighbours = compile::neighbour_set(cfg, bindings, learned);
    // Each snapshot owns an LPM with a 64 MiB first-level table: free what the workers have
    // finished with before building, and if memory is short while older snapshots are still
    // retired, wait out their grace period (workers pass a quiescent state every loop, so this
    // takes microseconds) and retry once. Only this thread frees retired snapshots, so those
    // counted here still hold their memory when the first build fails.
    config::Config failed_over;
    const config::Config& effective = routes_failed_over_locked(cfg, failed_over);
    const size_t still_retired = dataplane_.reclaim();
    auto snap = compile::build_snapshot(effective, bindings, neighbours, *tables_,
                                        next_generation_, error);
    if (!snap && still_retired != 0) {
        dataplane_.reclaim_all();
        error.clear();
        snap = compile::build_snapshot(effective, bindings, neighbours, *tables_,
                                       next_generation_, error);
    }
    if (!snap) {
        return nullptr;
    }
    auto pub = std::make_unique<runtime::Published>();
    pub->snapshot = std::move(snap);
    pub->loop = loop_settings(cfg);
    return pub;
}

void ControlPlane::sync_neighbours_locked(const std::vector<dp::DynamicNeighbour>& neighbours) {
    std::map<uint32_t, uint64_t> next;
    for (const auto& nb : neighbours) {
        next.emplace(nb.ip, dp::pack_station(nb.mac, nb.port));
    }
    bool rebuild = false;  // the snapshot about to be published is built from `neighbours`
    for (auto it = table_neighbours_.begin(); it != table_neighbours_.end();) {
        const uint32_t ip = (it++)->first;
        if (next.count(ip) == 0) {
            put_neighbour_locked(ip, 0, rebuild);
        }
    }
    for (const auto& [ip, word] : next) {
        auto have = table_neighbours_.find(ip);
        if ((have == table_neighbours_.end() || have->second != word) &&
            !put_neighbour_locked(ip, word, rebuild)) {
            // Validation keeps static plus learned within max_neighbours; count it if not.
            ++counters_.neighbour_table_full;
        }
    }
}

void ControlPlane::sync_neighbours6_locked() {
    std::set<net::Ipv6Addr> next;
    for (const auto& nb : running_.neighbours6) {
        const int i = running_.port_index(nb.port);
        if (i < 0 || static_cast<size_t>(i) >= ports_.size()) {
            continue;  // validation names the port
        }
        rte_ether_addr mac;
        std::memcpy(mac.addr_bytes, nb.mac.bytes.data(), 6);
        if (!tables_->set_neighbour6(nb.ip.bytes.data(), mac, ports_[static_cast<size_t>(i)].port_id,
                                     dp::ForwardingTables::Room::wait_for_readers)) {
            ++counters_.neighbour6_table_full;
            continue;
        }
        next.insert(nb.ip);
    }
    for (const auto& ip : static6_) {
        if (next.count(ip) == 0) {
            tables_->remove_neighbour6(ip.bytes.data());
        }
    }
    static6_ = std::move(next);
}

bool ControlPlane::put_neighbour_locked(uint32_t ip, uint64_t word, bool& rebuild) {
    if (word == 0) {
        tables_->remove_neighbour(ip);
        table_neighbours_.erase(ip);
    } else {
        const dp::Neighbour n = dp::unpack_station(word);
        if (!tables_->set_neighbour(ip, n.mac, n.port,
                                    dp::ForwardingTables::Room::wait_for_readers)) {
            return false;
        }
        table_neighbours_[ip] = word;
    }
    // start() publishes the first snapshot after filling the tables: none to patch yet.
    const runtime::Published* cur = dataplane_.current();
    if (cur == nullptr) {
        return true;
    }
    const dp::Snapshot& snap = *cur->snapshot;
    for (uint32_t k : snap.nexthops.gateways()) {
        if (snap.nexthops[k].gateway == ip) {
            snap.nexthops[k].set_station(word);
        }
    }
    for (const auto& t : snap.bifts) {
        for (uint16_t k = 0; k < t.n_neighbours; ++k) {
            rebuild = rebuild || t.neighbours[k].ip == ip;
        }
        for (const auto& h : t.local_host) {
            rebuild = rebuild || h.ip == ip;
        }
    }
    return true;
}

void ControlPlane::purge_fdb_locked(const dp::Snapshot& next) {
    for (auto it = fdb_.begin(); it != fdb_.end();) {
        const auto& [key, e] = *it;
        if (e.port < next.n_ports && next.ports[e.port].l2_group == key.second) {
            ++it;
            continue;
        }
        tables_->remove_fdb(mac_of_key(key.first), key.second);
        free_fdb_indices_.push_back(e.index);
        it = fdb_.erase(it);
    }
}

const config::Config& ControlPlane::routes_failed_over_locked(const config::Config& cfg,
                                                              config::Config& storage) {
    route_gateway_next_.clear();
    bool changed = false;
    for (size_t i = 0; i < cfg.routes.size(); ++i) {
        const auto& rt = cfg.routes[i];
        if (rt.backup_via.empty() || !rt.via) {
            continue;
        }
        // The first gateway in preference order that is not down; all down: the primary
        // (traffic keeps asking for it, and it is probed).
        net::Ipv4Addr use = *rt.via;
        if (down_gateways_.count(rt.via->value) != 0) {
            for (const auto& b : rt.backup_via) {
                if (down_gateways_.count(b.value) == 0) {
                    use = b;
                    break;
                }
            }
        }
        route_gateway_next_[rt.prefix] = use.value;
        if (use.value != rt.via->value) {
            if (!changed) {
                storage = cfg;
                changed = true;
            }
            storage.routes[i].via = use;
        }
    }
    return changed ? storage : cfg;
}

bool ControlPlane::is_route_gateway_locked(uint32_t ip) const {
    for (const auto& rt : running_.routes) {
        if (rt.backup_via.empty()) {
            continue;
        }
        if (rt.via && rt.via->value == ip) {
            return true;
        }
        for (const auto& b : rt.backup_via) {
            if (b.value == ip) {
                return true;
            }
        }
    }
    return false;
}

bool ControlPlane::gateway_down_locked(uint32_t ip, uint16_t port_id) {
    if (is_route_gateway_locked(ip) && down_gateways_.count(ip) == 0) {
        down_gateways_[ip] = DownGateway{port_id, rte_rdtsc()};
        std::fprintf(stderr, "inaswitch: gateway %s is down; routes with backups avoid it\n",
                     net::Ipv4Addr{ip}.str().c_str());
        return true;
    }
    return false;
}

void ControlPlane::assign_state_slots_locked(dp::Snapshot& snap) const {
    for (auto& v : snap.ina_jobs) {
        // The running jobs are the snapshot's jobs (install and publish both follow the commit).
        if (auto it = jobs_.find(v.job_id); it != jobs_.end()) {
            v.state_slot = it->second.slot;
        }
    }
}

void ControlPlane::install_locked(std::unique_ptr<runtime::Published> pub) {
    for (const auto& [prefix, gw] : route_gateway_next_) {
        const auto cfg_route = std::find_if(running_.routes.begin(), running_.routes.end(),
                                            [&](const auto& r) { return r.prefix == prefix; });
        const bool on_primary = cfg_route == running_.routes.end() || !cfg_route->via ||
                                cfg_route->via->value == gw;
        const auto prev = route_gateway_.find(prefix);
        const bool was_on_primary = prev == route_gateway_.end() || cfg_route == running_.routes.end() ||
                                    !cfg_route->via || prev->second == cfg_route->via->value;
        if (prev != route_gateway_.end() && prev->second == gw) {
            continue;
        }
        if (!on_primary) {
            ++counters_.route_failovers;
            std::fprintf(stderr, "inaswitch: route %s fails over to backup gateway %s\n",
                         prefix.str().c_str(), net::Ipv4Addr{gw}.str().c_str());
        } else if (!was_on_primary) {
            ++counters_.route_failbacks;
            std::fprintf(stderr, "inaswitch: route %s is back on gateway %s\n",
                         prefix.str().c_str(), net::Ipv4Addr{gw}.str().c_str());
        }
    }
    route_gateway_ = route_gateway_next_;
    assign_state_slots_locked(*pub->snapshot);
    for (const auto& fc : feature_controls()) {
        fc.decorate(fc.self, *pub->snapshot);
    }
    assign_bier_slots_locked(*pub->snapshot);
    ++next_generation_;
    live_ = pub->snapshot.get();
    dataplane_.publish(std::move(pub));
    ++counters_.snapshots_published;
}

bool ControlPlane::publish_locked(std::string& error) {
    std::vector<dp::DynamicNeighbour> neighbours;  // what the tables hold already
    auto pub = build_locked(running_, learned_, neighbours, error);
    if (!pub) {
        return false;
    }
    install_locked(std::move(pub));
    return true;
}

dp::BierCounters ControlPlane::bier_slot_total(size_t slot) const {
    dp::BierCounters sum;
    for (const auto& w : dataplane_.workers) {
        sum += w.ctx->counters.bier[slot];
    }
    return sum;
}

void ControlPlane::assign_bier_slots_locked(dp::Snapshot& snap) {
    std::array<bool, dp::kBierCounterSlots> kept{};
    std::vector<dp::BiftView*> fresh;
    for (auto& t : snap.bifts) {
        auto it = std::find_if(bier_slots_.begin(), bier_slots_.end(), [&](const BierSlot& b) {
            return b.in_use && b.bift_id == t.bift_id;
        });
        if (it != bier_slots_.end()) {
            t.counter_slot = static_cast<uint16_t>(it - bier_slots_.begin());
            kept[t.counter_slot] = true;
        } else {
            fresh.push_back(&t);
        }
    }
    for (size_t i = 0; i < bier_slots_.size(); ++i) {
        if (!kept[i]) {
            bier_slots_[i].in_use = false;
        }
    }
    for (auto* t : fresh) {
        // There are as many slots as BIFTs a snapshot may hold, so one is always free.
        auto it = std::find_if(bier_slots_.begin(), bier_slots_.end(),
                               [](const BierSlot& b) { return !b.in_use; });
        const auto slot = static_cast<size_t>(it - bier_slots_.begin());
        *it = BierSlot{t->bift_id, true, bier_slot_total(slot)};
        t->counter_slot = static_cast<uint16_t>(slot);
    }
}

void ControlPlane::handle_event(const dp::Event& ev, bool& dirty) {
    ++counters_.events_processed;
    if (ev.port >= dp::kMaxPorts || config_index(ev.port) < 0) {
        return;
    }
    const uint64_t now = rte_rdtsc();
    switch (ev.type) {
    case dp::EventType::neighbour_seen:
    case dp::EventType::neighbour_refresh: {
        const bool is_static = std::any_of(running_.neighbours.begin(), running_.neighbours.end(),
                                           [&](const auto& n) { return n.ip.value == ev.ip; });
        if (is_static || !snapshot().segment_has_subnet(ev.port, ev.ip)) {
            return;
        }
        rte_ether_addr mac;
        std::memcpy(mac.addr_bytes, ev.mac, 6);
        auto it = learned_.find(ev.ip);
        if (it == learned_.end()) {
            if (ev.type == dp::EventType::neighbour_refresh) {
                return;
            }
            // A learned host is one insert into the neighbour table; routes through it as a
            // gateway see it through their next hop's station word.
            if (learned_.size() + running_.neighbours.size() >= running_.arp.max_neighbours ||
                !put_neighbour_locked(ev.ip, dp::pack_station(mac, ev.port), dirty)) {
                ++counters_.neighbour_table_full;
                return;
            }
            learned_[ev.ip] = Learned{mac, ev.port, now, 0};
            ++counters_.neighbours_learned;
            pending_.erase(ev.ip);
            if (down_gateways_.erase(ev.ip) != 0) {
                dirty = true;  // routes with backups return to this gateway: a new snapshot
            }
            return;
        }
        if (!rte_is_same_ether_addr(&it->second.mac, &mac) || it->second.port != ev.port) {
            // Replacing a key's data never needs a free slot, so this cannot fail.
            put_neighbour_locked(ev.ip, dp::pack_station(mac, ev.port), dirty);
            it->second.mac = mac;
            it->second.port = ev.port;
        }
        it->second.updated_tsc = now;
        return;
    }
    case dp::EventType::resolve_request: {
        if (learned_.count(ev.ip) != 0) {
            return;  // already in the neighbour table; the packet raced the insert
        }
        auto& p = pending_[ev.ip];
        p.port = ev.port;
        const uint64_t interval = running_.arp.request_interval_ms * tsc_hz_ / 1000;
        if (p.attempts == 0 || now - p.last_request_tsc >= interval) {
            p.last_request_tsc = now;
            ++p.attempts;
            send_arp_request(ev.ip, ev.port);
        }
        return;
    }
    case dp::EventType::neighbour6_seen: {
        // A host on one of the port's IPv6 prefixes (the worker checked; the snapshot may have
        // changed since). One insert or one store of the entry's word; no snapshot. IPv6
        // neighbours are not aged yet: an entry changes when the host advertises a new MAC.
        if (snapshot().ports[ev.port].subnet6_of(ev.ip6) == nullptr) {
            return;
        }
        net::Ipv6Addr seen;
        std::memcpy(seen.bytes.data(), ev.ip6, 16);
        if (static6_.count(seen) != 0) {
            return;  // a static entry is never replaced by what ND learns
        }
        rte_ether_addr mac;
        std::memcpy(mac.addr_bytes, ev.mac, 6);
        const std::optional<dp::Neighbour> have = tables_->neighbour6(ev.ip6);
        if (have && rte_is_same_ether_addr(&have->mac, &mac) && have->port == ev.port) {
            return;
        }
        if (!tables_->set_neighbour6(ev.ip6, mac, ev.port,
                                     dp::ForwardingTables::Room::wait_for_readers)) {
            ++counters_.neighbour6_table_full;
            return;
        }
        ++counters_.neighbours6_learned;
        return;
    }
    case dp::EventType::fdb_learn: {
        const auto key = std::make_pair(mac_key(ev.mac), ev.group);
        auto it = fdb_.find(key);
        if (it == fdb_.end()) {
            if (free_fdb_indices_.empty()) {
                ++counters_.fdb_table_full;
                return;
            }
            const uint32_t index = free_fdb_indices_.back();
            rte_ether_addr mac;
            std::memcpy(mac.addr_bytes, ev.mac, 6);
            if (!tables_->set_fdb(mac, ev.group, dp::FdbEntry{ev.port, index},
                                  dp::ForwardingTables::Room::wait_for_readers)) {
                ++counters_.fdb_table_full;
                return;
            }
            free_fdb_indices_.pop_back();
            fdb_[key] = FdbState{ev.port, index, now};
            ++counters_.fdb_learned;
        } else if (it->second.port != ev.port) {
            // Station moved: one store of the entry's data word.
            rte_ether_addr mac;
            std::memcpy(mac.addr_bytes, ev.mac, 6);
            tables_->set_fdb(mac, ev.group, dp::FdbEntry{ev.port, it->second.index});
            it->second.port = ev.port;
            it->second.learned_tsc = now;
        }
        return;
    }
    }
}

void ControlPlane::age_locked(bool& dirty) {
    const uint64_t now = rte_rdtsc();
    const uint64_t timeout = running_.arp.neighbour_timeout_s * tsc_hz_;
    const uint64_t interval = running_.arp.request_interval_ms * tsc_hz_ / 1000;
    for (auto it = learned_.begin(); it != learned_.end();) {
        const uint64_t age = cycles_since(now, it->second.updated_tsc);
        if (age > timeout) {
            if (gateway_down_locked(it->first, it->second.port)) {
                dirty = true;  // routes with backups move off this gateway
            }
            put_neighbour_locked(it->first, 0, dirty);
            it = learned_.erase(it);
            ++counters_.neighbours_expired;
            continue;
        }
        // Re-resolve in the last quarter of the lifetime, so a live neighbour never expires
        // and traffic to it never sees a gap.
        if (age > timeout / 4 * 3 && now - it->second.refresh_sent_tsc > interval) {
            it->second.refresh_sent_tsc = now;
            send_arp_request(it->first, it->second.port);
        }
        ++it;
    }
    for (auto it = pending_.begin(); it != pending_.end();) {
        if (now - it->second.last_request_tsc < interval) {
            ++it;
            continue;
        }
        if (it->second.attempts >= 3) {
            if (is_route_gateway_locked(it->first) && down_gateways_.count(it->first) == 0) {
                gateway_down_locked(it->first, it->second.port);
                dirty = true;
            }
            it = pending_.erase(it);  // unreachable for now; the next packet asks again
            continue;
        }
        it->second.last_request_tsc = now;
        ++it->second.attempts;
        send_arp_request(it->first, it->second.port);
        ++it;
    }
    for (auto it = down_gateways_.begin(); it != down_gateways_.end();) {
        if (!is_route_gateway_locked(it->first)) {
            it = down_gateways_.erase(it);  // no route names it any more
            dirty = true;
            continue;
        }
        if (now - it->second.last_probe_tsc >= interval) {
            it->second.last_probe_tsc = now;
            send_arp_request(it->first, it->second.port);
        }
        ++it;
    }
    const uint64_t ageing = running_.l2.mac_ageing_s * tsc_hz_;
    for (auto it = fdb_.begin(); it != fdb_.end();) {
        if (cycles_since(now, fdb_last_seen(it->second)) > ageing) {
            // The index is reused only by a later insert; a worker still stamping it for the
            // deleted key at worst keeps the new key alive one extra ageing period.
            tables_->remove_fdb(mac_of_key(it->first.first), it->first.second);
            free_fdb_indices_.push_back(it->second.index);
            it = fdb_.erase(it);
            ++counters_.fdb_expired;
        } else {
            ++it;
        }
    }
}

void ControlPlane::send_arp_request(uint32_t ip, uint16_t port_id) {
    const auto& snap = snapshot();
    // Ask on the port, or on every member of its L2 group, from the address whose subnet holds
    // the target.
    std::vector<uint16_t> out_ports{port_id};
    const auto& pv = snap.ports[port_id];
    if (pv.l2_group != dp::kNoGroup) {
        const auto& g = snap.groups[static_cast<size_t>(pv.l2_group)];
        out_ports.assign(g.ports.begin(), g.ports.begin() + g.n_ports);
    }
    uint32_t sender = 0;
    for (uint16_t p : out_ports) {
        if (const auto* a = snap.ports[p].subnet_of(ip)) {
            sender = a->addr.value;
        }
    }
    if (sender == 0 || dataplane_.workers.empty()) {
        ++counters_.arp_requests_failed;
        return;
    }
    for (uint16_t p : out_ports) {
        rte_mbuf* m = rte_pktmbuf_alloc(dataplane_.pool);
        if (m == nullptr) {
            ++counters_.arp_requests_failed;
            continue;
        }
        const uint16_t len = sizeof(rte_ether_hdr) + sizeof(rte_arp_hdr);
        auto* eth = reinterpret_cast<rte_ether_hdr*>(rte_pktmbuf_append(m, len));
        if (eth == nullptr) {
            rte_pktmbuf_free(m);
            ++counters_.arp_requests_failed;
            continue;
        }
        std::memset(eth, 0xff, sizeof(eth->dst_addr));
        eth->src_addr = snap.ports[p].mac;
        eth->ether_type = rte_cpu_to_be_16(RTE_ETHER_TYPE_ARP);
        auto* arp = reinterpret_cast<rte_arp_hdr*>(eth + 1);
        arp->arp_hardware = rte_cpu_to_be_16(RTE_ARP_HRD_ETHER);
        arp->arp_protocol = rte_cpu_to_be_16(RTE_ETHER_TYPE_IPV4);
        arp->arp_hlen = RTE_ETHER_ADDR_LEN;
        arp->arp_plen = 4;
        arp->arp_opcode = rte_cpu_to_be_16(RTE_ARP_OP_REQUEST);
        arp->arp_data.arp_sha = snap.ports[p].mac;
        arp->arp_data.arp_sip = rte_cpu_to_be_32(sender);
        std::memset(&arp->arp_data.arp_tha, 0, sizeof(arp->arp_data.arp_tha));
        arp->arp_data.arp_tip = rte_cpu_to_be_32(ip);
        m->port = p;
        // Spread control transmissions over workers; each worker owns its TX queues.
        auto& w = dataplane_.workers[next_tx_worker_++ % dataplane_.workers.size()];
        if (rte_ring_sp_enqueue(w.control_tx, m) != 0) {
            rte_pktmbuf_free(m);
            ++counters_.arp_requests_failed;
            continue;
        }
        ++counters_.arp_requests_sent;
    }
}

bool ControlPlane::transmit(rte_mbuf* m) {
    if (dataplane_.workers.empty()) {
        return false;
    }
    // Spread control transmissions over workers; each worker owns its TX queues.
    auto& w = dataplane_.workers[next_tx_worker_++ % dataplane_.workers.size()];
    return rte_ring_sp_enqueue(w.control_tx, m) == 0;
}

void ControlPlane::release_feature_states_locked(bool& dirty) {
    for (const auto& fc : feature_controls()) {
        if (fc.release == nullptr) {
            continue;
        }
        // Only this thread (holding the lock) enqueues commands, so the room seen here holds.
        size_t room = std::numeric_limits<size_t>::max();
        for (const auto& w : dataplane_.workers) {
            room = std::min<size_t>(room, rte_ring_free_count(w.commands));
        }
        if (fc.release(fc.self, *this, room)) {
            dirty = true;
        }
    }
}

void ControlPlane::tick() {
    // The workers' event rings are drained without the lock, so an API call holding it never
    // lets a ring fill (a full ring only loses learning events, which are repeated).
    constexpr size_t kMaxBacklog = 1 << 16;
    dp::Event events[256];
    for (auto& w : dataplane_.workers) {
        unsigned n = 0;
        do {
            n = rte_ring_sc_dequeue_burst_elem(w.events, events, sizeof(dp::Event), 256, nullptr);
            for (unsigned i = 0; i < n; ++i) {
                if (backlog_.size() < kMaxBacklog) {
                    backlog_.push_back(events[i]);
                } else {
                    ++backlog_dropped_;
                }
            }
        } while (n == 256);
    }
    // The features' own work (e.g. RDMA CM answers, which may apply a change and so wait for an
    // API change in progress): after the event rings are drained, so those never wait on it.
    for (const auto& fc : feature_controls()) {
        if (fc.tick != nullptr) {
            fc.tick(fc.self, *this);
        }
    }
    // An API change in progress holds the lock: come back on the next tick rather than wait,
    // so this thread always sees a stop request within a tick.
    std::unique_lock lock(mu_, std::try_to_lock);
    if (!lock.owns_lock()) {
        return;
    }
    counters_.events_dropped_backlog = backlog_dropped_;
    bool dirty = false;
    for (const auto& ev : backlog_) {
        handle_event(ev, dirty);
    }
    backlog_.clear();
    collect_detached_locked();
    age_locked(dirty);
    release_feature_states_locked(dirty);
    if (dirty) {
        std::string error;
        if (!publish_locked(error)) {
            RTE_LOG(ERR, USER1, "cannot publish learned state: %s\n", error.c_str());
        }
    }
    dataplane_.reclaim();
}

ApplyResult ControlPlane::apply_locked(config::Config next) {
    auto errors = config::validate(next);
    if (!errors.empty()) {
        std::vector<std::string> out;
        for (const auto& e : errors) {
            out.push_back(e.str());
        }
        ++counters_.reloads_failed;
        RTE_LOG(WARNING, USER1, "config change refused (%zu errors); running config unchanged\n",
                out.size());
        return failure(out);
    }
    auto restart = config::restart_required(running_, next);
    if (!restart.empty()) {
        for (auto& r : restart) {
            r = "needs a restart, not a reload: " + r;
        }
        ++counters_.reloads_failed;
        return failure(restart);
    }
    std::string error;
    if (!install_config_locked(std::move(next), error)) {
        ++counters_.reloads_failed;
        RTE_LOG(WARNING, USER1, "config change refused: %s\n", error.c_str());
        return failure({error});
    }
    ++counters_.reloads_ok;
    ApplyResult r;
    r.ok = true;
    r.generation = dataplane_.generation();
    RTE_LOG(NOTICE, USER1, "config applied: generation %lu, %zu routes, %zu static neighbours\n",
            static_cast<unsigned long>(r.generation), running_.routes.size(),
            running_.neighbours.size());
    return r;
}

ApplyResult ControlPlane::apply(config::Config next) {
    std::lock_guard lock(mu_);
    return apply_locked(std::move(next));
}

ApplyResult ControlPlane::apply_loaded(config::LoadResult loaded) {
    std::lock_guard lock(mu_);
    if (!loaded.ok()) {
        ++counters_.reloads_failed;
        std::vector<std::string> out;
        for (const auto& e : loaded.errors) {
            out.push_back(e.str());
        }
        return failure(out);
    }
    // The file stays the source of later reloads, whoever supplied this config.
    loaded.config->source = running_.source;
    for (const auto& fc : feature_controls()) {
        if (fc.carry != nullptr) {
            fc.carry(fc.self, running_, *loaded.config);
        }
    }
    return apply_locked(std::move(*loaded.config));
}

ApplyResult ControlPlane::reload_file() {
    std::string source;
    {
        std::lock_guard lock(mu_);
        source = running_.source;
    }
    return apply_loaded(config::load_file(source));
}

ApplyResult ControlPlane::apply_yaml(const std::string& yaml, const std::string& source_name) {
    return apply_loaded(config::load_string(yaml, source_name));
}

void ControlPlane::index_routes_locked() {
    route_index_.clear();
    for (size_t i = 0; i < running_.routes.size(); ++i) {
        route_index_.emplace(running_.routes[i].prefix, i);
    }
}

bool ControlPlane::route_in_place_locked(const config::RouteConfig& route) const {
    if (live_ == nullptr || !route.backup_via.empty() || route.prefix.length < 2) {
        return false;  // failover routes, and /0 and /1 (the default route's halves)
    }
    const net::Ipv4Prefix& p = route.prefix;
    // Prefixes the builder adds after the static routes win over an equal one; a static
    // neighbour gets a host route only when no route covers it; BIER adjacencies are resolved
    // through routes at build time. A route touching any of these changes by a snapshot.
    for (const auto& port : running_.ports) {
        for (const auto& a : port.ipv4) {
            const net::Ipv4Prefix subnet{net::Ipv4Addr{a.network()}, a.length};
            if (p == subnet || (p.length == 32 && (p.addr == a.addr ||
                                                   p.addr.value == a.broadcast() ||
                                                   p.addr.value == a.network()))) {
                return false;
            }
        }
    }
    for (const auto& nb : running_.neighbours) {
        if (p.contains(nb.ip)) {
            return false;
        }
    }
    for (const auto& t : running_.bier.bifts) {
        for (const auto& nb : t.neighbours) {
            if (p.contains(nb.via)) {
                return false;
            }
        }
        for (const auto& l : t.local) {
            if (p.contains(l.host)) {
                return false;
            }
        }
    }
    return true;
}

ApplyResult ControlPlane::route_changed_in_place_locked() {
    // A config change applied like any other (config_reloads_total{result="ok"} counts it).
    ++counters_.reloads_ok;
    ++counters_.routes_changed_in_place;
    // Every applied change moves the generation, in place or by a snapshot.
    dataplane_.advance_generation(next_generation_++);
    ApplyResult r;
    r.ok = true;
    r.generation = dataplane_.generation();
    return r;
}

ApplyResult ControlPlane::add_route_locked(const config::RouteConfig& route) {
    if (!route_in_place_locked(route)) {
        config::Config next = running_;
        next.routes.push_back(route);
        return apply_locked(std::move(next));
    }
    // The checks a reload makes of this route (config::validate), without copying the config.
    auto errors = config::validate_route(running_, route);
    if (route_index_.count(route.prefix) != 0) {
        errors.push_back({running_.source.empty() ? "api" : running_.source, route.mark,
                          "duplicate route " + route.prefix.str()});
    }
    if (!errors.empty()) {
        std::vector<std::string> out;
        for (const auto& e : errors) {
            out.push_back(e.str());
        }
        ++counters_.reloads_failed;
        return failure(out);
    }
    const std::vector<dp::PortBinding> bindings = port_bindings();
    dp::NextHop nh = compile::route_next_hop(running_, bindings, route);
    if (nh.kind == dp::NextHopKind::gateway) {
        nh.station = tables_->neighbour_word(nh.gateway);
    }
    switch (live_->add_route(route.prefix, nh)) {
    case dp::Snapshot::RouteChange::done:
        break;
    case dp::Snapshot::RouteChange::table_full:
        ++counters_.route_table_full;
        ++counters_.reloads_failed;
        return failure({"route table full (" + std::to_string(live_->max_routes) +
                        " prefixes, or no free group for a prefix longer than /24); nothing "
                        "changed. The next snapshot (a reload, PUT /api/v1/config) is sized for "
                        "the routes then present and as many again"});
    case dp::Snapshot::RouteChange::nexthops_full:
        ++counters_.route_table_full;
        ++counters_.reloads_failed;
        return failure({"next-hop table full (" + std::to_string(live_->nexthops.capacity()) +
                        "); nothing changed. The next snapshot (a reload, PUT /api/v1/config) "
                        "is sized anew"});
    }
    route_index_.emplace(route.prefix, running_.routes.size());
    running_.routes.push_back(route);
    return route_changed_in_place_locked();
}

ApplyResult ControlPlane::remove_route_locked(const net::Ipv4Prefix& prefix) {
    const auto found = route_index_.find(prefix);
    if (found == route_index_.end()) {
        return failure({"no route " + prefix.str()});
    }
    const size_t pos = found->second;
    if (!route_in_place_locked(running_.routes[pos])) {
        config::Config next = running_;
        next.routes.erase(next.routes.begin() + static_cast<std::ptrdiff_t>(pos));
        return apply_locked(std::move(next));
    }
    live_->remove_route(prefix);
    // The last route takes the removed one's place: O(1), and the order of static routes
    // means nothing (their prefixes are distinct).
    route_index_.erase(found);
    if (pos + 1 != running_.routes.size()) {
        running_.routes[pos] = std::move(running_.routes.back());
        route_index_[running_.routes[pos].prefix] = pos;
    }
    running_.routes.pop_back();
    return route_changed_in_place_locked();
}

ApplyResult ControlPlane::add_route(const config::RouteConfig& route) {
    std::lock_guard lock(mu_);
    return add_route_locked(route);
}

ApplyResult ControlPlane::remove_route(const net::Ipv4Prefix& prefix) {
    std::lock_guard lock(mu_);
    return remove_route_locked(prefix);
}

ApplyResult ControlPlane::change_routes(const std::vector<net::Ipv4Prefix>& del,
                                        const std::vector<config::RouteConfig>& add,
                                        size_t& applied) {
    std::lock_guard lock(mu_);
    applied = 0;
    ApplyResult r;
    r.ok = true;
    r.generation = dataplane_.generation();
    for (const auto& prefix : del) {
        if (r = remove_route_locked(prefix); !r.ok) {
            return r;
        }
        ++applied;
    }
    for (const auto& route : add) {
        if (r = add_route_locked(route); !r.ok) {
            return r;
        }
        ++applied;
    }
    return r;
}

ApplyResult ControlPlane::add_job(const config::InaJobConfig& job) {
    std::lock_guard lock(mu_);
    config::Config next = running_;
    next.ina.jobs.push_back(job);
    return apply_locked(std::move(next));
}

ApplyResult ControlPlane::remove_job(uint32_t job_id) {
    std::lock_guard lock(mu_);
    config::Config next = running_;
    auto& jobs = next.ina.jobs;
    auto it = std::remove_if(jobs.begin(), jobs.end(),
                             [&](const auto& j) { return j.job_id == job_id; });
    if (it == jobs.end()) {
        return failure({"no job " + std::to_string(job_id)});
    }
    jobs.erase(it, jobs.end());
    return apply_locked(std::move(next));
}

ApplyResult ControlPlane::set_bier(const config::BierConfig& bier) {
    std::lock_guard lock(mu_);
    config::Config next = running_;
    next.bier = bier;
    return apply_locked(std::move(next));
}

ApplyResult ControlPlane::add_bier_group(const config::BierGroupConfig& group) {
    std::lock_guard lock(mu_);
    config::Config next = running_;
    next.bier.groups.push_back(group);
    return apply_locked(std::move(next));
}

ApplyResult ControlPlane::remove_bier_group(net::Ipv4Addr group) {
    std::lock_guard lock(mu_);
    config::Config next = running_;
    auto& groups = next.bier.groups;
    auto it = std::remove_if(groups.begin(), groups.end(),
                             [&](const auto& g) { return g.group == group; });
    if (it == groups.end()) {
        return failure({"no group " + group.str()});
    }
    groups.erase(it, groups.end());
    return apply_locked(std::move(next));
}

ApplyResult ControlPlane::add_neighbour(const config::NeighbourConfig& neighbour) {
    std::lock_guard lock(mu_);
    config::Config next = running_;
    next.neighbours.push_back(neighbour);
    return apply_locked(std::move(next));
}

ApplyResult ControlPlane::remove_neighbour(net::Ipv4Addr ip) {
    std::lock_guard lock(mu_);
    config::Config next = running_;
    auto it = std::remove_if(next.neighbours.begin(), next.neighbours.end(),
                             [&](const auto& n) { return n.ip == ip; });
    if (it == next.neighbours.end()) {
        return failure({"no static neighbour " + ip.str()});
    }
    next.neighbours.erase(it, next.neighbours.end());
    return apply_locked(std::move(next));
}

config::Config ControlPlane::running_config() const {
    std::lock_guard lock(mu_);
    return running_;
}

std::vector<NeighbourView> ControlPlane::neighbours() const {
    std::lock_guard lock(mu_);
    const uint64_t now = rte_rdtsc();
    std::vector<NeighbourView> out;
    for (const auto& n : running_.neighbours) {
        out.push_back({n.ip, n.mac, n.port, true, 0});
    }
    for (const auto& [ip, l] : learned_) {
        out.push_back({net::Ipv4Addr{ip}, to_mac(l.mac), port_name(l.port), false,
                       static_cast<double>(now - l.updated_tsc) / static_cast<double>(tsc_hz_)});
    }
    return out;
}

std::vector<FdbView> ControlPlane::fdb() const {
    std::lock_guard lock(mu_);
    const uint64_t now = rte_rdtsc();
    const auto& snap = snapshot();
    std::vector<FdbView> out;
    for (const auto& [key, e] : fdb_) {
        const uint64_t last = fdb_last_seen(e);
        const std::string group =
            key.second < snap.groups.size() ? snap.groups[key.second].name : "?";
        out.push_back({to_mac(mac_of_key(key.first)), group, port_name(e.port),
                       static_cast<double>(cycles_since(now, last)) /
                           static_cast<double>(tsc_hz_)});
    }
    return out;
}

uint64_t ControlPlane::fdb_last_seen(const FdbState& e) const {
    uint64_t last = e.learned_tsc;
    for (const auto& w : dataplane_.workers) {
        if (e.index < w.ctx->fdb_seen_len) {
            // The worker stores the word as it forwards; an aligned 64-bit load sees its old
            // or its new value, never a torn one.
            last = std::max(last, __atomic_load_n(&w.ctx->fdb_seen[e.index], __ATOMIC_RELAXED));
        }
    }
    return last;
}

metrics::Stats ControlPlane::stats() const {
    metrics::Stats s;
    {
        std::lock_guard lock(mu_);
        s.control = counters_;
        s.static_neighbours = running_.neighbours.size();
        s.learned_neighbours = learned_.size();
        s.fdb_entries = fdb_.size();
        s.routes = running_.routes.size();
        s.gateways_down = down_gateways_.size();
        if (tables_) {
            s.neighbour_table = {tables_->neighbour_count(), tables_->neighbour_capacity()};
            s.fdb_table = {tables_->fdb_count(), tables_->fdb_capacity()};
            s.neighbour6_table = {tables_->neighbour6_count(), tables_->neighbour_capacity()};
        }
        if (dataplane_.current() != nullptr) {
            const dp::Snapshot& snap = snapshot();
            s.route_table = {snap.routes, snap.max_routes};
            s.nexthop_table = {snap.nexthops.size(), snap.nexthops.capacity()};
            s.route6_table = {snap.nexthops6.size(), snap.nexthops6.capacity()};
        }
    }
    s.generation = dataplane_.generation();
    s.uptime_s = static_cast<double>(rte_rdtsc() - start_tsc_) / static_cast<double>(tsc_hz_);
    s.ports = ports_;
    for (const auto& w : dataplane_.workers) {
        // Plain reads of another lcore's counters: each word is written by one lcore only, and
        // an aligned 64-bit load is never torn.
        const dp::LcoreCounters c = w.ctx->counters;
        s.per_lcore.emplace_back(w.lcore_id, c);
        s.lcore_threads.emplace_back(w.lcore_id, runtime::read_thread_sched(*w.sched));
        s.total += c;
    }
    {
        std::lock_guard lock(mu_);
        for (const auto& [id, job] : jobs_) {
            metrics::JobStats js;
            js.job_id = id;
            js.is_root = job.cfg.role == config::InaRole::root;
            for (const auto& t : job.tables) {
                js += t->counters();
                js.slots_in_use += t->slots_in_use();
                js.capacity += t->capacity();
            }
            s.jobs.push_back(js);
        }
        const dp::Snapshot& snap = snapshot();
        s.bier_sub_domain = running_.bier.sub_domain;
        for (const auto& t : snap.bifts) {
            metrics::BiftStats b;
            b.bift_id = t.bift_id;
            b.bsl_bits = t.bsl_bits;
            b.set_id = t.set_id;
            for (uint16_t k = 0; k < t.n_neighbours; ++k) {
                b.neighbours.emplace_back(net::Ipv4Addr{t.neighbours[k].ip}.str(),
                                          t.neighbours[k].resolved);
            }
            b.local_bits = t.local_bp.size();
            b.counters = bier_slot_total(t.counter_slot);
            b.counters -= bier_slots_[t.counter_slot].baseline;
            s.bifts.push_back(std::move(b));
        }
        for (const auto& fc : feature_controls()) {
            fc.stats(fc.self, *this, s);
        }
    }
    if (dataplane_.pool != nullptr) {
        s.mempool_available = rte_mempool_avail_count(dataplane_.pool);
        s.mempool_in_use = rte_mempool_in_use_count(dataplane_.pool);
        s.mempool_size = dataplane_.pool->size;
    }
    return s;
}

bool ControlPlane::idle_for(uint64_t idle_ms) const {
    if (!backlog_.empty()) {
        return false;
    }
    const uint64_t now = rte_rdtsc();
    const uint64_t limit = idle_ms * tsc_hz_ / 1000;
    for (const auto& w : dataplane_.workers) {
        // The worker may stamp last_rx_tsc after `now` was read: that is "received just now".
        if (cycles_since(now, __atomic_load_n(&w.ctx->last_rx_tsc, __ATOMIC_RELAXED)) < limit || rte_ring_count(w.control_tx) != 0 ||
            rte_ring_count(w.events) != 0) {
            return false;
        }
    }
    return true;
}

}  // namespace ina::control
