// SPDX-License-Identifier: Apache-2.0
// The send side of one RDMA Reliable Connection the switch terminates (reference/rocev2.md §3.2;
// docs/rdma.md "Server-to-switch transport"): the switch's RDMA WRITEs of results into a
// worker's registered buffer. Pure and per QP, like the responder: no DPDK state, no allocation
// after construction, no exceptions, no virtual dispatch; time comes in as nanoseconds.
//
// The requester owns no payload. The caller posts a message (remote VA, R_Key, length,
// immediate, its own cookie); next() says which packet to put on the wire now (message, byte
// offset, length, opcode, PSN, AckReq, RETH, immediate), first transmissions and go-back-N
// retransmissions alike; responses (ACK, NAK, RNR NAK) and CNPs come back in; a message
// counts as completed once an ACK covers its last PSN, and completed_messages() only grows, so
// the caller can release what it keeps for a message once every peer's count passes it.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

#include "roce/wire.h"

namespace ina::roce {

// RNR NAK timer codes (IBA table 45): code 0 is 655.36 ms, 1..31 rise from 0.01 to 491.52 ms.
constexpr uint64_t rnr_timer_ns(uint8_t code) {
    constexpr uint32_t kMicroseconds[32] = {
        655360, 10,    20,    30,    40,    60,     80,     120,    160,    240,   320,
        480,    640,   960,   1280,  1920,  2560,   3840,   5120,   7680,   10240, 15360,
        20480,  30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520};
    return uint64_t{kMicroseconds[code & 0x1F]} * 1000;
}

// Local ACK timeout: 4.096 us * 2^exponent; exponent 0 means no timeout (returns 0).
constexpr uint64_t ack_timeout_ns(uint8_t exponent) {
    return exponent == 0 ? 0 : uint64_t{4096} << (exponent & 0x1F);
}

// A DCQCN-like reaction point (Zhu et al., SIGCOMM'15) reduced to what a software switch
// needs: each CNP cuts the current rate by alpha/2 and remembers it as the target; every
// increase period without a CNP decays alpha and moves the rate halfway back to the target
// (fast recovery, kFastRecoverySteps times), after which the target itself grows by the
// additive step. At line rate nothing is paced.
struct RateConfig {
    uint32_t line_rate_mbps = 100000;
    uint32_t min_rate_mbps = 100;
    uint32_t additive_increase_mbps = 40;
    uint64_t increase_period_ns = 55000;
    uint32_t g_shift = 8;  // alpha's gain g = 2^-g_shift
};

struct RequesterConfig {
    uint32_t initial_psn = 0;      // the switch's starting send PSN (the peer's first ePSN)
    uint32_t pmtu = 1024;          // bytes: 256, 512, 1024, 2048 or 4096
    uint8_t timeout = 14;          // local ACK timeout exponent (0: infinite); 14 = 67 ms
    uint8_t retry_cnt = 7;         // timeouts / NAK-sequence retries without progress (3 bits)
    uint8_t rnr_retry = 7;         // RNR NAK retries (3 bits); 7 means retry forever
    uint32_t max_inflight_packets = 256;  // sent and not yet acknowledged
    uint32_t ack_req_every = 64;   // AckReq at least this often within long messages
    RateConfig rate;
};

// One RDMA WRITE (with immediate if has_imm) of `length` bytes to the peer's remote_va.
struct WriteRequest {
    uint64_t remote_va = 0;
    uint32_t rkey = 0;
    uint32_t length = 0;
    bool has_imm = false;
    uint32_t imm = 0;      // network-order value, as ImmDt carries it
    uint64_t cookie = 0;   // the caller's, handed back with every packet of the message
};

// A packet to put on the wire now: payload bytes [offset, offset + length) of message
// `message` (its cookie alongside), with these header fields.
struct Transmit {
    uint64_t message = 0;  // the sequence number post() returned
    uint64_t cookie = 0;
    uint32_t offset = 0;
    uint32_t length = 0;
    uint8_t opcode = 0;
    uint32_t psn = 0;
    bool ack_req = false;
    bool retransmission = false;
    bool has_reth = false;  // FIRST / ONLY
    Reth reth;
    bool has_imm = false;   // LAST_IMM / ONLY_IMM
    uint32_t imm = 0;
};

enum class RequesterError : uint8_t {
    none,
    retry_exceeded,       // retry_cnt timeouts / NAK-sequences without progress
    rnr_retry_exceeded,
    nak_invalid_request,  // 0x61
    nak_remote_access,    // 0x62
    nak_remote_operational,  // 0x63
    nak_other,            // any other NAK code
    count
};
constexpr std::string_view to_string(RequesterError e) {
    constexpr std::string_view names[] = {"none",
                                          "retry_exceeded",
                                          "rnr_retry_exceeded",
                                          "nak_invalid_request",
                                          "nak_remote_access",
                                          "nak_remote_operational",
                                          "nak_other"};
    return names[static_cast<size_t>(e)];
}

// What a response did.
enum class ResponseKind : uint8_t {
    ack,          // advanced (or completed) what is acknowledged
    stale,        // an ACK/NAK for PSNs already acknowledged: ignored
    ghost,        // a PSN beyond anything sent: ignored
    nak_sequence, // go back to its PSN (everything before is acknowledged)
    rnr,          // wait its timer, then go back to its PSN
    fatal,        // NAK 0x61/0x62/0x63 or retries exhausted: the QP is in error
    ignored,      // not a response this requester handles (READ responses, error state)
};

struct ResponseOutcome {
    ResponseKind kind = ResponseKind::ignored;
    uint64_t first_completed = 0;  // messages [first_completed, first_completed + completed)
    uint32_t completed = 0;        // are now fully acknowledged
};

class Requester {
public:
    static constexpr uint32_t kMaxMessages = 256;  // posted and not yet completed
    static constexpr uint32_t kMaxOutstandingPackets = 1u << 22;  // PSNs posted, not acknowledged
    enum class State : uint8_t { ready, error };

