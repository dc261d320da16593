// SPDX-License-Identifier: Apache-2.0
#include "app/switch.h"

#include <rte_cycles.h>
#include <rte_eal.h>
#include <rte_ethdev.h>
#include <rte_lcore.h>
#include <rte_mbuf.h>
#include <rte_pdump.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <map>

#include "control/api.h"
#include "control/control_plane.h"
#include "metrics/metrics.h"
#include "metrics/telemetry.h"
#include "pipeline/mbuf_chain.h"
#include "runtime/dataplane.h"
#include "runtime/ports.h"

namespace ina::runtime {

namespace {

volatile std::sig_atomic_t g_stop = 0;
volatile std::sig_atomic_t g_reload = 0;

// Frames the ports have received so far, summed over the workers' counters (a racy read of
// plain per-lcore integers that only grow, as every scrape is).
uint64_t received_frames(const Dataplane& dataplane) {
    uint64_t n = 0;
    for (const auto& w : dataplane.workers) {
        for (const auto& port : w.ctx->counters.ports) {
            n += port.rx_packets;
        }
    }
    return n;
}

void on_signal(int sig) {
    if (sig == SIGHUP) {
        g_reload = 1;
    } else {
        g_stop = 1;
    }
}

void install_signals() {
    struct sigaction sa {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGHUP, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
    sigaction(SIGTERM, &sa, nullptr);
}

int fail(const std::string& message) {
    std::fprintf(stderr, "inaswitch: %s\n", message.c_str());
    return 1;
}

bool init_eal(const config::Config& cfg, const RunOptions& opt, std::string& error) {
    std::vector<std::string> args{"inaswitch"};
    args.insert(args.end(), cfg.eal_args.begin(), cfg.eal_args.end());
    if (!opt.file_prefix.empty()) {
        args.push_back("--file-prefix=" + opt.file_prefix);
    }
    args.insert(args.end(), opt.extra_eal_args.begin(), opt.extra_eal_args.end());
    std::vector<char*> argv;
    for (auto& a : args) {
        argv.push_back(a.data());
    }
    argv.push_back(nullptr);
    if (rte_eal_init(static_cast<int>(args.size()), argv.data()) < 0) {
        error = "EAL initialisation failed (see the EAL messages above); EAL args:";
        for (size_t i = 1; i < args.size(); ++i) {
            error += " " + args[i];
        }
        return false;
    }
    if (!pipeline::register_mbuf_flags()) {
        error = "cannot register the mbuf flag for originated packets";
        return false;
    }
    return true;
}

bool choose_workers(const config::Config& cfg, std::vector<unsigned>& out, std::string& error) {
    if (!cfg.lcores.empty()) {
        for (const auto& l : cfg.lcores) {
            if (!rte_lcore_is_enabled(l.lcore) || l.lcore == rte_get_main_lcore()) {
                error = "lcore " + std::to_string(l.lcore) +
                        " is not an EAL worker lcore (main lcore is " +
                        std::to_string(rte_get_main_lcore()) +
                        "); list it in the EAL -l/--lcores argument";
                return false;
            }
            out.push_back(l.lcore);
        }
        return true;
    }
    for (unsigned lcore = rte_get_next_lcore(~0u, 1, 0); lcore < RTE_MAX_LCORE;
         lcore = rte_get_next_lcore(lcore, 1, 0)) {
        out.push_back(lcore);
    }
    if (out.empty()) {
        error = "no worker lcore: the EAL main lcore runs the control plane, so give at least two "
                "lcores (e.g. eal args [-l, 0-1])";
        return false;
    }
    return true;
}

// Assigns RX queues to workers: as configured, or round-robin over every (port, queue).
bool assign_rx(const config::Config& cfg, const std::vector<PortRuntime>& ports,
               Dataplane& dataplane, std::string& error) {
    std::map<std::string, uint16_t> port_ids;
    for (const auto& p : ports) {
        port_ids[p.name] = p.port_id;
    }
    bool fits = true;
    auto add = [&](Worker& w, uint16_t port, uint16_t queue) {
        auto& ctx = *w.ctx;
        if (ctx.n_rx < pipeline::kMaxRxQueuesPerLcore) {
            ctx.rx[ctx.n_rx++] = {port, queue};
        } else {
            fits = false;
        }
    };
    if (!cfg.lcores.empty()) {
        for (size_t i = 0; i < cfg.lcores.size(); ++i) {
            for (const auto& q : cfg.lcores[i].rx) {
                add(dataplane.workers[i], port_ids[q.port], q.queue);
            }
        }
    } else {
        size_t next = 0;
        for (const auto& p : ports) {
            for (uint16_t q = 0; q < p.rx_queues; ++q) {
                add(dataplane.workers[next++ % dataplane.workers.size()], p.port_id, q);
            }
        }
    }
    for (auto& w : dataplane.workers) {
        for (const auto& p : ports) {
            w.ctx->tx_enabled[p.port_id] = true;
        }
    }
    if (!fits) {
        error = "more than " + std::to_string(pipeline::kMaxRxQueuesPerLcore) +
                " RX queues per worker lcore; add lcores or list them under 'lcores'";
    }
    return fits;
}

}  // namespace

int run_switch(config::Config cfg, const RunOptions& opt) {
    std::string error;
    if (!init_eal(cfg, opt, error)) {
        return fail(error);
    }
    if (rte_pdump_init() != 0) {
        std::fprintf(stderr, "inaswitch: pdump unavailable (dpdk-dumpcap will not attach)\n");
    }
    std::vector<unsigned> worker_lcores;
    if (!choose_workers(cfg, worker_lcores, error)) {
        return fail(error);
    }
    int rc = 0;
    {
        Dataplane dataplane;
        dataplane.pool = rte_pktmbuf_pool_create("mbufs", cfg.mempool.mbufs, cfg.mempool.cache_size,
                                                 0, cfg.mempool.data_room,
                                                 static_cast<int>(rte_socket_id()));
        if (dataplane.pool == nullptr) {
            return fail("cannot create the mbuf pool (" + std::to_string(cfg.mempool.mbufs) +
                        " mbufs of " + std::to_string(cfg.mempool.data_room) +
                        " B): raise EAL -m or hugepages, or lower mempool.mbufs");
        }
        if (!dataplane.init(worker_lcores, cfg.l2.max_fdb_entries, error)) {
            return fail(error);
        }
        std::vector<PortRuntime> ports;
        if (!start_ports(cfg, dataplane.pool, static_cast<uint16_t>(worker_lcores.size()), ports,
                         error)) {
            stop_ports(ports);
            return fail(error);
        }
        if (!assign_rx(cfg, ports, dataplane, error)) {
            stop_ports(ports);
            return fail(error);
        }
        // After the RX queues are assigned (a rule names the queue its lane's lcore polls) and
        // the ports started (where every PMD accepts rules), before any worker runs.
        install_chunk_steering(cfg, dataplane, ports);
        const std::string listen = cfg.control.listen;
        const config::ControlConfig api_settings = cfg.control;
        control::ControlPlane control(dataplane, ports, std::move(cfg));
        if (!control.start(error)) {
            stop_ports(ports);
            return fail("cannot build the forwarding tables: " + error);
        }
        const metrics::StatsSource stats_source = [&control] { return control.stats(); };
        metrics::register_telemetry(stats_source);
        control::ApiServer api(control);
        if (!listen.empty() && !api.start(api_settings, error)) {
            stop_ports(ports);
            return fail(error);
        }
        install_signals();
        for (const auto& w : dataplane.workers) {
            rte_eal_remote_launch(worker_main, &dataplane, w.lcore_id);
        }
        std::fprintf(stderr, "inaswitch: running: %zu port(s), %zu worker lcore(s)%s%s\n",
                     ports.size(), dataplane.workers.size(),
                     listen.empty() ? "" : ", control API on ", listen.c_str());

        while (g_stop == 0) {
            control.tick();
            if (g_reload != 0) {
                g_reload = 0;
                const auto r = control.reload_file();
                if (r.ok) {
                    std::fprintf(stderr, "inaswitch: reload applied, generation %lu\n",
                                 static_cast<unsigned long>(r.generation));
                } else {
                    std::fprintf(stderr, "inaswitch: reload refused; running config unchanged:\n");
                    for (const auto& e : r.errors) {
                        std::fprintf(stderr, "  %s\n", e.c_str());
                    }
                }
            }
            if (opt.idle_exit_ms != 0 && control.idle_for(opt.idle_exit_ms) &&
                received_frames(dataplane) >= opt.idle_exit_min_rx) {
                break;
            }
            rte_delay_us_sleep(1000);
        }
        dataplane.stop.store(true, std::memory_order_relaxed);
        rte_eal_mp_wait_lcore();
        api.stop();
        if (!opt.stats_file.empty()) {
            std::ofstream out(opt.stats_file);
            out << metrics::render(control.stats());
            if (!out) {
                rc = fail("cannot write stats file " + opt.stats_file);
            }
        }
        stop_ports(ports);
    }
    rte_pdump_uninit();
    rte_eal_cleanup();
    return rc;
}

}  // namespace ina::runtime
