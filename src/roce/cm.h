// SPDX-License-Identifier: Apache-2.0
// RDMA CM (IBA vol. 1 ch. 12, the Communication Manager) messages as RoCEv2 carries them, so
// that a worker can rdma_connect() to the switch: MADs of 256 bytes in UD SEND ONLY packets
// (opcode 0x64) to QP1, DETH Q_Key 0x80010000 and source QP 1. Pure parse and build of the
// MAD common header and of REQ, REP, RTU, REJ, DREQ and DREP, and of the 36-byte header rdma_cm
// puts at the start of a REQ's private data (cma_hdr: version, IP version, source port, source
// and destination address). Field offsets follow the IBA message layouts (as the Linux
// kernel's cm_msgs.h describes them); multi-byte fields are big-endian, sub-byte fields
// most-significant bit first. Reserved bits are written as zero and ignored on parse.
//
// Observed in Linux's own exchange (tests/data/rxe-rocev2-sample.pcap): the REQ's Starting PSN
// is the PSN the passive side (the REQ's receiver) then sends from, and the REP's Starting PSN
// the one the active side sends from.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "roce/encode.h"

namespace ina::roce::cm {

inline constexpr size_t kMadBytes = 256;
inline constexpr size_t kMadHeaderBytes = 24;
inline constexpr uint32_t kQp1Qkey = 0x80010000;
inline constexpr uint32_t kCmQpn = 1;
inline constexpr uint8_t kBaseVersion = 1;
inline constexpr uint8_t kMgmtClassCm = 0x07;
inline constexpr uint8_t kClassVersion = 2;
inline constexpr uint8_t kMethodSend = 0x03;
// Service ID of an rdma_cm TCP port space listener: RDMA_PS_TCP (0x0106) << 16 | port.
constexpr uint64_t service_id_for_tcp_port(uint16_t port) { return uint64_t{0x0106} << 16 | port; }

enum class Attr : uint16_t {
    req = 0x0010,
    mra = 0x0011,
    rej = 0x0012,
    rep = 0x0013,
    rtu = 0x0014,
    dreq = 0x0015,
    drep = 0x0016,
};

using Gid = std::array<uint8_t, 16>;
// RoCEv2 GID of an IPv4 address: the IPv4-mapped IPv6 address ::ffff:a.b.c.d.
Gid ipv4_gid(uint32_t ipv4);
bool is_ipv4_gid(const Gid& gid);
inline uint32_t gid_ipv4(const Gid& gid) {
    return uint32_t{gid[12]} << 24 | uint32_t{gid[13]} << 16 | uint32_t{gid[14]} << 8 | gid[15];
}

struct MadHeader {
    uint8_t base_version = kBaseVersion;
    uint8_t mgmt_class = kMgmtClassCm;
    uint8_t class_version = kClassVersion;
    uint8_t method = kMethodSend;  // with the response bit (0x80)
    uint16_t status = 0;
    uint16_t class_specific = 0;
    uint64_t transaction_id = 0;
    uint16_t attr_id = 0;
    uint32_t attr_modifier = 0;
};

// One path of a REQ (44 bytes: primary at MAD byte 76, alternate at 120). On RoCE the LIDs are
// 0xFFFF (permissive) and the GIDs carry the addresses.
struct Path {
    uint16_t local_lid = 0xFFFF;
    uint16_t remote_lid = 0xFFFF;
    Gid local_gid{};
    Gid remote_gid{};
    uint32_t flow_label = 0;   // 20 bits
    uint8_t packet_rate = 0;   // 6 bits
    uint8_t traffic_class = 0;
    uint8_t hop_limit = 0;
    uint8_t sl = 0;            // 4 bits
    bool subnet_local = false;
    uint8_t local_ack_timeout = 0;  // 5 bits
};

struct Req {
    uint32_t local_comm_id = 0;
    uint64_t service_id = 0;
    uint64_t local_ca_guid = 0;
    uint32_t local_qkey = 0;
    uint32_t local_qpn = 0;               // 24 bits
    uint8_t responder_resources = 0;
    uint32_t local_eecn = 0;              // 24 bits
    uint8_t initiator_depth = 0;
    uint32_t remote_eecn = 0;             // 24 bits
    uint8_t remote_cm_response_timeout = 0;  // 5 bits
    uint8_t transport_service_type = 0;   // 2 bits: 0 RC, 1 UC
    bool end_to_end_flow_control = false;
    uint32_t starting_psn = 0;            // 24 bits
    uint8_t local_cm_response_timeout = 0;  // 5 bits
    uint8_t retry_count = 0;              // 3 bits
    uint16_t pkey = 0;
    uint8_t path_mtu = 0;                 // 4 bits: the verbs enum (3 = 1024)
    bool rdc_exists = false;
    uint8_t rnr_retry_count = 0;          // 3 bits
    uint8_t max_cm_retries = 0;           // 4 bits
    bool srq = false;
    uint8_t extended_transport_type = 0;  // 3 bits
    Path primary;
    Path alternate;
    std::array<uint8_t, 92> private_data{};
};

struct Rep {
    uint32_t local_comm_id = 0;
    uint32_t remote_comm_id = 0;
    uint32_t local_qkey = 0;
    uint32_t local_qpn = 0;       // 24 bits
    uint32_t local_eecn = 0;      // 24 bits
    uint32_t starting_psn = 0;    // 24 bits
    uint8_t responder_resources = 0;
    uint8_t initiator_depth = 0;
    uint8_t target_ack_delay = 0;  // 5 bits
    uint8_t failover_accepted = 0;  // 2 bits
    bool end_to_end_flow_control = false;
    uint8_t rnr_retry_count = 0;  // 3 bits
    bool srq = false;
    uint64_t local_ca_guid = 0;
    std::array<uint8_t, 196> private_data{};
};

// RTU and DREP: the two communication IDs and private data.
struct Rtu {
    uint32_t local_comm_id = 0;
    uint32_t remote_comm_id = 0;
    std::array<uint8_t, 224> private_data{};
};
using Drep = Rtu;

struct Rej {
    uint32_t local_comm_id = 0;
    uint32_t remote_comm_id = 0;
    uint8_t message_rejected = 0;    // 2 bits: 0 REQ, 1 REP, 2 other
    uint8_t reject_info_length = 0;  // 7 bits
    uint16_t reason = 0;             // e.g. 28 consumer reject, 8 invalid service ID
    std::array<uint8_t, 72> additional_info{};
    std::array<uint8_t, 148> private_data{};
};

struct Dreq {
    uint32_t local_comm_id = 0;
    uint32_t remote_comm_id = 0;
    uint32_t remote_qpn = 0;  // 24 bits
    std::array<uint8_t, 220> private_data{};
};

// A CM MAD: the header and, by header.attr_id, one of the bodies (the others stay default).
struct Message {
    MadHeader header;
    Req req;
    Rep rep;
    Rtu rtu;
    Rej rej;
    Dreq dreq;
    Drep drep;
};

enum class CmError : uint8_t {
    truncated,       // fewer than 256 bytes
    not_cm,          // base version, management class or class version is not CM's
    unknown_attr,    // an attribute this codec does not decode (MRA, LAP, APR, SIDR ...)
    count
};

// Parses a 256-byte MAD. False (with `error`) when it is not a CM message this codec decodes.
bool parse(const uint8_t* mad, size_t len, Message& out, CmError& error);
// Builds header + the body header.attr_id names into 256 bytes. 0 when capacity < 256 or the
// attribute is not one this codec builds.
size_t build(const Message& message, uint8_t* out, size_t capacity);

// What the passive side (the switch) puts in its REP besides what the REQ dictates.
struct RepParams {
    uint32_t local_comm_id = 0;
    uint32_t local_qpn = 0;
    uint32_t starting_psn = 0;     // the PSN the active side will send from (its ePSN here)
    uint64_t local_ca_guid = 0;
    uint8_t responder_resources = 0;  // at most the REQ's initiator depth
    uint8_t initiator_depth = 0;      // at most the REQ's responder resources
    uint8_t target_ack_delay = 15;
    uint8_t rnr_retry_count = 7;      // how often the active side may retry after our RNR NAKs
};
// The passive side's answers to a parsed message, as Linux's CM builds them: the transaction
// ID echoed, the communication IDs swapped in, method Send, everything else zero.
Message make_rep(const Message& req, const RepParams& params);
Message make_rej(const Message& req, uint16_t reason);  // rejecting the REQ (message_rejected 0)
Message make_drep(const Message& dreq);
// REJ reasons (IBA table 103) the switch uses.
inline constexpr uint16_t kRejNoQp = 1;            // no QP available
inline constexpr uint16_t kRejInvalidServiceId = 8;
inline constexpr uint16_t kRejConsumerReject = 28;

// rdma_cm's header at the start of a REQ's private data.
struct CmaHeader {
    uint8_t cma_version = 0;
    uint8_t ip_version = 4;  // the high nibble of its byte on the wire
    uint16_t port = 0;       // the active side's source port
    Gid src{};               // IPv4: the address in the last 4 bytes, the rest zero
    Gid dst{};
};
inline constexpr size_t kCmaHeaderBytes = 36;
CmaHeader parse_cma_header(const std::array<uint8_t, 92>& private_data);
void write_cma_header(std::array<uint8_t, 92>& private_data, const CmaHeader& h);

// The whole UD SEND ONLY packet carrying a CM MAD, from the IP header on (path.dest_qp is
// the destination QP, 1 for CM): BTH (AckReq as Linux sets it), DETH Q_Key 0x80010000 source
// QP 1, the MAD, the ICRC. 0 when capacity is too small or the message cannot be built.
size_t encode_packet(uint8_t* out, size_t capacity, const Ipv4Path& path, uint16_t ip_id,
                     uint32_t psn, const Message& message);
// The same over IPv6 (a worker whose GID is an IPv6 address).
size_t encode_packet(uint8_t* out, size_t capacity, const Ipv6Path& path, uint32_t psn,
                     const Message& message);

}  // namespace ina::roce::cm
