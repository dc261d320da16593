// SPDX-License-Identifier: Apache-2.0
// The `rdma:` section into the snapshot: the RoceView (QPs by switch QPN, jobs) and the
// classifier binding of UDP 4791 to the feature. Slots and home lcores are the control plane's
// (control_roce writes them before the snapshot is published).
#pragma once

#include <string>

#include "config/config.h"
#include "dataplane/snapshot.h"

namespace ina::features::roce {

// compile::SnapshotExtension: adds nothing when the config has no rdma jobs.
bool compile_roce(const config::Config& cfg, dp::Snapshot& snap, std::string& error);

}  // namespace ina::features::roce
