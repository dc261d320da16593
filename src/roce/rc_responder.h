// SPDX-License-Identifier: Apache-2.0
// The receive side of one RDMA Reliable Connection that the switch terminates (reference/
// rocev2.md §3.1; docs/rdma.md "Server-to-switch transport"): a worker's SENDs and RDMA WRITEs
// into the switch. Pure and per QP: no DPDK state, no allocation, no exceptions, no virtual
// dispatch; a QP's packets always meet on one lcore, so nothing here is shared.
//
// Two phases, so that a contribution is acknowledged only once the caller has stored it:
//   1. receive(packet) checks the packet against the QP (PSN, opcode sequence, lengths, R_Key,
//      receive resources) and changes nothing if it is executable: the verdict says where its
//      payload goes (Action::execute). Anything else is decided here (drop, or a NAK to send).
//   2. After storing the payload, the caller calls commit(); the packet is then part of the
//      connection (ePSN, MSN advance). If it cannot take the payload now (no aggregation slot,
//      no buffer) it calls refuse() instead: an RNR NAK, nothing advances, the requester comes
//      back with the same PSN after the timer. Calling neither is a silent drop: nothing
//      advanced, the requester's timeout or a later NAK-sequence brings the packet back.
// ACKs are owed, not sent: commit() of a packet with AckReq and every duplicate make one owed;
// take_ack() hands it out (PSN = ePSN - 1, covering everything before). Calling take_ack() once
// per burst instead of once per packet coalesces ACKs, which a cumulative ACK allows.
#pragma once

#include <cstdint>
#include <string_view>

#include "roce/wire.h"

namespace ina::roce {

// PMTU in bytes for the verbs enum value 1..5 (IBV_MTU_256 .. IBV_MTU_4096); 0 if out of range.
constexpr uint32_t pmtu_bytes(uint8_t verbs_mtu) {
    return verbs_mtu >= 1 && verbs_mtu <= 5 ? 128u << verbs_mtu : 0u;
}
constexpr bool valid_pmtu(uint32_t bytes) {
    return bytes == 256 || bytes == 512 || bytes == 1024 || bytes == 2048 || bytes == 4096;
}

// Memory a peer may RDMA-WRITE into: [va, va + length) under rkey.
struct MemoryRegion {
    uint64_t va = 0;
    uint64_t length = 0;
    uint32_t rkey = 0;
};

struct ResponderConfig {
    uint32_t initial_psn = 0;     // the peer's starting send PSN (24 bits): the first ePSN
    uint32_t pmtu = 1024;         // bytes: 256, 512, 1024, 2048 or 4096
    MemoryRegion region;          // where WRITEs may land (length 0: WRITEs with data refused)
    uint64_t receive_bytes = 0;   // each posted receive buffer's size (0: unbounded)
    uint8_t min_rnr_timer = 1;    // 5-bit RNR NAK timer code (1 = 0.01 ms)
    uint16_t pkey = kDefaultPkey; // packets with another partition key are dropped
};

// Why a packet was dropped without a reply. Each is a counter reason.
enum class DropReason : uint8_t {
    qp_error,         // the QP is in the error state: everything is dropped
    nak_outstanding,  // PSN ahead of ePSN while the one NAK-sequence for this gap is out
    wrong_transport,  // a UC/UD/CNP or response opcode reached the RC responder
    bad_pkey,
    count
};
constexpr std::string_view to_string(DropReason r) {
    constexpr std::string_view names[] = {"qp_error", "nak_outstanding", "wrong_transport",
                                          "bad_pkey"};
    return names[static_cast<size_t>(r)];
}

// An ACK or NAK for the caller to encode: opcode 0x11, BTH.PSN = psn, AETH = syndrome | msn.
struct Reply {
    uint8_t syndrome = aeth::kAckUnlimited;
    uint32_t psn = 0;
    uint32_t msn = 0;
};

// Where an executable packet's payload goes.
struct Placement {
    bool write = false;         // RDMA WRITE (else SEND: into the posted receive buffer)
    bool first = false;         // the message's first packet (FIRST or ONLY)
    bool last = false;          // the message's last packet (LAST or ONLY): it completes on commit
    bool has_imm = false;       // LAST/ONLY with immediate: `imm` is valid
    uint32_t imm = 0;           // as on the wire (network order value)
    uint64_t va = 0;            // WRITE: the address of this packet's first byte
    uint64_t region_offset = 0; // WRITE: va - region.va (the aggregation maps it to a slot)
    uint64_t message_offset = 0;// bytes of this message before this packet
    uint32_t length = 0;        // payload bytes (no pad)
    uint32_t psn = 0;
    uint32_t msn = 0;           // the message's MSN once complete (current MSN + 1)
};

enum class Action : uint8_t {
    execute,  // place the payload (`where`), then commit() or refuse()
    reply,    // send `reply` (a NAK or a duplicate's re-ACK is owed: see take_ack); nothing else
    drop,     // `drop` says why; nothing to send
};

struct Verdict {
    Action action = Action::drop;
    Placement where;        // execute
    Reply reply;            // reply: a NAK (kind from its syndrome)
    bool fatal = false;     // reply: the NAK put the QP into the error state
    DropReason drop = DropReason::count;
};

class Responder {
public:
    enum class State : uint8_t { ready, error };

