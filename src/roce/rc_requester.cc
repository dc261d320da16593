// SPDX-License-Identifier: Apache-2.0
#include "roce/rc_requester.h"

#include <algorithm>

namespace ina::roce {

namespace {

constexpr uint32_t kFastRecoverySteps = 5;
constexpr uint32_t kAlphaOne = 1024;
// Bytes a WRITE packet adds on the wire around its payload (Ethernet + FCS, IPv4, UDP, BTH,
// RETH, ICRC), for pacing.
constexpr uint64_t kPacketOverheadBytes = 18 + 20 + 8 + kBthBytes + kRethBytes + kIcrcBytes;

uint32_t packets_of(uint32_t length, uint32_t pmtu) {
    return length == 0 ? 1 : (length + pmtu - 1) / pmtu;
}

}  // namespace

Requester::Requester(const RequesterConfig& config)
    : config_(config),
      timeout_ns_(ack_timeout_ns(config.timeout)),
      next_psn_(config.initial_psn & 0xFFFFFF),
      una_(next_psn_),
      send_psn_(next_psn_),
      sent_high_(next_psn_),
      retries_left_(config.retry_cnt & 7),
      rnr_retries_left_(config.rnr_retry & 7),
      current_mbps_(config.rate.line_rate_mbps),
      target_mbps_(config.rate.line_rate_mbps) {
    config_.max_inflight_packets = std::clamp<uint32_t>(config_.max_inflight_packets, 1, 1u << 22);
    config_.ack_req_every = std::max<uint32_t>(config_.ack_req_every, 1);
}

bool Requester::post(const WriteRequest& request, uint64_t& seq) {
    const uint32_t packets = packets_of(request.length, config_.pmtu);
    // PSN comparisons are serial over 2^24: keep what is outstanding far below 2^23.
    const uint64_t outstanding = static_cast<uint32_t>(psn_diff(next_psn_, una_));
    if (state_ != State::ready || tail_ - head_ >= kMaxMessages || request.length > (1u << 31) ||
        outstanding + packets > kMaxOutstandingPackets) {
        return false;
    }
    Message& m = messages_[tail_ % kMaxMessages];
    m.request = request;
    m.first_psn = next_psn_;
    m.packets = packets;
    next_psn_ = psn_add(next_psn_, m.packets);
    seq = tail_++;
    return true;
}

bool Requester::next(uint64_t now_ns, Transmit& out) {
    if (state_ != State::ready || send_psn_ == next_psn_ || now_ns < rnr_until_ns_) {
        return false;
    }
    update_rate(now_ns);
    if (rate_limited_ && now_ns < pace_next_ns_) {
        return false;
    }
    const uint32_t inflight = static_cast<uint32_t>(psn_diff(send_psn_, una_));
    if (inflight >= config_.max_inflight_packets) {
        return false;
    }
    const Message& m = message(send_seq_);
    const uint32_t index = static_cast<uint32_t>(psn_diff(send_psn_, m.first_psn));
    const bool first = index == 0;
    const bool last = index + 1 == m.packets;
    const WriteRequest& w = m.request;
    out = {};
    out.message = send_seq_;
    out.cookie = w.cookie;
    out.offset = index * config_.pmtu;
    out.length = std::min(config_.pmtu, w.length - out.offset);
    out.psn = send_psn_;
    out.retransmission = psn_diff(send_psn_, sent_high_) < 0;
    if (first && last) {
        out.opcode = w.has_imm ? op::kWriteOnlyImm : op::kWriteOnly;
    } else if (first) {
        out.opcode = op::kWriteFirst;
    } else if (last) {
        out.opcode = w.has_imm ? op::kWriteLastImm : op::kWriteLast;
    } else {
        out.opcode = op::kWriteMiddle;
    }
    out.has_reth = first;
    out.reth = {w.remote_va, w.rkey, w.length};
    out.has_imm = last && w.has_imm;
    out.imm = out.has_imm ? w.imm : 0;
    // AckReq on each message's last packet, periodically inside long ones, and on the packet
    // that fills the window (so that a full window always has an ACK coming).
    ++since_ack_req_;
    out.ack_req = last || since_ack_req_ >= config_.ack_req_every ||
                  inflight + 1 >= config_.max_inflight_packets;
    if (out.ack_req) {
        since_ack_req_ = 0;
    }

    send_psn_ = psn_add(send_psn_, 1);
    if (last) {
        ++send_seq_;
    }
    if (out.retransmission) {
        ++retransmitted_;
    } else {
        sent_high_ = send_psn_;
    }
    if (!timer_armed_ && timeout_ns_ != 0) {
        timer_armed_ = true;
        deadline_ns_ = now_ns + timeout_ns_;
    }
    if (rate_limited_) {
        const uint64_t bits = (out.length + kPacketOverheadBytes) * 8;
        pace_next_ns_ = std::max(pace_next_ns_, now_ns) + bits * 1000 / current_mbps_;
    }
    return true;
}

void Requester::acknowledge_before(uint32_t psn, uint64_t now_ns, ResponseOutcome& out) {
    out.first_completed = head_;
    if (psn_diff(psn, una_) <= 0) {
        return;
    }
    una_ = psn;
    while (head_ != tail_) {
        const Message& m = message(head_);
        if (psn_diff(psn_add(m.first_psn, m.packets), una_) > 0) {
            break;
        }
        ++head_;
        ++out.completed;
    }
    // Progress: the retry budgets start over and the timer measures from now.
    retries_left_ = config_.retry_cnt & 7;
    rnr_retries_left_ = config_.rnr_retry & 7;
    timer_armed_ = una_ != sent_high_ && timeout_ns_ != 0;
    deadline_ns_ = now_ns + timeout_ns_;
    if (psn_diff(send_psn_, una_) < 0) {
        go_back_to(una_);  // a late ACK covered packets a go-back-N had rewound over
    }
}

void Requester::go_back_to(uint32_t psn) {
    send_psn_ = psn;
    send_seq_ = head_;
    while (send_seq_ != tail_) {
        const Message& m = message(send_seq_);
        if (psn_diff(psn, psn_add(m.first_psn, m.packets)) < 0) {
            break;
        }
        ++send_seq_;
    }
    since_ack_req_ = 0;
}

void Requester::fail(RequesterError e, uint8_t syndrome) {
    state_ = State::error;
    error_ = e;
    error_syndrome_ = syndrome;
    timer_armed_ = false;
}

ResponseOutcome Requester::on_response(const Packet& packet, uint64_t now_ns) {
    ResponseOutcome out;
    out.first_completed = head_;
    if (state_ != State::ready || packet.bth.opcode != op::kAcknowledge) {
        return out;
    }
    const uint32_t psn = packet.bth.psn;
    const uint8_t syndrome = packet.aeth.syndrome;
    const aeth::Kind kind = aeth::kind(syndrome);
    // An ACK names the last PSN it covers; a NAK names the first PSN it does not.
    const uint32_t covers_before = kind == aeth::Kind::ack ? psn_add(psn, 1) : psn;
    if (kind == aeth::Kind::reserved) {
        return out;
    }
    if (psn_diff(covers_before, sent_high_) > 0) {
        out.kind = ResponseKind::ghost;
        return out;
    }
    if (psn_diff(covers_before, una_) < 0 ||
        (kind == aeth::Kind::ack && covers_before == una_)) {
        out.kind = ResponseKind::stale;
        return out;
    }
    acknowledge_before(covers_before, now_ns, out);
    if (kind == aeth::Kind::ack) {
        out.kind = ResponseKind::ack;
        return out;
    }
    if (kind == aeth::Kind::rnr_nak) {
        if (rnr_retries_left_ == 0) {
            fail(RequesterError::rnr_retry_exceeded, syndrome);
            out.kind = ResponseKind::fatal;
            return out;
        }
        if ((config_.rnr_retry & 7) != 7) {
            --rnr_retries_left_;
        }
        rnr_until_ns_ = now_ns + rnr_timer_ns(syndrome & 0x1F);
        timer_armed_ = false;  // the wait is the RNR timer's; the ACK timer restarts on resend
        go_back_to(una_);
        out.kind = ResponseKind::rnr;
        return out;
    }
    if (syndrome == aeth::kNakPsnSequence) {
        if (now_ns < rnr_until_ns_ && psn == una_) {
            // The responder NAKs the packets pipelined behind the one it RNR-NAKed: the RNR
            // wait already goes back to this PSN, so this is no new loss and costs no retry.
            out.kind = ResponseKind::nak_sequence;
            return out;
        }
        if (retries_left_ == 0) {
            fail(RequesterError::retry_exceeded, syndrome);
            out.kind = ResponseKind::fatal;
            return out;
        }
        --retries_left_;
        go_back_to(una_);
        out.kind = ResponseKind::nak_sequence;
        return out;
    }
    const RequesterError e = syndrome == aeth::kNakInvalidRequest ? RequesterError::nak_invalid_request
                             : syndrome == aeth::kNakRemoteAccess ? RequesterError::nak_remote_access
                             : syndrome == aeth::kNakRemoteOperational
                                 ? RequesterError::nak_remote_operational
                                 : RequesterError::nak_other;
    fail(e, syndrome);
    out.kind = ResponseKind::fatal;
    return out;
}

bool Requester::tick(uint64_t now_ns) {
    if (state_ != State::ready || !timer_armed_ || now_ns < deadline_ns_) {
        return false;
    }
    timer_armed_ = false;
    if (una_ == sent_high_) {
        return false;  // nothing outstanding
    }
    if (retries_left_ == 0) {
        fail(RequesterError::retry_exceeded, 0);
        return false;
    }
    --retries_left_;
    go_back_to(una_);
    return true;
}

void Requester::on_cnp(uint64_t now_ns) {
    const RateConfig& r = config_.rate;
    update_rate(now_ns);
    target_mbps_ = current_mbps_;
    const uint64_t cut = uint64_t{current_mbps_} * alpha_ / (2 * kAlphaOne);
    current_mbps_ = std::max<uint32_t>(r.min_rate_mbps, current_mbps_ - static_cast<uint32_t>(cut));
    alpha_ = alpha_ - (alpha_ >> r.g_shift) + (kAlphaOne >> r.g_shift);
    recovery_steps_ = 0;
    next_increase_ns_ = now_ns + r.increase_period_ns;
    rate_limited_ = current_mbps_ < r.line_rate_mbps;
}

void Requester::update_rate(uint64_t now_ns) {
    const RateConfig& r = config_.rate;
    // Bounded catch-up: after a long quiet spell a few dozen steps reach line rate anyway.
    for (int step = 0; rate_limited_ && step < 64 && now_ns >= next_increase_ns_; ++step) {
        alpha_ -= alpha_ >> r.g_shift;
        if (recovery_steps_ >= kFastRecoverySteps) {
            target_mbps_ = std::min(r.line_rate_mbps, target_mbps_ + r.additive_increase_mbps);
        } else {
            ++recovery_steps_;
        }
        current_mbps_ = static_cast<uint32_t>((uint64_t{current_mbps_} + target_mbps_ + 1) / 2);
        next_increase_ns_ += r.increase_period_ns;
        rate_limited_ = current_mbps_ < r.line_rate_mbps;
    }
    if (rate_limited_ && now_ns >= next_increase_ns_) {
        next_increase_ns_ = now_ns + r.increase_period_ns;
    }
}

}  // namespace ina::roce
