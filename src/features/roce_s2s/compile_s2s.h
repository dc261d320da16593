// SPDX-License-Identifier: Apache-2.0
// The `rdma_s2s:` section into the snapshot: the S2sView (both directions of every job
// connection) and the classifier binding of UDP 4791, routed and bridged (the connections run
// between two servers, through the switch as a router or an L2 bridge). Slots and home lcores
// are the control plane's (control_s2s writes them before the snapshot is published).
#pragma once

#include <string>

#include "config/config.h"
#include "dataplane/snapshot.h"

namespace ina::features::roce_s2s {

// compile::SnapshotExtension: adds nothing when the config has no rdma_s2s jobs.
bool compile_s2s(const config::Config& cfg, dp::Snapshot& snap, std::string& error);

}  // namespace ina::features::roce_s2s
