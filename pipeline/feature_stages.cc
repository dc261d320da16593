// SPDX-License-Identifier: Apache-2.0
#include "pipeline/feature_stages.h"

#include <array>
#include <bit>

#include "pipeline/ina_input.h"

namespace ina::pipeline {

namespace {

std::array<FeatureStage, dp::kMaxFeatures> make_builtin() {
    std::array<FeatureStage, dp::kMaxFeatures> stages{};
    stages[dp::kFeatureIna] = ina_stage();
    return stages;
}

uint32_t unchecked_mask(const std::array<FeatureStage, dp::kMaxFeatures>& stages) {
    uint32_t mask = 0;
    for (size_t f = 0; f < stages.size(); ++f) {
        if (stages[f].input_unchecked != nullptr) {
            mask |= uint32_t{1} << f;
        }
    }
    return mask;
}

// Written only before workers start (register_feature); read by every lcore afterwards.
std::array<FeatureStage, dp::kMaxFeatures> g_stages = make_builtin();
uint32_t g_unchecked = unchecked_mask(g_stages);

void fire_tick(TimerWheel& wheel, Timer& timer, uint64_t now) {
    const auto& slot = *static_cast<const FeatureSlot*>(timer.arg);
    LcoreContext& ctx = *slot.owner;
    if (ctx.timer_snapshot != nullptr) {
        g_stages[slot.feature].tick(ctx, *ctx.timer_snapshot, slot.state, now);
    }
    wheel.arm(timer, now + slot.tick_tsc);
}

}  // namespace

const FeatureStage& feature_stage(uint8_t feature) {
    static const FeatureStage kNone{};
    return feature < g_stages.size() ? g_stages[feature] : kNone;
}

uint32_t unchecked_features() { return g_unchecked; }

void flush_stages(LcoreContext& ctx) {
    // A flush may not ask again (it sends what it holds), so the mask empties.
    while (ctx.flush_pending != 0) {
        const auto f = static_cast<size_t>(std::countr_zero(ctx.flush_pending));
        ctx.flush_pending = static_cast<uint8_t>(ctx.flush_pending & (ctx.flush_pending - 1));
        if (f < g_stages.size() && g_stages[f].flush != nullptr) {
            g_stages[f].flush(ctx);
        }
    }
}

bool register_feature(uint8_t feature, const FeatureStage& stage) {
    if (feature == dp::kFeatureNone || feature >= g_stages.size() || stage.max_emit == 0 ||
        stage.max_emit > EdgeBatches<FeatureEdge>::kCapacity) {
        return false;
    }
    g_stages[feature] = stage;
    g_unchecked = unchecked_mask(g_stages);
    return true;
}

void init_timers(LcoreContext& ctx, uint64_t now_tsc) {
    // 100 µs resolution: a 1 ms tick fires within 1.1 ms plus one service interval.
    ctx.timers.init(ctx.tsc_hz / 10000, now_tsc);
}

void service_timers(LcoreContext& ctx, const dp::Snapshot& snap) {
    ctx.timer_snapshot = &snap;
    ctx.timers.service(ctx.now_tsc);
    ctx.timer_snapshot = nullptr;  // only valid within this loop iteration
}

bool apply_command(LcoreContext& ctx, const dp::Command& c) {
    if (c.type == dp::CommandType::detach) {
        if (c.slot < ctx.feature_slots.size()) {
            FeatureSlot& s = ctx.feature_slots[c.slot];
            if (s.feature == c.feature && s.id == c.id && s.feature != dp::kFeatureNone) {
                ctx.timers.cancel(s.timer);
                if (g_stages[s.feature].on_detach != nullptr) {
                    g_stages[s.feature].on_detach(s.state);
                }
                s = FeatureSlot{};
                --ctx.n_attached;
            }
        }
        // Published after the state is out of its slot: the control plane may free it as soon
        // as it sees the count.
        ctx.detaches_done.store(ctx.detaches_done.load(std::memory_order_relaxed) + 1,
                                std::memory_order_release);
        return true;
    }
    if (c.type != dp::CommandType::attach || c.slot >= ctx.feature_slots.size() ||
        c.feature == dp::kFeatureNone || c.feature >= dp::kMaxFeatures ||
        ctx.feature_slots[c.slot].feature != dp::kFeatureNone) {
        return false;
    }
    FeatureSlot& s = ctx.feature_slots[c.slot];
    s.feature = c.feature;
    s.id = c.id;
    s.state = c.state;
    s.owner = &ctx;
    ++ctx.n_attached;
    const FeatureStage& stage = g_stages[c.feature];
    if (stage.on_attach != nullptr) {
        stage.on_attach(s.state);
    }
    if (stage.tick != nullptr) {
        s.tick_tsc = ctx.tsc_hz * stage.tick_us / 1'000'000;
        s.timer.fire = fire_tick;
        s.timer.arg = &s;
        ctx.timers.arm(s.timer, ctx.now_tsc + s.tick_tsc);
    }
    return true;
}

bool attach_ina_table(LcoreContext& ctx, dp::Snapshot& snap, uint32_t job_id, uint16_t slot,
                      void* table) {
    for (auto& job : snap.ina_jobs) {
        if (job.job_id == job_id) {
            job.state_slot = slot;
            return apply_command(
                ctx, dp::Command{dp::CommandType::attach, dp::kFeatureIna, slot, job_id, table});
        }
    }
    return false;
}

}  // namespace ina::pipeline
