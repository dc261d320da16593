// SPDX-License-Identifier: Apache-2.0
// The `rdma_s2s:` section into the snapshot: the S2sView (both directions of every job
// connection) and the classifier binding of UDP 4791, routed and bridged (the connections run
// between two servers, through the switch as a router or an L2 bridge). Slots and home lcores
// are the control plane's (control_s2s writes them before the snapshot is published).
#pragma once

#include <string>

#include "config/config.h"
#include "dataplane/snapshot.h"
#include "features/roce_s2s/config_s2s.h"
#include "features/roce_s2s/view_s2s.h"

namespace ina::features::roce_s2s {

// compile::SnapshotExtension: adds nothing when the config has no rdma_s2s jobs.
bool compile_s2s(const config::Config& cfg, dp::Snapshot& snap, std::string& error);

// Job j's entries (both directions of each connection; a LearnView when it learns) appended to
// `view`. A leaving job's (removed, its state kept: control_s2s) are marked leaving and
// draining and carry their home and slot (and a LearnView even when static: its root's CM
// DREQs end its connections); a configured job's get theirs from control_s2s.
void append_job(S2sView& view, const JobConfig& j, bool leaving, uint16_t home = 0,
                uint16_t slot = dp::kNoStateSlot);
// Sorts the connection entries for S2sView::find; of equal keys, the leaving job's first.
void sort_view(S2sView& view);

}  // namespace ina::features::roce_s2s
