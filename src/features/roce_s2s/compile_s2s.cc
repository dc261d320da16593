// SPDX-License-Identifier: Apache-2.0
#include "features/roce_s2s/compile_s2s.h"

#include <algorithm>
#include <memory>

#include "features/roce_s2s/config_s2s.h"
#include "features/roce_s2s/view_s2s.h"
#include "roce/wire.h"

namespace ina::features::roce_s2s {

bool compile_s2s(const config::Config& cfg, dp::Snapshot& snap, std::string& error) {
    const S2sConfig* s2s = s2s_of(cfg);
    if (s2s == nullptr || s2s->jobs.empty()) {
        return true;
    }
    auto view = std::make_shared<S2sView>();
    for (const auto& j : s2s->jobs) {
        if (j.learn) {
            view->learning.push_back(LearnView{j.root, j.id, j.drain, j.replicate});
        }
        for (size_t i = 0; i < j.connections.size(); ++i) {
            const auto& c = j.connections[i];
            const auto conn = static_cast<uint16_t>(i);
            view->conns.push_back(
                ConnView{{c.ip, j.root, c.root_qpn}, j.id, conn, Direction::to_root, j.drain,
                         j.replicate});
            view->conns.push_back(ConnView{{j.root, c.ip, c.qpn}, j.id, conn,
                                           Direction::to_worker, j.drain, j.replicate});
        }
    }
    std::sort(view->conns.begin(), view->conns.end(),
              [](const ConnView& a, const ConnView& b) { return a.key < b.key; });
    // One feature per (protocol, port): the server-to-switch feature binds UDP 4791 on the
    // routed path too, so the two modes do not run on one switch yet (docs/rdma.md).
    if (!snap.features.bind({dp::kIpProtoUdp, kFeatureS2s,
                             static_cast<uint8_t>(dp::kScopeRouted | dp::kScopeBridged),
                             ina::roce::kUdpPort})) {
        error = "rdma_s2s: cannot bind UDP 4791 (taken: server-to-switch `rdma` jobs and "
                "server-to-server `rdma_s2s` jobs cannot run on one switch yet)";
        return false;
    }
    snap.feature_views[kFeatureS2s] = std::move(view);
    return true;
}

}  // namespace ina::features::roce_s2s
