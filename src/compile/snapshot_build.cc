// SPDX-License-Identifier: Apache-2.0
#include "compile/snapshot_build.h"

#include <rte_errno.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <optional>
#include <unordered_map>

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

// The neighbours a snapshot is built against: what its tables hold once it is published.
using NeighbourMap = std::unordered_map<uint32_t, Neighbour>;

// Resolves an adjacent station the way routing would: through the route to it (a gateway's
// station, or the station's own neighbour entry). BIER adjacencies are resolved here only, so
// the control plane rebuilds the snapshot when a neighbour one of them names changes.
BierAdjacency adjacency(const Snapshot& s, const NeighbourMap& neighbours, uint32_t ip) {
    BierAdjacency a;
    a.ip = ip;
    if (const NextHop* nh = s.route(ip)) {
        a.port = nh->port;
        std::optional<Neighbour> st;
        if (nh->kind == NextHopKind::gateway) {
            if (const uint64_t w = nh->station_word(); w != 0) {
                st = unpack_station(w);
            }
        } else if (auto it = neighbours.find(ip); it != neighbours.end()) {
            st = it->second;
        }
        if (st) {
            a.resolved = true;
            a.port = st->port;
            a.dst_mac = st->mac;
        }
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

bool build_bift(const Snapshot& s, const NeighbourMap& neighbours, const config::BiftConfig& t,
                BiftView& v, std::string& error) {
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
        v.neighbours[k] = adjacency(s, neighbours, t.neighbours[k].via.value);
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
        v.local_host.push_back(adjacency(s, neighbours, l->host.value));
    }
    return true;
}

bool build_bier(Snapshot& s, const NeighbourMap& neighbours, const config::Config& cfg,
                std::string& error) {
    const config::BierConfig& bier = cfg.bier;
    s.bier_bfr_id = bier.bfr_id;
    s.bier_ttl = bier.ttl;
    if (bier.bifts.size() > kMaxBifts) {
        error = "more than 64 BIFTs";
        return false;
    }
    for (const auto& t : bier.bifts) {
        BiftView v;
        if (!build_bift(s, neighbours, t, v, error)) {
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

std::vector<SnapshotExtension>& extensions() {
    static std::vector<SnapshotExtension> fns;
    return fns;
}

}  // namespace

dp::NextHop route_next_hop(const config::Config& cfg, const std::vector<PortBinding>& bindings,
                           const config::RouteConfig& rt) {
    auto port_of = [&](const std::string& name) {
        return bindings[static_cast<size_t>(cfg.port_index(name))].port_id;
    };
    NextHop nh;
    if (rt.via) {
        nh.kind = NextHopKind::gateway;
        nh.gateway = rt.via->value;
        // An explicit port, else the first port with a connected subnet holding the gateway.
        int port = rt.port.empty() ? -1 : port_of(rt.port);
        for (size_t i = 0; port < 0 && i < cfg.ports.size(); ++i) {
            for (const auto& a : cfg.ports[i].ipv4) {
                if (port < 0 && a.contains(*rt.via)) {
                    port = bindings[i].port_id;
                }
            }
        }
        nh.port = static_cast<uint16_t>(port < 0 ? 0 : port);
    } else {
        nh.kind = NextHopKind::connected;
        nh.port = port_of(rt.port);
    }
    return nh;
}

bool register_extension(SnapshotExtension fn) {
    if (fn == nullptr) {
        return false;
    }
    extensions().push_back(fn);
    return true;
}

std::vector<DynamicNeighbour> neighbour_set(const config::Config& cfg,
                                            const std::vector<PortBinding>& bindings,
                                            const std::vector<DynamicNeighbour>& learned) {
    std::vector<DynamicNeighbour> out;
    std::unordered_map<uint32_t, bool> seen;
    for (const auto& nb : cfg.neighbours) {
        const int i = cfg.port_index(nb.port);
        if (i < 0 || static_cast<size_t>(i) >= bindings.size()) {
            continue;  // validation names the port; a snapshot is never built from it
        }
        if (seen.emplace(nb.ip.value, true).second) {
            out.push_back({nb.ip.value, to_ether(nb.mac), bindings[static_cast<size_t>(i)].port_id});
        }
    }
    for (const auto& nb : learned) {
        if (seen.emplace(nb.ip, true).second) {  // a static entry wins over a learned one
            out.push_back(nb);
        }
    }
    return out;
}

std::unique_ptr<Snapshot> build_snapshot(const config::Config& cfg,
                                         const std::vector<PortBinding>& bindings,
                                         const std::vector<DynamicNeighbour>& neighbour_list,
                                         const ForwardingTables& tables, uint64_t generation,
                                         std::string& error) {
    std::unique_ptr<Snapshot> s(SnapshotBuilder::make_empty());
    s->generation = generation;
    s->tables = &tables;
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
        if (pc.ipv6.size() > kMaxAddrsPerPort) {
            error = "port '" + pc.name + "': at most " + std::to_string(kMaxAddrsPerPort) +
                    " IPv6 addresses per port";
            return nullptr;
        }
        pv.n_addrs6 = static_cast<uint8_t>(pc.ipv6.size());
        std::copy(pc.ipv6.begin(), pc.ipv6.end(), pv.addrs6.begin());
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

    NeighbourMap neighbours;
    for (const auto& nb : neighbour_list) {
        neighbours.emplace(nb.ip, Neighbour{nb.mac, nb.port});
    }

    // The LPM is created once per snapshot, with room for the config's prefixes and as many
    // again (at least kRouteHeadroom) for routes the API adds in place; a reload sizes it anew.
    // One tbl8 group per /24 that holds a longer prefix: as many as the config has rules.
    const uint32_t needed = static_cast<uint32_t>(cfg.routes.size() + cfg.neighbours.size() +
                                                  4 * cfg.ports.size() * kMaxAddrsPerPort + 16);
    if (!s->make_route_table("lpm" + suffix, needed + std::max(kRouteHeadroom, needed),
                             std::max<uint32_t>(256, needed), tables.qsbr(), error)) {
        return nullptr;
    }
    // Routes map to shared next hops: one per (kind, gateway, port), so the routes through one
    // gateway share its station word and the control plane resolves them all with one store.
    // Neighbours are not routes: a destination on a connected subnet is looked up in the
    // neighbour table, which changes in place.
    auto add_route = [&](const net::Ipv4Prefix& p, NextHop nh) {
        if (nh.kind == NextHopKind::gateway) {
            if (auto n = neighbours.find(nh.gateway); n != neighbours.end()) {
                nh.station = pack_station(n->second.mac, n->second.port);
            }
        }
        return s->add_route(p, nh) == Snapshot::RouteChange::done;
    };
    // Order matters on equal prefixes (the last add wins): static routes, then connected
    // subnets (never shadowed by a static route to them), then static neighbours no route
    // covers, then the switch's own addresses.
    // Shortest prefixes first, so a configured /1 overrides the halves of a default route.
    std::vector<const config::RouteConfig*> static_routes;
    for (const auto& rt : cfg.routes) {
        static_routes.push_back(&rt);
    }
    std::stable_sort(static_routes.begin(), static_routes.end(),
                     [](const auto* a, const auto* b) { return a->prefix.length < b->prefix.length; });
    for (const auto* rtp : static_routes) {
        if (!add_route(rtp->prefix, route_next_hop(cfg, bindings, *rtp))) {
            error = "cannot add route " + rtp->prefix.str();
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
    for (const auto& nb : cfg.neighbours) {
        // A static neighbour no route covers is reachable as a host route on its port (the
        // packet path then finds its MAC in the neighbour table, like any connected host).
        if (s->route(nb.ip.value) != nullptr) {
            continue;
        }
        if (!add_route(net::Ipv4Prefix{nb.ip, 32},
                       NextHop{NextHopKind::connected, 0, port_of(nb.port)})) {
            error = "cannot add neighbour route " + nb.ip.str();
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

    if (!build_routes6(cfg, id, *s, "lpm6_" + suffix, error)) {
        return nullptr;
    }

    s->ina_udp_port = cfg.ina.udp_port;
    s->udp_checksum_offload =
        !bindings.empty() && std::all_of(bindings.begin(), bindings.end(),
                                         [](const PortBinding& b) { return b.tx_udp_checksum; });
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

    if (!build_bier(*s, neighbours, cfg, error)) {
        return nullptr;
    }

    for (SnapshotExtension fn : extensions()) {
        if (!fn(cfg, *s, error)) {
            return nullptr;
        }
    }
    return s;
}

StandaloneSnapshot build_standalone(const config::Config& cfg,
                                    const std::vector<PortBinding>& bindings,
                                    const std::vector<DynamicNeighbour>& learned,
                                    const std::vector<DynamicFdbEntry>& fdb, rte_rcu_qsbr* qsbr,
                                    uint64_t generation, std::string& error) {
    StandaloneSnapshot out;
    out.tables = ForwardingTables::create("sa" + std::to_string(generation),
                                          cfg.arp.max_neighbours, cfg.l2.max_fdb_entries, qsbr,
                                          error);
    if (!out.tables) {
        return {};
    }
    const auto neighbours = neighbour_set(cfg, bindings, learned);
    for (const auto& nb : neighbours) {
        if (!out.tables->set_neighbour(nb.ip, nb.mac, nb.port)) {
            error = "neighbour table full";
            return {};
        }
    }
    for (const auto& nb : cfg.neighbours6) {
        const int i = cfg.port_index(nb.port);
        if (i >= 0 && static_cast<size_t>(i) < bindings.size() &&
            !out.tables->set_neighbour6(nb.ip.bytes.data(), to_ether(nb.mac),
                                        bindings[static_cast<size_t>(i)].port_id)) {
            error = "IPv6 neighbour table full";
            return {};
        }
    }
    for (const auto& e : fdb) {
        if (!out.tables->set_fdb(e.mac, e.group, FdbEntry{e.port, e.index})) {
            error = "FDB full";
            return {};
        }
    }
    out.snapshot = build_snapshot(cfg, bindings, neighbours, *out.tables, generation, error);
    if (!out.snapshot) {
        return {};
    }
    return out;
}

}  // namespace ina::compile
