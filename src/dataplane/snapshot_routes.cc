// SPDX-License-Identifier: Apache-2.0
// Route changes made in place on a snapshot's LPM and next-hop table: by the builder while it
// fills a new snapshot, and by the control plane on the published one (API route changes), so
// both take the same path. One writer (the control-plane thread); workers look up meanwhile.
// rte_lpm_rcu_qsbr_add is still experimental in DPDK 22.11 (stable from 23.11 on).
#define ALLOW_EXPERIMENTAL_API
#include <rte_errno.h>
#include <rte_lpm.h>
#include <rte_rcu_qsbr.h>

#include <algorithm>
#include <new>

#include "dataplane/snapshot.h"

namespace ina::dp {

bool NextHopTable::reserve(uint32_t capacity) {
    capacity = std::min(capacity, kMaxNextHops);
    slots_.reset(new (std::nothrow) NextHop[capacity]);
    capacity_ = slots_ ? capacity : 0;
    size_ = 0;
    index_.clear();
    gateways_.clear();
    return slots_ != nullptr;
}

uint32_t NextHopTable::intern(const NextHop& nh) {
    const auto key = std::make_tuple(nh.kind, nh.gateway, nh.port);
    if (auto it = index_.find(key); it != index_.end()) {
        return it->second;
    }
    if (size_ >= capacity_) {
        return kNone;
    }
    // Written before any route names the slot: the LPM store that publishes the index is a
    // release, so a reader that finds the index sees this whole next hop.
    NextHop& slot = slots_[size_];
    slot.kind = nh.kind;
    slot.gateway = nh.gateway;
    slot.port = nh.port;
    slot.set_station(nh.kind == NextHopKind::gateway ? nh.station_word() : 0);
    index_.emplace(key, size_);
    if (nh.kind == NextHopKind::gateway) {
        gateways_.push_back(size_);
    }
    return size_++;
}

bool Snapshot::make_route_table(const std::string& name, uint32_t max_rules, uint32_t tbl8s,
                                rte_rcu_qsbr* qsbr, std::string& error) {
    rte_lpm_config cfg{};
    cfg.max_rules = max_rules;
    cfg.number_tbl8s = tbl8s;
    max_routes = max_rules;
    route_qsbr_ = qsbr;
    lpm = rte_lpm_create(name.c_str(), SOCKET_ID_ANY, &cfg);
    if (lpm == nullptr) {
        error = std::string("rte_lpm_create: ") + rte_strerror(rte_errno);
        return false;
    }
    // A tbl8 group freed by an in-place delete is reused only after every worker has passed a
    // quiescent state, so a lookup in progress never reads a group given to another /24.
    rte_lpm_rcu_config rcu{};
    rcu.v = qsbr;
    rcu.mode = RTE_LPM_QSBR_MODE_DQ;
    if (rte_lpm_rcu_qsbr_add(lpm, &rcu) != 0) {
        error = std::string("rte_lpm_rcu_qsbr_add: ") + rte_strerror(rte_errno);
        return false;
    }
    // Every next hop a route has named stays while the snapshot lives (no reuse under a
    // reader): one slot per rule bounds the distinct gateways too.
    if (!nexthops.reserve(max_rules)) {
        error = "out of memory for the next-hop table";
        return false;
    }
    return true;
}

Snapshot::RouteChange Snapshot::add_route(const net::Ipv4Prefix& prefix, const NextHop& nh) {
    const uint32_t index = nexthops.intern(nh);
    if (index == NextHopTable::kNone) {
        return RouteChange::nexthops_full;
    }
    auto add = [&] {
        if (prefix.length == 0) {
            const int rc = rte_lpm_add(lpm, 0, 1, index);
            return rc != 0 ? rc : rte_lpm_add(lpm, 0x80000000u, 1, index);
        }
        return rte_lpm_add(lpm, prefix.network(), prefix.length, index);
    };
    int rc = add();
    if (rc == -ENOSPC && route_qsbr_ != nullptr) {
        // The free tbl8 groups may all be deleted routes' still in their grace period: wait
        // until every worker has passed a quiescent state (microseconds while they run; this
        // is the control thread, never a reader), and the retried add reclaims them.
        rte_rcu_qsbr_synchronize(route_qsbr_, RTE_QSBR_THRID_INVALID);
        rc = add();
    }
    if (rc != 0) {
        return RouteChange::table_full;  // no rule room, or no free tbl8 group
    }
    ++routes;
    return RouteChange::done;
}

bool Snapshot::remove_route(const net::Ipv4Prefix& prefix) {
    bool removed = false;
    if (prefix.length == 0) {
        removed = rte_lpm_delete(lpm, 0, 1) == 0;
        removed = rte_lpm_delete(lpm, 0x80000000u, 1) == 0 || removed;
    } else {
        removed = rte_lpm_delete(lpm, prefix.network(), prefix.length) == 0;
    }
    if (removed && routes != 0) {
        --routes;
    }
    return removed;
}

}  // namespace ina::dp
