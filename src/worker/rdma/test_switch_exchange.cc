// SPDX-License-Identifier: Apache-2.0
// Server-to-switch, the pure part: the connect exchange's JSON (the contract's example both
// ways, every field checked), the API's error text, the contribution and result addresses and
// immediates, and the session sequence running across AllReduce calls and wrapping 24 bits.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <string>

#include "worker/rdma/switch_exchange.h"

namespace ina::rdma {
namespace {

using nlohmann::json;

SwitchConnectRequest contract_request() {
    SwitchConnectRequest r;
    r.rank = 1;
    r.qpn = 17;
    r.psn = 1000;
    r.ip = "10.77.1.2";
    r.pmtu = 1024;
    r.result_addr = 140737488355328u;
    r.result_rkey = 4660;
    r.result_length = 65536;
    r.chunk_bytes = 1024;
    r.window = 64;
    r.elem_type = reduce::ElemType::fp32;
    r.op = reduce::Op::sum;
    r.world = 2;
    return r;
}

// The contract's request, verbatim (CONTRACT-roce.md / docs/api.md).
constexpr const char* kContractRequest = R"({"rank": 1, "qpn": 17, "psn": 1000,
  "ip": "10.77.1.2", "pmtu": 1024, "result_addr": 140737488355328, "result_rkey": 4660,
  "result_length": 65536, "chunk_bytes": 1024, "window": 64, "dtype": "fp32", "op": "sum",
  "world": 2, "timeout": 14, "retry_cnt": 7, "rnr_retry": 7})";
constexpr const char* kContractReply = R"({"qpn": 256, "psn": 5000, "ip": "10.77.1.1",
  "gid": "::ffff:10.77.1.1", "area_addr": 4096, "area_rkey": 305419896, "area_length": 65536,
  "pmtu": 1024})";

TEST(SwitchExchange, RequestEncodesTheContractsFields) {
    EXPECT_EQ(json::parse(contract_request().to_json()), json::parse(kContractRequest));
}

TEST(SwitchExchange, RequestRoundTripsAndDefaultsTheRequesterAttributes) {
    std::string why;
    auto r = SwitchConnectRequest::from_json(kContractRequest, &why);
    ASSERT_TRUE(r) << why;
    EXPECT_EQ(r->to_json(), contract_request().to_json());
    json j = json::parse(kContractRequest);
    j.erase("timeout");
    j.erase("retry_cnt");
    j.erase("rnr_retry");
    r = SwitchConnectRequest::from_json(j.dump(), &why);
    ASSERT_TRUE(r) << why;
    EXPECT_EQ(r->timeout, 14);
    EXPECT_EQ(r->retry_cnt, 7);
    EXPECT_EQ(r->rnr_retry, 7);
    j["dtype"] = "int32";
    j["op"] = "max";
    r = SwitchConnectRequest::from_json(j.dump(), &why);
    ASSERT_TRUE(r) << why;
    EXPECT_EQ(r->elem_type, reduce::ElemType::int32);
    EXPECT_EQ(r->op, reduce::Op::max);
}

TEST(SwitchExchange, RequestRefusesEachBadField) {
    const json good = json::parse(kContractRequest);
    const std::vector<std::pair<std::string, json>> bad = {
        {"qpn", 1 << 24},     {"psn", -1},          {"ip", "10.77.1"},   {"ip", 7},
        {"dtype", "fp8"},     {"op", "xor"},        {"pmtu", 8192},      {"rank", 65536},
        {"timeout", 32},      {"retry_cnt", 8},     {"rnr_retry", "7"},  {"window", 1.5},
        {"result_rkey", 1ull << 32},
    };
    for (const auto& [key, value] : bad) {
        json j = good;
        j[key] = value;
        std::string why;
        EXPECT_FALSE(SwitchConnectRequest::from_json(j.dump(), &why)) << key << "=" << value;
        EXPECT_NE(why.find(key == "dtype" || key == "op" ? "unknown" : key), std::string::npos)
            << why;
    }
    for (const char* key : {"rank", "qpn", "psn", "ip", "result_addr", "world", "dtype"}) {
        json j = good;
        j.erase(key);
        std::string why;
        EXPECT_FALSE(SwitchConnectRequest::from_json(j.dump(), &why)) << key;
        EXPECT_NE(why.find(key), std::string::npos) << why;
    }
    std::string why;
    EXPECT_FALSE(SwitchConnectRequest::from_json("[1, 2]", &why));
    EXPECT_FALSE(SwitchConnectRequest::from_json("{\"rank\": ", &why));
    EXPECT_EQ(why, "not a JSON object");
}

