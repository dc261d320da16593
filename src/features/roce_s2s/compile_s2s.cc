// SPDX-License-Identifier: Apache-2.0
#include "features/roce_s2s/compile_s2s.h"

#include <algorithm>
#include <memory>

#include "roce/wire.h"

namespace ina::features::roce_s2s {

void append_job(S2sView& view, const JobConfig& j, bool leaving, uint16_t home, uint16_t slot) {
    const bool drain = j.drain || leaving;
    // A leaving static job is matched on its root too, for the DREQs (RDMA CM on QP1) that end
    // its connections; its connections' own packets are found by their keys first.
    if (j.learn || leaving) {
        LearnView lv{j.root, j.id, drain, j.replicate, home, slot};
        lv.leaving = leaving;
        view.learning.push_back(lv);
    }
    for (size_t i = 0; i < j.connections.size(); ++i) {
        const auto& c = j.connections[i];
        const auto conn = static_cast<uint16_t>(i);
        view.conns.push_back(ConnView{{c.ip, j.root, c.root_qpn}, j.id, conn, Direction::to_root,
                                      drain, j.replicate, leaving, home, slot});
        view.conns.push_back(ConnView{{j.root, c.ip, c.qpn}, j.id, conn, Direction::to_worker,
                                      drain, j.replicate, leaving, home, slot});
    }
}

void sort_view(S2sView& view) {
    // A leaving job's entry before a configured one's of the same key: the endpoints' PSNs on
    // that connection are translated, a new job cannot take it over until it ends.
    std::stable_sort(view.conns.begin(), view.conns.end(),
                     [](const ConnView& a, const ConnView& b) {
                         return a.key < b.key || (a.key == b.key && a.leaving && !b.leaving);
                     });
}

bool compile_s2s(const config::Config& cfg, dp::Snapshot& snap, std::string& error) {
    const S2sConfig* s2s = s2s_of(cfg);
    if (s2s == nullptr || s2s->jobs.empty()) {
        return true;
    }
    auto view = std::make_shared<S2sView>();
    for (const auto& j : s2s->jobs) {
        append_job(*view, j, false);
    }
    sort_view(*view);
    view->switches = s2s->switches;
    // Shared with the server-to-switch feature (routed RoCE to the switch's own addresses):
    // what is not a job connection's is passed on to it (dp::FeatureBinding::shared).
    if (!snap.features.bind({dp::kIpProtoUdp, kFeatureS2s,
                             static_cast<uint8_t>(dp::kScopeRouted | dp::kScopeBridged),
                             ina::roce::kUdpPort, true})) {
        error = "rdma_s2s: cannot bind UDP 4791 (the port is taken, or the feature table is "
                "full)";
        return false;
    }
    snap.feature_views[kFeatureS2s] = std::move(view);
    return true;
}

}  // namespace ina::features::roce_s2s
