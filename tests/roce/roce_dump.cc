// SPDX-License-Identifier: Apache-2.0
// roce_dump: prints, as lowercase hex, one line per IPv4 packet, the frames the RC endpoint's
// encoders (roce/encode.h) build for the fields on the command line; scapy_roce_crosscheck.py
// rebuilds each with scapy's contrib.roce and compares byte for byte, ICRC included.
//
//   roce_dump ack   src=10.0.0.2 dst=10.0.0.1 sport=0xc001 qp=0x11 psn=0x100 syndrome=0x1f msn=5
//   roce_dump cnp   src=... dst=... qp=0x118 tos=0xc2 id=0x718c
//   roce_dump write src=... dst=... qp=0x22 opcode=0x0a psn=0x200 ackreq=1 va=0x7f0000001000
//                   rkey=0x1234 dmalen=16 imm=0 len=16 seed=3
//   roce_dump segments src=... dst=... qp=0x22 psn=0xfffffe pmtu=256 len=1000 va=... rkey=...
//                   imm=0x11223344 hasimm=1 seed=3      (the Requester's packets of one WRITE)
//
// src and dst may be IPv6 addresses (both): the frame is then IPv6, tos its traffic class, ttl
// its hop limit, flow= its flow label, and id unused.
// Other keys: tos (default 2), ttl (64), id (0), pkey (0xffff). Payload byte i is
// (seed + 31 * i) & 0xff, counted from the message's start. Numbers are decimal or 0x-hex.
// Exit status 2 on bad arguments.
#include <arpa/inet.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <array>
#include <map>
#include <string>
#include <vector>

#include "roce/encode.h"

