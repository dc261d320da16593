// SPDX-License-Identifier: Apache-2.0
#include "compile/snapshot_build.h"

#include <rte_errno.h>
#include <rte_hash.h>
#include <rte_jhash.h>
#include <rte_lpm.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>

namespace ina::compile {

using namespace ina::dp;  // this file fills in dp::Snapshot field by field

static_assert(dp::kMaxInaJobs == config::kMaxInaJobs &&
                  dp::kMaxUnicastWorkers == config::kMaxUnicastWorkers,
              "the schema accepts exactly what a snapshot holds");

namespace {

rte_ether_addr to_ether(const net::MacAddr& m) {
    rte_ether_addr e;
    std::memcpy(e.addr_bytes, m.bytes.data(), 6);
    return e;
}

// Resolves an adjacent station the way routing would: through the route to it, which carries its
// MAC once the neighbour is known (static or learned; the snapshot is rebuilt when one is).
BierAdjacency adjacency(const Snapshot& s, uint32_t ip) {
    BierAdjacency a;
    a.ip = ip;
    if (const NextHop* nh = s.route(ip)) {
        a.resolved = nh->resolved;
        a.port = nh->resolved ? nh->out_port : nh->port;
        a.dst_mac = nh->dst_mac;
    }
    return a;
}

// The BIER targets of a BFIR sending to `ids` with BSL `bsl`: one BitString per set.
bool bier_targets(const Snapshot& s, const config::BierConfig& bier, uint16_t bsl,
                  const std::vector<uint16_t>& ids, std::vector<BierTarget>& out,
                  std::string& error) {
    std::map<uint16_t, std::vector<uint16_t>> by_set;
    for (auto id : ids) {
        by_set[static_cast<uint16_t>((id - 1u) / bsl)].push_back(id);
    }
    for (const auto& [si, members] : by_set) {
        const config::BiftConfig* t = config::find_bift(bier, bsl, si);
        auto bits = wire::BitString::from_bfr_ids(bsl, si, members);
        if (t == nullptr || !bits) {
            error = "no BIFT for BSL " + std::to_string(bsl) + " set " + std::to_string(si);
            return false;
        }
        for (uint16_t k = 0; k < s.bifts.size(); ++k) {
            if (s.bifts[k].bift_id == t->bift_id) {
                out.push_back(BierTarget{k, *bits});
            }
        }
    }
    return true;
}

bool build_bift(const Snapshot& s, const config::BiftConfig& t, BiftView& v, std::string& error) {
    v.bift_id = t.bift_id;
    v.bsl_bits = t.bsl_bits;
    v.bs_bytes = wire::bsl_bytes(t.bsl_bits);
    v.bsl_code = wire::bsl_code_from_bits(t.bsl_bits).value_or(0);
    v.set_id = t.set_id;
    if (t.neighbours.size() > kMaxBierNeighbours) {
        error = "BIFT " + std::to_string(t.bift_id) + ": more than 16 neighbours";
        return false;
    }
    v.n_neighbours = static_cast<uint16_t>(t.neighbours.size());
    // ECMP: the paths of each BP in configuration order; plane e takes path e mod width.
    std::map<uint16_t, std::vector<uint16_t>> paths;  // BP -> neighbour indices
    for (uint16_t k = 0; k < v.n_neighbours; ++k) {
        v.neighbours[k] = adjacency(s, t.neighbours[k].via.value);
        for (auto id : t.neighbours[k].bfr_ids) {
            paths[static_cast<uint16_t>((id - 1u) % t.bsl_bits + 1)].push_back(k);
        }
    }
    unsigned planes = 1;
    for (const auto& [bp, via] : paths) {
        planes = std::lcm(planes, static_cast<unsigned>(via.size()));
    }
    if (planes > kMaxBierPlanes) {
        error = "BIFT " + std::to_string(t.bift_id) + ": more than 16 ECMP planes";
        return false;
    }
    v.n_planes = static_cast<uint16_t>(planes);
    v.fbm.assign(size_t{planes} * v.n_neighbours * v.bs_bytes, 0);
    v.local_mask.assign(v.bs_bytes, 0);
    v.reachable_mask.assign(v.bs_bytes, 0);
    for (const auto& [bp, via] : paths) {
        wire::bits_set_bp(v.reachable_mask.data(), v.bs_bytes, bp);
        for (uint16_t e = 0; e < planes; ++e) {
            const uint16_t k = via[e % via.size()];
            wire::bits_set_bp(const_cast<uint8_t*>(v.fbm_of(e, k)), v.bs_bytes, bp);
        }
    }
    std::vector<const config::BierLocalConfig*> local;
    for (const auto& l : t.local) {
        local.push_back(&l);
    }
    std::sort(local.begin(), local.end(),
              [](const auto* a, const auto* b) { return a->bfr_id < b->bfr_id; });
    for (const auto* l : local) {
        const auto bp = static_cast<uint16_t>((l->bfr_id - 1u) % t.bsl_bits + 1);
        wire::bits_set_bp(v.local_mask.data(), v.bs_bytes, bp);
        wire::bits_set_bp(v.reachable_mask.data(), v.bs_bytes, bp);
        v.local_bp.push_back(bp);
        v.local_host.push_back(adjacency(s, l->host.value));
    }
    return true;
}

bool build_bier(Snapshot& s, const config::Config& cfg, std::string& error) {
    const config::BierConfig& bier = cfg.bier;
    s.bier_bfr_id = bier.bfr_id;
    s.bier_ttl = bier.ttl;
    if (bier.bifts.size() > kMaxBifts) {
        error = "more than 64 BIFTs";
        return false;
    }
    for (const auto& t : bier.bifts) {
        BiftView v;
        if (!build_bift(s, t, v, error)) {
            return false;
        }
        v.counter_slot = static_cast<uint16_t>(s.bifts.size());
        s.bifts.push_back(std::move(v));
    }
    for (const auto& g : bier.groups) {
        BierGroupView v;
        v.group = g.group.value;
        if (!bier_targets(s, bier, config::bier_bsl_for(bier, g.bsl_bits), g.bfr_ids, v.targets,
                          error)) {
            error = "group " + g.group.str() + ": " + error;
            return false;
        }
        s.bier_groups.push_back(std::move(v));
    }
    for (size_t i = 0; i < cfg.ina.jobs.size() && i < s.ina_jobs.size(); ++i) {
        const auto& j = cfg.ina.jobs[i];
        if (j.results != config::ResultDelivery::bier) {
            continue;
        }
        if (!bier_targets(s, bier, config::bier_job_bsl(bier, j.bsl_bits), j.abm,
                          s.ina_jobs[i].bier_targets, error)) {
            error = "INA job " + std::to_string(j.job_id) + ": " + error;
            return false;
        }
    }
    return true;
}

rte_hash* make_hash(const std::string& name, uint32_t entries, uint32_t key_len) {
    rte_hash_parameters params{};
    params.name = name.c_str();
    params.entries = entries < 8 ? 8 : entries;
    params.key_len = key_len;
    params.hash_func = rte_jhash;
    params.hash_func_init_val = 0;
    params.socket_id = SOCKET_ID_ANY;
    return rte_hash_create(&params);
}

std::vector<SnapshotExtension>& extensions() {
    static std::vector<SnapshotExtension> fns;
    return fns;
}

}  // namespace

bool register_extension(SnapshotExtension fn) {
    if (fn == nullptr) {
        return false;
    }
    extensions().push_back(fn);
    return true;
}

std::unique_ptr<Snapshot> build_snapshot(const config::Config& cfg,
                                         const std::vector<PortBinding>& bindings,
                                         const std::vector<DynamicNeighbour>& learned,
                                         const std::vector<DynamicFdbEntry>& fdb,
                                         uint64_t generation, std::string& error) {
    std::unique_ptr<Snapshot> s(SnapshotBuilder::make_empty());
    s->generation = generation;
    s->max_fdb_entries = cfg.l2.max_fdb_entries;
    s->arp_request_interval_ms = cfg.arp.request_interval_ms;
    if (bindings.size() != cfg.ports.size()) {
        error = "internal: port bindings do not match the configured ports";
        return nullptr;
    }
    std::vector<uint16_t> id(cfg.ports.size());
    for (size_t i = 0; i < cfg.ports.size(); ++i) {
        id[i] = bindings[i].port_id;
        if (id[i] >= kMaxPorts) {
            error = "DPDK port id " + std::to_string(id[i]) + " is above the supported " +
                    std::to_string(kMaxPorts - 1);
            return nullptr;
        }
        s->n_ports = std::max<uint16_t>(s->n_ports, static_cast<uint16_t>(id[i] + 1));
    }
    auto port_of = [&](const std::string& name) { return id[static_cast<size_t>(cfg.port_index(name))]; };

    std::map<std::string, int16_t> group_ids;
    for (size_t i = 0; i < cfg.ports.size(); ++i) {
        const auto& pc = cfg.ports[i];
        auto& pv = s->ports[id[i]];
        pv.present = true;
        pv.promiscuous = pc.promiscuous;
        pv.mac = pc.mac ? to_ether(*pc.mac) : bindings[i].mac;
        pv.mtu = pc.mtu;
        if (pc.ipv4.size() > kMaxAddrsPerPort) {
            error = "port '" + pc.name + "': at most " + std::to_string(kMaxAddrsPerPort) +
                    " addresses per port";
            return nullptr;
        }
        pv.n_addrs = static_cast<uint8_t>(pc.ipv4.size());
        std::copy(pc.ipv4.begin(), pc.ipv4.end(), pv.addrs.begin());
        if (!pc.l2_group.empty()) {
            auto [it, inserted] = group_ids.try_emplace(pc.l2_group,
                                                        static_cast<int16_t>(s->groups.size()));
            if (inserted) {
                s->groups.push_back(L2Group{pc.l2_group, 0, {}});
            }
            auto& g = s->groups[static_cast<size_t>(it->second)];
            g.ports[g.n_ports++] = id[i];
            pv.l2_group = it->second;
        }
    }

    // Names of DPDK objects must be unique process-wide: the generation makes them so.
    const std::string suffix = std::to_string(generation);

    // Neighbours first: routes are resolved against them while the LPM is built.
    const uint32_t max_neigh = cfg.arp.max_neighbours;
    s->neighbour_hash = make_hash("nb" + suffix, max_neigh, sizeof(uint32_t));
    if (s->neighbour_hash == nullptr) {
        error = std::string("rte_hash_create(neighbours): ") + rte_strerror(rte_errno);
        return nullptr;
    }
    std::vector<uint32_t> neighbour_ips;
    auto add_neighbour = [&](uint32_t ip, const rte_ether_addr& mac, uint16_t port) {
        void* existing = nullptr;
        if (rte_hash_lookup_data(s->neighbour_hash, &ip, &existing) >= 0) {
            return true;  // static entries are added first and win over learned ones
        }
        s->neighbours.push_back(Neighbour{mac, port});
        neighbour_ips.push_back(ip);
        auto* index = reinterpret_cast<void*>(static_cast<uintptr_t>(s->neighbours.size() - 1));
        return rte_hash_add_key_data(s->neighbour_hash, &ip, index) == 0;
    };
    for (const auto& nb : cfg.neighbours) {
        if (!add_neighbour(nb.ip.value, to_ether(nb.mac), port_of(nb.port))) {
            error = "neighbour table full";
            return nullptr;
        }
    }
    for (const auto& nb : learned) {
        if (!add_neighbour(nb.ip, nb.mac, nb.port)) {
            error = "neighbour table full";
            return nullptr;
        }
    }

    // The LPM answers everything the packet path needs in one lookup: every resolved neighbour
    // is a /32 whose next hop carries its MAC and port, and gateway routes are resolved here,
    // so forwarding a packet never touches a hash table.
    rte_lpm_config lpm_cfg{};
    lpm_cfg.max_rules = static_cast<uint32_t>(cfg.routes.size() + neighbour_ips.size() +
                                              4 * cfg.ports.size() * kMaxAddrsPerPort + 16);
    // One tbl8 group per /24 that holds a longer prefix; bounded by the rule count.
    lpm_cfg.number_tbl8s = std::max<uint32_t>(256, lpm_cfg.max_rules);
    s->lpm = rte_lpm_create(("lpm" + suffix).c_str(), SOCKET_ID_ANY, &lpm_cfg);
    if (s->lpm == nullptr) {
        error = std::string("rte_lpm_create: ") + rte_strerror(rte_errno);
        return nullptr;
    }
    auto add_route = [&](const net::Ipv4Prefix& p, NextHop nh) {
        const uint32_t target = nh.kind == NextHopKind::gateway ? nh.gateway : 0;
        if (target != 0) {
            if (const Neighbour* n = s->neighbour(target)) {
                nh.resolved = true;
                nh.out_port = n->port;
                nh.dst_mac = n->mac;
            }
        }
        s->nexthops.push_back(nh);
        const auto index = static_cast<uint32_t>(s->nexthops.size() - 1);
        if (p.length == 0) {
            // rte_lpm rejects depth 0: a default route is its two /1 halves.
            return rte_lpm_add(s->lpm, 0, 1, index) == 0 &&
                   rte_lpm_add(s->lpm, 0x80000000u, 1, index) == 0;
        }
        return rte_lpm_add(s->lpm, p.network(), p.length, index) == 0;
    };
    // Order matters on equal prefixes (the last add wins): static routes, then connected
    // subnets (never shadowed by a static route to them), then neighbours, then the switch's
    // own addresses.
    // Shortest prefixes first, so a configured /1 overrides the halves of a default route.
    std::vector<const config::RouteConfig*> static_routes;
    for (const auto& rt : cfg.routes) {
        static_routes.push_back(&rt);
    }
    std::stable_sort(static_routes.begin(), static_routes.end(),
                     [](const auto* a, const auto* b) { return a->prefix.length < b->prefix.length; });
    for (const auto* rtp : static_routes) {
        const auto& rt = *rtp;
        NextHop nh;
        if (rt.via) {
            nh.kind = NextHopKind::gateway;
            nh.gateway = rt.via->value;
            int port = rt.port.empty() ? -1 : port_of(rt.port);
            for (size_t i = 0; port < 0 && i < cfg.ports.size(); ++i) {
                if (s->ports[id[i]].subnet_of(nh.gateway)) {
                    port = id[i];
                }
            }
            nh.port = static_cast<uint16_t>(port < 0 ? 0 : port);
        } else {
            nh.kind = NextHopKind::connected;
            nh.port = port_of(rt.port);
        }
        if (!add_route(rt.prefix, nh)) {
            error = "cannot add route " + rt.prefix.str();
            return nullptr;
        }
    }
    for (size_t i = 0; i < cfg.ports.size(); ++i) {
        for (const auto& a : cfg.ports[i].ipv4) {
            if (!add_route(net::Ipv4Prefix{net::Ipv4Addr{a.network()}, a.length},
                           NextHop{NextHopKind::connected, 0, id[i]})) {
                error = "cannot add connected route " + a.str();
                return nullptr;
            }
        }
    }
    for (size_t k = 0; k < neighbour_ips.size(); ++k) {
        // A neighbour becomes a host route only where the destination is reached directly; a
        // more specific static route through a gateway keeps its traffic.
        const NextHop* covering = s->route(neighbour_ips[k]);
        if (covering != nullptr && covering->kind == NextHopKind::gateway) {
            continue;
        }
        const Neighbour& n = s->neighbours[k];
        NextHop nh{NextHopKind::connected, 0, n.port};
        nh.resolved = true;
        nh.out_port = n.port;
        nh.dst_mac = n.mac;
        if (!add_route(net::Ipv4Prefix{net::Ipv4Addr{neighbour_ips[k]}, 32}, nh)) {
            error = "cannot add neighbour route " + net::Ipv4Addr{neighbour_ips[k]}.str();
            return nullptr;
        }
    }
    for (size_t i = 0; i < cfg.ports.size(); ++i) {
        for (const auto& a : cfg.ports[i].ipv4) {
            if (!add_route(net::Ipv4Prefix{a.addr, 32}, NextHop{NextHopKind::local, 0, id[i]})) {
                error = "cannot add local address " + a.str();
                return nullptr;
            }
            // The subnet's broadcast and (old-style broadcast) network addresses.
            if (a.length < 31 &&
                (!add_route(net::Ipv4Prefix{net::Ipv4Addr{a.broadcast()}, 32},
                            NextHop{NextHopKind::broadcast, 0, id[i]}) ||
                 !add_route(net::Ipv4Prefix{net::Ipv4Addr{a.network()}, 32},
                            NextHop{NextHopKind::broadcast, 0, id[i]}))) {
                error = "cannot add broadcast addresses of " + a.str();
                return nullptr;
            }
        }
    }

    s->ina_udp_port = cfg.ina.udp_port;
    for (const auto& j : cfg.ina.jobs) {
        InaJobView v;
        v.job_id = j.job_id;
        v.is_root = j.role == config::InaRole::root;
        v.drop_rejected = j.on_reject == config::RejectAction::drop;
        auto abm = wire::BitString::from_bfr_ids(j.bsl_bits, j.set_id, j.abm);
        if (!abm || j.workers.size() > kMaxUnicastWorkers || s->ina_jobs.size() >= kMaxInaJobs) {
            error = "INA job " + std::to_string(j.job_id) +
                    ": bad A-BM, more than 32 workers or more than 64 jobs";
            return nullptr;
        }
        v.abm = *abm;
        v.bsl_code = *wire::bsl_code_from_bits(j.bsl_bits);
        v.set_id = static_cast<uint8_t>(j.set_id);
        v.op = j.op;
        v.elem_type = j.elem_type;
        v.max_elements = j.max_elements;
        v.parent = j.parent ? j.parent->value : j.root.value;
        v.source = j.source ? j.source->value : 0;
        for (const auto& name : j.ingress_ports) {
            v.ingress_ports |= 1u << port_of(name);
        }
        v.ingress_sources = j.ingress_sources;
        for (const auto& w : j.workers) {
            v.worker_ip[v.n_workers++] = w.ip.value;
        }
        v.results_bier = j.results == config::ResultDelivery::bier;
        s->ina_jobs.push_back(std::move(v));
    }
    // INA contributions are UDP to the switch's routers (ina_input); bridged INA is not the
    // switch's to aggregate. Without jobs nothing is bound: no packet reaches the INA stage.
    if (!s->ina_jobs.empty()) {
        s->features.bind({kIpProtoUdp, kFeatureIna, kScopeRouted, s->ina_udp_port});
    }

    if (!build_bier(*s, cfg, error)) {
        return nullptr;
    }

    s->fdb_hash = make_hash("fdb" + suffix, cfg.l2.max_fdb_entries, sizeof(FdbKey));
    if (s->fdb_hash == nullptr) {
        error = std::string("rte_hash_create(fdb): ") + rte_strerror(rte_errno);
        return nullptr;
    }
    for (const auto& e : fdb) {
        FdbKey key{};
        std::memcpy(key.mac, e.mac.addr_bytes, 6);
        key.group = e.group;
        s->fdb_entries.push_back(FdbEntry{e.port, e.index});
        auto* index = reinterpret_cast<void*>(static_cast<uintptr_t>(s->fdb_entries.size() - 1));
        if (rte_hash_add_key_data(s->fdb_hash, &key, index) != 0) {
            error = "FDB full";
            return nullptr;
        }
    }
    for (SnapshotExtension fn : extensions()) {
        if (!fn(cfg, *s, error)) {
            return nullptr;
        }
    }
    return s;
}

}  // namespace ina::compile
