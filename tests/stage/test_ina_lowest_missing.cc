// SPDX-License-Identifier: Apache-2.0
// An aggregator and the senders' lowest missing result (flag 0x08, docs/protocol.md "Through
// aggregators"), through process_burst: a contribution 2 x the workers' window or more beyond its
// sender's lowest missing result is refused (dropped, counted as no_slot and as an overrun
// refusal, nothing forwarded); a partial carries the flag and the least of its contributors'
// latest lowest missing results (refreshed on a re-send), or the flag clear when one
// contribution did not state it.
#include <rte_ip.h>
#include <rte_udp.h>

#include <cstring>

#include "ina/chunk_table.h"
#include "ina/protocol.h"
#include "pipeline/feature_stages.h"
#include "pipeline/ina_input.h"
#include "pipeline/pipeline.h"
#include "stage_util.h"

namespace ina::test {
namespace {

constexpr uint32_t kJob = 7;
constexpr size_t kInaAt = 14 + 20 + 8;  // the INA header in a frame


class InaLowestMissing : public StageTest {
protected:
    void SetUp() override {
        StageTest::SetUp();
        build(kInaAggregatorYaml);
        table = std::make_unique<ina::ChunkTable>(
            ina_job_params(kJob, {1, 2}, ina::Role::aggregator));
        ASSERT_EQ(table->params().window, 8u);
        ASSERT_TRUE(pipeline::attach_ina_table(*ctx, *snap, kJob, 0, table.get()));
        ctx->pool = pool;
    }

    // A worker's contribution towards the root 10.0.2.2; with `lowest` >= 0 it states its
    // lowest missing result (UDP checksum 0: none).
    rte_mbuf* contribution(uint16_t bfr_id, uint32_t seq, int32_t value, int64_t lowest,
                           bool retransmit = false) {
        Bytes f = ina_contribution(kJob, bfr_id, seq, {value}, ip4("10.0.2.2"));
        uint8_t* h = f.data() + kInaAt;
        uint8_t flags = h[3];
        if (lowest >= 0) {
            flags |= proto::kFlagLowestMissing;
            proto::set_lowest_missing(h, static_cast<uint32_t>(lowest));
        }
        if (retransmit) flags |= proto::kFlagRetransmit;
        proto::set_flags(h, flags);
        f[14 + 20 + 6] = 0;
        f[14 + 20 + 7] = 0;
        return mbuf(f, kR0);
    }
    void run(std::vector<rte_mbuf*> in) {
        pipeline::process_burst(*ctx, *snap, in.data(), static_cast<uint16_t>(in.size()));
    }
    // The one partial sent to the parent since the last call: its header and first element.
    std::pair<proto::Header, int32_t> partial() {
        auto out = take_tx(kR1);
        EXPECT_EQ(out.size(), 1u);
        if (out.size() != 1) {
            free_mbufs(out);
            return {};
        }
        const Bytes f = bytes_of(out[0]);
        free_mbufs(out);
        const auto parsed = proto::parse(f.data() + kInaAt, f.size() - kInaAt);
        EXPECT_TRUE(parsed.packet.has_value()) << proto::to_string(parsed.error);
        if (!parsed.packet) return {};
        int32_t first = 0;
        std::memcpy(&first, parsed.packet->payload, sizeof first);
        return {parsed.packet->header, first};
    }

    std::unique_ptr<ina::ChunkTable> table;
};

TEST_F(InaLowestMissing, AggregatorRefusesAContributionTwoWindowsBeyondItsSendersLowestMissing) {
    // Window 8: seq 21 is 16 = 2 x 8 beyond worker 1's lowest missing result 5: refused.
    run({contribution(1, 21, 1, 5)});
    EXPECT_EQ(drops(dp::DropReason::ina_no_slot), 1u);
    EXPECT_EQ(ctx->counters.ina_absorbed, 0u);
    EXPECT_EQ(ctx->counters.ina_fallbacks, 0u) << "refused, not forwarded unaggregated";
    EXPECT_TRUE(take_tx(kR1).empty());
    EXPECT_EQ(table->counters().overrun_refusals, 1u);
    EXPECT_EQ(table->state_of(21), ina::ChunkTable::State::empty);
    // One less ahead is taken; so is the same chunk once the worker has caught up (lead 15).
    run({contribution(1, 20, 1, 5), contribution(1, 21, 1, 6, true)});
    EXPECT_EQ(ctx->counters.ina_absorbed, 2u);
    EXPECT_EQ(table->counters().overrun_refusals, 1u);
    EXPECT_EQ(table->state_of(20), ina::ChunkTable::State::aggregating);
    EXPECT_EQ(table->state_of(21), ina::ChunkTable::State::aggregating);
    // The same packet without the flag is an INA v1 sender: the window rules, no refusal.
    run({contribution(2, 40, 1, -1)});
    EXPECT_EQ(table->counters().overrun_refusals, 1u);
    EXPECT_EQ(drops(dp::DropReason::ina_no_slot), 1u);
}

TEST_F(InaLowestMissing, PartialCarriesTheLeastLatestLowestMissingOfItsContributors) {
    run({contribution(1, 5, 10, 3), contribution(2, 5, 20, 4)});
    auto [h, sum] = partial();
    EXPECT_EQ(sum, 30);
    EXPECT_EQ(h.flags & proto::kFlagLowestMissing, proto::kFlagLowestMissing);
    EXPECT_EQ(h.lowest_missing, 3u) << "the least of 3 and 4";
    EXPECT_EQ(h.flags & proto::kFlagRetransmit, 0);
    // Worker 1 lost the result and asks again, now stating 5 (it holds everything before 5,
    // lacks 5): the re-sent partial states the least of the latest, 4 (worker 2's).
    run({contribution(1, 5, 10, 5, true)});
    std::tie(h, sum) = partial();
    EXPECT_EQ(sum, 30);
    EXPECT_EQ(h.flags & proto::kFlagRetransmit, proto::kFlagRetransmit);
    EXPECT_EQ(h.flags & proto::kFlagLowestMissing, proto::kFlagLowestMissing);
    EXPECT_EQ(h.lowest_missing, 4u);
    // A claim beyond the chunk is cut to it: worker 2 states 9 with seq 6, worker 1 states 7.
    run({contribution(2, 6, 1, 9), contribution(1, 6, 2, 7)});
    std::tie(h, sum) = partial();
    EXPECT_EQ(h.lowest_missing, 6u) << "claims of 9 and 7 with seq 6 are each cut to 6";
}

TEST_F(InaLowestMissing, PartialCarriesTheFlagClearWhenAContributionDidNotStateIt) {
    run({contribution(1, 2, 10, 1), contribution(2, 2, 20, -1)});
    auto [h, sum] = partial();
    EXPECT_EQ(sum, 30);
    EXPECT_EQ(h.flags & proto::kFlagLowestMissing, 0);
    EXPECT_EQ(h.lowest_missing, 0u);
}

}  // namespace
}  // namespace ina::test
