// SPDX-License-Identifier: Apache-2.0
// inaswitch: command line. Everything else is configured by the YAML file.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "app/feature_registry.h"
#include "app/switch.h"
#include "config/config.h"

int main(int argc, char** argv) {
    if (!ina::app::register_features()) {
        std::fprintf(stderr, "inaswitch: a feature could not be registered\n");
        return 1;
    }
    CLI::App app{"inaswitch: a DPDK top-of-rack switch with in-network aggregation"};
    app.set_version_flag("--version", INASWITCH_VERSION);
    std::string config_path;
    std::string check_path;
    ina::runtime::RunOptions opt;
    auto* config_opt = app.add_option("-c,--config", config_path, "YAML configuration file")
                           ->check(CLI::ExistingFile);
    auto* check_opt = app.add_option("--check-config", check_path,
                                     "Validate a configuration file and exit (0 valid, 2 invalid)");
    config_opt->excludes(check_opt);
    app.add_option("--idle-exit-ms", opt.idle_exit_ms,
                   "Stop once every RX queue has been idle this many ms, after flushing TX "
                   "(pcap replay, tests)");
    app.add_option("--idle-exit-after-rx", opt.idle_exit_min_rx,
                   "With --idle-exit-ms: idleness counts only once the ports have received at "
                   "least this many frames in all (the replayed input's size)");
    app.add_option("--stats-file", opt.stats_file,
                   "On exit, write the final metrics (Prometheus text format) to this file");
    app.add_option("--file-prefix", opt.file_prefix,
                   "EAL --file-prefix (one per switch process on a host)");
    app.add_option("eal_args", opt.extra_eal_args, "Extra EAL arguments, after --");
    app.positionals_at_end();
    CLI11_PARSE(app, argc, argv);

    if (!check_path.empty()) {
        auto result = ina::config::load_file(check_path);
        if (!result.ok()) {
            std::cerr << result.error_text();
            return 2;
        }
        std::cout << check_path << ": valid (" << result.config->ports.size() << " ports, "
                  << result.config->routes.size() << " routes)\n";
        return 0;
    }
    if (config_path.empty()) {
        std::cerr << "inaswitch: give --config FILE or --check-config FILE (see --help)\n";
        return 2;
    }
    auto result = ina::config::load_file(config_path);
    if (!result.ok()) {
        std::cerr << result.error_text();
        return 2;
    }
    return ina::runtime::run_switch(std::move(*result.config), opt);
}
