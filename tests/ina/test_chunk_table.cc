// SPDX-License-Identifier: Apache-2.0
// The chunk table, packet by packet: verdicts, results, release, stale, fallback stickiness,
// expiry, wrap-around and floating point semantics. The randomised schedules are in
// test_chunk_sim.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

#include "chunk_test_util.h"
#include "reduce/convert.h"

namespace ina::test {
namespace {

using reduce::ElemType;
using V = Verdict;

// Feeds worker w's int32 contribution for seq (n elements).
Verdict send(ChunkTable& t, const wire::BitString& p, unsigned w, uint32_t seq, uint32_t n = 16,
             uint64_t now = 0, uint8_t flags = 0) {
    const std::vector<uint8_t> payload = int32_payload(w, seq, n);
    return t.on_data(p.data(), seq, n, payload.data(), flags, now);
}
Verdict send(ChunkTable& t, unsigned w, uint32_t seq, uint32_t n = 16, uint64_t now = 0,
             uint8_t flags = 0) {
    return send(t, ids({static_cast<wire::BfrId>(w)}), w, seq, n, now, flags);
}

std::vector<uint8_t> result(const ChunkTable& t, uint32_t seq, uint32_t n = 16) {
    std::vector<uint8_t> out(n * 4, 0xEE);
    EXPECT_EQ(t.store_result(seq, out.data()), n) << "seq " << seq;
    return out;
}

// RFC 1982 serial arithmetic on seq.
static_assert(seq_le(0xFFFFFFFFu, 0u) && !seq_le(0u, 0xFFFFFFFFu));
static_assert(seq_le(5u, 5u) && seq_le(4u, 5u) && !seq_le(6u, 5u));
static_assert(seq_diff(2u, 0xFFFFFFFEu) == 4 && seq_diff(0xFFFFFFFEu, 2u) == -4);
static_assert(seq_diff(0x80000000u, 0u) == INT32_MIN);

TEST(ChunkTableParams, Validate) {
    EXPECT_EQ(validate(make_job(Role::root, 8)), "");
    JobParams p = make_job(Role::root, 8);
    p.window = 0;
    EXPECT_NE(validate(p), "");
    p.window = 6;  // not a power of two: seq mod W would break at the 2^32 wrap
    EXPECT_NE(validate(p), "");
    p.window = kMaxWindow * 2;
    EXPECT_NE(validate(p), "");
    p = make_job(Role::root, 8);
    p.max_elems = 0;
    EXPECT_NE(validate(p), "");
    p.max_elems = 65536;
    EXPECT_NE(validate(p), "");
    p = make_job(Role::root, 8);
    p.abm = ids({});
    EXPECT_NE(validate(p), "");
    EXPECT_THROW(ChunkTable{p}, std::invalid_argument);
    // A root cannot take a workers' window above its own (no fallback: it could deadlock); an
    // aggregator can.
    p = make_job(Role::root, 8);
    p.worker_window = 16;
    EXPECT_NE(validate(p), "");
    p.role = Role::aggregator;
    EXPECT_EQ(validate(p), "");
    p.lanes = 3;
    p.lane = 3;
    EXPECT_NE(validate(p), "");
    p.lane = 2;
    EXPECT_EQ(validate(p), "");
    ChunkTable t(make_job(Role::aggregator, 8));
    EXPECT_EQ(t.capacity(), 16u);
    EXPECT_EQ(t.slots_in_use(), 0u);
}

TEST(ChunkTableParams, HeaderMismatch) {
    const JobParams p = make_job(Role::aggregator, 8);
    proto::Header h;
    h.type = proto::PacketType::data;
    h.job_id = p.job_id;
    h.op = static_cast<uint8_t>(p.op);
    h.elem_type = static_cast<uint8_t>(p.elem_type);
    h.bsl_code = 1;  // 64 bits
    h.set_id = 0;
    EXPECT_EQ(header_mismatch(h, p), 0);
    proto::Header bad = h;
    bad.job_id = 8;
    bad.op = 1;
    bad.elem_type = 1;
    bad.bsl_code = 2;
    bad.set_id = 1;
    bad.type = proto::PacketType::result;
    EXPECT_EQ(header_mismatch(bad, p), mismatch::job | mismatch::op | mismatch::elem_type |
                                           mismatch::bsl | mismatch::set_id | mismatch::type);
    bad = h;
    bad.bsl_code = 3;
    EXPECT_EQ(header_mismatch(bad, p), mismatch::bsl);
    EXPECT_EQ(mismatch_name(mismatch::set_id), "set_id");
    EXPECT_EQ(mismatch_name(0x80), "unknown");
}

// The packet path's inline test agrees with header_mismatch on every field value that matters
// (each field at its job's value, one off, and the BSL code points 0..15, valid or not), for a
// plain and a deterministic job (which also takes int64 partials).
TEST(ChunkTableParams, HeaderMatchesIsHeaderMismatchZero) {
    for (const bool deterministic : {false, true}) {
        JobParams p = make_job(Role::aggregator, 8);
        if (deterministic) {
            p.elem_type = ElemType::fp32;
            p.deterministic = true;
            p.fraction_bits = 20;
        }
        const ChunkTable t(p);
        size_t matched = 0;
        for (const auto type : {proto::PacketType::data, proto::PacketType::result})
            for (const uint32_t job : {p.job_id, p.job_id + 1})
                for (uint8_t op = 0; op < 4; ++op)
                    for (uint8_t et = 0; et < 6; ++et)
                        for (uint8_t bsl = 0; bsl < 16; ++bsl)
                            for (const uint8_t set : {uint8_t{0}, uint8_t{1}}) {
                                proto::Header h;
                                h.type = type;
                                h.job_id = job;
                                h.op = op;
                                h.elem_type = et;
                                h.bsl_code = bsl;
                                h.set_id = set;
                                const bool expect = header_mismatch(h, p) == 0;
                                ASSERT_EQ(t.header_matches(h), expect)
                                    << "type " << int(type) << " job " << job << " op "
                                    << int(op) << " elem " << int(et) << " bsl " << int(bsl)
                                    << " set " << int(set);
                                matched += expect;
                            }
        EXPECT_EQ(matched, deterministic ? 2u : 1u);
    }
}

TEST(ChunkTableParams, VerdictNames) {
    for (size_t i = 0; i < kNumVerdicts; ++i) {
        EXPECT_NE(to_string(static_cast<Verdict>(i)), "unknown") << i;
    }
    EXPECT_EQ(to_string(V::resend_result), "resend_result");
}

// One chunk, four workers, every arrival order: completes exactly once, bit-exact, duplicates
// are not added twice, and packets after completion ask for the result again.
TEST(ChunkTable, FourWorkersEveryOrderWithDuplicatesAndRetransmits) {
    std::array<unsigned, 4> order{1, 2, 3, 4};
    std::mt19937 rng(1);
    uint32_t seq = 100;
    do {
        ChunkTable t(make_job(Role::root, 8));
        const uint32_t n = 1 + seq % 64;
        for (size_t i = 0; i < 4; ++i) {
            const Verdict v = send(t, order[i], seq, n);
            EXPECT_EQ(v, i == 3 ? V::completed : V::absorbed);
            if (i < 3) {
                // A duplicate of something already absorbed: not added again.
                const unsigned again = order[std::uniform_int_distribution<size_t>(0, i)(rng)];
                EXPECT_EQ(send(t, again, seq, n), V::duplicate);
                EXPECT_EQ(t.state_of(seq), ChunkTable::State::aggregating);
                std::vector<uint8_t> out(n * 4);
                EXPECT_EQ(t.store_result(seq, out.data()), 0u);  // not complete yet
            }
        }
        EXPECT_EQ(result(t, seq, n), int32_sum({1, 2, 3, 4}, seq, n));
        // Retransmissions after completion (their sender lacks the result): resend, sum unchanged.
        EXPECT_EQ(send(t, order[2], seq, n, 0, proto::kFlagRetransmit), V::resend_result);
        EXPECT_EQ(send(t, order[0], seq, n), V::resend_result);
        EXPECT_EQ(result(t, seq, n), int32_sum({1, 2, 3, 4}, seq, n));
        EXPECT_EQ(t.counters()[V::completed], 1u);
        EXPECT_EQ(t.counters()[V::duplicate], 3u);
        EXPECT_EQ(t.counters()[V::resend_result], 2u);
        EXPECT_EQ(t.counters().rx_retransmit, 1u);
        EXPECT_EQ(t.slots_in_use(), 1u);
        ++seq;
    } while (std::next_permutation(order.begin(), order.end()));
}

// A = {1,2,3,4}; a child switch aggregates {1,2}; workers 3 and 4 are direct.
TEST(ChunkTable, MultiBitContributionFromChildSwitch) {
    ChunkTable t(make_job(Role::aggregator, 4));
    const uint32_t n = 32;
    const std::vector<uint8_t> child = int32_sum({1, 2}, 5, n);
    EXPECT_EQ(send(t, 3, 5, n), V::absorbed);
    EXPECT_EQ(t.on_data(ids({1, 2}).data(), 5, n, child.data(), 0, 0), V::absorbed);
    // The child's retransmission, and a stray single-bit copy of one of its workers: duplicates.
    EXPECT_EQ(t.on_data(ids({1, 2}).data(), 5, n, child.data(), proto::kFlagRetransmit, 0),
              V::duplicate);
    EXPECT_EQ(send(t, 1, 5, n), V::duplicate);
    // {2,4}: bit 2 absorbed, bit 4 not: cannot be split, dropped.
    EXPECT_EQ(send(t, ids({2, 4}), 4, 5, n), V::overlap);
    EXPECT_EQ(send(t, 4, 5, n), V::completed);
    EXPECT_EQ(result(t, 5, n), int32_sum({1, 2, 3, 4}, 5, n));

    // One packet covering the whole A-BM completes at once (e.g. a single child below us).
    const std::vector<uint8_t> all = int32_sum({1, 2, 3, 4}, 6, n);
    EXPECT_EQ(t.on_data(first_n(4).data(), 6, n, all.data(), 0, 0), V::completed);
    EXPECT_EQ(result(t, 6, n), all);
}

TEST(ChunkTable, RejectsBeforeTouchingState) {
    ChunkTable t(make_job(Role::aggregator, 4, 4, ElemType::int32, 64));
    EXPECT_EQ(send(t, 5, 0), V::not_mine);
    EXPECT_EQ(send(t, ids({9, 17}), 9, 0), V::not_mine);
    EXPECT_EQ(send(t, ids({4, 5}), 4, 0), V::outside_abm);
    EXPECT_EQ(send(t, 1, 0, 0), V::bad_length);
    EXPECT_EQ(send(t, 1, 0, 65), V::bad_length);
    EXPECT_EQ(t.slots_in_use(), 0u);
    EXPECT_EQ(send(t, 1, 0, 64), V::absorbed);
    EXPECT_EQ(send(t, 2, 0, 63), V::count_mismatch);  // a chunk has one length
    EXPECT_EQ(send(t, 2, 0, 64), V::absorbed);
    const ChunkCounters& c = t.counters();
    EXPECT_EQ(c[V::not_mine], 2u);
    EXPECT_EQ(c[V::outside_abm], 1u);
    EXPECT_EQ(c[V::bad_length], 2u);
    EXPECT_EQ(c[V::count_mismatch], 1u);
    EXPECT_EQ(c[V::absorbed], 2u);
    EXPECT_EQ(t.slots_in_use(), 1u);
}

// Chunk seq is released by the workers' contributions for seq + W; then late copies are stale.
TEST(ChunkTable, ReleaseThenStale) {
    ChunkTable t(make_job(Role::root, 4));
    for (unsigned w = 1; w <= 4; ++w) send(t, w, 2);
    ASSERT_EQ(t.state_of(2), ChunkTable::State::complete);
    for (unsigned w = 1; w <= 3; ++w) {
        EXPECT_EQ(send(t, w, 6), V::absorbed);
        // Worker 4 has not shown it has the result of 2: still kept for it.
        EXPECT_EQ(t.state_of(2), ChunkTable::State::complete);
    }
    EXPECT_EQ(t.slots_in_use(), 2u);
    EXPECT_EQ(send(t, 4, 2, 16, 0, proto::kFlagRetransmit), V::resend_result);
    EXPECT_EQ(send(t, 4, 6), V::completed);
    EXPECT_EQ(t.state_of(2), ChunkTable::State::empty);
    EXPECT_EQ(t.slots_in_use(), 1u);
    EXPECT_EQ(send(t, 1, 2), V::stale);
    EXPECT_EQ(send(t, 4, 2), V::stale);
    EXPECT_EQ(t.counters()[V::stale], 2u);
    EXPECT_EQ(t.slots_in_use(), 1u);
    EXPECT_EQ(result(t, 6), int32_sum({1, 2, 3, 4}, 6, 16));
    // Chunk 10 = 6 + W releases 6 the same way.
    for (unsigned w = 1; w <= 4; ++w) send(t, w, 10);
    EXPECT_EQ(t.state_of(6), ChunkTable::State::empty);
    EXPECT_EQ(t.slots_in_use(), 1u);
}

// W = 2: index 0 holds chunks 0, 2, 4, ... in two entries. Workers running ahead of the window
// fill both; the next chunk falls back, and keeps falling back even once an entry is free.
TEST(ChunkTable, FallbackIsSticky) {
    ChunkTable t(make_job(Role::aggregator, 2));
    EXPECT_EQ(send(t, 1, 0), V::absorbed);
    EXPECT_EQ(send(t, 1, 2), V::absorbed);
    EXPECT_EQ(send(t, 1, 4), V::fallback);  // both entries aggregating: none may be evicted
    EXPECT_EQ(t.slots_in_use(), 2u);
    // Worker 1 runs ahead of the window: sending 2 (then 4) claims it holds the result of 0
    // (then 2), still aggregating. Each is a window violation, and this aggregator measures
    // release proofs (and obsolescence) in a window twice as long each time: 8 from now on.
    EXPECT_EQ(t.counters().window_violations, 2u);
    for (unsigned w = 2; w <= 4; ++w) send(t, w, 0);
    for (unsigned w = 2; w <= 4; ++w) send(t, w, 2);
    EXPECT_EQ(t.state_of(0), ChunkTable::State::complete);
    EXPECT_EQ(t.state_of(2), ChunkTable::State::complete);
    // Chunk 0 is obsolete for seq 4 (4 >= 0 + 2W), but 4 already fell back: all of it goes there.
    for (unsigned w = 2; w <= 4; ++w) EXPECT_EQ(send(t, w, 4), V::fallback);
    EXPECT_EQ(send(t, 2, 4, 16, 0, proto::kFlagRetransmit), V::fallback);
    EXPECT_EQ(t.state_of(4), ChunkTable::State::empty);
    // Chunk 6 is past the fallback mark but no entry is obsolete for it (6 < 0 + 2 * 8), so it
    // falls back too; chunk 16 takes the obsolete entry of chunk 0.
    EXPECT_EQ(send(t, 1, 6), V::fallback);
    EXPECT_EQ(send(t, 1, 16), V::absorbed);
    EXPECT_EQ(t.counters().obsolete_evictions, 1u);
    EXPECT_EQ(t.state_of(0), ChunkTable::State::empty);
    EXPECT_EQ(send(t, 3, 0), V::stale);  // evicted complete: its floor moved
    // A fallback-flagged packet from a child that had no slot is absorbed here like any other.
    EXPECT_EQ(send(t, 2, 16, 16, 0, proto::kFlagFallback), V::absorbed);
    EXPECT_EQ(t.counters().rx_fallback_flag, 1u);
    EXPECT_EQ(t.counters()[V::fallback], 6u);
    // Worker 2's 16 claims chunk 8, which never reached this table: one more violation.
    EXPECT_EQ(t.counters().window_violations, 3u);
}

// The root has nowhere to fall back to: it drops (no_slot) and never marks the chunk, so the
// worker's retransmission is aggregated once an entry is free.
TEST(ChunkTable, RootReturnsNoSlot) {
    ChunkTable t(make_job(Role::root, 2));
    EXPECT_EQ(send(t, 1, 0), V::absorbed);
    EXPECT_EQ(send(t, 1, 2), V::absorbed);
    EXPECT_EQ(send(t, 1, 4), V::no_slot);
    EXPECT_EQ(send(t, 2, 4), V::no_slot);
    for (unsigned w = 2; w <= 4; ++w) send(t, w, 0);
    EXPECT_EQ(t.state_of(0), ChunkTable::State::complete);
    // Chunk 0 is complete and obsolete for seq 4: the retransmission takes its entry.
    EXPECT_EQ(send(t, 1, 4, 16, 0, proto::kFlagRetransmit), V::absorbed);
    for (unsigned w = 2; w <= 4; ++w) send(t, w, 4);
    EXPECT_EQ(result(t, 4), int32_sum({1, 2, 3, 4}, 4, 16));
    EXPECT_EQ(t.counters()[V::no_slot], 2u);
    EXPECT_EQ(t.counters()[V::fallback], 0u);
}

TEST(ChunkTable, IncrementalExpireSweepsABoundedNumberOfEntriesPerCall) {
    // Window 64: 128 entries. Chunks 0..9 go idle; a budget of 16 entries per call visits every
    // entry once in 8 calls, frees each idle chunk exactly once, and never more than 16 a call.
    JobParams p = make_job(Role::aggregator, 64);
    p.idle_timeout = 1000;
    ChunkTable t(p);
    for (uint32_t seq = 0; seq < 10; ++seq) {
        EXPECT_EQ(send(t, 1, seq, 16, 10), V::absorbed);
    }
    ASSERT_EQ(t.capacity(), 128u);
    size_t freed = 0;
    for (int call = 0; call < 8; ++call) {
        const size_t n = t.expire(2000, 16);
        EXPECT_LE(n, 16u);
        freed += n;
    }
    EXPECT_EQ(freed, 10u);
    EXPECT_EQ(t.slots_in_use(), 0u);
    EXPECT_EQ(t.expire(2000, 16), 0u) << "the cursor wrapped; nothing left";
    EXPECT_EQ(t.counters().slot_timeouts, 10u);
}

TEST(ChunkTable, ExpireFreesIdleEntries) {
    JobParams p = make_job(Role::aggregator, 4);
    p.idle_timeout = 1000;
    ChunkTable t(p);
    EXPECT_EQ(send(t, 1, 0, 16, 10), V::absorbed);
    EXPECT_EQ(send(t, 2, 0, 16, 20), V::absorbed);
    for (unsigned w = 1; w <= 4; ++w) send(t, w, 1, 16, 500);
    EXPECT_EQ(t.slots_in_use(), 2u);
    EXPECT_EQ(t.expire(1020), 0u);  // idle exactly the timeout: kept
    EXPECT_EQ(t.expire(1021), 1u);  // chunk 0 idle since 20
    EXPECT_EQ(t.state_of(0), ChunkTable::State::empty);
    EXPECT_EQ(t.state_of(1), ChunkTable::State::complete);
    EXPECT_EQ(t.counters().slot_timeouts, 1u);
    // The partial sum is gone: retransmissions start chunk 0 afresh and still sum exactly once.
    for (unsigned w = 1; w <= 4; ++w) {
        EXPECT_EQ(send(t, w, 0, 16, 1100, proto::kFlagRetransmit), w == 4 ? V::completed : V::absorbed);
    }
    EXPECT_EQ(result(t, 0), int32_sum({1, 2, 3, 4}, 0, 16));
    EXPECT_EQ(t.expire(1100 + 1001), 2u);
    EXPECT_EQ(t.slots_in_use(), 0u);
    EXPECT_EQ(t.counters().slot_timeouts, 3u);
    // Expired complete chunks were emitted already: their late packets are stale, never a second
    // aggregation (and a second emission towards the parent).
    EXPECT_EQ(send(t, 2, 0, 16, 2200), V::stale);
    EXPECT_EQ(send(t, 3, 1, 16, 2200), V::stale);
    EXPECT_EQ(t.slots_in_use(), 0u);
}

TEST(ChunkTable, SequenceWrapsAt2To32) {
    ChunkTable t(make_job(Role::root, 4));
    const uint32_t last = 0xFFFFFFFEu;  // index 2; last + W wraps to 2, same index
    for (unsigned w = 1; w <= 4; ++w) send(t, w, last);
    ASSERT_EQ(t.state_of(last), ChunkTable::State::complete);
    for (unsigned w = 1; w <= 4; ++w) {
        EXPECT_EQ(send(t, w, last + 4), w == 4 ? V::completed : V::absorbed);
    }
    EXPECT_EQ(last + 4, 2u);
    EXPECT_EQ(t.state_of(last), ChunkTable::State::empty);  // released across the wrap
    EXPECT_EQ(send(t, 2, last), V::stale);                   // 0xFFFFFFFE <= 2 in serial order
    EXPECT_EQ(result(t, 2), int32_sum({1, 2, 3, 4}, 2, 16));
    // Obsolete eviction across the wrap: seq 2 + 2W = 10 reclaims chunk 2's entry.
    EXPECT_EQ(send(t, 1, 6), V::absorbed);
    EXPECT_EQ(send(t, 1, 10), V::absorbed);
    EXPECT_EQ(t.counters().obsolete_evictions, 1u);
    EXPECT_EQ(send(t, 3, 2), V::stale);
}

// A CE-marked contribution (the caller passes kFlagEcnEcho) makes the chunk's result echo it.
TEST(ChunkTable, EcnEchoFollowsTheChunk) {
    ChunkTable t(make_job(Role::root, 4));
    for (unsigned w = 1; w <= 4; ++w) send(t, w, 0);
    EXPECT_EQ(t.result_flags(0), 0);
    send(t, 1, 1);
    send(t, 2, 1, 16, 0, proto::kFlagEcnEcho | proto::kFlagRetransmit);
    send(t, 3, 1);
    send(t, 4, 1);
    EXPECT_EQ(t.result_flags(1), proto::kFlagEcnEcho);
    EXPECT_EQ(t.result_flags(2), 0);
    // A retransmission after completion that saw congestion marks the resent result too.
    EXPECT_EQ(send(t, 3, 0, 16, 0, proto::kFlagEcnEcho), V::resend_result);
    EXPECT_EQ(t.result_flags(0), proto::kFlagEcnEcho);
    // A recycled entry starts clean.
    for (unsigned w = 1; w <= 4; ++w) send(t, w, 4);
    for (unsigned w = 1; w <= 4; ++w) send(t, w, 8);
    EXPECT_EQ(t.result_flags(8), 0);
}

TEST(ChunkTable, ResetForgetsEverything) {
    ChunkTable t(make_job(Role::root, 2));
    for (unsigned w = 1; w <= 4; ++w) send(t, w, 0);
    for (unsigned w = 1; w <= 4; ++w) send(t, w, 2);
    EXPECT_EQ(send(t, 1, 0), V::stale);
    t.reset();
    EXPECT_EQ(t.slots_in_use(), 0u);
    EXPECT_EQ(send(t, 1, 0), V::absorbed);  // a restarted job reuses low sequence numbers
}

// fp32: the result is the reduce library's fold in arrival order (load, then accumulate in the
// order packets came), bit for bit, whatever ISA the table's kernels use.
TEST(ChunkTableFloat, Fp32EqualsScalarFoldInArrivalOrder) {
    const uint32_t n = 67;
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> mag(-30.0f, 30.0f);
    std::array<std::vector<float>, 4> in;
    for (auto& v : in) {
        v.resize(n);
        for (float& x : v) x = std::ldexp(mag(rng), static_cast<int>(rng() % 40) - 20);
    }
    const reduce::Kernels& scalar = reduce::select_kernels(reduce::Isa::scalar);
    for (reduce::Isa isa : {reduce::Isa::scalar, reduce::Isa::avx2, reduce::Isa::avx512}) {
        const reduce::Kernels& k = reduce::select_kernels(isa);
        std::array<unsigned, 4> order{0, 1, 2, 3};
        uint32_t seq = 0;
        do {
            ChunkTable t(make_job(Role::root, 8, 4, ElemType::fp32, 128), k);
            alignas(64) std::array<float, 128> acc{};
            for (size_t i = 0; i < 4; ++i) {
                const unsigned w = order[i];
                const Verdict v = t.on_data(ids({static_cast<wire::BfrId>(w + 1)}).data(), seq, n,
                                            in[w].data(), 0, 0);
                ASSERT_EQ(v, i == 3 ? V::completed : V::absorbed);
                if (i == 0) {
                    scalar.load(ElemType::fp32, acc.data(), in[w].data(), n);
                } else {
                    scalar.accumulate(ElemType::fp32, acc.data(), in[w].data(), n, reduce::Op::sum);
                }
                if (i == 1) {  // a duplicate in the middle changes nothing
                    ASSERT_EQ(t.on_data(ids({static_cast<wire::BfrId>(w + 1)}).data(), seq, n,
                                        in[w].data(), 0, 0),
                              V::duplicate);
                }
            }
            std::vector<float> want(n), got(n);
            scalar.store(ElemType::fp32, want.data(), acc.data(), n);
            ASSERT_EQ(t.store_result(seq, got.data()), n);
            EXPECT_EQ(std::memcmp(want.data(), got.data(), n * 4), 0)
                << reduce::to_string(k.isa) << " order " << order[0] << order[1] << order[2]
                << order[3];
            ++seq;
        } while (std::next_permutation(order.begin(), order.end()));
    }
}

// fp16 accumulates in fp32 and rounds once, at store: 1 + 3 x 2^-11 becomes 1 + 2^-9 (1.5 ulp,
// a tie, to even), where rounding after every addition would have stayed at 1.0.
TEST(ChunkTableFloat, Fp16AccumulatesInFp32AndRoundsOnce) {
    ChunkTable t(make_job(Role::aggregator, 4, 4, ElemType::fp16, 8));
    const uint16_t one = reduce::fp32_to_fp16(1.0f);
    const uint16_t half_ulp = reduce::fp32_to_fp16(std::ldexp(1.0f, -11));
    ASSERT_EQ(reduce::fp16_to_fp32(half_ulp), std::ldexp(1.0f, -11));
    const std::array<uint16_t, 2> first{one, reduce::fp32_to_fp16(65504.0f)};
    const std::array<uint16_t, 2> small{half_ulp, reduce::fp32_to_fp16(16.0f)};
    EXPECT_EQ(t.on_data(ids({1}).data(), 0, 2, first.data(), 0, 0), V::absorbed);
    EXPECT_EQ(t.on_data(ids({2}).data(), 0, 2, small.data(), 0, 0), V::absorbed);
    EXPECT_EQ(t.on_data(ids({3}).data(), 0, 2, small.data(), 0, 0), V::absorbed);
    EXPECT_EQ(t.on_data(ids({4}).data(), 0, 2, small.data(), 0, 0), V::completed);
    std::array<uint16_t, 2> out{};
    ASSERT_EQ(t.store_result(0, out.data()), 2u);
    EXPECT_EQ(reduce::fp16_to_fp32(out[0]), 1.0f + std::ldexp(1.0f, -9));
    EXPECT_EQ(out[0], reduce::fp32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)));
    // 65504 + 48 = 65552 >= 65520: overflows to +Inf only at the final rounding.
    EXPECT_EQ(out[1], 0x7C00);
    // Stepwise fp16 rounding would give exactly 1.0 for the first element.
    float stepwise = 1.0f;
    for (int i = 0; i < 3; ++i) {
        stepwise = reduce::fp16_to_fp32(reduce::fp32_to_fp16(stepwise + std::ldexp(1.0f, -11)));
    }
    EXPECT_EQ(stepwise, 1.0f);
}

}  // namespace
}  // namespace ina::test

