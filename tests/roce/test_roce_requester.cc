// SPDX-License-Identifier: Apache-2.0
// The RC requester (src/roce/rc_requester.h) against reference/rocev2.md §3.2, one table row
// per rule: each row posts WRITEs, asks for packets at given times, feeds ACKs/NAKs and timer
// ticks, and checks every answer and the QP's state after the last step. The DCQCN-like rate
// state has its own tests below.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "rule_rows.h"
#include "roce/rc_requester.h"

namespace ina::roce {
namespace {

constexpr uint32_t kPmtu = 1024;
constexpr uint32_t kStart = 500;
constexpr uint8_t kTimeoutExp = 10;  // 4.096 us * 2^10 = 4194304 ns
constexpr uint64_t kTimeout = 4194304;

enum class Op : uint8_t { post, send, nothing, respond, tick };

struct Step {
    Op op = Op::send;
    uint64_t now = 0;
    // post
    uint32_t length = 0;
    bool imm = false;
    // send: the packet expected
    uint8_t opcode = 0;
    uint32_t psn = 0;
    uint32_t offset = 0;
    uint32_t bytes = 0;
    bool ack_req = false;
    bool retransmission = false;
    // respond: AETH syndrome and BTH PSN; the outcome expected
    uint8_t syndrome = 0;
    ResponseKind kind = ResponseKind::ack;
    uint32_t completed = 0;
    // tick: whether it goes back
    bool fired = false;
};

Step post(uint32_t length, bool imm = false) {
    return {.op = Op::post, .length = length, .imm = imm};
}
Step send(uint8_t opcode, uint32_t psn, uint32_t offset, uint32_t bytes, bool a, bool retx = false,
          uint64_t now = 0) {
    return {.op = Op::send, .now = now, .opcode = opcode, .psn = psn & 0xFFFFFF, .offset = offset,
            .bytes = bytes, .ack_req = a, .retransmission = retx};
}
Step nothing(uint64_t now = 0) { return {.op = Op::nothing, .now = now}; }
Step respond(uint8_t syndrome, uint32_t psn, ResponseKind kind, uint32_t completed = 0,
             uint64_t now = 0) {
    return {.op = Op::respond, .now = now, .psn = psn & 0xFFFFFF, .syndrome = syndrome,
            .kind = kind, .completed = completed};
}
Step ack(uint32_t psn, uint32_t completed, uint64_t now = 0) {
    return respond(aeth::kAckUnlimited, psn, ResponseKind::ack, completed, now);
}
Step tick(uint64_t now, bool fired) { return {.op = Op::tick, .now = now, .fired = fired}; }

struct Final {
    uint64_t completed;
    Requester::State state = Requester::State::ready;
    RequesterError error = RequesterError::none;
};

struct Row {
    std::string rule;
    std::vector<Step> steps;
    Final after;
    RequesterConfig config;
};

RequesterConfig base() {
    RequesterConfig c;
    c.initial_psn = kStart;
    c.pmtu = kPmtu;
    c.timeout = kTimeoutExp;
    c.retry_cnt = 2;
    c.rnr_retry = 1;
    c.max_inflight_packets = 16;
    c.ack_req_every = 64;
    return c;
}
// base() with one field changed.
template <class T>
RequesterConfig with(T RequesterConfig::*field, T value) {
    RequesterConfig c = base();
    c.*field = value;
    return c;
}

constexpr uint8_t kF = op::kWriteFirst, kM = op::kWriteMiddle, kL = op::kWriteLast,
                  kLI = op::kWriteLastImm, kO = op::kWriteOnly, kOI = op::kWriteOnlyImm;
constexpr uint8_t kSeq = aeth::kNakPsnSequence;
constexpr auto kErr = Requester::State::error;
using RK = ResponseKind;

std::vector<Row> rows() {
    const uint32_t s = kStart;
    // Repeated RNR NAKs, each waited out (rnr_retry 7: forever).
    std::vector<Step> rnr_forever = {post(8), send(kO, s, 0, 8, true)};
    for (uint64_t i = 1; i <= 20; ++i) {
        rnr_forever.push_back(respond(aeth::kRnrNak | 1, s, RK::rnr, 0, i * 100000));
        rnr_forever.push_back(send(kO, s, 0, 8, true, true, i * 100000 + 10000));
    }
    rnr_forever.push_back(ack(s, 1, 5000000));
    return {
        {"3.2 segmentation by PMTU: WRITE FIRST / MIDDLE / LAST with immediate, PSNs in order, "
         "AckReq on the message's last packet",
         {post(2500, true), send(kF, s, 0, kPmtu, false), send(kM, s + 1, kPmtu, kPmtu, false),
          send(kLI, s + 2, 2 * kPmtu, 452, true), nothing()},
         {0},
         base()},
        {"3.2 segmentation: a message of PMTU or less is one WRITE ONLY (with immediate: ONLY_IMM)",
         {post(kPmtu), post(8, true), post(kPmtu + 1), send(kO, s, 0, kPmtu, true),
          send(kOI, s + 1, 0, 8, true), send(kF, s + 2, 0, kPmtu, false),
          send(kL, s + 3, kPmtu, 1, true)},
         {0},
         base()},
        {"3.2 segmentation: a zero-length WRITE is one ONLY packet without payload",
         {post(0), send(kO, s, 0, 0, true), ack(s, 1)},
         {1},
         base()},
        {"3.2 AckReq periodically inside long messages (every N packets)",
         {post(5 * kPmtu), send(kF, s, 0, kPmtu, false), send(kM, s + 1, kPmtu, kPmtu, false),
          send(kM, s + 2, 2 * kPmtu, kPmtu, true), send(kM, s + 3, 3 * kPmtu, kPmtu, false),
          send(kL, s + 4, 4 * kPmtu, kPmtu, true)},
         {0},
         with(&RequesterConfig::ack_req_every, uint32_t{3})},
        {"3.2 an ACK of PSN n completes every message whose last PSN <= n, and reports them",
         {post(kPmtu), post(2 * kPmtu), post(kPmtu), send(kO, s, 0, kPmtu, true),
          send(kF, s + 1, 0, kPmtu, false), send(kL, s + 2, kPmtu, kPmtu, true),
          send(kO, s + 3, 0, kPmtu, true), ack(s + 2, 2), ack(s + 3, 1)},
         {3},
         base()},
        {"3.2 an ACK inside a message completes nothing until its last PSN",
         {post(3 * kPmtu), send(kF, s, 0, kPmtu, false), send(kM, s + 1, kPmtu, kPmtu, false),
          send(kL, s + 2, 2 * kPmtu, kPmtu, true), ack(s + 1, 0), ack(s + 2, 1)},
         {1},
         base()},
        {"3.2 a ghost ACK (PSN beyond anything sent) is ignored",
         {post(kPmtu), post(kPmtu), send(kO, s, 0, kPmtu, true),
          respond(aeth::kAckUnlimited, s + 1, RK::ghost), respond(aeth::kAckUnlimited, s + 900, RK::ghost),
          respond(kSeq, s + 2, RK::ghost), ack(s, 1), send(kO, s + 1, 0, kPmtu, true)},
         {1},
         base()},
        {"3.2 an ACK for PSNs already acknowledged is ignored",
         {post(kPmtu), post(kPmtu), send(kO, s, 0, kPmtu, true), send(kO, s + 1, 0, kPmtu, true),
          ack(s + 1, 2), respond(aeth::kAckUnlimited, s + 1, RK::stale),
          respond(aeth::kAckUnlimited, s, RK::stale), respond(kSeq, s, RK::stale)},
         {2},
         base()},
        {"3.2 go-back-N: NAK-sequence p acknowledges everything below p, resend from p",
         {post(kPmtu), post(kPmtu), post(kPmtu), post(kPmtu), send(kO, s, 0, kPmtu, true),
          send(kO, s + 1, 0, kPmtu, true), send(kO, s + 2, 0, kPmtu, true),
          send(kO, s + 3, 0, kPmtu, true), respond(kSeq, s + 2, RK::nak_sequence, 2),
          send(kO, s + 2, 0, kPmtu, true, true), send(kO, s + 3, 0, kPmtu, true, true), nothing(),
          ack(s + 3, 2)},
         {4},
         base()},
        {"3.2 go-back-N from inside a message resends from that packet with its own opcode",
         {post(3 * kPmtu), send(kF, s, 0, kPmtu, false), send(kM, s + 1, kPmtu, kPmtu, false),
          send(kL, s + 2, 2 * kPmtu, kPmtu, true), respond(kSeq, s + 1, RK::nak_sequence, 0),
          send(kM, s + 1, kPmtu, kPmtu, false, true), send(kL, s + 2, 2 * kPmtu, kPmtu, true, true)},
         {0},
         base()},
        {"3.2 NAK-sequences without progress use up retry_cnt, then the QP is in error",
         {post(kPmtu), send(kO, s, 0, kPmtu, true), respond(kSeq, s, RK::nak_sequence),
          send(kO, s, 0, kPmtu, true, true), respond(kSeq, s, RK::nak_sequence),
          send(kO, s, 0, kPmtu, true, true), respond(kSeq, s, RK::fatal), nothing()},
         {0, kErr, RequesterError::retry_exceeded},
         base()},
        {"3.2 local ACK timeout 4.096 us * 2^timeout: resend from the oldest unacknowledged PSN",
         {post(kPmtu), post(kPmtu), send(kO, s, 0, kPmtu, true), send(kO, s + 1, 0, kPmtu, true),
          tick(kTimeout - 1, false), tick(kTimeout, true), send(kO, s, 0, kPmtu, true, true, kTimeout),
          send(kO, s + 1, 0, kPmtu, true, true, kTimeout), tick(2 * kTimeout - 1, false),
          ack(s + 1, 2, 2 * kTimeout - 1), tick(10 * kTimeout, false)},
         {2},
         base()},
        {"3.2 the ACK timer restarts on progress",
         {post(kPmtu), post(kPmtu), send(kO, s, 0, kPmtu, true), send(kO, s + 1, 0, kPmtu, true),
          ack(s, 1, kTimeout - 10), tick(kTimeout, false), tick(2 * kTimeout - 11, false),
          tick(2 * kTimeout - 10, true), send(kO, s + 1, 0, kPmtu, true, true, 2 * kTimeout)},
         {1},
         base()},
        {"3.2 timeouts use up retry_cnt, then the QP is in error (retry exceeded)",
         {post(kPmtu), send(kO, s, 0, kPmtu, true), tick(kTimeout, true),
          send(kO, s, 0, kPmtu, true, true, kTimeout), tick(2 * kTimeout, true),
          send(kO, s, 0, kPmtu, true, true, 2 * kTimeout), tick(3 * kTimeout, false),
          nothing(3 * kTimeout)},
         {0, kErr, RequesterError::retry_exceeded},
         base()},
        {"3.2 progress restores the retry budget",
         {post(kPmtu), post(kPmtu), send(kO, s, 0, kPmtu, true), send(kO, s + 1, 0, kPmtu, true),
          tick(kTimeout, true), send(kO, s, 0, kPmtu, true, true, kTimeout),
          send(kO, s + 1, 0, kPmtu, true, true, kTimeout), tick(2 * kTimeout, true),
          send(kO, s, 0, kPmtu, true, true, 2 * kTimeout), ack(s, 1, 2 * kTimeout),
          tick(3 * kTimeout, true), send(kO, s + 1, 0, kPmtu, true, true, 3 * kTimeout),
          tick(4 * kTimeout, true), send(kO, s + 1, 0, kPmtu, true, true, 4 * kTimeout),
          ack(s + 1, 1, 4 * kTimeout)},
         {2},
         base()},
        {"3.2 timeout 0 means no timeout",
         {post(kPmtu), send(kO, s, 0, kPmtu, true), tick(uint64_t{1} << 50, false)},
         {0},
         with(&RequesterConfig::timeout, uint8_t{0})},
        {"3.2 RNR NAK: wait the encoded timer, then resend from its PSN",
         {post(kPmtu), post(kPmtu), send(kO, s, 0, kPmtu, true), send(kO, s + 1, 0, kPmtu, true),
          respond(aeth::kRnrNak | 3, s + 1, RK::rnr, 1, 1000), nothing(1000 + 29999),
          send(kO, s + 1, 0, kPmtu, true, true, 1000 + 30000), ack(s + 1, 1, 40000)},
         {2},
         base()},
        {"3.2 RNR NAK: the NAK-sequence for packets pipelined behind it costs no retry",
         {post(kPmtu), post(kPmtu), send(kO, s, 0, kPmtu, true), send(kO, s + 1, 0, kPmtu, true),
          respond(aeth::kRnrNak | 1, s, RK::rnr, 0, 0), respond(kSeq, s, RK::nak_sequence, 0, 5),
          send(kO, s, 0, kPmtu, true, true, 10000), respond(aeth::kRnrNak | 1, s, RK::rnr, 0, 20000),
          respond(kSeq, s, RK::nak_sequence, 0, 20005), send(kO, s, 0, kPmtu, true, true, 30000),
          respond(aeth::kRnrNak | 1, s, RK::rnr, 0, 40000), respond(kSeq, s, RK::nak_sequence, 0, 40005),
          send(kO, s, 0, kPmtu, true, true, 50000), ack(s + 1, 2, 60000)},
         {2},
         with(&RequesterConfig::rnr_retry, uint8_t{7})},
        {"3.2 RNR NAK: rnr_retry exhausted puts the QP in error",
         {post(kPmtu), send(kO, s, 0, kPmtu, true), respond(aeth::kRnrNak | 1, s, RK::rnr, 0, 0),
          send(kO, s, 0, kPmtu, true, true, 10000), respond(aeth::kRnrNak | 1, s, RK::fatal, 0, 20000)},
         {0, kErr, RequesterError::rnr_retry_exceeded},
         base()},
        {"3.2 RNR NAK: rnr_retry 7 retries forever", rnr_forever, {1}, with(&RequesterConfig::rnr_retry, uint8_t{7})},
        {"3.2 NAK invalid request (0x61) is fatal",
         {post(kPmtu), send(kO, s, 0, kPmtu, true), respond(aeth::kNakInvalidRequest, s, RK::fatal),
          nothing()},
         {0, kErr, RequesterError::nak_invalid_request},
         base()},
        {"3.2 NAK remote access (0x62) is fatal",
         {post(kPmtu), send(kO, s, 0, kPmtu, true), respond(aeth::kNakRemoteAccess, s, RK::fatal)},
         {0, kErr, RequesterError::nak_remote_access},
         base()},
        {"3.2 NAK remote operational (0x63) is fatal, after acknowledging what came before",
         {post(kPmtu), post(kPmtu), send(kO, s, 0, kPmtu, true), send(kO, s + 1, 0, kPmtu, true),
          respond(aeth::kNakRemoteOperational, s + 1, RK::fatal, 1)},
         {1, kErr, RequesterError::nak_remote_operational},
         base()},
        {"window: at most max_inflight packets unacknowledged; AckReq on the one filling it",
         {post(6 * kPmtu), send(kF, s, 0, kPmtu, false), send(kM, s + 1, kPmtu, kPmtu, false),
          send(kM, s + 2, 2 * kPmtu, kPmtu, false), send(kM, s + 3, 3 * kPmtu, kPmtu, true),
          nothing(), ack(s + 3, 0), send(kM, s + 4, 4 * kPmtu, kPmtu, false),
          send(kL, s + 5, 5 * kPmtu, kPmtu, true)},
         {0},
         with(&RequesterConfig::max_inflight_packets, uint32_t{4})},
        {"3.2 a late ACK after go-back-N skips the resends it covers",
         {post(kPmtu), post(kPmtu), post(kPmtu), send(kO, s, 0, kPmtu, true),
          send(kO, s + 1, 0, kPmtu, true), send(kO, s + 2, 0, kPmtu, true), tick(kTimeout, true),
          send(kO, s, 0, kPmtu, true, true, kTimeout), ack(s + 1, 2, kTimeout),
          send(kO, s + 2, 0, kPmtu, true, true, kTimeout), nothing(kTimeout)},
         {2},
         base()},
        {"PSN wrap-around at 2^24: segmentation, ACKs and ghosts across 0xFFFFFF -> 0",
         {post(4 * kPmtu), send(kF, 0xFFFFFE, 0, kPmtu, false),
          send(kM, 0xFFFFFF, kPmtu, kPmtu, false), send(kM, 0, 2 * kPmtu, kPmtu, false),
          send(kL, 1, 3 * kPmtu, kPmtu, true), respond(aeth::kAckUnlimited, 2, RK::ghost),
          ack(0xFFFFFF, 0), respond(kSeq, 0, RK::nak_sequence, 0),
          send(kM, 0, 2 * kPmtu, kPmtu, false, true), send(kL, 1, 3 * kPmtu, kPmtu, true, true),
          ack(1, 1), respond(aeth::kAckUnlimited, 0xFFFFFF, RK::stale)},
         {1},
         with(&RequesterConfig::initial_psn, uint32_t{0xFFFFFE})},
    };
}

Packet response(uint8_t syndrome, uint32_t psn) {
    Packet p;
    p.bth.opcode = op::kAcknowledge;
    p.bth.psn = psn;
    p.info = opcode_info(op::kAcknowledge);
    p.aeth = {syndrome, 0};
    return p;
}

class RequesterRules : public testing::TestWithParam<Row> {};

TEST_P(RequesterRules, Holds) {
    const Row& row = GetParam();
    Requester qp(row.config);
    uint64_t posted = 0;
    for (size_t i = 0; i < row.steps.size(); ++i) {
        const Step& step = row.steps[i];
        const std::string where = row.rule + ", step " + std::to_string(i);
        switch (step.op) {
        case Op::post: {
            WriteRequest w{0x10000 + posted * 0x1000, 0x77, step.length, step.imm,
                           0xC0DE0000u + static_cast<uint32_t>(posted), 1000 + posted};
            uint64_t seq = ~uint64_t{0};
            ASSERT_TRUE(qp.post(w, seq)) << where;
            EXPECT_EQ(seq, posted) << where;
            ++posted;
            break;
        }
        case Op::send: {
            Transmit t;
            ASSERT_TRUE(qp.next(step.now, t)) << where;
            EXPECT_EQ(t.opcode, step.opcode) << where;
            EXPECT_EQ(t.psn, step.psn) << where;
            EXPECT_EQ(t.offset, step.offset) << where;
            EXPECT_EQ(t.length, step.bytes) << where;
            EXPECT_EQ(t.ack_req, step.ack_req) << where;
            EXPECT_EQ(t.retransmission, step.retransmission) << where;
            EXPECT_EQ(t.cookie, 1000 + t.message) << where;
            const bool first = t.opcode == kF || t.opcode == kO || t.opcode == kOI;
            const bool with_imm = t.opcode == kLI || t.opcode == kOI;
            EXPECT_EQ(t.has_reth, first) << where;
            EXPECT_EQ(t.has_imm, with_imm) << where;
            if (first) {
                EXPECT_EQ(t.reth.va, 0x10000 + t.message * 0x1000) << where;
                EXPECT_EQ(t.reth.rkey, 0x77u) << where;
            }
            if (with_imm) {
                EXPECT_EQ(t.imm, 0xC0DE0000u + t.message) << where;
            }
            break;
        }
        case Op::nothing: {
            Transmit t;
            EXPECT_FALSE(qp.next(step.now, t)) << where << ": sent PSN " << t.psn;
            break;
        }
        case Op::respond: {
            const uint64_t before = qp.completed_messages();
            const auto out = qp.on_response(response(step.syndrome, step.psn), step.now);
            EXPECT_EQ(out.kind, step.kind) << where;
            EXPECT_EQ(out.completed, step.completed) << where;
            EXPECT_EQ(out.first_completed, before) << where;
            EXPECT_EQ(qp.completed_messages(), before + step.completed) << where;
            break;
        }
        case Op::tick:
            EXPECT_EQ(qp.tick(step.now), step.fired) << where;
            break;
        }
    }
    EXPECT_EQ(qp.completed_messages(), row.after.completed) << row.rule;
    EXPECT_EQ(qp.state(), row.after.state) << row.rule;
    EXPECT_EQ(qp.error(), row.after.error) << row.rule << ": " << to_string(qp.error());
    if (row.after.state == kErr) {
        uint64_t seq = 0;
        EXPECT_FALSE(qp.post(WriteRequest{}, seq)) << row.rule << ": posted on a QP in error";
    }
}

INSTANTIATE_TEST_SUITE_P(Rocev2Section3_2, RequesterRules, testing::ValuesIn(rows()),
                         test::rule_name<Row>);

TEST(Requester, TimerEncodings) {
    EXPECT_EQ(ack_timeout_ns(0), 0u) << "0 = infinite";
    EXPECT_EQ(ack_timeout_ns(1), 8192u);
    EXPECT_EQ(ack_timeout_ns(14), 4096u << 14);
    EXPECT_EQ(rnr_timer_ns(0), 655360000u);
    EXPECT_EQ(rnr_timer_ns(1), 10000u);
    EXPECT_EQ(rnr_timer_ns(14), 1280000u);
    EXPECT_EQ(rnr_timer_ns(31), 491520000u);
}

TEST(Requester, PostRefusesWhenTheMessageRingIsFull) {
    Requester qp(base());
    uint64_t seq = 0;
    for (uint32_t i = 0; i < Requester::kMaxMessages; ++i) {
        ASSERT_TRUE(qp.post(WriteRequest{0, 0, 4, false, 0, i}, seq));
    }
    EXPECT_FALSE(qp.post(WriteRequest{}, seq));
    EXPECT_EQ(qp.posted_messages(), Requester::kMaxMessages);
    Transmit t;
    ASSERT_TRUE(qp.next(0, t));
    ASSERT_EQ(qp.on_response(response(aeth::kAckUnlimited, t.psn), 0).completed, 1u);
    EXPECT_TRUE(qp.post(WriteRequest{}, seq)) << "room again once one completed";
    EXPECT_EQ(seq, Requester::kMaxMessages);
}

TEST(Requester, PostRefusesMoreOutstandingPsnsThanSerialArithmeticAllows) {
    RequesterConfig c = base();
    c.pmtu = 256;
    Requester qp(c);
    uint64_t seq = 0;
    // 2^31 bytes at PMTU 256 are 2^23 packets: more than half the PSN space.
    EXPECT_FALSE(qp.post(WriteRequest{0, 0, 1u << 31, false, 0, 0}, seq));
    // 2^30 bytes are 2^22 packets: exactly the limit.
    ASSERT_TRUE(qp.post(WriteRequest{0, 0, 1u << 30, false, 0, 0}, seq));
    EXPECT_FALSE(qp.post(WriteRequest{0, 0, 1, false, 0, 1}, seq)) << "one PSN over";
    Transmit t;
    ASSERT_TRUE(qp.next(0, t));
    ASSERT_EQ(qp.on_response(response(aeth::kAckUnlimited, t.psn), 0).kind, ResponseKind::ack);
    EXPECT_TRUE(qp.post(WriteRequest{0, 0, 1, false, 0, 1}, seq)) << "one PSN acknowledged";
}

// The rate state: a CNP cuts the rate by alpha/2 (alpha starts at 1: half), packets are then
// paced at that rate, and quiet increase periods bring it back to line rate.
TEST(Requester, CnpCutsTheRateAndPacesUntilRecovered) {
    RequesterConfig c = base();
    c.max_inflight_packets = 1 << 20;
    c.rate = {.line_rate_mbps = 10000, .min_rate_mbps = 100, .additive_increase_mbps = 1000,
              .increase_period_ns = 50000, .g_shift = 4};
    Requester qp(c);
    uint64_t seq = 0;
    for (int i = 0; i < 200; ++i) {
        ASSERT_TRUE(qp.post(WriteRequest{0, 0, kPmtu, false, 0, 0}, seq));
    }
    Transmit t;
    // At line rate nothing is paced: back-to-back at the same instant.
    ASSERT_TRUE(qp.next(0, t));
    ASSERT_TRUE(qp.next(0, t));
    qp.on_cnp(1000);
    EXPECT_EQ(qp.rate_mbps(), 5000u);
    EXPECT_EQ(qp.target_rate_mbps(), 10000u);
    // Paced at 5 Gbit/s: a 1024-byte WRITE (+ 78 bytes of headers) takes 1763 ns.
    ASSERT_TRUE(qp.next(1000, t));
    EXPECT_FALSE(qp.next(1000 + 1762, t));
    EXPECT_TRUE(qp.next(1000 + 1763, t));
    // A second CNP with alpha ~ 1 - g + g cuts again.
    qp.on_cnp(2000);
    EXPECT_LT(qp.rate_mbps(), 2600u);
    EXPECT_GT(qp.rate_mbps(), 2400u);
    EXPECT_EQ(qp.target_rate_mbps(), 5000u);
    // Fast recovery: each quiet period halves the distance to the target.
    const uint32_t before = qp.rate_mbps();
    qp.next(2000 + 50000, t);
    EXPECT_EQ(qp.rate_mbps(), (before + 5000 + 1) / 2);
    // Long quiet: back to line rate, unpaced.
    qp.next(100'000'000, t);
    EXPECT_EQ(qp.rate_mbps(), 10000u);
    EXPECT_TRUE(qp.next(100'000'000, t));
    EXPECT_TRUE(qp.next(100'000'000, t));
}

TEST(Requester, CnpNeverCutsBelowTheMinimumRate) {
    RequesterConfig c = base();
    c.rate.min_rate_mbps = 1000;
    Requester qp(c);
    for (int i = 0; i < 100; ++i) {
        qp.on_cnp(static_cast<uint64_t>(i));
    }
    EXPECT_EQ(qp.rate_mbps(), 1000u);
}

}  // namespace
}  // namespace ina::roce
