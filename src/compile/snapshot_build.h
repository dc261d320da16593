// SPDX-License-Identifier: Apache-2.0
// The snapshot compiler: the one place the YAML schema (config::Config) meets the tables workers
// read (dp::Snapshot). Keeping it out of src/dataplane/ keeps the schema out of the packet path.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "dataplane/snapshot.h"

namespace ina::compile {

// The neighbours a snapshot is built against, as the forwarding tables will hold them: the
// config's static neighbours, then `learned` ones whose address no static entry has.
std::vector<dp::DynamicNeighbour> neighbour_set(const config::Config& cfg,
                                                const std::vector<dp::PortBinding>& ports,
                                                const std::vector<dp::DynamicNeighbour>& learned);

// Routes the API adds in place beyond the config's prefixes: a snapshot's LPM holds the
// config's prefixes plus as many again, and at least this many.
inline constexpr uint32_t kRouteHeadroom = 4096;

// The next hop of static route `rt` (valid in `cfg`, validate_route): its gateway and the port
// it is reached through, or its device port. The station is left unresolved (0).
dp::NextHop route_next_hop(const config::Config& cfg, const std::vector<dp::PortBinding>& ports,
                           const config::RouteConfig& rt);

// The IPv6 route table of `snap` (snapshot_build6.cc): the config's ipv6_routes, connected
// prefixes and own addresses. `port_ids[i]` is config port i's DPDK port id.
bool build_routes6(const config::Config& cfg, const std::vector<uint16_t>& port_ids,
                   dp::Snapshot& snap, const std::string& name, std::string& error);

// Builds a snapshot; on failure returns nullptr and sets `error`. `ports[i]` binds config port
// i to its DPDK port id and the MAC the device reports (config `mac` overrides it). Every port
// number inside a snapshot (PortView index, next hops, neighbours, groups) is a DPDK port id,
// because that is what mbuf->port carries. `neighbours` (neighbour_set) is what `tables` holds
// when the snapshot is published: gateway next hops and BIER adjacencies start resolved from
// it. The snapshot points at `tables`, which must outlive it.
std::unique_ptr<dp::Snapshot> build_snapshot(const config::Config& cfg,
                                             const std::vector<dp::PortBinding>& ports,
                                             const std::vector<dp::DynamicNeighbour>& neighbours,
                                             const dp::ForwardingTables& tables,
                                             uint64_t generation, std::string& error);

// A snapshot with tables of its own, for programs without a control plane (benchmarks, stage
// tests): the tables hold `cfg`'s static neighbours plus `learned`, and `fdb`, and reclaim
// through `qsbr`. Members are destroyed snapshot first, then the tables it points at.
struct StandaloneSnapshot {
    std::unique_ptr<dp::ForwardingTables> tables;
    std::unique_ptr<dp::Snapshot> snapshot;
};
StandaloneSnapshot build_standalone(const config::Config& cfg,
                                    const std::vector<dp::PortBinding>& ports,
                                    const std::vector<dp::DynamicNeighbour>& learned,
                                    const std::vector<dp::DynamicFdbEntry>& fdb,
                                    rte_rcu_qsbr* qsbr, uint64_t generation, std::string& error);

// A feature's compile step (src/features/<f>/compile*): adds the feature's view and bindings
// to a snapshot being built from `cfg`. False with `error` fails the whole build (nothing is
// published). Registered at start-up (src/app), run in registration order by build_snapshot.
using SnapshotExtension = bool (*)(const config::Config& cfg, dp::Snapshot& snap,
                                   std::string& error);
bool register_extension(SnapshotExtension fn);

// The only maker of dp::Snapshot objects (its constructor is private): a snapshot exists only
// with its tables built, so a worker never reads one without them.
class SnapshotBuilder {
    friend std::unique_ptr<dp::Snapshot> build_snapshot(const config::Config&,
                                                        const std::vector<dp::PortBinding>&,
                                                        const std::vector<dp::DynamicNeighbour>&,
                                                        const dp::ForwardingTables&, uint64_t,
                                                        std::string&);
    static dp::Snapshot* make_empty() { return new dp::Snapshot(); }
};

}  // namespace ina::compile