TEST(SwitchExchange, AnIpv6WorkerAndSwitchGoBothWays) {
    json j = json::parse(kContractRequest);
    j["ip"] = "fd00:77:1::2";
    std::string why;
    const auto req = SwitchConnectRequest::from_json(j.dump(), &why);
    ASSERT_TRUE(req) << why;
    EXPECT_EQ(req->ip, "fd00:77:1::2");
    EXPECT_EQ(json::parse(req->to_json())["ip"], "fd00:77:1::2");
    json k = json::parse(kContractReply);
    k["ip"] = "fd00:77:1::1";
    k["gid"] = "fd00:77:1::1";
    const auto rep = SwitchConnectReply::from_json(k.dump(), &why);
    ASSERT_TRUE(rep) << why;
    EXPECT_EQ(rep->ip, "fd00:77:1::1");
    EXPECT_EQ(rep->gid, "fd00:77:1::1");
}

TEST(SwitchExchange, GidTextByFamily) {
    EXPECT_EQ(gid_text("10.77.1.1"), "::ffff:10.77.1.1");
    EXPECT_EQ(gid_text("fd00:77:1::1"), "fd00:77:1::1");
    EXPECT_EQ(gid_text("10.77.1"), "");
    EXPECT_EQ(gid_text("switch"), "");
}

TEST(SwitchExchange, CmTargetOfEitherFamilyWithOrWithoutPort) {
    std::string why;
    auto t = parse_cm_target("10.77.1.1", &why);
    ASSERT_TRUE(t) << why;
    EXPECT_EQ(t->ip, "10.77.1.1");
    EXPECT_FALSE(t->port);
    t = parse_cm_target("10.77.1.1:7000", &why);
    ASSERT_TRUE(t) << why;
    EXPECT_EQ(t->ip, "10.77.1.1");
    EXPECT_EQ(t->port, 7000);
    t = parse_cm_target("fd00:77:1::1", &why);
    ASSERT_TRUE(t) << why;
    EXPECT_EQ(t->ip, "fd00:77:1::1");
    EXPECT_FALSE(t->port);
    t = parse_cm_target("[fd00:77:1::1]", &why);
    ASSERT_TRUE(t) << why;
    EXPECT_EQ(t->ip, "fd00:77:1::1");
    EXPECT_FALSE(t->port);
    t = parse_cm_target("[fd00:77:1::1]:7471", &why);
    ASSERT_TRUE(t) << why;
    EXPECT_EQ(t->ip, "fd00:77:1::1");
    EXPECT_EQ(t->port, 7471);
    const std::vector<std::pair<std::string, std::string>> bad = {
        {"10.77.1.1:0", "bad port"},          {"10.77.1.1:65536", "bad port"},
        {"10.77.1.1:", "bad port"},           {"10.77.1.1:7x", "bad port"},
        {"switch:7471", "not an IPv4"},       {"[10.77.1.1]:7471", "not an IPv6"},
        {"[fd00::1", "no ']'"},               {"[fd00::1]7471", "expected ':PORT'"},
        {"fd00::1:7471:x", "not an IPv6"},    {"", "not an IPv4"},
    };
    for (const auto& [text, want] : bad) {
        why.clear();
        EXPECT_FALSE(parse_cm_target(text, &why)) << text;
        EXPECT_NE(why.find(want), std::string::npos) << text << ": " << why;
    }
}

TEST(SwitchExchange, ReplyDecodesTheContractsAnswer) {
    std::string why;
    const auto r = SwitchConnectReply::from_json(kContractReply, &why);
    ASSERT_TRUE(r) << why;
    EXPECT_EQ(r->qpn, 256u);
    EXPECT_EQ(r->psn, 5000u);
    EXPECT_EQ(r->ip, "10.77.1.1");
    EXPECT_EQ(r->gid, "::ffff:10.77.1.1");
    EXPECT_EQ(r->area_addr, 4096u);
    EXPECT_EQ(r->area_rkey, 305419896u);
    EXPECT_EQ(r->area_length, 65536u);
    EXPECT_EQ(r->pmtu, 1024u);
    EXPECT_EQ(json::parse(r->to_json()), json::parse(kContractReply));
}

TEST(SwitchExchange, ReplyRefusesEachBadField) {
    const json good = json::parse(kContractReply);
    const std::vector<std::pair<std::string, json>> bad = {
        {"qpn", 1 << 24}, {"psn", 1 << 24},     {"ip", "10.77.1"}, {"ip", "switch"},
        {"gid", "10.77.1.1"},
        {"gid", 5},       {"area_rkey", -4},    {"pmtu", 4097},
    };
    for (const auto& [key, value] : bad) {
        json j = good;
        j[key] = value;
        std::string why;
        EXPECT_FALSE(SwitchConnectReply::from_json(j.dump(), &why)) << key << "=" << value;
        EXPECT_NE(why.find(key), std::string::npos) << why;
    }
    for (const auto& [key, _] : good.items()) {
        json j = good;
        j.erase(key);
        std::string why;
        EXPECT_FALSE(SwitchConnectReply::from_json(j.dump(), &why)) << key;
    }
}

