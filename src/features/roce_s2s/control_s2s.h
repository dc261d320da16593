// SPDX-License-Identifier: Apache-2.0
// The server-to-server feature's control piece: one per-lcore JobState per `rdma_s2s` job (on
// its home lcore: job id mod workers), attached and detached through the control plane's
// command rings as configs change (a job whose config is unchanged keeps its state), its slot
// written into each snapshot's S2sView, and the metrics sampled at a scrape.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "control/control_plane.h"
#include "features/roce_s2s/config_s2s.h"
#include "features/roce_s2s/datapath_s2s.h"

namespace ina::features::roce_s2s {

class S2sControl {
public:
    // The hooks to register with control::register_feature_control (self = this).
    control::FeatureControl hooks();

private:
    struct Job {
        JobConfig cfg;
        uint16_t home = 0;
        uint16_t slot = dp::kNoStateSlot;
        std::shared_ptr<JobState> state;
    };
    // A job removed (or replaced) by a config change whose state the switch keeps attached
    // until its connections end (docs/rdma.md "Leaving a job"): it drains, then translates.
    struct Leaving {
        uint32_t id = 0;
        JobConfig cfg;  // as it was configured last
        uint16_t home = 0;
        uint16_t slot = dp::kNoStateSlot;
        std::shared_ptr<JobState> state;
    };
    struct Plan {
        std::map<uint32_t, Job> jobs;
        std::vector<Leaving> leaving;
        uint64_t leave_timeout_ns = 0;
        control::FeatureStateChanges states;  // slots taken, detaches, attaches
    };

    bool prepare(control::ControlPlane& cp, const config::Config& next, std::string& error);
    void commit(control::ControlPlane& cp);
    void abandon(control::ControlPlane& cp);
    void decorate(dp::Snapshot& snap);
    // Between config changes (ControlPlane::tick): detaches the leaving states that are over
    // (`left`), and gives a fresh state to every learning job whose home lcore asked for one (a
    // worker reconnected alone: the old state leaves). True when either happened, so the
    // snapshot naming the states as they are now is published.
    bool release(control::ControlPlane& cp, size_t command_room);
    // Part of release: the fresh states for rejoins (docs/rdma.md "A worker that reconnects
    // alone"), into `changes`.
    void attach_successors(control::ControlPlane& cp, size_t command_room,
                           control::FeatureStateChanges& changes);
    void stats(const control::ControlPlane& cp, metrics::Stats& out);

    std::mutex mu_;  // jobs_ and plan_ (taken inside the control plane's lock)
    std::map<uint32_t, Job> jobs_;
    std::vector<Leaving> leaving_;
    // The counters of leaving states already released, by job id (summed when an id left
    // more than once): a leaving job's `leaving_job` series outlive its state, so a scrape
    // after its connections ended still reads what it did (as the RDMA job totals do).
    std::map<uint32_t, JobCounters> released_;
    Plan plan_;
    // The running config's leave timeout (for states a rejoin makes leave between changes).
    uint64_t leave_timeout_ns_ = uint64_t{kDefaultLeaveTimeoutMs} * 1000000;
};

S2sControl& s2s_control();  // the one instance src/app registers

// The job's per-lcore parameters from its config (connections ranked; the first carries).
JobParams job_params(const JobConfig& j);

}  // namespace ina::features::roce_s2s