    explicit Responder(const ResponderConfig& config);

    // Checks one parsed packet (wire.h parse()) of this QP, its ICRC already verified. An
    // execute verdict's payload is the packet's `where.length` bytes after its headers; see the
    // file comment for the two phases.
    Verdict receive(const Packet& packet);
    // receive() for the common case alone: an in-order WRITE ONLY (with or without immediate)
    // that receive() would execute as it stands. True: `where` is receive()'s placement and the
    // packet is pending exactly as after receive() (commit() or refuse() next). False: nothing
    // changed, and receive() decides (every other packet, and every one it would NAK, drop or
    // refuse). Inline and without a Verdict to build: the packet path's per-contribution
    // check is a dozen compares (roce-responder runs every rule row through both ways).
    bool take_write_only(const Packet& packet, Placement& where) {
        const uint8_t opcode = packet.bth.opcode;
        const bool imm = opcode == op::kWriteOnlyImm;
        const uint32_t len = packet.payload_bytes;
        const uint64_t va = packet.reth.va;
        const MemoryRegion& r = config_.region;
        // check_in_order's tests for an ONLY in order, with the DMA length equal to the
        // payload's (its LAST rule), so the access check on the DMA length is the one on len.
        if ((opcode != op::kWriteOnly && !imm) || state_ != State::ready ||
            packet.bth.psn != epsn_ || in_message_ != Kind::none ||
            ((packet.bth.pkey ^ config_.pkey) & 0x7FFF) != 0 || len > config_.pmtu ||
            packet.bth.pad != ((0u - len) & 3u) || packet.reth.dma_len != len ||
            (len != 0 && (packet.reth.rkey != r.rkey || va < r.va || va - r.va > r.length ||
                          len > r.length - (va - r.va))) ||
            (imm && receives_ == 0)) {
            return false;
        }
        where.write = true;
        where.first = true;
        where.last = true;
        where.has_imm = imm;
        where.imm = imm ? packet.imm : 0;
        where.va = va;
        where.region_offset = va - r.va;
        where.message_offset = 0;
        where.length = len;
        where.psn = packet.bth.psn;
        where.msn = psn_add(msn_, 1);
        hold(where, Kind::write, packet.bth.ack_req, imm, len);
        return true;
    }
    // The packet of the last execute verdict is stored: advance. Returns false (and changes
    // nothing) if the last verdict was not an execute verdict for the current ePSN.
    bool commit();
    // The packet of the last execute verdict cannot be taken now: the RNR NAK to send
    // (PSN = its PSN, syndrome 0x20 | min_rnr_timer). Nothing advances.
    Reply refuse();

    // The QP fails for a reason outside this responder (its own requester out of retries: one
    // state per QP): the fatal NAK to answer the current request with (`syndrome`, e.g. remote
    // operational error; PSN ePSN, acknowledging everything before it), and the error state.
    // The requester learns of the failure at once instead of retrying into silence.
    Reply fail(uint8_t syndrome) { return nak(syndrome, true).reply; }

    // Receive buffers posted for SENDs (and WRITE with immediate, which consumes one). A SEND
    // FIRST/ONLY or a WRITE *_IMM without one is refused with an RNR NAK.
    void post_receives(uint32_t n) { receives_ += n; }
    uint32_t posted_receives() const { return receives_; }

    // The owed ACK, if any: PSN ePSN - 1, the current MSN. Clears it.
    bool take_ack(Reply& out);
    bool ack_owed() const { return ack_owed_; }

    State state() const { return state_; }
    uint32_t expected_psn() const { return epsn_; }
    uint32_t msn() const { return msn_; }
    // The syndrome that put the QP into error (0 while ready).
    uint8_t error_syndrome() const { return error_syndrome_; }

private:
    enum class Kind : uint8_t { none, send, write };

    Verdict nak(uint8_t syndrome, bool fatal);
    Reply rnr_nak();
    Verdict check_in_order(const Packet& packet);

    ResponderConfig config_;
    State state_ = State::ready;
    uint32_t epsn_;
    uint32_t msn_ = 0;
    uint32_t receives_ = 0;
    bool nak_sent_ = false;   // the NAK-sequence for the current gap is out
    bool ack_owed_ = false;
    uint8_t error_syndrome_ = 0;
    // The message in progress (after its FIRST, before its LAST).
    Kind in_message_ = Kind::none;
    uint64_t message_bytes_ = 0;   // received so far
    uint64_t write_va_ = 0;        // WRITE: the address of the next byte
    uint64_t write_left_ = 0;      // WRITE: RETH DMA length not yet received
    // The last execute verdict, for commit()/refuse(): hold() records it (check_in_order and
    // take_write_only alike).
    void hold(const Placement& where, Kind kind, bool ack_req, bool takes_receive,
              uint64_t left) {
        pending_ = true;
        pending_where_ = where;
        pending_kind_ = kind;
        pending_ack_req_ = ack_req;
        pending_takes_receive_ = takes_receive;
        pending_left_ = left;
    }
    bool pending_ = false;
    Placement pending_where_;
    Kind pending_kind_ = Kind::none;
    bool pending_ack_req_ = false;
    bool pending_takes_receive_ = false;
    uint64_t pending_left_ = 0;
};

}  // namespace ina::roce
