// SPDX-License-Identifier: Apache-2.0
// Per-lcore feature state: attach and detach by (feature, id) into the slot the snapshot's view
// names, lookup by index, detaches counted in detaches_done whatever they find, refused attaches
// that change nothing, and a feature's periodic work on the lcore's timer wheel.
#include <vector>

#include "ina/chunk_table.h"
#include "pipeline/feature_stages.h"
#include "pipeline/pipeline.h"
#include "stage_util.h"

namespace ina::test {
namespace {

using dp::Command;
using dp::CommandType;

constexpr uint8_t kTickFeature = dp::kMaxFeatures - 2;

std::vector<std::pair<void*, uint64_t>> g_ticks;  // (state, now) per tick

void count_tick(pipeline::LcoreContext&, const dp::Snapshot&, void* state, uint64_t now) {
    g_ticks.emplace_back(state, now);
}

class FeatureState : public StageTest {
protected:
    void SetUp() override {
        StageTest::SetUp();
        g_ticks.clear();
        ASSERT_TRUE(pipeline::register_feature(
            kTickFeature, pipeline::FeatureStage{"tick", nullptr, 1, count_tick, 1000}));
    }
    void TearDown() override {
        pipeline::register_feature(kTickFeature, pipeline::FeatureStage{"none", nullptr, 1});
        StageTest::TearDown();
    }
    // Services the wheel at `now` the way the worker loop does (with the loop's snapshot).
    size_t service(uint64_t now) {
        ctx->now_tsc = now;
        ctx->timer_snapshot = snap.get();
        const size_t fired = ctx->timers.service(now);
        ctx->timer_snapshot = nullptr;
        return fired;
    }
    bool apply(CommandType t, uint8_t feature, uint16_t slot, uint32_t id, void* state) {
        return pipeline::apply_command(*ctx, Command{t, feature, slot, id, state});
    }
    uint64_t detaches() const { return ctx->detaches_done.load(); }
    int cells[dp::kMaxFeatureStates] = {};
};

TEST_F(FeatureState, EverySlotIsFoundByIndexAndOnlyForItsOwner) {
    for (uint16_t s = 0; s < dp::kMaxFeatureStates; ++s) {
        ASSERT_TRUE(apply(CommandType::attach, dp::kFeatureIna, s, 1000u + s, &cells[s]));
    }
    EXPECT_EQ(ctx->n_attached, dp::kMaxFeatureStates);
    for (uint16_t s = 0; s < dp::kMaxFeatureStates; ++s) {
        EXPECT_EQ(ctx->feature_state(s, dp::kFeatureIna, 1000u + s), &cells[s]);
        EXPECT_EQ(ctx->feature_state(s, dp::kFeatureIna, 999u + s), nullptr) << "another id";
        EXPECT_EQ(ctx->feature_state(s, kTickFeature, 1000u + s), nullptr) << "another feature";
    }
    EXPECT_EQ(ctx->feature_state(dp::kMaxFeatureStates, dp::kFeatureIna, 1000), nullptr);
    EXPECT_EQ(ctx->feature_state(dp::kNoStateSlot, dp::kFeatureIna, 1000), nullptr);
}

TEST_F(FeatureState, RefusedAttachesChangeNothing) {
    ASSERT_TRUE(apply(CommandType::attach, dp::kFeatureIna, 3, 7, &cells[0]));
    EXPECT_FALSE(apply(CommandType::attach, dp::kFeatureIna, 3, 8, &cells[1])) << "slot in use";
    EXPECT_FALSE(apply(CommandType::attach, dp::kFeatureIna, dp::kMaxFeatureStates, 9, &cells[2]));
    EXPECT_FALSE(apply(CommandType::attach, dp::kFeatureNone, 4, 9, &cells[2]));
    EXPECT_FALSE(apply(CommandType::attach, dp::kMaxFeatures, 4, 9, &cells[2]));
    EXPECT_EQ(ctx->n_attached, 1);
    EXPECT_EQ(ctx->feature_state(3, dp::kFeatureIna, 7), &cells[0]);
    EXPECT_EQ(ctx->feature_state(4, dp::kFeatureIna, 9), nullptr);
    EXPECT_EQ(detaches(), 0u);
}

TEST_F(FeatureState, EveryDetachIsCountedAndEmptiesOnlyItsOwnSlot) {
    ASSERT_TRUE(apply(CommandType::attach, dp::kFeatureIna, 5, 7, &cells[0]));
    ASSERT_TRUE(apply(CommandType::attach, dp::kFeatureIna, 6, 8, &cells[1]));
    // A detach for a slot that holds another job (or nothing) leaves it, and still counts: the
    // control plane frees states in the order it sent the detaches.
    EXPECT_TRUE(apply(CommandType::detach, dp::kFeatureIna, 5, 8, nullptr));
    EXPECT_EQ(detaches(), 1u);
    EXPECT_EQ(ctx->feature_state(5, dp::kFeatureIna, 7), &cells[0]);
    EXPECT_TRUE(apply(CommandType::detach, dp::kFeatureIna, 5, 7, nullptr));
    EXPECT_EQ(detaches(), 2u);
    EXPECT_EQ(ctx->feature_state(5, dp::kFeatureIna, 7), nullptr);
    EXPECT_EQ(ctx->feature_state(6, dp::kFeatureIna, 8), &cells[1]);
    EXPECT_TRUE(apply(CommandType::detach, dp::kFeatureIna, 5, 7, nullptr)) << "twice";
    EXPECT_EQ(detaches(), 3u);
    EXPECT_EQ(ctx->n_attached, 1);
    // The slot is free for the next attach, which an older view (job 7) no longer finds.
    ASSERT_TRUE(apply(CommandType::attach, dp::kFeatureIna, 5, 9, &cells[2]));
    EXPECT_EQ(ctx->feature_state(5, dp::kFeatureIna, 7), nullptr);
    EXPECT_EQ(ctx->feature_state(5, dp::kFeatureIna, 9), &cells[2]);
}

TEST_F(FeatureState, AttachedStateGetsItsPeriodicWorkUntilDetached) {
    const uint64_t ms = ctx->tsc_hz / 1000;
    ctx->now_tsc = kStartTsc;
    ASSERT_TRUE(apply(CommandType::attach, kTickFeature, 2, 1, &cells[0]));
    ASSERT_TRUE(apply(CommandType::attach, kTickFeature, 9, 2, &cells[1]));
    EXPECT_EQ(ctx->timers.armed(), 2u);
    EXPECT_EQ(service(kStartTsc + ms / 2), 0u) << "not due yet";
    EXPECT_EQ(service(kStartTsc + ms + ms / 5), 2u);
    ASSERT_EQ(g_ticks.size(), 2u);
    EXPECT_TRUE((g_ticks[0].first == &cells[0] && g_ticks[1].first == &cells[1]) ||
                (g_ticks[0].first == &cells[1] && g_ticks[1].first == &cells[0]));
    EXPECT_EQ(ctx->timers.armed(), 2u) << "periodic: armed again";
    ASSERT_TRUE(apply(CommandType::detach, kTickFeature, 2, 1, nullptr));
    EXPECT_EQ(ctx->timers.armed(), 1u);
    g_ticks.clear();
    EXPECT_EQ(service(kStartTsc + 10 * ms), 1u);
    ASSERT_EQ(g_ticks.size(), 1u);
    EXPECT_EQ(g_ticks[0].first, &cells[1]) << "the detached state is never touched again";
}

TEST_F(FeatureState, InaJobFindsItsTableThroughTheSnapshotSlot) {
    build(std::string(kStageYaml) + R"(ina:
  jobs:
    - {job_id: 7, role: aggregator, bsl: 64, abm: "1-2", op: sum, elem_type: int32,
       max_elements: 16, window: 8, root: 10.0.2.2}
)");
    ctx->pool = pool;
    ChunkTable table(ina_job_params(7, {1, 2}, ina::Role::aggregator));
    ASSERT_TRUE(pipeline::attach_ina_table(*ctx, *snap, 7, 42, &table));
    EXPECT_EQ(snap->ina_jobs[0].state_slot, 42);
    rte_mbuf* m = mbuf(ina_contribution(7, 1, 3, {5}, ip4("10.0.2.2")), kR0);
    pipeline::process_burst(*ctx, *snap, &m, 1);
    EXPECT_EQ(ctx->counters.ina_absorbed, 1u);
    EXPECT_EQ(table.state_of(3), ina::ChunkTable::State::aggregating);
    // Detached: the view still names slot 42, the lookup finds nothing and routes the packet.
    ASSERT_TRUE(pipeline::apply_command(
        *ctx, Command{CommandType::detach, dp::kFeatureIna, 42, 7, nullptr}));
    m = mbuf(ina_contribution(7, 2, 3, {5}, ip4("10.0.2.2")), kR0);
    pipeline::process_burst(*ctx, *snap, &m, 1);
    EXPECT_EQ(ctx->counters.ina_unknown_job, 1u);
    EXPECT_EQ(ctx->counters.routed, 1u);
    free_mbufs(take_tx(kR1));
}

}  // namespace
}  // namespace ina::test
