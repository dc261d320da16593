// SPDX-License-Identifier: Apache-2.0
#include "runtime/chunk_steering.h"

#include <rte_byteorder.h>
#include <rte_errno.h>
#include <rte_ethdev.h>
#include <rte_log.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "ina/protocol.h"
#include "runtime/dataplane.h"
#include "runtime/ports.h"

namespace ina::runtime {

namespace {

// The most lanes a rule set covers: senders steer over at most 64 source ports
// (ina/protocol.h), so more lanes could never all be named by a source port.
constexpr size_t kMaxSteerLanes = proto::kMaxSteerPorts;

}  // namespace

std::string_view steering_mode_name(SteeringMode mode) {
    switch (mode) {
    case SteeringMode::off: return "off";
    case SteeringMode::hand_off: return "hand-off";
    case SteeringMode::rte_flow: return "rte_flow";
    }
    return "hand-off";
}

SteerPlan plan_chunk_steering(config::ChunkSteering setting, uint16_t rx_queues,
                              uint16_t ina_port, const std::vector<LaneQueues>& lanes) {
    SteerPlan plan;
    if (setting == config::ChunkSteering::off) {
        plan.mode = SteeringMode::off;
        plan.reason = "chunk_steering: off in the config";
        return plan;
    }
    if (lanes.size() < 2) {
        plan.reason = "one worker lcore owns every chunk: nothing to steer";
        return plan;
    }
    if (rx_queues < 2) {
        plan.reason = "one RX queue: every chunk arrives on the lcore polling it";
        return plan;
    }
    if (!std::has_single_bit(lanes.size()) || lanes.size() > kMaxSteerLanes) {
        plan.reason = std::to_string(lanes.size()) +
                      " worker lcores: a source port's low bits name the owner only for a "
                      "power of two from 2 to 64";
        return plan;
    }
    const auto mask = static_cast<uint16_t>(lanes.size() - 1);
    for (size_t k = 0; k < lanes.size(); ++k) {
        const auto& q = lanes[k].queues;
        if (q.empty()) {
            plan.rules.clear();
            plan.reason = "lane " + std::to_string(k) + " (lcore " +
                          std::to_string(lanes[k].lcore) + ") polls no RX queue of this port";
            return plan;
        }
        plan.rules.push_back(SteerRule{static_cast<uint16_t>(k), ina_port,
                                       static_cast<uint16_t>(k), mask,
                                       *std::min_element(q.begin(), q.end())});
    }
    plan.mode = SteeringMode::rte_flow;
    return plan;
}

FlowSpec::FlowSpec(const SteerRule& rule) {
    attr.ingress = 1;
    udp_spec.hdr.src_port = rte_cpu_to_be_16(rule.src_value);
    udp_spec.hdr.dst_port = rte_cpu_to_be_16(rule.dst_port);
    udp_mask.hdr.src_port = rte_cpu_to_be_16(rule.src_mask);
    udp_mask.hdr.dst_port = rte_cpu_to_be_16(0xFFFF);
    queue.index = rule.queue;
    // ETH and IPV4 without a spec match any frame of that kind: an aggregator sees data for
    // the root's address, not its own, so no address is matched.
    pattern[0].type = RTE_FLOW_ITEM_TYPE_ETH;
    pattern[1].type = RTE_FLOW_ITEM_TYPE_IPV4;
    pattern[2].type = RTE_FLOW_ITEM_TYPE_UDP;
    pattern[2].spec = &udp_spec;
    pattern[2].mask = &udp_mask;
    pattern[3].type = RTE_FLOW_ITEM_TYPE_END;
    actions[0].type = RTE_FLOW_ACTION_TYPE_QUEUE;
    actions[0].conf = &queue;
    actions[1].type = RTE_FLOW_ACTION_TYPE_END;
}

namespace {

std::string flow_error_text(const char* call, const SteerRule& rule, int rc,
                            const rte_flow_error& e) {
    std::string text = std::string(call) + " refused the rule of lane " +
                       std::to_string(rule.lane) + " (queue " + std::to_string(rule.queue) + "): ";
    const std::string cause = std::strerror(rc < 0 ? -rc : rc);
    // A device without flow support answers ENOSYS with the errno's own text as the message.
    if (e.message == nullptr || cause == e.message) {
        return text + cause;
    }
    return text + e.message + " (" + cause + ")";
}

// Validates and creates `plan`'s rules on `port`; on the first refusal destroys what it
// created and returns the refusal. Returns "" when every rule is in place.
std::string create_rules(PortRuntime& port, const SteerPlan& plan) {
    std::vector<rte_flow*> made;
    for (const auto& rule : plan.rules) {
        const FlowSpec spec(rule);
        rte_flow_error e{};
        int rc = rte_flow_validate(port.port_id, &spec.attr, spec.pattern.data(),
                                   spec.actions.data(), &e);
        std::string why;
        if (rc != 0) {
            why = flow_error_text("rte_flow_validate", rule, rc, e);
        } else if (rte_flow* f = rte_flow_create(port.port_id, &spec.attr, spec.pattern.data(),
                                                 spec.actions.data(), &e);
                   f != nullptr) {
            made.push_back(f);
            continue;
        } else {
            why = flow_error_text("rte_flow_create", rule, rte_errno, e);
        }
        for (rte_flow* f : made) {
            rte_flow_error ignored{};
            rte_flow_destroy(port.port_id, f, &ignored);
        }
        return why;
    }
    port.chunk_steering_rules = static_cast<uint16_t>(made.size());
    return "";
}

}  // namespace

void install_chunk_steering(const config::Config& cfg, const Dataplane& dataplane,
                            std::vector<PortRuntime>& ports) {
    for (size_t i = 0; i < ports.size() && i < cfg.ports.size(); ++i) {
        PortRuntime& port = ports[i];
        std::vector<LaneQueues> lanes;
        for (const auto& w : dataplane.workers) {
            LaneQueues lq{w.lcore_id, {}};
            for (uint16_t r = 0; r < w.ctx->n_rx; ++r) {
                if (w.ctx->rx[r].port == port.port_id) {
                    lq.queues.push_back(w.ctx->rx[r].queue);
                }
            }
            lanes.push_back(std::move(lq));
        }
        SteerPlan plan = plan_chunk_steering(cfg.ports[i].chunk_steering, port.rx_queues,
                                             cfg.ina.udp_port, lanes);
        port.chunk_steering = plan.mode;
        port.chunk_steering_reason = plan.reason;
        port.chunk_steering_rules = 0;
        if (plan.mode != SteeringMode::rte_flow) {
            continue;
        }
        const std::string refused = create_rules(port, plan);
        if (!refused.empty()) {
            port.chunk_steering = SteeringMode::hand_off;
            port.chunk_steering_reason = port.driver + ": " + refused;
            RTE_LOG(WARNING, USER1,
                    "port '%s': no chunk steering by the NIC, chunks of other lcores are "
                    "handed over: %s\n",
                    port.name.c_str(), port.chunk_steering_reason.c_str());
            continue;
        }
        RTE_LOG(INFO, USER1, "port '%s': chunk steering: %u rte_flow rules on UDP %u\n",
                port.name.c_str(), unsigned{port.chunk_steering_rules},
                unsigned{cfg.ina.udp_port});
    }
}

void flush_chunk_steering(const PortRuntime& port) {
    if (port.chunk_steering_rules == 0) {
        return;
    }
    rte_flow_error e{};
    if (rte_flow_flush(port.port_id, &e) != 0) {
        RTE_LOG(WARNING, USER1, "port '%s': cannot remove the chunk steering rules: %s\n",
                port.name.c_str(), e.message != nullptr ? e.message : "no message");
    }
}

}  // namespace ina::runtime