namespace ina::test {
namespace {

using RV = Verdict;

// Issue 9, defect 5: a worker beyond its window makes a root release a chunk on a false proof.
// When that worker lost the result, its retransmission is a late packet of a released chunk:
// stale without the result cache (the worker never completes), answered from it with it.
TEST(ChunkTableResultCache, AnswersAReleasedChunkToAWorkerThatLostItsResult) {
    for (uint32_t depth : {0u, 1u, 2u}) {
        SCOPED_TRACE(testing::Message() << "result_cache " << depth);
        JobParams p = make_job(Role::root, 1, 2);
        p.result_cache = depth;
        ChunkTable t(p);
        EXPECT_EQ(send(t, 1, 0, 16, 0, proto::kFlagEcnEcho), RV::absorbed);
        EXPECT_EQ(send(t, 2, 0), RV::completed);  // worker 1's copy of the result is lost
        // Worker 1 runs beyond W = 1: its chunk 1 claims the result of 0, so 0 is released.
        EXPECT_EQ(send(t, 1, 1), RV::absorbed);
        EXPECT_EQ(send(t, 2, 1), RV::completed);
        EXPECT_EQ(t.state_of(0), ChunkTable::State::empty);
        if (depth == 0) {
            EXPECT_EQ(send(t, 1, 0, 16, 0, proto::kFlagRetransmit), RV::stale);
            std::vector<uint8_t> none(64);
            EXPECT_EQ(t.store_result(0, none.data()), 0u);
            EXPECT_EQ(t.result_cache_capacity(), 0u);
            continue;
        }
        EXPECT_EQ(send(t, 1, 0, 16, 0, proto::kFlagRetransmit), RV::cached_result);
        EXPECT_EQ(result(t, 0), int32_sum({1, 2}, 0, 16));  // the exact sum, from the cache
        EXPECT_EQ(t.result_flags(0), proto::kFlagEcnEcho);   // as the first result carried
        EXPECT_EQ(t.counters().result_cache_hits, 1u);
        EXPECT_EQ(t.counters().result_cache_misses, 0u);
        EXPECT_EQ(t.state_of(0), ChunkTable::State::empty);  // never aggregated again
        EXPECT_EQ(t.slots_in_use(), 1u);
        EXPECT_EQ(t.results_cached(), 1u);
        EXPECT_EQ(t.result_cache_capacity(), depth);
        // A chunk that never completed is never answered from the cache.
        std::vector<uint8_t> none(64);
        EXPECT_EQ(t.store_result(5, none.data()), 0u);
        EXPECT_EQ(t.store_result(0 + (1u << 20), none.data()), 0u);  // same index, other seq
    }
}

// Each index keeps its result_cache HIGHEST released chunks: a release older than every cached
// one (here chunk 0, expired after chunk 1) is not cached; asking for it is a counted miss.
TEST(ChunkTableResultCache, KeepsTheNewestReleasesOfAnIndex) {
    JobParams p = make_job(Role::root, 1, 2);
    p.result_cache = 1;
    ChunkTable t(p);
    EXPECT_EQ(send(t, 1, 1), RV::absorbed);  // entry 0: chunk 1
    EXPECT_EQ(send(t, 1, 0), RV::absorbed);  // entry 1: chunk 0
    EXPECT_EQ(send(t, 2, 0), RV::completed);
    EXPECT_EQ(send(t, 2, 1), RV::completed);
    EXPECT_EQ(t.expire(p.idle_timeout + 1), 2u);  // sweeps chunk 1, then chunk 0
    EXPECT_EQ(send(t, 1, 1), RV::cached_result);
    EXPECT_EQ(result(t, 1), int32_sum({1, 2}, 1, 16));
    EXPECT_EQ(send(t, 2, 0), RV::stale);
    EXPECT_EQ(t.counters().result_cache_hits, 1u);
    EXPECT_EQ(t.counters().result_cache_misses, 1u);
}

// Corner 1 of issue 9, defect 5: chunk 1 completes while chunk 0 of its index has not arrived
// yet (workers up to 2W at a root: none holds 0's result), then expires. Its release must not
// make chunk 0 released: 0 still aggregates and completes; 1 is answered from the cache, never
// aggregated again. (Before, the floor rose to 1 - W = 0 and 0 was stale for ever.)
TEST(ChunkTableResultCache, ExpiryAtARootNeverMakesAPendingChunkStale) {
    JobParams p = make_job(Role::root, 1, 2);
    p.result_cache = 2;
    ChunkTable t(p);
    EXPECT_EQ(send(t, 1, 1), RV::absorbed);
    EXPECT_EQ(send(t, 2, 1), RV::completed);
    EXPECT_EQ(t.expire(p.idle_timeout + 1), 1u);
    EXPECT_EQ(send(t, 1, 0, 16, p.idle_timeout + 2), RV::absorbed);
    EXPECT_EQ(send(t, 2, 0, 16, p.idle_timeout + 2), RV::completed);
    EXPECT_EQ(result(t, 0), int32_sum({1, 2}, 0, 16));
    EXPECT_EQ(send(t, 2, 1, 16, p.idle_timeout + 2, proto::kFlagRetransmit), RV::cached_result);
    EXPECT_EQ(t.state_of(1), ChunkTable::State::empty);
}

// Corner 2: W = 1 (every chunk at index 0), a worker far beyond 2W. Chunk 2 (worker 1 only)
// holds the entry chunk 0 needs while chunk 1 holds the other: 0 takes 2's entry (preempted:
// the partial is discarded), and 2 is refused while 0 aggregates; once 0 is complete, 2 gets
// the entry of 0 by obsolete eviction and aggregates afresh.
TEST(ChunkTable, RootRefusesAndPreemptsAChunkTwoWindowsAhead) {
    ChunkTable t(make_job(Role::root, 1, 4));
    for (unsigned w = 1; w <= 4; ++w) send(t, w, 1);
    EXPECT_EQ(t.state_of(1), ChunkTable::State::complete);
    EXPECT_EQ(send(t, 1, 2), RV::absorbed);
    EXPECT_EQ(send(t, 2, 0), RV::absorbed);  // takes chunk 2's entry
    EXPECT_EQ(t.counters().overrun_preemptions, 1u);
    EXPECT_EQ(t.state_of(2), ChunkTable::State::empty);
    EXPECT_EQ(send(t, 1, 2, 16, 0, proto::kFlagRetransmit), RV::no_slot);  // 0 is pending
    EXPECT_EQ(t.counters().overrun_refusals, 1u);
    for (unsigned w : {1u, 3u, 4u}) send(t, w, 0);
    EXPECT_EQ(t.state_of(0), ChunkTable::State::complete);
    EXPECT_EQ(result(t, 0), int32_sum({1, 2, 3, 4}, 0, 16));
    EXPECT_EQ(send(t, 1, 2, 16, 0, proto::kFlagRetransmit), RV::absorbed);  // 0 obsolete
    for (unsigned w = 2; w <= 4; ++w) EXPECT_NE(send(t, w, 2), RV::no_slot);
    EXPECT_EQ(t.state_of(2), ChunkTable::State::complete);
    EXPECT_EQ(result(t, 2), int32_sum({1, 2, 3, 4}, 2, 16));
}

// reset() starts a new sequence space: a cached result of the old one must never answer it.
TEST(ChunkTableResultCache, ResetForgetsCachedResults) {
    JobParams p = make_job(Role::root, 1, 2);
    p.result_cache = 2;
    ChunkTable t(p);
    send(t, 1, 0);
    send(t, 2, 0);
    send(t, 1, 1);
    send(t, 2, 1);
    ASSERT_EQ(send(t, 1, 0), RV::cached_result);
    t.reset();
    EXPECT_EQ(t.results_cached(), 0u);
    std::vector<uint8_t> none(64);
    EXPECT_EQ(t.store_result(0, none.data()), 0u);
    EXPECT_EQ(send(t, 1, 0), RV::absorbed);  // aggregated afresh
}

TEST(ChunkTableResultCache, OnlyRootsWithAtMostTwoPerIndex) {
    JobParams p = make_job(Role::root, 8);
    p.result_cache = kMaxResultCache;
    EXPECT_EQ(validate(p), "");
    p.result_cache = kMaxResultCache + 1;
    EXPECT_NE(validate(p), "");
    p = make_job(Role::aggregator, 8);
    p.result_cache = 1;
    EXPECT_NE(validate(p), "");
}

}  // namespace
}  // namespace ina::test

