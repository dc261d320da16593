// SPDX-License-Identifier: Apache-2.0
// The snapshot's IPv6 route table: an rte_lpm6 built with the snapshot and read-only once it is
// published (an IPv6 route change is a config reload, which builds a new snapshot).
#include <rte_errno.h>
#include <rte_lpm6.h>

#include "dataplane/snapshot.h"

namespace ina::dp {

bool Snapshot::make_route6_table(const std::string& name, uint32_t max_rules,
                                 std::string& error) {
    rte_lpm6_config cfg{};
    cfg.max_rules = max_rules;
    // One tbl8 group per 8 bits of every prefix beyond the first 24: enough for any rule set
    // of this size.
    cfg.number_tbl8s = max_rules * 14 + 64;
    lpm6 = rte_lpm6_create(name.c_str(), SOCKET_ID_ANY, &cfg);
    if (lpm6 == nullptr) {
        error = "rte_lpm6_create(" + name + "): " + rte_strerror(rte_errno);
        return false;
    }
    nexthops6.reserve(max_rules);
    return true;
}

bool Snapshot::add_route6(const net::Ipv6Prefix& prefix, const NextHop6& nh) {
    if (nexthops6.size() == nexthops6.capacity()) {
        return false;  // the next hops must not move: workers never see this table grow
    }
    const net::Ipv6Addr network = prefix.network();
    if (rte_lpm6_add(lpm6, network.bytes.data(), prefix.length,
                     static_cast<uint32_t>(nexthops6.size())) != 0) {
        return false;
    }
    nexthops6.push_back(nh);
    return true;
}

const NextHop6* Snapshot::route6(const uint8_t* dst6) const {
    uint32_t index = 0;
    if (lpm6 == nullptr || rte_lpm6_lookup(lpm6, dst6, &index) != 0) {
        return nullptr;
    }
    return &nexthops6[index];
}

}  // namespace ina::dp
