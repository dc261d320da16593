// SPDX-License-Identifier: Apache-2.0
// DPDK telemetry commands (dpdk-telemetry.py): /inaswitch/stats, /inaswitch/ports,
// /inaswitch/drops.
#pragma once

#include "control/control_plane.h"

namespace ina::metrics {

// Registers the commands; they read `control` until the process exits.
void register_telemetry(const control::ControlPlane& control);

}  // namespace ina::metrics
