// SPDX-License-Identifier: Apache-2.0
// The switch process from EAL start to clean exit: ports, worker lcores, control plane, API,
// telemetry, pdump, signals (SIGHUP reloads; SIGINT/SIGTERM stop).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"

namespace ina::runtime {

struct RunOptions {
    uint64_t idle_exit_ms = 0;       // stop once every RX queue was idle this long (0: never)
    uint64_t idle_exit_min_rx = 0;   // idle_exit_ms counts only after this many RX frames
    std::string stats_file;          // write final metrics here on exit
    std::string file_prefix;         // EAL --file-prefix, appended to the config's EAL args
    std::vector<std::string> extra_eal_args;
};

// Runs until stopped. Returns the process exit code.
int run_switch(config::Config cfg, const RunOptions& options);

}  // namespace ina::runtime
