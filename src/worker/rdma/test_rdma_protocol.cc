// SPDX-License-Identifier: Apache-2.0
// The pure parts of the RDMA worker side: immediate encoding, chunking, the rdma_cm private
// data, the root's chunk reducer (including a switch-style aggregate contribution), and the
// verification of a reduced tensor.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "worker/rdma/chunk_reducer.h"
#include "worker/rdma/protocol.h"
#include "worker/testdata.h"

namespace ina::rdma {
namespace {

using reduce::ElemType;
using reduce::Op;

TEST(Imm, LayoutIsChunkHighCountLow) {
    EXPECT_EQ(make_imm(0, 1), 0x00000001u);
    EXPECT_EQ(make_imm(0x123456, 0x07), 0x12345607u);
    EXPECT_EQ(make_imm(kMaxChunks - 1, 255), 0xFFFFFFFFu);
    const Imm i = parse_imm(0xABCDEF02u);
    EXPECT_EQ(i.chunk, 0xABCDEFu);
    EXPECT_EQ(i.contributions, 2);
    for (uint32_t c : {0u, 1u, 255u, 256u, 65535u, 0xFFFFFFu}) {
        for (uint8_t n : {uint8_t{1}, uint8_t{2}, uint8_t{255}}) {
            const Imm back = parse_imm(make_imm(c, n));
            EXPECT_EQ(back.chunk, c);
            EXPECT_EQ(back.contributions, n);
        }
    }
}

TEST(Names, ParseWhatToStringPrints) {
    for (const char* t : {"int32", "fp32", "fp16", "bf16", "int64", "fp64"}) {
        const auto parsed = parse_elem_type(t);
        ASSERT_TRUE(parsed) << t;
        EXPECT_EQ(reduce::to_string(*parsed), t);
    }
    for (const char* o : {"sum", "prod", "min", "max"}) {
        const auto parsed = parse_op(o);
        ASSERT_TRUE(parsed) << o;
        EXPECT_EQ(reduce::to_string(*parsed), o);
    }
    EXPECT_FALSE(parse_elem_type("float"));
    EXPECT_FALSE(parse_elem_type("?"));
    EXPECT_FALSE(parse_op(""));
    EXPECT_FALSE(parse_op("Sum"));
}

TEST(Chunking, CutsTheTensorAndNamesBadParameters) {
    std::string why;
    const auto c = Chunking::make(ElemType::int32, 1000, 1024, 8, &why);
    ASSERT_TRUE(c) << why;
    EXPECT_EQ(c->tensor_bytes, 4000u);
    EXPECT_EQ(c->chunks(), 4u);
    EXPECT_EQ(c->offset(3), 3072u);
    EXPECT_EQ(c->length(0), 1024u);
    EXPECT_EQ(c->length(3), 4000u - 3072u);
    EXPECT_EQ(c->slot(3), 3u);
    EXPECT_EQ(c->slot(9), 1u);
    EXPECT_EQ(c->area_bytes(), 8u * 1024u);

    const auto exact = Chunking::make(ElemType::fp64, 256, 1024, 1, &why);
    ASSERT_TRUE(exact);
    EXPECT_EQ(exact->chunks(), 2u);
    EXPECT_EQ(exact->length(1), 1024u);

    EXPECT_FALSE(Chunking::make(ElemType::int32, 10, 1022, 8, &why));
    EXPECT_NE(why.find("multiple of the 4-byte element"), std::string::npos) << why;
    EXPECT_FALSE(Chunking::make(ElemType::int32, 10, 0, 8, &why));
    EXPECT_FALSE(Chunking::make(ElemType::int32, 10, 1024, 0, &why));
    EXPECT_NE(why.find("window"), std::string::npos);
    EXPECT_FALSE(Chunking::make(ElemType::int32, 0, 1024, 8, &why));
    // 2^24 chunks fit the immediate, one more does not.
    EXPECT_TRUE(Chunking::make(ElemType::int32, uint64_t{kMaxChunks}, 4, 8, &why));
    EXPECT_FALSE(Chunking::make(ElemType::int32, uint64_t{kMaxChunks} + 1, 4, 8, &why));
    EXPECT_NE(why.find("2^24"), std::string::npos) << why;
}

ConnectRequest sample_request() {
    ConnectRequest q;
    q.mode = Mode::server_to_server;
    q.elem_type = ElemType::int32;
    q.op = Op::max;
    q.job_id = 0x01020304;
    q.rank = 2;
    q.world = 3;
    q.elements = 0x1122334455667788ull;
    q.chunk_bytes = 1024;
    q.window = 32;
    q.result_addr = 0x00007F0012345678ull;
    q.result_rkey = 0xCAFEBABE;
    return q;
}

TEST(ConnectRequest, FixedBigEndianLayoutWithinRdmaCmLimit) {
    static_assert(ConnectRequest::kEncodedSize <= kMaxConnectPrivateData);
    const auto b = sample_request().encode();
    const std::vector<uint8_t> expect = {
        0x49, 0x4E, 0x41, 0x52,  // "INAR"
        0x01, 0x01, 0x00, 0x03,  // version, mode, int32, max
        0x01, 0x02, 0x03, 0x04,  // job
        0x00, 0x02, 0x00, 0x03,  // rank, world
        0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88,  // elements
        0x00, 0x00, 0x04, 0x00,  // chunk_bytes
        0x00, 0x00, 0x00, 0x20,  // window
        0x00, 0x00, 0x7F, 0x00, 0x12, 0x34, 0x56, 0x78,  // result_addr
        0xCA, 0xFE, 0xBA, 0xBE,  // result_rkey
        0x00, 0x00, 0x00, 0x00,  // flags (not resuming), reserved
        0x00, 0x00, 0x00, 0x00,  // resume_from
        0x00, 0x00, 0x00, 0x00,  // results_from
    };
    ASSERT_EQ(b.size(), expect.size());
    for (size_t i = 0; i < b.size(); ++i) {
        EXPECT_EQ(std::to_integer<uint8_t>(b[i]), expect[i]) << "byte " << i;
    }
}

TEST(ConnectRequest, RoundTripsAndAcceptsPadding) {
    const ConnectRequest q = sample_request();
    const auto b = q.encode();
    std::vector<std::byte> padded(b.begin(), b.end());
    padded.resize(kMaxConnectPrivateData, std::byte{0});  // rdma_cm pads to the CM's size
    std::string why;
    const auto d = ConnectRequest::decode(padded, &why);
    ASSERT_TRUE(d) << why;
    EXPECT_EQ(d->encode(), b);
    EXPECT_TRUE(d->same_job(q));
}

TEST(ConnectRequest, RefusesWhatItCannotTrust) {
    const auto good = sample_request().encode();
    std::string why;
    EXPECT_FALSE(
        ConnectRequest::decode(std::span(good).first(ConnectRequest::kBaseSize - 1), &why));
    EXPECT_NE(why.find("at least 44"), std::string::npos) << why;
    EXPECT_FALSE(ConnectRequest::decode({}, &why));

    auto bad = good;
    bad[0] = std::byte{0};
    EXPECT_FALSE(ConnectRequest::decode(bad, &why));
    EXPECT_NE(why.find("magic"), std::string::npos);

    bad = good;
    bad[4] = std::byte{2};
    EXPECT_FALSE(ConnectRequest::decode(bad, &why));
    EXPECT_NE(why.find("version 2"), std::string::npos);

    bad = good;
    bad[5] = std::byte{9};
    EXPECT_FALSE(ConnectRequest::decode(bad, &why));
    EXPECT_NE(why.find("mode"), std::string::npos);

    bad = good;
    bad[6] = std::byte{6};
    EXPECT_FALSE(ConnectRequest::decode(bad, &why));
    bad = good;
    bad[7] = std::byte{4};
    EXPECT_FALSE(ConnectRequest::decode(bad, &why));
    EXPECT_NE(why.find("op 4"), std::string::npos);
}

TEST(ConnectRequest, ResumeFieldsRoundTripAndAreAbsentFromTheBaseLayout) {
    ConnectRequest q = sample_request();
    q.resuming = true;
    q.resume_from = 0x00ABCDEF;
    q.results_from = 0x00123456;
    const auto b = q.encode();
    EXPECT_EQ(std::to_integer<uint8_t>(b[44]), 1);
    EXPECT_EQ(std::to_integer<uint8_t>(b[48]), 0x00);
    EXPECT_EQ(std::to_integer<uint8_t>(b[49]), 0xAB);
    EXPECT_EQ(std::to_integer<uint8_t>(b[51]), 0xEF);
    EXPECT_EQ(std::to_integer<uint8_t>(b[53]), 0x12);
    EXPECT_EQ(std::to_integer<uint8_t>(b[55]), 0x56);
    std::string why;
    const auto d = ConnectRequest::decode(b, &why);
    ASSERT_TRUE(d) << why;
    EXPECT_TRUE(d->resuming);
    EXPECT_EQ(d->resume_from, 0x00ABCDEFu);
    EXPECT_EQ(d->results_from, 0x00123456u);
    // A worker of the 52-byte layout: resuming, no results_from (every result written again).
    const auto mid = ConnectRequest::decode(std::span(b).first(ConnectRequest::kResumeSize), &why);
    ASSERT_TRUE(mid) << why;
    EXPECT_TRUE(mid->resuming);
    EXPECT_EQ(mid->resume_from, 0x00ABCDEFu);
    EXPECT_EQ(mid->results_from, 0u);
    // An older worker's 44 bytes: the same job, not resuming.
    const auto base = ConnectRequest::decode(std::span(b).first(ConnectRequest::kBaseSize), &why);
    ASSERT_TRUE(base) << why;
    EXPECT_FALSE(base->resuming);
    EXPECT_EQ(base->resume_from, 0u);
    EXPECT_TRUE(base->same_job(q));
}

TEST(ConnectRequest, SameJobIgnoresRankAndResultBuffer) {
    const ConnectRequest a = sample_request();
    ConnectRequest b = a;
    b.rank = 3;
    b.result_addr = 1;
    b.result_rkey = 2;
    EXPECT_TRUE(a.same_job(b));
    for (auto change : {+[](ConnectRequest& r) { r.window = 16; },
                        +[](ConnectRequest& r) { r.elements = 1; },
                        +[](ConnectRequest& r) { r.world = 4; },
                        +[](ConnectRequest& r) { r.op = Op::sum; },
                        +[](ConnectRequest& r) { r.elem_type = ElemType::fp32; },
                        +[](ConnectRequest& r) { r.chunk_bytes = 512; },
                        +[](ConnectRequest& r) { r.job_id = 9; }}) {
        ConnectRequest c = a;
        change(c);
        EXPECT_FALSE(a.same_job(c));
    }
}

TEST(ConnectReply, RoundTripsWithStatus) {
    ConnectReply r;
    r.status = static_cast<uint8_t>(RejectReason::bad_rank);
    r.job_id = 7;
    r.contribution_addr = 0x1234567890ull;
    r.contribution_rkey = 0x42;
    const auto b = r.encode();
    static_assert(ConnectReply::kEncodedSize <= 148);  // rdma_reject's private data limit
    std::string why;
    const auto d = ConnectReply::decode(b, &why);
    ASSERT_TRUE(d) << why;
    EXPECT_EQ(d->status, r.status);
    EXPECT_EQ(d->job_id, 7u);
    EXPECT_EQ(d->contribution_addr, r.contribution_addr);
    EXPECT_EQ(d->contribution_rkey, 0x42u);
    EXPECT_FALSE(d->resumed);
    EXPECT_FALSE(ConnectReply::decode(std::span(b).first(10), &why));
    EXPECT_EQ(to_string(RejectReason::bad_rank), "rank outside 1..world or already connected");
}

TEST(ConnectReply, ResumedAnswerRoundTripsAndIsAbsentFromTheBaseLayout) {
    ConnectReply r;
    r.job_id = 7;
    r.resumed = true;
    r.resume_chunk = 300;
    r.has_complete = true;
    r.complete_from = 0x104;
    r.complete[0] = 0x05;   // chunks 0x104 and 0x106
    r.complete[31] = 0x80;  // chunk 0x104 + 255
    const auto b = r.encode();
    EXPECT_EQ(std::to_integer<uint8_t>(b[24]), 3);
    EXPECT_EQ(std::to_integer<uint8_t>(b[30]), 0x01);
    EXPECT_EQ(std::to_integer<uint8_t>(b[31]), 0x2C);
    EXPECT_EQ(std::to_integer<uint8_t>(b[34]), 0x01);
    EXPECT_EQ(std::to_integer<uint8_t>(b[35]), 0x04);
    EXPECT_EQ(std::to_integer<uint8_t>(b[36]), 0x05);
    EXPECT_EQ(std::to_integer<uint8_t>(b[67]), 0x80);
    std::string why;
    const auto d = ConnectReply::decode(b, &why);
    ASSERT_TRUE(d) << why;
    EXPECT_TRUE(d->resumed);
    EXPECT_EQ(d->resume_chunk, 300u);
    EXPECT_TRUE(d->root_has(0) && d->root_has(0x103) && d->root_has(0x104) &&
                d->root_has(0x106) && d->root_has(0x104 + 255));
    EXPECT_FALSE(d->root_has(0x105) || d->root_has(0x104 + 254) || d->root_has(0x104 + 256));
    // An older root's 32 bytes (flags: resumed only), padded by rdma_cm with zeros.
    std::vector<std::byte> older(b.begin(), b.begin() + ConnectReply::kResumeSize);
    older[24] = std::byte{1};
    older.resize(196, std::byte{0});
    const auto mid = ConnectReply::decode(older, &why);
    ASSERT_TRUE(mid) << why;
    EXPECT_TRUE(mid->resumed);
    EXPECT_FALSE(mid->has_complete) << "nothing said of what is complete";
    EXPECT_FALSE(mid->root_has(0));
    const auto base = ConnectReply::decode(std::span(b).first(ConnectReply::kBaseSize), &why);
    ASSERT_TRUE(base) << why;
    EXPECT_FALSE(base->resumed);
    EXPECT_EQ(base->resume_chunk, 0u);
}

std::vector<std::byte> int32s(std::initializer_list<int32_t> v) {
    std::vector<std::byte> b(v.size() * 4);
    std::memcpy(b.data(), std::data(v), b.size());
    return b;
}

std::vector<int32_t> as_int32(std::span<const std::byte> b) {
    std::vector<int32_t> v(b.size() / 4);
    std::memcpy(v.data(), b.data(), b.size());
    return v;
}

// 3 elements per chunk, 5 elements: chunk 0 = [0, 3), chunk 1 = [3, 5).
Chunking small_chunking(uint32_t window) {
    return *Chunking::make(ElemType::int32, 5, 12, window, nullptr);
}

TEST(ChunkReducer, CompletesWhenCountsReachWorldWhoeverDeliversThem) {
    ChunkReducer r(small_chunking(2), ElemType::int32, Op::sum, 3);
    std::string why;
    // Worker 1 directly, then one aggregate of workers 2 and 3 (a switch's WRITE, count 2).
    EXPECT_EQ(r.add(0, 1, int32s({1, 2, 3}), &why), ChunkReducer::Verdict::added);
    EXPECT_EQ(r.add(0, 2, int32s({30, 20, 10}), &why), ChunkReducer::Verdict::complete);
    EXPECT_EQ(r.chunks_completed(), 1u);
    EXPECT_FALSE(r.all_complete());
    // Chunk 1 from three separate WRITEs (its last chunk is 2 elements).
    EXPECT_EQ(r.add(1, 1, int32s({1, -1}), &why), ChunkReducer::Verdict::added);
    EXPECT_EQ(r.add(1, 1, int32s({2, -2}), &why), ChunkReducer::Verdict::added);
    EXPECT_EQ(r.add(1, 1, int32s({4, -4}), &why), ChunkReducer::Verdict::complete);
    EXPECT_TRUE(r.all_complete());

    std::vector<std::byte> out(12);
    ASSERT_TRUE(r.take(0, out));
    EXPECT_EQ(as_int32(out), (std::vector<int32_t>{31, 22, 13}));
    std::vector<std::byte> out1(8);
    ASSERT_TRUE(r.take(1, out1));
    EXPECT_EQ(as_int32(out1), (std::vector<int32_t>{7, -7}));
    EXPECT_FALSE(r.take(1, out1));  // taken once
}

TEST(ChunkReducer, RefusesWithoutTouchingTheAccumulator) {
    ChunkReducer r(small_chunking(1), ElemType::int32, Op::sum, 2);
    std::string why;
    EXPECT_FALSE(r.take(0, std::span<std::byte>{}));  // not complete
    EXPECT_EQ(r.add(2, 1, int32s({1, 2, 3}), &why), ChunkReducer::Verdict::refused);
    EXPECT_NE(why.find("beyond"), std::string::npos) << why;
    EXPECT_EQ(r.add(0, 1, int32s({1, 2}), &why), ChunkReducer::Verdict::refused);
    EXPECT_NE(why.find("8 bytes written, the chunk has 12"), std::string::npos) << why;
    EXPECT_EQ(r.add(0, 0, int32s({1, 2, 3}), &why), ChunkReducer::Verdict::refused);
    EXPECT_EQ(r.add(0, 3, int32s({1, 2, 3}), &why), ChunkReducer::Verdict::refused);

    EXPECT_EQ(r.add(0, 1, int32s({1, 2, 3}), &why), ChunkReducer::Verdict::added);
    // Window 1: chunk 1 shares chunk 0's slot, which is still busy.
    EXPECT_EQ(r.add(1, 1, int32s({9, 9}), &why), ChunkReducer::Verdict::refused);
    EXPECT_NE(why.find("still holds chunk 0"), std::string::npos) << why;
    // Over-count on top of one: refused, the one stays.
    EXPECT_EQ(r.add(0, 2, int32s({100, 100, 100}), &why), ChunkReducer::Verdict::refused);
    EXPECT_EQ(r.add(0, 1, int32s({10, 20, 30}), &why), ChunkReducer::Verdict::complete);
    EXPECT_EQ(r.add(0, 1, int32s({1, 1, 1}), &why), ChunkReducer::Verdict::refused);
    EXPECT_NE(why.find("after the chunk was complete"), std::string::npos) << why;
    // Still refused after take(): a chunk is reduced once.
    std::vector<std::byte> out(12);
    ASSERT_TRUE(r.take(0, out));
    EXPECT_EQ(as_int32(out), (std::vector<int32_t>{11, 22, 33}));
    EXPECT_EQ(r.add(0, 1, int32s({1, 1, 1}), &why), ChunkReducer::Verdict::refused);
    // The slot is free for chunk 1 now.
    EXPECT_EQ(r.add(1, 2, int32s({5, 6}), &why), ChunkReducer::Verdict::complete);
}

// A rank resumed at chunk 4 that resumes again with nothing of its own received since (a process
// that restarts right after a reconnect says 0): it writes from 4 again, never below, where its
// earlier contributions are held by a switch and would be added twice (docs/rdma.md "A worker
// process that restarts"). Complete chunks are skipped; its own WRITEs raise the point too.
TEST(ResumePoints, AnEarlierResumeIsNeverGoneBelow) {
    const Chunking c = *Chunking::make(ElemType::int32, 3 * 8, 12, 8, nullptr);  // 8 chunks
    ChunkReducer r(c, ElemType::int32, Op::sum, 2);
    ResumePoints p(2);
    std::string why;
    EXPECT_EQ(p.resume(1, 0, r, c.chunks()), 0u);  // nothing known: where it says
    EXPECT_EQ(p.resume(1, 4, r, c.chunks()), 4u);
    EXPECT_EQ(p.resume(1, 0, r, c.chunks()), 4u);  // said 0 after the reconnect at 4
    EXPECT_EQ(p.resume(0, 0, r, c.chunks()), 0u);  // per rank
    ASSERT_EQ(r.add(4, 2, int32s({1, 2, 3}), &why), ChunkReducer::Verdict::complete) << why;
    EXPECT_EQ(p.resume(1, 0, r, c.chunks()), 5u);  // 4 complete: skipped
    p.on_own_write(1, 6);
    EXPECT_EQ(p.resume(1, 0, r, c.chunks()), 7u);  // its own WRITE of 6 came
    p.on_own_write(0, 7);
    EXPECT_EQ(p.resume(0, 3, r, c.chunks()), 8u);  // past the tensor: nothing left to write
}

// The root's reduction of generated tensors, contributions arriving in a scrambled order and
// partly pre-aggregated, passes the worker's verification; one flipped bit fails it.
TEST(Verification, ReducedGeneratedTensorsVerifyAndCorruptionIsCaught) {
    for (const ElemType t : {ElemType::int32, ElemType::fp32}) {
        const uint32_t world = 3;
        const size_t n = 1000;
        const uint64_t seed = 7;
        const auto chunking = *Chunking::make(t, n, 256, 4, nullptr);
        std::vector<wire::BfrId> ids(world);
        std::iota(ids.begin(), ids.end(), wire::BfrId{1});
        std::vector<std::vector<std::byte>> data;
        for (const auto id : ids) {
            data.push_back(worker::generate(t, n, seed, id));
        }
        ChunkReducer r(chunking, t, Op::sum, world);
        std::vector<std::byte> got(chunking.tensor_bytes);
        for (uint32_t c = 0; c < chunking.chunks(); ++c) {
            const auto part = [&](uint32_t w) {
                return std::span<const std::byte>(data[w]).subspan(chunking.offset(c),
                                                                   chunking.length(c));
            };
            std::string why;
            // Rank 3 first, then ranks 1 and 2 as one aggregate (summed in wire order first).
            ASSERT_EQ(r.add(c, 1, part(2), &why), ChunkReducer::Verdict::added) << why;
            ChunkReducer pair(*Chunking::make(t, chunking.length(c) / 4, chunking.length(c), 1,
                                              nullptr),
                              t, Op::sum, 2);
            pair.add(0, 1, part(0), &why);
            ASSERT_EQ(pair.add(0, 1, part(1), &why), ChunkReducer::Verdict::complete);
            std::vector<std::byte> agg(chunking.length(c));
            ASSERT_TRUE(pair.take(0, agg));
            ASSERT_EQ(r.add(c, 2, agg, &why), ChunkReducer::Verdict::complete) << why;
            ASSERT_TRUE(r.take(c, std::span(got).subspan(chunking.offset(c), chunking.length(c))));
        }
        const auto ref = worker::reference(t, Op::sum, n, seed, ids);
        const auto v = worker::verify(t, Op::sum, n, seed, ids, ref, got);
        EXPECT_TRUE(v.ok) << reduce::to_string(t) << ": " << v.detail;
        if (t == ElemType::int32) {
            EXPECT_EQ(got, ref);  // bit-exact
        }
        got[4 * 517 + 1] ^= std::byte{0x40};
        EXPECT_FALSE(worker::verify(t, Op::sum, n, seed, ids, ref, got).ok)
            << reduce::to_string(t);
    }
}

}  // namespace
}  // namespace ina::rdma