TEST(SwitchExchange, ErrorTextIsTheSwitchsMessageOrTheBody) {
    EXPECT_EQ(api_error_text(409, R"({"error": "rank 1 is already connected"})"),
              "HTTP 409: rank 1 is already connected");
    EXPECT_EQ(api_error_text(404, R"({"errors": ["no such resource: POST /x", "second"],
                                       "ok": false})"),
              "HTTP 404: no such resource: POST /x; second");
    EXPECT_EQ(api_error_text(502, "Bad Gateway"), "HTTP 502: Bad Gateway");
    EXPECT_EQ(api_error_text(500, std::string(500, 'x')).size(), std::string("HTTP 500: ").size() + 200);
}

TEST(SwitchLayout, ContributionAndResultAddressesWrapByWindowAndSlots) {
    SwitchLayout l;
    l.area_addr = 4096;
    l.chunk_bytes = 1024;
    l.window = 64;
    l.result_addr = 0x7f0000000000;
    l.result_slots = 64;
    EXPECT_EQ(l.contribution_addr(0), 4096u);
    EXPECT_EQ(l.contribution_addr(1), 4096u + 1024);
    EXPECT_EQ(l.contribution_addr(63), 4096u + 63 * 1024);
    EXPECT_EQ(l.contribution_addr(64), 4096u);
    EXPECT_EQ(l.contribution_addr(1000), 4096u + (1000 % 64) * 1024);
    EXPECT_EQ(l.result_offset(65), 1024u);
    l.result_slots = 16;  // a shorter result ring than the window wraps on its own count
    EXPECT_EQ(l.result_slot(17), 1u);
    EXPECT_EQ(l.result_offset(31), 15u * 1024);
}

TEST(SwitchImmediate, SequenceHighCountLowWrapping24Bits) {
    EXPECT_EQ(contribution_imm(0), 0x00000001u);
    EXPECT_EQ(contribution_imm(0x123456), 0x12345601u);
    EXPECT_EQ(contribution_imm(0x01FFFFFF), 0xFFFFFF01u);  // s mod 2^24
    EXPECT_EQ(contribution_imm(1u << 24), 0x00000001u);
    EXPECT_EQ(result_imm(5, 2), 0x00000502u);
    EXPECT_EQ(result_imm(0x1000005, 255), 0x000005FFu);
}

// The failure notice's immediate: count 0 (no result's), the rank and the reason above it.
TEST(SwitchImmediate, FailureNoticeHasCountZeroAndNamesTheRankAndWhy) {
    EXPECT_EQ(failure_notice_imm(3, 1), 0x01000300u);
    EXPECT_EQ(failure_notice_imm(64, kFailureReceiveSide), 0x80004000u);
    EXPECT_TRUE(is_failure_notice(failure_notice_imm(1, 2)));
    EXPECT_FALSE(is_failure_notice(result_imm(0, 2))) << "a result has its world as count";
    EXPECT_FALSE(is_failure_notice(result_imm(0x123456, 1)));
    EXPECT_EQ(failure_notice_text(failure_notice_imm(3, 1)),
              "rank 3's connection failed (what the switch sent it went unacknowledged until "
              "its retries ran out)");
    EXPECT_EQ(failure_notice_text(failure_notice_imm(2, kFailureReceiveSide)),
              "rank 2's connection failed (the switch refused its WRITEs with a fatal NAK)");
    EXPECT_EQ(failure_notice_text(failure_notice_imm(2, kFailureRankLeft)),
              "rank 2's connection failed (it left the job while the others still needed its "
              "contributions)");
    EXPECT_EQ(failure_notice_text(failure_notice_imm(1, 0x7F)),
              "rank 1's connection failed (reason 127)");
}

TEST(SessionSequence, RunsAcrossCallsAndMapsResultsBackToChunks) {
    SessionSequence s;
    EXPECT_EQ(s.seq(0), 0u);
    EXPECT_EQ(s.chunk_of(result_imm(3, 2), 10), 3u);
    EXPECT_FALSE(s.chunk_of(result_imm(10, 2), 10));
    s.advance(10);
    EXPECT_EQ(s.base(), 10u);
    EXPECT_EQ(s.seq(0), 10u);
    EXPECT_EQ(s.seq(5), 15u);
    EXPECT_EQ(s.chunk_of(result_imm(15, 2), 10), 5u);
    EXPECT_FALSE(s.chunk_of(result_imm(9, 2), 10));  // the previous call's last chunk
    EXPECT_FALSE(s.chunk_of(result_imm(20, 2), 10));
    // Across the 24-bit wrap: base 2^24 - 3, chunk 5 is s = 2^24 + 2, on the wire 2.
    s.advance((1u << 24) - 13);
    EXPECT_EQ(s.base(), (1u << 24) - 3);
    EXPECT_EQ(s.seq(5) & kSeqMask, 2u);
    EXPECT_EQ(s.chunk_of(result_imm(s.seq(5), 2), 10), 5u);
    EXPECT_EQ(s.chunk_of(result_imm(s.seq(0), 2), 10), 0u);
    EXPECT_FALSE(s.chunk_of(result_imm(s.base() - 1, 2), 10));
}

}  // namespace
}  // namespace ina::rdma
