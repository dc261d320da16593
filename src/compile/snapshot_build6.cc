// SPDX-License-Identifier: Apache-2.0
// The IPv6 half of the snapshot compiler: config ipv6_routes and port ipv6 prefixes into the
// snapshot's LPM6 and next hops.
#include <algorithm>

#include "compile/snapshot_build.h"

namespace ina::compile {

bool build_routes6(const config::Config& cfg, const std::vector<uint16_t>& port_ids,
                   dp::Snapshot& snap, const std::string& name, std::string& error) {
    size_t n_addrs = 0;
    for (const auto& p : cfg.ports) {
        n_addrs += p.ipv6.size();
    }
    if (n_addrs == 0 && cfg.ipv6_routes.empty()) {
        // No IPv6: no LPM6 (its first-level table alone is 64 MiB of DPDK memory), and no
        // IPv6 frame reaches routing (eth_input: no port has an IPv6 address).
        return true;
    }
    const auto max_rules = static_cast<uint32_t>(cfg.ipv6_routes.size() + 2 * n_addrs + 16);
    if (!snap.make_route6_table(name, max_rules, error)) {
        return false;
    }
    auto port_id = [&](const std::string& port_name) {
        return port_ids[static_cast<size_t>(cfg.port_index(port_name))];
    };
    // As for IPv4: static routes shortest first, then connected prefixes (never shadowed by a
    // static route to them), then the switch's own addresses (/128, always local).
    std::vector<const config::Route6Config*> routes;
    for (const auto& rt : cfg.ipv6_routes) {
        routes.push_back(&rt);
    }
    std::stable_sort(routes.begin(), routes.end(), [](const auto* a, const auto* b) {
        return a->prefix.length < b->prefix.length;
    });
    for (const auto* rt : routes) {
        dp::NextHop6 nh;
        if (rt->via) {
            nh.kind = dp::NextHopKind::gateway;
            nh.gateway = rt->via->bytes;
            const config::PortConfig* via_port =
                rt->port.empty() ? config::connected_port6_of(cfg, *rt->via) : nullptr;
            nh.port = port_id(via_port != nullptr ? via_port->name : rt->port);
        } else {
            nh.kind = dp::NextHopKind::connected;
            nh.port = port_id(rt->port);
        }
        if (!snap.add_route6(rt->prefix, nh)) {
            error = "cannot add IPv6 route " + rt->prefix.str();
            return false;
        }
    }
    for (size_t i = 0; i < cfg.ports.size(); ++i) {
        for (const auto& a : cfg.ports[i].ipv6) {
            if (!snap.add_route6(a, dp::NextHop6{dp::NextHopKind::connected, {}, port_ids[i]})) {
                error = "cannot add connected IPv6 route " + a.str();
                return false;
            }
        }
    }
    for (size_t i = 0; i < cfg.ports.size(); ++i) {
        for (const auto& a : cfg.ports[i].ipv6) {
            if (!snap.add_route6(net::Ipv6Prefix{a.addr, 128},
                                 dp::NextHop6{dp::NextHopKind::local, {}, port_ids[i]})) {
                error = "cannot add local IPv6 address " + a.str();
                return false;
            }
        }
    }
    return true;
}

}  // namespace ina::compile
