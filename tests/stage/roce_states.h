// SPDX-License-Identifier: Apache-2.0
// The RoCE server-to-switch stage tests' states, attached as the control plane attaches them:
// a job and its two QPs (ranks 1 and 2, switch QPNs in the snapshot's RoceView order) in
// feature slots 10, 11 and 12 of the lcore, the slots named in the snapshot's view, and
// detached again in reverse order.
#pragma once

#include <gtest/gtest.h>

#include "features/roce/datapath_roce.h"
#include "pipeline/feature_stages.h"

namespace ina::test {

inline void attach_roce_state(pipeline::LcoreContext& ctx, features::roce::StateTag* state,
                              uint16_t slot, uint32_t id) {
    ASSERT_TRUE(pipeline::apply_command(
        ctx, dp::Command{dp::CommandType::attach, features::roce::kFeatureRoce, slot, id, state}));
}

inline void attach_roce_job(pipeline::LcoreContext& ctx, dp::Snapshot& snap,
                            features::roce::JobState& job, features::roce::QpState& q1,
                            features::roce::QpState& q2) {
    namespace fr = features::roce;
    attach_roce_state(ctx, &job, 10, fr::job_state_id(job.params.job_id));
    attach_roce_state(ctx, &q1, 11, fr::qp_state_id(q1.params.switch_qpn));
    attach_roce_state(ctx, &q2, 12, fr::qp_state_id(q2.params.switch_qpn));
    auto* view = static_cast<fr::RoceView*>(snap.feature_views[fr::kFeatureRoce].get());
    ASSERT_NE(view, nullptr);
    ASSERT_EQ(view->qps.size(), 2u);
    view->qps[0].slot = 11;
    view->qps[1].slot = 12;
    view->jobs[0].slot = 10;
}

inline void detach_roce_job(pipeline::LcoreContext& ctx) {
    for (uint16_t s : {12, 11, 10}) {
        pipeline::apply_command(ctx, dp::Command{dp::CommandType::detach,
                                                 features::roce::kFeatureRoce, s,
                                                 ctx.feature_slots[s].id, nullptr});
    }
}

}  // namespace ina::test
