// SPDX-License-Identifier: Apache-2.0
// What the packet path asks a published snapshot; compile/snapshot_build.cc makes snapshots.
#include "dataplane/snapshot.h"

#include <rte_hash.h>
#include <rte_lpm.h>

#include <cstring>

namespace ina::dp {

Snapshot::~Snapshot() {
    rte_lpm_free(lpm);
    rte_hash_free(neighbour_hash);
    rte_hash_free(fdb_hash);
}

const NextHop* Snapshot::route(uint32_t dst) const {
    uint32_t index = 0;
    if (rte_lpm_lookup(lpm, dst, &index) != 0) {
        return nullptr;
    }
    return &nexthops[index];
}

const Neighbour* Snapshot::neighbour(uint32_t ip) const {
    void* data = nullptr;
    if (rte_hash_lookup_data(neighbour_hash, &ip, &data) < 0) {
        return nullptr;
    }
    return &neighbours[reinterpret_cast<uintptr_t>(data)];
}

const FdbEntry* Snapshot::fdb(const rte_ether_addr& mac, uint16_t group) const {
    FdbKey key{};
    std::memcpy(key.mac, mac.addr_bytes, 6);
    key.group = group;
    void* data = nullptr;
    if (rte_hash_lookup_data(fdb_hash, &key, &data) < 0) {
        return nullptr;
    }
    return &fdb_entries[reinterpret_cast<uintptr_t>(data)];
}

}  // namespace ina::dp
