// SPDX-License-Identifier: Apache-2.0
// What the packet path asks a published snapshot; compile/snapshot_build.cc makes snapshots.
#include "dataplane/snapshot.h"

#include <rte_lpm.h>
#include <rte_lpm6.h>

namespace ina::dp {

// The forwarding tables are the control plane's: a snapshot only points at them.
Snapshot::~Snapshot() {
    rte_lpm_free(lpm);
    rte_lpm6_free(lpm6);
}

const NextHop* Snapshot::route(uint32_t dst) const {
    uint32_t index = 0;
    if (rte_lpm_lookup(lpm, dst, &index) != 0) {
        return nullptr;
    }
    return &nexthops[index];
}

}  // namespace ina::dp
