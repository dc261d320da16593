// SPDX-License-Identifier: Apache-2.0
// The RC responder (src/roce/rc_responder.h) against reference/rocev2.md §3.1, one table row
// per rule: each row drives a fresh QP through packets (and ACK collections) and checks every
// verdict and the QP's state after the last step.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "rule_rows.h"
#include "roce/rc_responder.h"

namespace ina::roce {
namespace {

constexpr uint32_t kPmtu = 1024;
constexpr uint64_t kRegionVa = 0x7f0000000000;
constexpr uint64_t kRegionBytes = 64 * 1024;
constexpr uint32_t kRkey = 0x1234;
constexpr uint8_t kRnrTimer = 3;
constexpr uint32_t kStart = 100;

// A packet as parse() would give it.
struct In {
    uint8_t opcode = op::kWriteOnly;
    uint32_t psn = kStart;
    uint32_t len = 0;
    bool ack_req = false;
    uint64_t va = kRegionVa;
    uint32_t rkey = kRkey;
    uint32_t dma_len = 0;
    int pad = -1;  // -1: the correct PadCnt for len
    uint16_t pkey = kDefaultPkey;
    uint32_t imm = 0xA1B2C3D4;
};

Packet packet_of(const In& in) {
    Packet p;
    p.info = opcode_info(in.opcode);
    p.bth.opcode = in.opcode;
    p.bth.psn = in.psn & 0xFFFFFF;
    p.bth.ack_req = in.ack_req;
    p.bth.pkey = in.pkey;
    p.bth.pad = static_cast<uint8_t>(in.pad < 0 ? (0u - in.len) & 3u : static_cast<uint32_t>(in.pad));
    p.reth = {in.va, in.rkey, in.dma_len};
    p.imm = in.imm;
    p.payload_bytes = in.len;
    return p;
}

enum class Do : uint8_t {
    receive_commit,  // receive; if the verdict is execute, commit
    receive_refuse,  // receive; if the verdict is execute, refuse (expect the RNR NAK)
    receive_only,    // receive and neither commit nor refuse (a silent drop by the caller)
    take_ack,        // collect the owed ACK
    post_receive,    // post one receive buffer
};

struct Expect {
    Action action = Action::execute;
    uint8_t syndrome = 0;  // reply / take_ack: the syndrome ...
    uint32_t psn = 0;      // ... the PSN ...
    std::optional<uint32_t> msn;  // ... and the MSN (when given)
    bool fatal = false;
    DropReason drop = DropReason::count;
    // execute: placement
    std::optional<uint64_t> region_offset;
    std::optional<uint64_t> message_offset;
    std::optional<bool> last;
    bool none = false;  // take_ack: no ACK owed
};

struct Step {
    Do what = Do::receive_commit;
    In in;
    Expect expect;
};

struct Final {
    uint32_t epsn;
    uint32_t msn;
    Responder::State state = Responder::State::ready;
};

struct Row {
    std::string rule;
    std::vector<Step> steps;
    Final after;
    uint32_t initial_psn = kStart;
};

Expect exec() { return {}; }
Expect exec_at(uint64_t region_offset, uint64_t message_offset, bool last) {
    Expect e;
    e.region_offset = region_offset;
    e.message_offset = message_offset;
    e.last = last;
    return e;
}
Expect exec_send(uint64_t message_offset, bool last) {
    Expect e;
    e.message_offset = message_offset;
    e.last = last;
    return e;
}
Expect reply(uint8_t syndrome, uint32_t psn, uint32_t msn, bool fatal = false) {
    Expect e;
    e.action = Action::reply;
    e.syndrome = syndrome;
    e.psn = psn;
    e.msn = msn;
    e.fatal = fatal;
    return e;
}
Expect drop(DropReason r) {
    Expect e;
    e.action = Action::drop;
    e.drop = r;
    return e;
}
Expect ack(uint32_t psn, uint32_t msn) { return reply(aeth::kAckUnlimited, psn, msn); }
Expect no_ack() {
    Expect e;
    e.none = true;
    return e;
}

// Packet builders. The WRITE helpers carry a RETH for a message of dma bytes at region
// offset `at`.
In wonly(uint32_t psn, uint32_t len, bool a = true, uint64_t at = 0) {
    return {.opcode = op::kWriteOnly, .psn = psn, .len = len, .ack_req = a, .va = kRegionVa + at,
            .dma_len = len};
}
In wfirst(uint32_t psn, uint32_t dma, uint64_t at = 0) {
    return {.opcode = op::kWriteFirst, .psn = psn, .len = kPmtu, .va = kRegionVa + at,
            .dma_len = dma};
}
In wmiddle(uint32_t psn) { return {.opcode = op::kWriteMiddle, .psn = psn, .len = kPmtu}; }
In wlast(uint32_t psn, uint32_t len, bool a = true) {
    return {.opcode = op::kWriteLast, .psn = psn, .len = len, .ack_req = a};
}
In sonly(uint32_t psn, uint32_t len, bool a = true) {
    return {.opcode = op::kSendOnly, .psn = psn, .len = len, .ack_req = a};
}
In with(In in, uint8_t opcode) {
    in.opcode = opcode;
    return in;
}

const Step post{Do::post_receive, {}, {}};
Step take(Expect e) { return {Do::take_ack, {}, e}; }

constexpr uint8_t kSeq = aeth::kNakPsnSequence, kInv = aeth::kNakInvalidRequest,
                  kAcc = aeth::kNakRemoteAccess, kRnr = aeth::kRnrNak | kRnrTimer;
constexpr auto kErr = Responder::State::error;

std::vector<Row> rows() {
    const uint32_t s = kStart;
    return {
        {"3.1 PSN == ePSN: execute, then ePSN++",
         {{Do::receive_commit, wonly(s, 16), exec_at(0, 0, true)},
          {Do::receive_commit, wonly(s + 1, 16, true, 64), exec_at(64, 0, true)}},
         {s + 2, 2}},
        {"3.1 PSN == ePSN: nothing advances before commit (caller dropped it silently)",
         {{Do::receive_only, wonly(s, 16), exec()},
          {Do::receive_commit, wonly(s, 16), exec()}},
         {s + 1, 1}},
        {"3.1 PSN ahead: one NAK-sequence with PSN = ePSN, packet dropped",
         {{Do::receive_commit, wonly(s + 3, 16), reply(kSeq, s, 0)}},
         {s, 0}},
        {"3.1 PSN ahead: no more NAKs until the expected PSN arrives",
         {{Do::receive_commit, wonly(s + 1, 16), reply(kSeq, s, 0)},
          {Do::receive_commit, wonly(s + 2, 16), drop(DropReason::nak_outstanding)},
          {Do::receive_commit, wonly(s + 9, 16), drop(DropReason::nak_outstanding)},
          {Do::receive_commit, wonly(s, 16), exec()},
          {Do::receive_commit, wonly(s + 2, 16), reply(kSeq, s + 1, 1)}},
         {s + 1, 1}},
        {"3.1 PSN behind: re-ACK PSN = ePSN - 1, syndrome 0x1F, no re-execution",
         {{Do::receive_commit, wonly(s, 16), exec()},
          {Do::receive_commit, wonly(s + 1, 16), exec()},
          {Do::receive_commit, wonly(s, 16), ack(s + 1, 2)},
          {Do::receive_commit, wonly(s - 5000, 16), ack(s + 1, 2)}},
         {s + 2, 2}},
        {"3.1 PSN behind without AckReq: still re-ACKed",
         {{Do::receive_commit, wonly(s, 16, false), exec()},
          {Do::receive_commit, wonly(s, 16, false), ack(s, 1)}},
         {s + 1, 1}},
        {"3.1 opcode sequence: FIRST -> MIDDLE* -> LAST executes",
         {{Do::receive_commit, wfirst(s, 3 * kPmtu + 8, 128), exec_at(128, 0, false)},
          {Do::receive_commit, wmiddle(s + 1), exec_at(128 + kPmtu, kPmtu, false)},
          {Do::receive_commit, wmiddle(s + 2), exec_at(128 + 2 * kPmtu, 2 * kPmtu, false)},
          {Do::receive_commit, wlast(s + 3, 8), exec_at(128 + 3 * kPmtu, 3 * kPmtu, true)}},
         {s + 4, 1}},
        {"3.1 opcode sequence: MIDDLE without FIRST is NAK invalid request, QP error",
         {{Do::receive_commit, wmiddle(s), reply(kInv, s, 0, true)},
          {Do::receive_commit, wonly(s, 16), drop(DropReason::qp_error)}},
         {s, 0, kErr}},
        {"3.1 opcode sequence: LAST without FIRST is NAK invalid request",
         {{Do::receive_commit, wlast(s, 8), reply(kInv, s, 0, true)}},
         {s, 0, kErr}},
        {"3.1 opcode sequence: ONLY inside an open message is NAK invalid request",
         {{Do::receive_commit, wfirst(s, 2 * kPmtu), exec()},
          {Do::receive_commit, wonly(s + 1, 16), reply(kInv, s + 1, 0, true)}},
         {s + 1, 0, kErr}},
        {"3.1 opcode sequence: FIRST inside an open message is NAK invalid request",
         {{Do::receive_commit, wfirst(s, 2 * kPmtu), exec()},
          {Do::receive_commit, wfirst(s + 1, 2 * kPmtu), reply(kInv, s + 1, 0, true)}},
         {s + 1, 0, kErr}},
        {"3.1 opcode sequence: SEND MIDDLE inside a WRITE is NAK invalid request",
         {{Do::receive_commit, wfirst(s, 2 * kPmtu), exec()},
          {Do::receive_commit, with(wmiddle(s + 1), op::kSendMiddle), reply(kInv, s + 1, 0, true)}},
         {s + 1, 0, kErr}},
        {"3.1 length: FIRST must carry exactly PMTU",
         {{Do::receive_commit, {.opcode = op::kWriteFirst, .psn = s, .len = kPmtu - 4, .dma_len = 4096},
           reply(kInv, s, 0, true)}},
         {s, 0, kErr}},
        {"3.1 length: MIDDLE must carry exactly PMTU",
         {{Do::receive_commit, wfirst(s, 8 * kPmtu), exec()},
          {Do::receive_commit, {.opcode = op::kWriteMiddle, .psn = s + 1, .len = kPmtu + 4},
           reply(kInv, s + 1, 0, true)}},
         {s + 1, 0, kErr}},
        {"3.1 length: LAST carries at least 1 byte",
         {{Do::receive_commit, wfirst(s, kPmtu + 1), exec()},
          {Do::receive_commit, wlast(s + 1, 0), reply(kInv, s + 1, 0, true)}},
         {s + 1, 0, kErr}},
        {"3.1 length: LAST carries at most PMTU",
         {{Do::receive_commit, with(sonly(s, kPmtu), op::kSendFirst), reply(kRnr, s, 0)},
          post,
          {Do::receive_commit, with(sonly(s, kPmtu), op::kSendFirst), exec()},
          {Do::receive_commit, with(sonly(s + 1, kPmtu + 4), op::kSendLast), reply(kInv, s + 1, 0, true)}},
         {s + 1, 0, kErr}},
        {"3.1 length: ONLY carries 0..PMTU (0 executes)",
         {{Do::receive_commit, wonly(s, 0), exec_at(0, 0, true)}},
         {s + 1, 1}},
        {"3.1 length: ONLY over PMTU is NAK invalid request",
         {{Do::receive_commit, wonly(s, kPmtu + 4), reply(kInv, s, 0, true)}},
         {s, 0, kErr}},
        {"3.1 length: PadCnt must pad the payload to 4 bytes",
         {{Do::receive_commit, {.opcode = op::kWriteOnly, .psn = s, .len = 6, .dma_len = 6, .pad = 0},
           reply(kInv, s, 0, true)}},
         {s, 0, kErr}},
        {"3.1 RETH: a bad R_Key is NAK remote access, QP error",
         {{Do::receive_commit, {.opcode = op::kWriteOnly, .psn = s, .len = 16, .rkey = kRkey + 1, .dma_len = 16},
           reply(kAcc, s, 0, true)}},
         {s, 0, kErr}},
        {"3.1 RETH: a VA below the region is NAK remote access",
         {{Do::receive_commit, {.opcode = op::kWriteOnly, .psn = s, .len = 16, .va = kRegionVa - 8, .dma_len = 16},
           reply(kAcc, s, 0, true)}},
         {s, 0, kErr}},
        {"3.1 RETH: VA + length past the region is NAK remote access",
         {{Do::receive_commit, wonly(s, 16, true, kRegionBytes - 8), reply(kAcc, s, 0, true)}},
         {s, 0, kErr}},
        {"3.1 RETH: a VA far past the region (no wrap-around) is NAK remote access",
         {{Do::receive_commit, {.opcode = op::kWriteOnly, .psn = s, .len = 16, .va = ~uint64_t{0} - 4, .dma_len = 16},
           reply(kAcc, s, 0, true)}},
         {s, 0, kErr}},
        {"3.1 RETH: the region's last bytes are writable",
         {{Do::receive_commit, wonly(s, 16, true, kRegionBytes - 16), exec_at(kRegionBytes - 16, 0, true)}},
         {s + 1, 1}},
        {"3.1 RETH: a zero-length WRITE touches no memory, so its R_Key is not checked",
         {{Do::receive_commit, {.opcode = op::kWriteOnly, .psn = s, .rkey = 0, .dma_len = 0}, exec()}},
         {s + 1, 1}},
        {"3.1 RETH: packets past the DMA length are NAK invalid request",
         {{Do::receive_commit, wfirst(s, kPmtu + 8), exec()},
          {Do::receive_commit, wmiddle(s + 1), reply(kInv, s + 1, 0, true)}},
         {s + 1, 0, kErr}},
        {"3.1 RETH: a FIRST holding the whole DMA length (no LAST can follow) is NAK invalid request",
         {{Do::receive_commit, wfirst(s, kPmtu), reply(kInv, s, 0, true)}},
         {s, 0, kErr}},
        {"3.1 RETH: a LAST short of the DMA length is NAK invalid request",
         {{Do::receive_commit, wfirst(s, kPmtu + 8), exec()},
          {Do::receive_commit, wlast(s + 1, 4), reply(kInv, s + 1, 0, true)}},
         {s + 1, 0, kErr}},
        {"3.1 RETH: ONLY with a payload other than the DMA length is NAK invalid request",
         {{Do::receive_commit, {.opcode = op::kWriteOnly, .psn = s, .len = 16, .dma_len = 32},
           reply(kInv, s, 0, true)}},
         {s, 0, kErr}},
        {"3.1 no receive WQE for a SEND: RNR NAK 0x20|timer with PSN = the offending PSN",
         {{Do::receive_commit, wonly(s, 16), exec()},
          {Do::receive_commit, sonly(s + 1, 16), reply(kRnr, s + 1, 1)},
          {Do::receive_commit, wonly(s + 2, 16), drop(DropReason::nak_outstanding)},
          post,
          {Do::receive_commit, sonly(s + 1, 16), exec_send(0, true)},
          {Do::receive_commit, sonly(s + 2, 16), reply(kRnr, s + 2, 2)}},
         {s + 2, 2}},
        {"3.1 no receive WQE for a WRITE with immediate: RNR NAK",
         {{Do::receive_commit, with(wonly(s, 16), op::kWriteOnlyImm), reply(kRnr, s, 0)},
          post,
          {Do::receive_commit, with(wonly(s, 16), op::kWriteOnlyImm), exec()}},
         {s + 1, 1}},
        {"3.1 a multi-packet SEND takes one receive at its FIRST",
         {post,
          {Do::receive_commit, with(sonly(s, kPmtu), op::kSendFirst), exec_send(0, false)},
          {Do::receive_commit, with(sonly(s + 1, kPmtu), op::kSendMiddle), exec_send(kPmtu, false)},
          {Do::receive_commit, with(sonly(s + 2, 3), op::kSendLastImm), exec_send(2 * kPmtu, true)},
          {Do::receive_commit, sonly(s + 3, 1), reply(kRnr, s + 3, 1)}},
         {s + 3, 1}},
        {"3.1 caller back-pressure: refuse() is an RNR NAK for that PSN and nothing advances",
         {{Do::receive_refuse, wonly(s, 16), reply(kRnr, s, 0)},
          {Do::receive_commit, wonly(s, 16), exec()}},
         {s + 1, 1}},
        {"3.1 after an RNR NAK, the packets pipelined behind are dropped without a NAK-sequence",
         {{Do::receive_refuse, wonly(s, 16), reply(kRnr, s, 0)},
          {Do::receive_commit, wonly(s + 1, 16), drop(DropReason::nak_outstanding)},
          {Do::receive_commit, wonly(s + 2, 16), drop(DropReason::nak_outstanding)},
          {Do::receive_commit, wonly(s - 1, 16), ack(s - 1, 0)},
          {Do::receive_commit, wonly(s, 16), exec()},
          {Do::receive_commit, wonly(s + 2, 16), reply(kSeq, s + 1, 1)}},
         {s + 1, 1}},
        {"3.1 ACK with A=1: the ACK is owed after commit, PSN = the packet's, MSN current",
         {{Do::receive_commit, wonly(s, 16, true), exec()},
          take(ack(s, 1)),
          take(no_ack())},
         {s + 1, 1}},
        {"3.1 ACK: packets without A=1 are not acknowledged",
         {{Do::receive_commit, wonly(s, 16, false), exec()},
          take(no_ack())},
         {s + 1, 1}},
        {"3.1 ACK coalescing: one ACK for PSN n covers every PSN <= n",
         {{Do::receive_commit, wonly(s, 16, true), exec()},
          {Do::receive_commit, wonly(s + 1, 16, true), exec()},
          {Do::receive_commit, wonly(s + 2, 16, false), exec()},
          take(ack(s + 2, 3)),
          take(no_ack())},
         {s + 3, 3}},
        {"3.1 ACK: a NAK acknowledges what came before, so no ACK stays owed",
         {{Do::receive_commit, wonly(s, 16, true), exec()},
          {Do::receive_commit, wonly(s + 2, 16), reply(kSeq, s + 1, 1)},
          take(no_ack())},
         {s + 1, 1}},
        {"3.1 MSN: +1 per completed message, on LAST/ONLY only",
         {{Do::receive_commit, wfirst(s, 2 * kPmtu), exec()},
          take(no_ack()),
          {Do::receive_commit, {.opcode = op::kWriteLast, .psn = s + 1, .len = kPmtu, .ack_req = true}, exec()},
          take(ack(s + 1, 1)),
          {Do::receive_commit, wonly(s + 2, 4), exec()},
          take(ack(s + 2, 2))},
         {s + 3, 2}},
        {"R5 READ REQUEST is refused: NAK invalid request, QP error",
         {{Do::receive_commit, {.opcode = op::kReadRequest, .psn = s, .dma_len = 64}, reply(kInv, s, 0, true)}},
         {s, 0, kErr}},
        {"R5 COMPARE & SWAP is refused: NAK invalid request",
         {{Do::receive_commit, {.opcode = op::kCompareSwap, .psn = s}, reply(kInv, s, 0, true)}},
         {s, 0, kErr}},
        {"R5 FETCH & ADD is refused: NAK invalid request",
         {{Do::receive_commit, {.opcode = op::kFetchAdd, .psn = s}, reply(kInv, s, 0, true)}},
         {s, 0, kErr}},
        {"R5 SEND with invalidate is refused: NAK invalid request",
         {post, {Do::receive_commit, with(sonly(s, 4), op::kSendOnlyInv), reply(kInv, s, 0, true)}},
         {s, 0, kErr}},
        {"R5 a refused opcode ahead of ePSN is only a PSN sequence error",
         {{Do::receive_commit, {.opcode = op::kReadRequest, .psn = s + 1}, reply(kSeq, s, 0)}},
         {s, 0}},
        {"drop: responses, CNPs and UC/UD opcodes are not the responder's",
         {{Do::receive_commit, {.opcode = op::kAcknowledge, .psn = s}, drop(DropReason::wrong_transport)},
          {Do::receive_commit, {.opcode = op::kReadRespOnly, .psn = s}, drop(DropReason::wrong_transport)},
          {Do::receive_commit, {.opcode = op::kCnp, .psn = s}, drop(DropReason::wrong_transport)},
          {Do::receive_commit, with(sonly(s, 4), op::kUc | op::kSendOnly), drop(DropReason::wrong_transport)},
          {Do::receive_commit, with(sonly(s, 4), op::kUdSendOnly), drop(DropReason::wrong_transport)}},
         {s, 0}},
        {"drop: another partition key (the membership bit does not count)",
         {{Do::receive_commit, {.opcode = op::kWriteOnly, .psn = s, .pkey = 0x8001}, drop(DropReason::bad_pkey)},
          {Do::receive_commit, {.opcode = op::kWriteOnly, .psn = s, .pkey = 0x7FFF}, exec()}},
         {s + 1, 1}},
        {"PSN wrap-around at 2^24: in order across 0xFFFFFF -> 0",
         {{Do::receive_commit, wfirst(0xFFFFFE, 2 * kPmtu + 4), exec()},
          {Do::receive_commit, wmiddle(0xFFFFFF), exec()},
          {Do::receive_commit, wlast(0, 4), exec()},
          take(ack(0, 1)),
          {Do::receive_commit, wonly(1, 4), exec()}},
         {2, 2},
         0xFFFFFE},
        {"PSN wrap-around: a duplicate from before the wrap is re-ACKed with PSN ePSN - 1",
         {{Do::receive_commit, wonly(0xFFFFFF, 4), exec()},
          {Do::receive_commit, wonly(0xFFFFFF, 4), ack(0xFFFFFF, 1)},
          {Do::receive_commit, wonly(0, 4), exec()},
          {Do::receive_commit, wonly(0xFFFFFF, 4), ack(0, 2)}},
         {1, 2},
         0xFFFFFF},
        {"PSN wrap-around: ahead across the wrap is a NAK-sequence with PSN = ePSN",
         {{Do::receive_commit, wonly(3, 4), reply(kSeq, 0xFFFFFD, 0)}},
         {0xFFFFFD, 0},
         0xFFFFFD},
    };
}

void check_execute(const std::string& where, const Verdict& v, const Expect& e) {
    if (e.region_offset) {
        EXPECT_EQ(v.where.region_offset, *e.region_offset) << where;
        EXPECT_EQ(v.where.va, kRegionVa + *e.region_offset) << where;
    }
    if (e.message_offset) {
        EXPECT_EQ(v.where.message_offset, *e.message_offset) << where;
    }
    if (e.last) {
        EXPECT_EQ(v.where.last, *e.last) << where;
    }
}

void check_reply(const std::string& where, const Reply& r, const Expect& e) {
    EXPECT_EQ(r.syndrome, e.syndrome) << where;
    EXPECT_EQ(r.psn, e.psn & 0xFFFFFF) << where;
    if (e.msn) {
        EXPECT_EQ(r.msn, *e.msn) << where;
    }
}

// The packet path's way: take_write_only first, receive() when it declines. Its execute
// verdicts must be receive()'s, and everything else receive()'s own.
Verdict receive_fast_first(Responder& qp, const Packet& p, size_t* taken = nullptr) {
    Verdict v;
    if (qp.take_write_only(p, v.where)) {
        v.action = Action::execute;
        if (taken != nullptr) {
            ++*taken;
        }
        return v;
    }
    return qp.receive(p);
}

// Each rule row runs both ways: receive() alone, and take_write_only before it.
class ResponderRules : public testing::TestWithParam<std::tuple<Row, bool>> {};

TEST_P(ResponderRules, Holds) {
    const Row& row = std::get<0>(GetParam());
    const bool fast = std::get<1>(GetParam());
    ResponderConfig config;
    config.initial_psn = row.initial_psn;
    config.pmtu = kPmtu;
    config.region = {kRegionVa, kRegionBytes, kRkey};
    config.min_rnr_timer = kRnrTimer;
    Responder qp(config);
    for (size_t i = 0; i < row.steps.size(); ++i) {
        const Step& step = row.steps[i];
        const std::string where = row.rule + ", step " + std::to_string(i);
        if (step.what == Do::post_receive) {
            qp.post_receives(1);
            continue;
        }
        if (step.what == Do::take_ack) {
            Reply r;
            const bool owed = qp.take_ack(r);
            EXPECT_EQ(owed, !step.expect.none) << where;
            if (owed && !step.expect.none) {
                check_reply(where, r, step.expect);
            }
            continue;
        }
        const uint32_t epsn = qp.expected_psn();
        const uint32_t msn = qp.msn();
        const Verdict v = fast ? receive_fast_first(qp, packet_of(step.in))
                               : qp.receive(packet_of(step.in));
        const Expect& e = step.expect;
        if (step.what == Do::receive_refuse && v.action == Action::execute) {
            check_reply(where, qp.refuse(), e);
            EXPECT_EQ(qp.expected_psn(), epsn) << where << ": refuse advanced ePSN";
            continue;
        }
        ASSERT_EQ(v.action, e.action) << where;
        switch (v.action) {
        case Action::execute:
            check_execute(where, v, e);
            EXPECT_EQ(qp.expected_psn(), epsn) << where << ": receive alone advanced ePSN";
            if (step.what == Do::receive_commit) {
                EXPECT_TRUE(qp.commit()) << where;
                EXPECT_FALSE(qp.commit()) << where << ": committed twice";
                EXPECT_EQ(qp.expected_psn(), psn_add(epsn, 1)) << where;
                EXPECT_EQ(qp.msn(), v.where.last ? psn_add(msn, 1) : msn) << where;
            }
            break;
        case Action::reply:
            check_reply(where, v.reply, e);
            EXPECT_EQ(v.fatal, e.fatal) << where;
            EXPECT_FALSE(qp.commit()) << where << ": a reply verdict is not committable";
            EXPECT_EQ(qp.expected_psn(), epsn) << where;
            break;
        case Action::drop:
            EXPECT_EQ(v.drop, e.drop) << where << ": " << to_string(v.drop);
            EXPECT_EQ(qp.expected_psn(), epsn) << where;
            break;
        }
    }
    EXPECT_EQ(qp.expected_psn(), row.after.epsn & 0xFFFFFF) << row.rule;
    EXPECT_EQ(qp.msn(), row.after.msn) << row.rule;
    EXPECT_EQ(qp.state(), row.after.state) << row.rule;
    if (row.after.state == Responder::State::error) {
        EXPECT_NE(qp.error_syndrome(), 0) << row.rule;
    }
}

INSTANTIATE_TEST_SUITE_P(
    Rocev2Section3_1, ResponderRules, testing::Combine(testing::ValuesIn(rows()), testing::Bool()),
    [](const testing::TestParamInfo<std::tuple<Row, bool>>& p) {
        return test::rule_name<Row>(testing::TestParamInfo<Row>(std::get<0>(p.param),
                                                                p.index)) +
               (std::get<1>(p.param) ? "_FastFirst" : "");
    });

// take_write_only against receive() on packets drawn around every condition it tests (opcode,
// PSN, P_Key, length, pad, DMA length, R_Key, VA at and past the region's ends, receive buffers,
// a message in progress, the error state): two QPs fed the same packets, one through receive()
// alone and one fast first, give the same verdicts and end in the same state after each step.
TEST(Responder, TakeWriteOnlyIsReceiveForEveryPacketItTakes) {
    ResponderConfig config;
    config.initial_psn = 0xFFFFF0;  // the PSN wraps during the run
    config.pmtu = kPmtu;
    config.region = {kRegionVa, kRegionBytes, kRkey};
    config.min_rnr_timer = kRnrTimer;
    Responder plain(config);
    Responder fast(config);
    uint64_t seed = 0x9E3779B97F4A7C15ull;
    const auto next = [&seed](uint32_t n) {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        return static_cast<uint32_t>(seed % n);
    };
    const uint8_t opcodes[] = {op::kWriteOnly,    op::kWriteOnlyImm, op::kWriteOnly,
                               op::kWriteOnlyImm, op::kWriteOnly,    op::kWriteOnlyImm,
                               op::kWriteOnly,    op::kWriteOnlyImm, op::kWriteOnly,
                               op::kWriteOnlyImm, op::kWriteOnly,    op::kWriteOnlyImm,
                               op::kWriteFirst,   op::kWriteLast,    op::kSendOnly,
                               op::kReadRequest};
    size_t taken = 0;
    for (int i = 0; i < 200000; ++i) {
        if (plain.state() == Responder::State::error) {
            // A fatal NAK ended the QP (an opcode out of sequence, a bad length): both ended.
            ASSERT_EQ(fast.state(), Responder::State::error) << "step " << i;
            plain = Responder(config);
            fast = Responder(config);
        }
        In in;
        in.opcode = opcodes[next(16)];
        in.psn = plain.expected_psn() + (next(16) == 0 ? next(3) - 1 : 0);
        in.len = next(8) == 0 ? kPmtu + 4 * next(2) + next(2) : next(kPmtu / 4 + 1) * 4 - next(2);
        in.dma_len = next(8) == 0 ? in.len + next(3) - 1 : in.len;
        in.pad = next(32) == 0 ? static_cast<int>(next(4)) : -1;
        in.pkey = next(32) == 0 ? static_cast<uint16_t>(kDefaultPkey ^ (1u << next(16)))
                                : kDefaultPkey;
        in.rkey = next(32) == 0 ? kRkey + 1 : kRkey;
        const uint64_t at[] = {0, kRegionBytes - in.dma_len, kRegionBytes - in.dma_len + 4,
                               kRegionBytes, 0 - uint64_t{4}, next(kRegionBytes / 4) * 4ull};
        in.va = kRegionVa + at[next(6)];
        in.ack_req = next(2) == 0;
        if (next(64) == 0) {
            // Drain the receive queue of both so the immediate's RNR case comes up.
            plain = Responder(config);
            fast = Responder(config);
        }
        const Packet p = packet_of(in);
        const Verdict a = plain.receive(p);
        const Verdict b = receive_fast_first(fast, p, &taken);
        ASSERT_EQ(a.action, b.action) << "step " << i;
        if (a.action == Action::execute) {
            const Placement &x = a.where, &y = b.where;
            ASSERT_TRUE(x.write == y.write && x.first == y.first && x.last == y.last &&
                        x.has_imm == y.has_imm && x.imm == y.imm && x.va == y.va &&
                        x.region_offset == y.region_offset &&
                        x.message_offset == y.message_offset && x.length == y.length &&
                        x.psn == y.psn && x.msn == y.msn)
                << "step " << i;
            // Commit most, refuse some: both QPs move alike.
            if (next(8) == 0) {
                const Reply ra = plain.refuse(), rb = fast.refuse();
                ASSERT_TRUE(ra.syndrome == rb.syndrome && ra.psn == rb.psn && ra.msn == rb.msn);
            } else {
                ASSERT_EQ(plain.commit(), fast.commit()) << "step " << i;
            }
        } else if (a.action == Action::reply) {
            ASSERT_TRUE(a.reply.syndrome == b.reply.syndrome && a.reply.psn == b.reply.psn &&
                        a.reply.msn == b.reply.msn && a.fatal == b.fatal)
                << "step " << i;
        } else {
            ASSERT_EQ(a.drop, b.drop) << "step " << i;
        }
        Reply ra, rb;
        const bool owed_a = next(4) == 0 && plain.take_ack(ra);
        ASSERT_EQ(plain.expected_psn(), fast.expected_psn()) << "step " << i;
        ASSERT_EQ(plain.msn(), fast.msn()) << "step " << i;
        ASSERT_EQ(plain.posted_receives(), fast.posted_receives()) << "step " << i;
        ASSERT_EQ(plain.ack_owed() || owed_a, fast.ack_owed()) << "step " << i;
        if (owed_a) {
            ASSERT_TRUE(fast.take_ack(rb));
        }
        if (next(16) == 0) {
            plain.post_receives(1);
            fast.post_receives(1);
        }
    }
    EXPECT_GT(taken, 20000u) << taken;  // the fast path was taken, not only declined
}

TEST(Responder, SendLongerThanTheReceiveBufferIsAnInvalidRequest) {
    ResponderConfig config;
    config.pmtu = 256;
    config.receive_bytes = 300;
    Responder qp(config);
    qp.post_receives(1);
    auto v = qp.receive(packet_of({.opcode = op::kSendFirst, .psn = 0, .len = 256}));
    ASSERT_EQ(v.action, Action::execute);
    ASSERT_TRUE(qp.commit());
    v = qp.receive(packet_of({.opcode = op::kSendLast, .psn = 1, .len = 48}));
    ASSERT_EQ(v.action, Action::reply);
    EXPECT_EQ(v.reply.syndrome, aeth::kNakInvalidRequest);
    EXPECT_TRUE(v.fatal);
}

// A failure from outside (the QP's requester out of retries): a fatal NAK at ePSN, which
// acknowledges what was taken, and the error state; nothing is taken after it.
TEST(Responder, FailAnswersWithAFatalNakAtTheExpectedPsnAndEntersError) {
    ResponderConfig config;
    config.initial_psn = 100;
    config.pmtu = kPmtu;
    config.region = {kRegionVa, kRegionBytes, kRkey};
    Responder qp(config);
    ASSERT_EQ(qp.receive(packet_of(wonly(100, 16))).action, Action::execute);
    ASSERT_TRUE(qp.commit());
    const Reply r = qp.fail(aeth::kNakRemoteOperational);
    EXPECT_EQ(r.syndrome, aeth::kNakRemoteOperational);
    EXPECT_EQ(r.psn, 101u);
    EXPECT_EQ(r.msn, 1u);
    EXPECT_EQ(qp.state(), Responder::State::error);
    EXPECT_EQ(qp.error_syndrome(), aeth::kNakRemoteOperational);
    Reply ack;
    EXPECT_FALSE(qp.take_ack(ack)) << "the NAK acknowledged the WRITE: no ACK owed";
    EXPECT_EQ(qp.receive(packet_of(wonly(101, 16))).action, Action::drop);
}

TEST(Responder, PmtuHelpers) {
    EXPECT_EQ(pmtu_bytes(1), 256u);
    EXPECT_EQ(pmtu_bytes(5), 4096u);
    EXPECT_EQ(pmtu_bytes(0), 0u);
    EXPECT_EQ(pmtu_bytes(6), 0u);
    EXPECT_TRUE(valid_pmtu(2048));
    EXPECT_FALSE(valid_pmtu(1500));
}

// Every PMTU of the range: a message of 2.5 PMTU is FIRST, MIDDLE, LAST with exact lengths.
TEST(Responder, EveryPmtuAcceptsExactlyPmtuSizedFirstAndMiddle) {
    for (const uint32_t pmtu : {256u, 512u, 1024u, 2048u, 4096u}) {
        ResponderConfig config;
        config.pmtu = pmtu;
        config.region = {0x1000, 1 << 20, 7};
        Responder qp(config);
        const uint32_t total = 2 * pmtu + pmtu / 2;
        const In packets[] = {
            {.opcode = op::kWriteFirst, .psn = 0, .len = pmtu, .va = 0x1000, .rkey = 7, .dma_len = total},
            {.opcode = op::kWriteMiddle, .psn = 1, .len = pmtu},
            {.opcode = op::kWriteLast, .psn = 2, .len = pmtu / 2, .ack_req = true}};
        for (const In& in : packets) {
            const auto v = qp.receive(packet_of(in));
            ASSERT_EQ(v.action, Action::execute) << "pmtu " << pmtu << " psn " << in.psn;
            ASSERT_TRUE(qp.commit());
        }
        EXPECT_EQ(qp.msn(), 1u);
        Responder small(config);
        const auto v = small.receive(packet_of({.opcode = op::kWriteFirst, .psn = 0, .len = pmtu / 2,
                                                .va = 0x1000, .rkey = 7, .dma_len = total}));
        EXPECT_EQ(v.action, Action::reply) << "pmtu " << pmtu;
    }
}

}  // namespace
}  // namespace ina::roce
