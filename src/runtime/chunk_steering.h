// SPDX-License-Identifier: Apache-2.0
// Chunk steering by the NIC (docs/operations.md "Chunk steering"): on a port with several RX
// queues, one rte_flow rule per lane sends the INA datagrams whose UDP source port's low bits
// name lane k to the RX queue lane k's lcore polls, so a contribution arrives where its chunk
// is owned instead of crossing cores on the hand-off ring.
//
// Why the source port's low bits name the owner: a worker steering over N ports sends chunk
// seq from base | (seq & (N - 1)) with base aligned to N (src/worker/client.h). The owner of
// seq is lane (seq & (W - 1)) % L (ina::chunk_place, W the job's window, L the lanes = worker
// lcores). With L a power of two dividing N and W, that is seq & (L - 1) = src & (L - 1). Where
// that does not hold (a worker with fewer ports than lanes, a window below the lane count,
// another sender) a datagram lands on some other lcore, which hands it over as without rules:
// the rules only ever save work, never decide correctness.
//
// The planning and the rte_flow pattern are pure (unit test `chunk_steering`); the DPDK calls
// are one thin function run at start, after the ports are started and the RX queues assigned,
// never on the packet path.
#pragma once

#include <rte_flow.h>

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"

namespace ina::runtime {

struct Dataplane;
struct PortRuntime;

enum class SteeringMode : uint8_t {
    off,       // chunk_steering: off in the port's config
    hand_off,  // no rules: a chunk arriving on another lcore is handed over (the reason says why)
    rte_flow,  // one rule per lane installed on the device
};
// "off", "hand-off", "rte_flow": the status API's and the metric's value.
std::string_view steering_mode_name(SteeringMode mode);

// IPv4/UDP to `dst_port` with (source port & src_mask) == src_value -> RX queue `queue`.
struct SteerRule {
    uint16_t lane = 0;
    uint16_t dst_port = 0;
    uint16_t src_value = 0;
    uint16_t src_mask = 0;
    uint16_t queue = 0;
    bool operator==(const SteerRule&) const = default;
};

// The RX queues of one port that lane k's lcore polls (lane k = worker k, the order of
// Dataplane::workers, which is the order ChunkTable lanes are dealt in).
struct LaneQueues {
    unsigned lcore = 0;
    std::vector<uint16_t> queues;
};

struct SteerPlan {
    SteeringMode mode = SteeringMode::hand_off;
    std::string reason;  // why not rte_flow; empty when rules are planned
    std::vector<SteerRule> rules;
};

// Which rules a port needs: rte_flow when the setting is auto, the port has more than one RX
// queue, the lane count is a power of two from 2 to 64 (a worker steers over at most 64 source
// ports) and every lane's lcore polls a queue of the port (the lowest, when it polls several:
// its other queues still take what RSS gives them). Otherwise hand-off (or off) with the reason.
SteerPlan plan_chunk_steering(config::ChunkSteering setting, uint16_t rx_queues,
                              uint16_t ina_port, const std::vector<LaneQueues>& lanes);

// One rule as rte_flow sees it: ingress attribute, pattern ETH / IPV4 / UDP / END (only the UDP
// item has a spec: destination port exact, source port under the lane mask), actions
// QUEUE / END. The items point into the object itself, so it is neither copied nor moved.
struct FlowSpec {
    rte_flow_attr attr{};
    rte_flow_item_udp udp_spec{};
    rte_flow_item_udp udp_mask{};
    rte_flow_action_queue queue{};
    std::array<rte_flow_item, 4> pattern{};
    std::array<rte_flow_action, 2> actions{};

    explicit FlowSpec(const SteerRule& rule);
    FlowSpec(const FlowSpec&) = delete;
    FlowSpec& operator=(const FlowSpec&) = delete;
};

// Plans and installs every port's rules (after start_ports and the RX queue assignment): each
// rule is validated, then created; the first refusal removes the port's rules created so far,
// logs the device's rte_flow_error message once for the port and leaves it on the hand-off
// path with that message as the reason. Fills PortRuntime's chunk_steering fields.
void install_chunk_steering(const config::Config& cfg, const Dataplane& dataplane,
                            std::vector<PortRuntime>& ports);

// Removes the rules of a port that has some (before the port stops: stop_ports calls it).
void flush_chunk_steering(const PortRuntime& port);

}  // namespace ina::runtime