namespace {

using namespace ina::roce;

int usage(const std::string& problem) {
    std::fprintf(stderr, "roce_dump: %s\nusage: roce_dump ack|cnp|write|segments key=value ...\n",
                 problem.c_str());
    return 2;
}

bool parse_number(const std::string& text, uint64_t& out) {
    if (text.empty() || text[0] == '-' || text[0] == '+') {
        return false;
    }
    errno = 0;
    char* end = nullptr;
    out = std::strtoull(text.c_str(), &end, 0);
    return errno == 0 && *end == '\0';
}

bool parse_ipv6(const std::string& text, std::array<uint8_t, 16>& out) {
    return inet_pton(AF_INET6, text.c_str(), out.data()) == 1;
}

bool parse_ipv4(const std::string& text, uint32_t& out) {
    unsigned a = 0, b = 0, c = 0, d = 0;
    char tail = 0;
    if (std::sscanf(text.c_str(), "%u.%u.%u.%u%c", &a, &b, &c, &d, &tail) != 4 || a > 255 ||
        b > 255 || c > 255 || d > 255) {
        return false;
    }
    out = a << 24 | b << 16 | c << 8 | d;
    return true;
}

void print(const uint8_t* p, size_t n) {
    for (size_t i = 0; i < n; ++i) {
        std::printf("%02x", p[i]);
    }
    std::printf("\n");
}

std::vector<uint8_t> payload_bytes(uint64_t seed, size_t n) {
    std::vector<uint8_t> out(n);
    for (size_t i = 0; i < n; ++i) {
        out[i] = static_cast<uint8_t>(seed + 31 * i);
    }
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        return usage("missing kind");
    }
    const std::string kind = argv[1];
    std::map<std::string, uint64_t> num = {{"tos", 2},   {"ttl", 64},     {"id", 0},
                                           {"pkey", 0xFFFF}, {"sport", 0xC000}, {"qp", 0},
                                           {"psn", 0},   {"syndrome", 0x1F}, {"msn", 0},
                                           {"opcode", op::kWriteOnly}, {"ackreq", 0},
                                           {"va", 0},    {"rkey", 0},     {"dmalen", 0},
                                           {"imm", 0},   {"hasimm", 0},   {"len", 0},
                                           {"seed", 0},  {"pmtu", 1024}, {"flow", 0}};
    Ipv4Path path;
    Ipv6Path path6;
    bool have_src = false, have_dst = false;
    int v6_addresses = 0;
    for (int i = 2; i < argc; ++i) {
        const std::string arg = argv[i];
        const size_t eq = arg.find('=');
        if (eq == std::string::npos) {
            return usage("expected key=value: " + arg);
        }
        const std::string key = arg.substr(0, eq), value = arg.substr(eq + 1);
        if (key == "src" || key == "dst") {
            const bool v6 = value.find(':') != std::string::npos;
            v6_addresses += v6 ? 1 : 0;
            if (v6 ? !parse_ipv6(value, key == "src" ? path6.src_ip : path6.dst_ip)
                   : !parse_ipv4(value, key == "src" ? path.src_ip : path.dst_ip)) {
                return usage("bad address " + value);
            }
            (key == "src" ? have_src : have_dst) = true;
            continue;
        }
        if (num.find(key) == num.end()) {
            return usage("unknown key " + key);
        }
        if (!parse_number(value, num[key])) {
            return usage("bad value for " + key);
        }
    }
    if (!have_src || !have_dst) {
        return usage("src= and dst= are required");
    }
    if (v6_addresses == 1) {
        return usage("src and dst must both be IPv4 or both IPv6");
    }
    const bool v6 = v6_addresses == 2;
    path.src_port = static_cast<uint16_t>(num["sport"]);
    path.tos = static_cast<uint8_t>(num["tos"]);
    path.ttl = static_cast<uint8_t>(num["ttl"]);
    path.dest_qp = static_cast<uint32_t>(num["qp"]);
    path.pkey = static_cast<uint16_t>(num["pkey"]);
    path6.src_port = path.src_port;
    path6.traffic_class = path.tos;
    path6.hop_limit = path.ttl;
    path6.flow_label = static_cast<uint32_t>(num["flow"]);
    path6.dest_qp = path.dest_qp;
    path6.pkey = path.pkey;
    const auto ip_id = static_cast<uint16_t>(num["id"]);
    // The encoders for this underlay.
    const auto ack = [&](uint8_t* out, size_t cap, const Reply& r) {
        return v6 ? encode_ack(out, cap, path6, r) : encode_ack(out, cap, path, ip_id, r);
    };
    const auto write = [&](uint8_t* out, size_t cap, const Transmit& tx, const uint8_t* data) {
        return v6 ? encode_write(out, cap, path6, tx, data)
                  : encode_write(out, cap, path, ip_id, tx, data);
    };
    std::vector<uint8_t> buf(8192);
    if (kind == "ack") {
        const Reply r{static_cast<uint8_t>(num["syndrome"]), static_cast<uint32_t>(num["psn"]),
                      static_cast<uint32_t>(num["msn"])};
        print(buf.data(), ack(buf.data(), buf.size(), r));
        return 0;
    }
    if (kind == "cnp") {
        print(buf.data(), v6 ? encode_cnp(buf.data(), buf.size(), path6)
                             : encode_cnp(buf.data(), buf.size(), path, ip_id));
        return 0;
    }
    const auto length = static_cast<uint32_t>(num["len"]);
    if (length > 4096) {
        return usage("len is at most 4096");
    }
    if (kind == "write") {
        Transmit tx;
        tx.opcode = static_cast<uint8_t>(num["opcode"]);
        const OpcodeInfo info = opcode_info(tx.opcode);
        if (!info.known || tx.opcode < op::kWriteFirst || tx.opcode > op::kWriteOnlyImm) {
            return usage("opcode must be an RC WRITE (0x06..0x0b)");
        }
        tx.psn = static_cast<uint32_t>(num["psn"]);
        tx.ack_req = num["ackreq"] != 0;
        tx.has_reth = (info.ext & ext::kReth) != 0;
        tx.reth = {num["va"], static_cast<uint32_t>(num["rkey"]), static_cast<uint32_t>(num["dmalen"])};
        tx.has_imm = (info.ext & ext::kImm) != 0;
        tx.imm = static_cast<uint32_t>(num["imm"]);
        tx.length = length;
        const auto payload = payload_bytes(num["seed"], length);
        print(buf.data(), write(buf.data(), buf.size(), tx, payload.data()));
        return 0;
    }
    if (kind == "segments") {
        RequesterConfig config;
        config.initial_psn = static_cast<uint32_t>(num["psn"]);
        config.pmtu = static_cast<uint32_t>(num["pmtu"]);
        if (config.pmtu != 256 && config.pmtu != 512 && config.pmtu != 1024 &&
            config.pmtu != 2048 && config.pmtu != 4096) {
            return usage("pmtu must be 256, 512, 1024, 2048 or 4096");
        }
        Requester requester(config);
        uint64_t seq = 0;
        requester.post(WriteRequest{num["va"], static_cast<uint32_t>(num["rkey"]), length,
                                    num["hasimm"] != 0, static_cast<uint32_t>(num["imm"]), 0},
                       seq);
        const auto payload = payload_bytes(num["seed"], length);
        Transmit tx;
        while (requester.next(0, tx)) {
            print(buf.data(), write(buf.data(), buf.size(), tx, payload.data() + tx.offset));
        }
        return 0;
    }
    return usage("unknown kind " + kind);
}
