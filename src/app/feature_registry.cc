// SPDX-License-Identifier: Apache-2.0
#include "app/feature_registry.h"

#include "compile/snapshot_build.h"
#include "config/config.h"
#include "control/api.h"
#include "control/control_plane.h"
#include "features/roce/compile_roce.h"
#include "features/roce/config_roce.h"
#include "features/roce/control_roce.h"
#include "features/roce/datapath_roce.h"
#include "features/roce_s2s/compile_s2s.h"
#include "features/roce_s2s/config_s2s.h"
#include "features/roce_s2s/control_s2s.h"
#include "features/roce_s2s/datapath_s2s.h"
#include "pipeline/feature_stages.h"

namespace ina::app {

bool register_features() {
    static const bool ok = [] {
        namespace roce = features::roce;
        namespace s2s = features::roce_s2s;
        // Order matters where features share UDP 4791 (dp::FeatureBinding::shared): the
        // endpoint binds first, as it passes whole flows (every destination not the switch).
        return config::register_section(roce::section_hooks()) &&
               compile::register_extension(roce::compile_roce) &&
               pipeline::register_feature(roce::kFeatureRoce, roce::stage()) &&
               control::register_feature_control(roce::roce_control().hooks()) &&
               control::register_routes(roce::install_routes) &&
               config::register_section(s2s::section_hooks()) &&
               compile::register_extension(s2s::compile_s2s) &&
               pipeline::register_feature(s2s::kFeatureS2s, s2s::stage()) &&
               control::register_feature_control(s2s::s2s_control().hooks());
    }();
    return ok;
}

}  // namespace ina::app
