// SPDX-License-Identifier: Apache-2.0
// Arbitrary input never breaks the transport's invariants: a million pseudo-random packets (a
// worker's legal stream with PSN gaps, duplicates and arbitrary damage: any opcode, length,
// RETH, pad, P_Key) into a Responder, and random posts,
// ACKs/NAKs of any syndrome and PSN, timer ticks and CNPs into a Requester. Checked after every
// step: nothing advances without commit, placements stay inside the registered region, the MSN
// moves by one per completed message, packets to send lie inside what was posted, completions
// only grow, and the error state is final.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "roce/rc_requester.h"
#include "roce/rc_responder.h"

namespace ina::roce {
namespace {

TEST(RoceRobustness, ResponderKeepsItsInvariantsUnderArbitraryPackets) {
    constexpr uint64_t kVa = 0x10000;
    constexpr uint64_t kBytes = 1 << 16;
    std::mt19937_64 rng(11);
    int executed = 0, errors = 0;
    for (int qp_round = 0; qp_round < 1000; ++qp_round) {
        ResponderConfig config;
        config.initial_psn = static_cast<uint32_t>(rng()) & 0xFFFFFF;
        config.pmtu = 256u << (rng() % 5);
        config.region = {kVa, kBytes, 9};
        Responder qp(config);
        qp.post_receives(static_cast<uint32_t>(rng() % 40));
        // A model of the worker's message in progress: the packets it generates are legal,
        // except for occasional PSN gaps and duplicates and rare arbitrary damage.
        bool open = false;
        bool send = false;
        uint64_t left = 0;
        for (int i = 0; i < 1000; ++i) {
            Packet p;
            const uint32_t pmtu = config.pmtu;
            uint8_t opcode = 0;
            uint32_t len = 0;
            if (!open) {
                send = rng() % 4 == 0;
                const uint64_t total = rng() % (4 * pmtu);
                const bool only = total <= pmtu;
                const bool imm = rng() % 3 == 0;
                opcode = send ? (only ? (imm ? op::kSendOnlyImm : op::kSendOnly) : op::kSendFirst)
                              : (only ? (imm ? op::kWriteOnlyImm : op::kWriteOnly) : op::kWriteFirst);
                len = only ? static_cast<uint32_t>(total) : pmtu;
                p.reth = {kVa + rng() % (kBytes - total), 9, static_cast<uint32_t>(total)};
                left = total;
            } else {
                const bool last = left <= pmtu;
                opcode = send ? (last ? op::kSendLast : op::kSendMiddle)
                              : (last ? op::kWriteLast : op::kWriteMiddle);
                len = last ? static_cast<uint32_t>(left) : pmtu;
            }
            const uint32_t epsn = qp.expected_psn();
            p.bth.psn = epsn;
            const uint64_t dice = rng() % 1000;
            if (dice < 50) {
                p.bth.psn = psn_add(epsn, static_cast<uint32_t>(1 + rng() % 5));  // a gap
            } else if (dice < 100) {
                p.bth.psn = psn_add(epsn, static_cast<uint32_t>(-1 - static_cast<int>(rng() % 5)));
            } else if (dice < 102) {
                opcode = static_cast<uint8_t>(rng());
            } else if (dice < 104) {
                len = static_cast<uint32_t>(rng() % 5000);
            } else if (dice < 106) {
                p.reth = {rng(), static_cast<uint32_t>(rng() % 11), static_cast<uint32_t>(rng())};
            } else if (dice < 108) {
                p.bth.pkey = 0x1234;
            }
            p.bth.opcode = opcode;
            p.info = opcode_info(opcode);
            p.bth.ack_req = (rng() & 1) != 0;
            p.payload_bytes = len;
            p.bth.pad = static_cast<uint8_t>(dice == 108 ? (1 + (0u - len)) & 3u : (0u - len) & 3u);
            const uint32_t msn = qp.msn();
            const bool was_error = qp.state() == Responder::State::error;
            const Verdict v = qp.receive(p);
            ASSERT_EQ(qp.expected_psn(), epsn) << "receive alone advanced";
            if (was_error) {
                ASSERT_EQ(v.action, Action::drop);
                ASSERT_EQ(v.drop, DropReason::qp_error);
                continue;
            }
            if (v.action == Action::execute) {
                ASSERT_EQ(v.where.psn, epsn);
                ASSERT_LE(v.where.length, config.pmtu);
                if (v.where.write && v.where.length != 0) {
                    ASSERT_LE(v.where.region_offset + v.where.length, kBytes) << "outside the region";
                    ASSERT_EQ(v.where.va, kVa + v.where.region_offset);
                }
                if (rng() % 10 == 0) {
                    const Reply r = qp.refuse();
                    ASSERT_EQ(aeth::kind(r.syndrome), aeth::Kind::rnr_nak);
                    ASSERT_EQ(qp.expected_psn(), epsn);
                } else {
                    ASSERT_TRUE(qp.commit());
                    ++executed;
                    open = !v.where.last;
                    left -= v.where.length;
                    ASSERT_EQ(qp.expected_psn(), psn_add(epsn, 1));
                    ASSERT_EQ(qp.msn(), v.where.last ? psn_add(msn, 1) : msn);
                }
            } else {
                ASSERT_FALSE(qp.commit());
                ASSERT_EQ(qp.msn(), msn);
            }
            if (v.action == Action::reply && v.fatal) {
                ASSERT_EQ(qp.state(), Responder::State::error);
                ++errors;
            }
            Reply ack;
            if (qp.take_ack(ack)) {
                ASSERT_EQ(ack.psn, psn_add(qp.expected_psn(), 0xFFFFFF));
            }
        }
    }
    EXPECT_GT(executed, 50000) << "the generator reached the execute path";
    EXPECT_GT(errors, 200) << "and the fatal ones";
    std::printf("responder: %d packets executed, %d QPs put into error\n", executed, errors);
}

TEST(RoceRobustness, RequesterKeepsItsInvariantsUnderArbitraryResponses) {
    std::mt19937_64 rng(12);
    uint64_t sent = 0, completed_total = 0;
    for (int qp_round = 0; qp_round < 200; ++qp_round) {
        RequesterConfig config;
        config.initial_psn = static_cast<uint32_t>(rng()) & 0xFFFFFF;
        config.pmtu = 256u << (rng() % 5);
        config.timeout = static_cast<uint8_t>(rng() % 8);
        config.retry_cnt = static_cast<uint8_t>(rng() % 8);
        config.rnr_retry = static_cast<uint8_t>(rng() % 8);
        config.max_inflight_packets = static_cast<uint32_t>(1 + rng() % 64);
        Requester qp(config);
        std::vector<uint32_t> lengths;
        uint64_t now = 0;
        uint64_t completed = 0;
        for (int i = 0; i < 3000; ++i) {
            now += rng() % 20000;
            const bool was_error = qp.state() == Requester::State::error;
            switch (rng() % 5) {
            case 0: {
                uint64_t seq = 0;
                const auto len = static_cast<uint32_t>(rng() % 3 ? rng() % 6000 : 0);
                if (qp.post(WriteRequest{0, 0, len, (rng() & 1) != 0, 0, lengths.size()}, seq)) {
                    ASSERT_FALSE(was_error);
                    ASSERT_EQ(seq, lengths.size());
                    lengths.push_back(len);
                }
                break;
            }
            case 1:
            case 2: {
                Transmit t;
                while (qp.next(now, t)) {
                    ASSERT_FALSE(was_error);
                    ASSERT_LT(t.message, lengths.size());
                    ASSERT_GE(t.message, qp.completed_messages());
                    ASSERT_LE(t.offset + t.length, lengths[t.message]);
                    ASSERT_LE(t.length, config.pmtu);
                    ASSERT_LT(psn_diff(t.psn, qp.next_psn()), 0);
                    ASSERT_LE(qp.inflight_packets(), config.max_inflight_packets);
                    ++sent;
                }
                break;
            }
            case 3: {
                Packet p;
                p.bth.opcode = rng() % 10 ? op::kAcknowledge : static_cast<uint8_t>(rng());
                p.info = opcode_info(p.bth.opcode);
                // Mostly PSNs from just before the oldest unacknowledged one to just past the
                // highest sent; sometimes anything.
                const uint32_t span = qp.inflight_packets() + 3;
                p.bth.psn = rng() % 10 ? psn_add(qp.oldest_unacked_psn(),
                                                 static_cast<uint32_t>(rng() % span) - 2)
                                       : static_cast<uint32_t>(rng()) & 0xFFFFFF;
                p.aeth.syndrome = static_cast<uint8_t>(rng() % 30 ? aeth::kAckUnlimited : rng());
                const auto out = qp.on_response(p, now);
                ASSERT_EQ(out.first_completed, completed);
                completed += out.completed;
                break;
            }
            default:
                if (rng() % 2) {
                    qp.tick(now);
                } else {
                    qp.on_cnp(now);
                    ASSERT_GE(qp.rate_mbps(), config.rate.min_rate_mbps);
                }
            }
            ASSERT_EQ(qp.completed_messages(), completed);
            ASSERT_LE(completed, lengths.size());
            if (was_error) {
                ASSERT_EQ(qp.state(), Requester::State::error) << "the error state is final";
            }
        }
        completed_total += completed;
    }
    std::printf("requester: %lu packets sent, %lu messages completed\n",
                static_cast<unsigned long>(sent), static_cast<unsigned long>(completed_total));
    EXPECT_GT(sent, 10000u);
    EXPECT_GT(completed_total, 1000u);
}

}  // namespace
}  // namespace ina::roce
