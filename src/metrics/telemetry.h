// SPDX-License-Identifier: Apache-2.0
// DPDK telemetry commands (dpdk-telemetry.py): /inaswitch/stats, /inaswitch/ports,
// /inaswitch/drops.
#pragma once

#include <functional>

#include "metrics/stats.h"

namespace ina::metrics {

// Copies out a fresh Stats; called from the DPDK telemetry thread.
using StatsSource = std::function<Stats()>;

// Registers the commands; they call `source` until the process exits, so it must outlive them.
void register_telemetry(const StatsSource& source);

}  // namespace ina::metrics