namespace ina::test {
namespace {

// A contribution stating its sender's lowest missing result `low` (proto::kFlagLowestMissing).
Verdict send_low(ChunkTable& t, unsigned w, uint32_t seq, uint32_t low, uint8_t flags = 0) {
    const std::vector<uint8_t> payload = int32_payload(w, seq, 16);
    return t.on_data(ids({static_cast<wire::BfrId>(w)}).data(), seq, 16, payload.data(),
                     static_cast<uint8_t>(flags | proto::kFlagLowestMissing), 0,
                     agg::Encoding::native, low);
}

// An aggregator given the field (docs/protocol.md, "Through aggregators"), W = 2, workers 1, 2:
// a worker at a lead below 2W may lack a chunk 2W behind the packet's, so the aggregator (no
// result cache) must not evict it as obsolete there, as it does for window-keeping senders:
// worker 2, still lacking chunk 0, asks for it again and is answered (resend_result), not
// stale. A lead of 2W is refused (no_slot: dropped, never fallback).
TEST(ChunkTable, AggregatorKeepsWhatAStatingWorkerMayLackAndRefusesTwoWindowsAhead) {
    ChunkTable t(make_job(Role::aggregator, 2, 2));
    for (unsigned w = 1; w <= 2; ++w) EXPECT_NE(send_low(t, w, 0, 0), Verdict::no_slot);
    for (unsigned w = 1; w <= 2; ++w) EXPECT_NE(send_low(t, w, 2, w == 1 ? 1 : 0), Verdict::no_slot);
    ASSERT_EQ(t.state_of(0), ChunkTable::State::complete);
    ASSERT_EQ(t.state_of(2), ChunkTable::State::complete);
    // Worker 1 states 1 (it holds 0) with chunk 4, a lead of 3 < 2W. Both entries of index 0
    // are complete, and 0 is not obsolete for a stating sender at 4 = 0 + 2W: 4 falls back.
    EXPECT_EQ(send_low(t, 1, 4, 1), Verdict::fallback);
    EXPECT_EQ(t.counters().obsolete_evictions, 0u);
    EXPECT_EQ(send_low(t, 2, 0, 0, proto::kFlagRetransmit), Verdict::resend_result);
    // Lead 2W (4 - 0): refused, dropped, nothing recorded against chunk 4's fallback.
    EXPECT_EQ(send_low(t, 2, 4, 0), Verdict::no_slot);
    EXPECT_EQ(t.counters().overrun_refusals, 1u);
    EXPECT_EQ(t.counters()[Verdict::fallback], 1u);
    // The partial of 2 states the least latest low of its contributors: worker 1 said 1, then
    // (chunk 4) 1; worker 2 said 0.
    uint32_t low = 99;
    ASSERT_TRUE(t.partial_lowest_missing(2, &low));
    EXPECT_EQ(low, 0u);
    // Worker 2 catches up: it states 3 with a retransmission of 2 (cut to 2); now both hold 0
    // and 1 and, by exact proof, chunk 0 is released.
    EXPECT_EQ(send_low(t, 2, 2, 3, proto::kFlagRetransmit), Verdict::resend_result);
    ASSERT_TRUE(t.partial_lowest_missing(2, &low));
    EXPECT_EQ(low, 1u) << "min(worker 1's 1, worker 2's 2)";
    EXPECT_EQ(t.state_of(0), ChunkTable::State::empty);
}

}  // namespace
}  // namespace ina::test
