// SPDX-License-Identifier: Apache-2.0
// Chunk steering's pure half (runtime/chunk_steering.h): which rules a port gets and why not,
// the rte_flow pattern of a rule, and that a worker's source port lands each chunk on the lane
// ina::chunk_place makes its owner. No EAL, no device.
#include <gtest/gtest.h>

#include <rte_byteorder.h>

#include "ina/chunk_table.h"
#include "runtime/chunk_steering.h"
#include "ina/protocol.h"

namespace {

using ina::config::ChunkSteering;
using ina::runtime::FlowSpec;
using ina::runtime::LaneQueues;
using ina::runtime::plan_chunk_steering;
using ina::runtime::SteeringMode;
using ina::runtime::SteerRule;

constexpr uint16_t kInaPort = 9470;

// Lane k polls queue k of the port (the round-robin assignment of one port over L lcores).
std::vector<LaneQueues> one_queue_each(size_t lanes) {
    std::vector<LaneQueues> v;
    for (size_t k = 0; k < lanes; ++k) {
        v.push_back({static_cast<unsigned>(k + 1), {static_cast<uint16_t>(k)}});
    }
    return v;
}

TEST(ChunkSteeringPlan, OneRulePerLaneOnItsQueue) {
    const auto plan = plan_chunk_steering(ChunkSteering::automatic, 4, kInaPort, one_queue_each(4));
    ASSERT_EQ(plan.mode, SteeringMode::rte_flow) << plan.reason;
    EXPECT_EQ(plan.reason, "");
    const std::vector<SteerRule> want = {
        {0, kInaPort, 0, 3, 0}, {1, kInaPort, 1, 3, 1}, {2, kInaPort, 2, 3, 2}, {3, kInaPort, 3, 3, 3}};
    EXPECT_EQ(plan.rules, want);
}

TEST(ChunkSteeringPlan, QueuesFromTheAssignmentNotTheLaneNumber) {
    // Lane 0 polls queue 1, lane 1 queues 3 and 0 (the lowest takes its chunks).
    const std::vector<LaneQueues> lanes = {{5, {1}}, {6, {3, 0}}};
    const auto plan = plan_chunk_steering(ChunkSteering::automatic, 4, 4791, lanes);
    ASSERT_EQ(plan.mode, SteeringMode::rte_flow) << plan.reason;
    const std::vector<SteerRule> want = {{0, 4791, 0, 1, 1}, {1, 4791, 1, 1, 0}};
    EXPECT_EQ(plan.rules, want);
}

TEST(ChunkSteeringPlan, HandOffWithTheReason) {
    struct Case {
        ChunkSteering setting;
        uint16_t rx_queues;
        std::vector<LaneQueues> lanes;
        SteeringMode mode;
        const char* reason;
    };
    const std::vector<Case> cases = {
        {ChunkSteering::off, 4, one_queue_each(4), SteeringMode::off, "chunk_steering: off"},
        {ChunkSteering::automatic, 2, one_queue_each(1), SteeringMode::hand_off,
         "one worker lcore"},
        {ChunkSteering::automatic, 1, {{1, {0}}, {2, {}}}, SteeringMode::hand_off,
         "one RX queue"},
        {ChunkSteering::automatic, 3, one_queue_each(3), SteeringMode::hand_off,
         "3 worker lcores: a source port's low bits name the owner only for a power of two"},
        {ChunkSteering::automatic, 64, one_queue_each(128), SteeringMode::hand_off,
         "128 worker lcores"},
        {ChunkSteering::automatic, 2, {{7, {0, 1}}, {9, {}}}, SteeringMode::hand_off,
         "lane 1 (lcore 9) polls no RX queue of this port"},
    };
    for (const auto& c : cases) {
        const auto plan = plan_chunk_steering(c.setting, c.rx_queues, kInaPort, c.lanes);
        EXPECT_EQ(plan.mode, c.mode) << c.reason;
        EXPECT_NE(plan.reason.find(c.reason), std::string::npos) << plan.reason;
        EXPECT_TRUE(plan.rules.empty()) << c.reason;
    }
}

TEST(ChunkSteeringPlan, ModeNames) {
    EXPECT_EQ(ina::runtime::steering_mode_name(SteeringMode::off), "off");
    EXPECT_EQ(ina::runtime::steering_mode_name(SteeringMode::hand_off), "hand-off");
    EXPECT_EQ(ina::runtime::steering_mode_name(SteeringMode::rte_flow), "rte_flow");
}

TEST(ChunkSteeringFlow, PatternMasksAndQueue) {
    const FlowSpec f(SteerRule{2, kInaPort, 2, 3, 5});
    EXPECT_EQ(f.attr.ingress, 1u);
    EXPECT_EQ(f.attr.egress, 0u);
    EXPECT_EQ(f.attr.transfer, 0u);
    EXPECT_EQ(f.attr.group, 0u);
    ASSERT_EQ(f.pattern[0].type, RTE_FLOW_ITEM_TYPE_ETH);
    EXPECT_EQ(f.pattern[0].spec, nullptr);
    EXPECT_EQ(f.pattern[0].mask, nullptr);
    ASSERT_EQ(f.pattern[1].type, RTE_FLOW_ITEM_TYPE_IPV4);
    EXPECT_EQ(f.pattern[1].spec, nullptr);
    ASSERT_EQ(f.pattern[2].type, RTE_FLOW_ITEM_TYPE_UDP);
    EXPECT_EQ(f.pattern[2].last, nullptr);
    const auto* spec = static_cast<const rte_flow_item_udp*>(f.pattern[2].spec);
    const auto* mask = static_cast<const rte_flow_item_udp*>(f.pattern[2].mask);
    ASSERT_EQ(spec, &f.udp_spec);
    ASSERT_EQ(mask, &f.udp_mask);
    EXPECT_EQ(rte_be_to_cpu_16(spec->hdr.dst_port), kInaPort);
    EXPECT_EQ(rte_be_to_cpu_16(mask->hdr.dst_port), 0xFFFF);
    EXPECT_EQ(rte_be_to_cpu_16(spec->hdr.src_port), 2);
    EXPECT_EQ(rte_be_to_cpu_16(mask->hdr.src_port), 3);
    // Length and checksum are not matched.
    EXPECT_EQ(mask->hdr.dgram_len, 0);
    EXPECT_EQ(mask->hdr.dgram_cksum, 0);
    EXPECT_EQ(f.pattern[3].type, RTE_FLOW_ITEM_TYPE_END);
    ASSERT_EQ(f.actions[0].type, RTE_FLOW_ACTION_TYPE_QUEUE);
    EXPECT_EQ(static_cast<const rte_flow_action_queue*>(f.actions[0].conf)->index, 5);
    EXPECT_EQ(f.actions[1].type, RTE_FLOW_ACTION_TYPE_END);
}

// The whole scheme: a worker steering over N ports sends chunk seq from
// base | (seq & (N - 1)); the rule whose masked source port matches sends it to a queue; that
// queue's lane is the one ina::chunk_place names as the owner, for every lane count L (a power
// of two) dividing N, window W >= L and first seq.
TEST(ChunkSteeringFlow, SourcePortRuleMatchesTheChunkOwner) {
    for (uint16_t lanes : {2, 4, 8}) {
        // Lane k polls queue lanes - 1 - k: the rule, not the numbering, must pick it.
        std::vector<LaneQueues> lq;
        for (uint16_t k = 0; k < lanes; ++k) {
            lq.push_back({k, {static_cast<uint16_t>(lanes - 1 - k)}});
        }
        const auto plan = plan_chunk_steering(ChunkSteering::automatic, lanes, kInaPort, lq);
        ASSERT_EQ(plan.mode, SteeringMode::rte_flow);
        for (uint32_t n = lanes; n <= ina::proto::kMaxSteerPorts; n *= 2) {
            for (uint32_t window : {uint32_t{lanes}, 64u, 256u}) {
                for (uint32_t seq = 0xFFFFFF00u; seq != 0x200u; ++seq) {  // across the wrap
                    const uint16_t src = ina::proto::steer_source_port(
                        ina::proto::kDefaultSteerBasePort, n, seq);
                    int hits = 0;
                    uint16_t queue = 0;
                    for (const auto& r : plan.rules) {
                        if ((src & r.src_mask) == r.src_value) {
                            ++hits;
                            queue = r.queue;
                        }
                    }
                    ASSERT_EQ(hits, 1) << "seq " << seq;
                    const uint16_t owner = ina::chunk_place(seq, window, lanes).lane;
                    ASSERT_EQ(queue, lq[owner].queues[0])
                        << "lanes " << lanes << " ports " << n << " window " << window << " seq "
                        << seq;
                }
            }
        }
    }
}

}  // namespace