    explicit Requester(const RequesterConfig& config);

    // Queues a WRITE. False (nothing queued) when kMaxMessages are outstanding, the QP is in
    // error, the length exceeds 2^31, or its packets would take the PSNs posted and not yet
    // acknowledged past kMaxOutstandingPackets (24-bit serial PSNs stay unambiguous below
    // 2^23). `seq` numbers messages 0, 1, 2, ... in post order.
    bool post(const WriteRequest& request, uint64_t& seq);

    // The next packet to send at `now`, if any may go: something is unsent or must be resent,
    // the window has room, no RNR wait is running and the paced rate allows it.
    bool next(uint64_t now_ns, Transmit& out);

    // An ACKNOWLEDGE (opcode 0x11) of this QP; any other opcode is `ignored`.
    ResponseOutcome on_response(const Packet& packet, uint64_t now_ns);
    // A CNP for this QP (reaction point): a rate cut.
    void on_cnp(uint64_t now_ns);
    // Checks the local ACK timeout: on expiry, go back to the oldest unacknowledged PSN (true),
    // or, retries exhausted, the QP enters error (see error()).
    bool tick(uint64_t now_ns);

    State state() const { return state_; }
    RequesterError error() const { return error_; }
    uint8_t error_syndrome() const { return error_syndrome_; }
    uint64_t posted_messages() const { return tail_; }
    uint64_t completed_messages() const { return head_; }
    uint32_t oldest_unacked_psn() const { return una_; }
    uint32_t next_psn() const { return next_psn_; }
    uint32_t inflight_packets() const { return static_cast<uint32_t>(psn_diff(sent_high_, una_)); }
    uint32_t rate_mbps() const { return current_mbps_; }
    uint32_t target_rate_mbps() const { return target_mbps_; }
    uint64_t retransmitted_packets() const { return retransmitted_; }

private:
    struct Message {
        WriteRequest request;
        uint32_t first_psn = 0;
        uint32_t packets = 0;
    };
    const Message& message(uint64_t seq) const { return messages_[seq % kMaxMessages]; }
    void acknowledge_before(uint32_t psn, uint64_t now_ns, ResponseOutcome& out);
    void go_back_to(uint32_t psn);
    void fail(RequesterError e, uint8_t syndrome);
    void update_rate(uint64_t now_ns);

    RequesterConfig config_;
    uint64_t timeout_ns_;
    State state_ = State::ready;
    RequesterError error_ = RequesterError::none;
    uint8_t error_syndrome_ = 0;
    std::array<Message, kMaxMessages> messages_{};
    uint64_t head_ = 0;       // oldest message not fully acknowledged
    uint64_t tail_ = 0;       // next sequence number post() gives
    uint64_t send_seq_ = 0;   // the message holding send_psn_ (tail_ when all is sent)
    uint32_t next_psn_;       // PSN after the last one assigned
    uint32_t una_;            // oldest PSN not acknowledged
    uint32_t send_psn_;       // next PSN to (re)send
    uint32_t sent_high_;      // PSN after the highest ever sent
    uint32_t since_ack_req_ = 0;
    uint8_t retries_left_;
    uint8_t rnr_retries_left_;
    bool timer_armed_ = false;
    uint64_t deadline_ns_ = 0;
    uint64_t rnr_until_ns_ = 0;
    uint64_t pace_next_ns_ = 0;
    uint64_t retransmitted_ = 0;
    // Rate state (RateConfig).
    uint32_t current_mbps_;
    uint32_t target_mbps_;
    uint32_t alpha_ = 1024;   // Q10: 1024 = 1.0
    uint32_t recovery_steps_ = 0;
    uint64_t next_increase_ns_ = 0;
    bool rate_limited_ = false;
};

}  // namespace ina::roce
