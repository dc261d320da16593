// SPDX-License-Identifier: Apache-2.0
#include "roce/rc_responder.h"

namespace ina::roce {

namespace {

// RC request opcodes the responder may see; everything else on the QP (responses, ACKs, CNPs,
// UC/UD) belongs to the requester side or to no RC QP.
constexpr bool rc_request(uint8_t opcode) {
    return opcode <= op::kReadRequest || opcode == op::kCompareSwap ||
           opcode == op::kFetchAdd || opcode == op::kSendLastInv || opcode == op::kSendOnlyInv;
}

constexpr bool is_write(uint8_t opcode) {
    return opcode >= op::kWriteFirst && opcode <= op::kWriteOnlyImm;
}

}  // namespace

Responder::Responder(const ResponderConfig& config)
    : config_(config), epsn_(config.initial_psn & 0xFFFFFF) {}

Verdict Responder::nak(uint8_t syndrome, bool fatal) {
    Verdict v;
    v.action = Action::reply;
    v.reply = {syndrome, epsn_, msn_};
    v.fatal = fatal;
    if (fatal) {
        state_ = State::error;
        error_syndrome_ = syndrome;
    }
    ack_owed_ = false;  // a NAK for PSN p acknowledges every PSN before p
    return v;
}

Verdict Responder::receive(const Packet& packet) {
    pending_ = false;
    Verdict v;
    if (state_ == State::error) {
        v.drop = DropReason::qp_error;
        return v;
    }
    const uint8_t opcode = packet.bth.opcode;
    if (!packet.info.known || !rc_request(opcode)) {
        v.drop = DropReason::wrong_transport;
        return v;
    }
    // P_Key match ignores the membership bit (bit 15).
    if (((packet.bth.pkey ^ config_.pkey) & 0x7FFF) != 0) {
        v.drop = DropReason::bad_pkey;
        return v;
    }
    const int32_t ahead = psn_diff(packet.bth.psn, epsn_);
    if (ahead > 0) {
        if (nak_sent_) {
            v.drop = DropReason::nak_outstanding;
            return v;
        }
        nak_sent_ = true;
        return nak(aeth::kNakPsnSequence, false);
    }
    if (ahead < 0) {
        // A duplicate: executed before, so only re-acknowledged (IBA C9-105).
        v.action = Action::reply;
        v.reply = {aeth::kAckUnlimited, psn_add(epsn_, 0xFFFFFF), msn_};
        ack_owed_ = false;
        return v;
    }
    return check_in_order(packet);
}

Verdict Responder::check_in_order(const Packet& packet) {
    // Every return is `v`, so the verdict is built in the caller's slot (no copy of its
    // Placement on the way out): a refusal assigns it first.
    Verdict v;
    const uint8_t opcode = packet.bth.opcode;
    if (opcode == op::kReadRequest || opcode == op::kCompareSwap || opcode == op::kFetchAdd ||
        opcode == op::kSendLastInv || opcode == op::kSendOnlyInv) {
        v = nak(aeth::kNakInvalidRequest, true);  // unsupported operation (docs/rdma.md R5)
        return v;
    }
    const Kind kind = is_write(opcode) ? Kind::write : Kind::send;
    const Position pos = packet.info.position;
    const bool starts = pos == Position::first || pos == Position::only;
    const bool ends = pos == Position::last || pos == Position::only;
    if (starts != (in_message_ == Kind::none) || (!starts && kind != in_message_)) {
        v = nak(aeth::kNakInvalidRequest, true);  // opcode sequence
        return v;
    }
    const uint32_t len = packet.payload_bytes;
    const uint32_t pmtu = config_.pmtu;
    const bool length_ok = pos == Position::only   ? len <= pmtu
                           : pos == Position::last ? len >= 1 && len <= pmtu
                                                   : len == pmtu;
    if (!length_ok || packet.bth.pad != ((0u - len) & 3u)) {
        v = nak(aeth::kNakInvalidRequest, true);  // length
        return v;
    }
    const bool has_imm = (packet.info.ext & ext::kImm) != 0;
    Placement& where = v.where;
    where.write = kind == Kind::write;
    where.first = starts;
    where.last = ends;
    where.has_imm = has_imm;
    where.imm = has_imm ? packet.imm : 0;
    where.message_offset = starts ? 0 : message_bytes_;
    where.length = len;
    where.psn = packet.bth.psn;
    where.msn = psn_add(msn_, 1);
    bool takes_receive = false;
    uint64_t left = 0;
    if (kind == Kind::write) {
        uint64_t va = write_va_;
        left = write_left_;
        if (starts) {
            va = packet.reth.va;
            left = packet.reth.dma_len;
            const MemoryRegion& r = config_.region;
            // A zero-length WRITE touches no memory, so its R_Key and VA are not checked.
            if (left != 0 && (packet.reth.rkey != r.rkey || va < r.va ||
                              va - r.va > r.length || left > r.length - (va - r.va))) {
                v = nak(aeth::kNakRemoteAccess, true);
                return v;
            }
        }
        // The DMA length bounds the message: no packet past it, no LAST short of it.
        if (len > left || (ends ? len != left : len == left)) {
            v = nak(aeth::kNakInvalidRequest, true);
            return v;
        }
        where.va = va;
        where.region_offset = va - config_.region.va;
        takes_receive = has_imm;
    } else {
        if (config_.receive_bytes != 0 && where.message_offset + len > config_.receive_bytes) {
            v = nak(aeth::kNakInvalidRequest, true);  // longer than the receive buffer
            return v;
        }
        takes_receive = starts;
    }
    if (takes_receive && receives_ == 0) {
        v = Verdict{};
        v.action = Action::reply;
        v.reply = rnr_nak();
        return v;
    }
    hold(where, kind, packet.bth.ack_req, takes_receive, left);
    v.action = Action::execute;
    return v;
}

bool Responder::commit() {
    if (!pending_ || state_ != State::ready) {
        return false;
    }
    pending_ = false;
    const Placement& w = pending_where_;
    epsn_ = psn_add(epsn_, 1);
    nak_sent_ = false;
    if (pending_takes_receive_) {
        --receives_;
    }
    message_bytes_ = w.message_offset + w.length;
    write_va_ = w.va + w.length;
    write_left_ = pending_left_ - w.length;
    in_message_ = w.last ? Kind::none : pending_kind_;
    if (w.last) {
        msn_ = w.msn;
    }
    if (pending_ack_req_) {
        ack_owed_ = true;
    }
    return true;
}

Reply Responder::rnr_nak() {
    // The RNR NAK sends the requester back to ePSN after its timer, so it also stands for the
    // NAK-sequence the packets it had pipelined behind would earn: they are dropped silently
    // until ePSN comes again. (A NAK-sequence per RNR would cost the requester a retry each
    // time, and a long back-pressure would exhaust retry_cnt on a QP that lost nothing.)
    nak_sent_ = true;
    ack_owed_ = false;
    return {static_cast<uint8_t>(aeth::kRnrNak | (config_.min_rnr_timer & 0x1F)), epsn_, msn_};
}

Reply Responder::refuse() {
    pending_ = false;
    return rnr_nak();
}

bool Responder::take_ack(Reply& out) {
    if (!ack_owed_) {
        return false;
    }
    ack_owed_ = false;
    out = {aeth::kAckUnlimited, psn_add(epsn_, 0xFFFFFF), msn_};
    return true;
}

}  // namespace ina::roce
