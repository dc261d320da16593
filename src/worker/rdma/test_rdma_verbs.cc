// SPDX-License-Identifier: Apache-2.0
// The parts of the verbs layer that need no RDMA device: address parsing, connection
// parameters, and the messages a failed work completion turns into.
#include <gtest/gtest.h>

#include <arpa/inet.h>

#include <array>
#include <string>

#include "worker/rdma/verbs.h"

namespace ina::rdma {
namespace {

TEST(ParseAddress, Ipv4AndIpv6WithPortAndRefusesNames) {
    SockAddr a = parse_address("10.77.0.2", 7471);
    ASSERT_EQ(a.get()->sa_family, AF_INET);
    const auto* v4 = reinterpret_cast<const sockaddr_in*>(&a.storage);
    EXPECT_EQ(ntohs(v4->sin_port), 7471);
    EXPECT_EQ(ntohl(v4->sin_addr.s_addr), 0x0A4D0002u);

    SockAddr b = parse_address("fe80::1", 1);
    ASSERT_EQ(b.get()->sa_family, AF_INET6);
    EXPECT_EQ(ntohs(reinterpret_cast<const sockaddr_in6*>(&b.storage)->sin6_port), 1);

    try {
        parse_address("root.example", 7471);
        FAIL() << "a host name was accepted";
    } catch (const Error& e) {
        EXPECT_STREQ(e.what(), "'root.example' is not an IPv4 or IPv6 address");
    }
    EXPECT_THROW(parse_address("10.77.0.256", 1), Error);
    EXPECT_THROW(parse_address("", 1), Error);
}

// The GID rules find_roce_gid applies to each table entry.
TEST(GidAddress, Ipv4MappedAndGlobalIpv6AreSourcesLinkLocalIsNot) {
    const auto raw = [](const char* text) {
        ibv_gid g{};
        EXPECT_EQ(inet_pton(AF_INET6, text, g.raw), 1) << text;
        return g;
    };
    auto g = gid_address(raw("::ffff:10.77.1.2"));
    ASSERT_TRUE(g);
    EXPECT_EQ(g->ip, "10.77.1.2");
    EXPECT_FALSE(g->ipv6);
    g = gid_address(raw("fd00:77:1::2"));
    ASSERT_TRUE(g);
    EXPECT_EQ(g->ip, "fd00:77:1::2");
    EXPECT_TRUE(g->ipv6);
    g = gid_address(raw("2001:db8::5"));
    ASSERT_TRUE(g);
    EXPECT_TRUE(g->ipv6);
    for (const char* no : {"fe80::5054:ff:fe4d:1", "::", "::1", "ff02::1", "::10.77.1.2"}) {
        EXPECT_FALSE(gid_address(raw(no))) << no;
    }
    EXPECT_TRUE(gid_is_address(raw("::ffff:10.77.1.2"), "10.77.1.2"));
    EXPECT_TRUE(gid_is_address(raw("fd00:77:1::2"), "fd00:0077:0001:0000::2"));  // any spelling
    EXPECT_FALSE(gid_is_address(raw("fd00:77:1::2"), "fd00:77:1::3"));
    EXPECT_FALSE(gid_is_address(raw("::ffff:10.77.1.2"), "10.77.1.3"));
    EXPECT_FALSE(gid_is_address(raw("::ffff:10.77.1.2"), "::ffff:10.77.1.3"));
    EXPECT_TRUE(gid_is_address(raw("::ffff:10.77.1.2"), "::ffff:10.77.1.2"));
    EXPECT_FALSE(gid_is_address(raw("fd00:77:1::2"), "not-an-address"));
}

TEST(ConnParam, RetriesAndPrivateData) {
    const std::array<std::byte, 44> data{};
    const rdma_conn_param p = conn_param(data);
    EXPECT_EQ(p.private_data, data.data());
    EXPECT_EQ(p.private_data_len, 44);
    EXPECT_EQ(p.retry_count, 7);
    EXPECT_EQ(p.rnr_retry_count, 7);  // infinite: receivers repost as they consume
    EXPECT_EQ(p.responder_resources, 0);
    EXPECT_EQ(p.initiator_depth, 0);
}

TEST(CompletionError, NamesStatusOpcodeWorkRequestAndQp) {
    ibv_wc wc{};
    wc.status = IBV_WC_RETRY_EXC_ERR;
    wc.opcode = IBV_WC_RDMA_WRITE;
    wc.wr_id = 42;
    wc.qp_num = 17;
    wc.vendor_err = 0x81;
    try {
        throw_completion_error(wc, "writing a chunk");
        FAIL() << "no exception";
    } catch (const Error& e) {
        const std::string m = e.what();
        EXPECT_NE(m.find("writing a chunk: work completion transport retry counter exceeded"),
                  std::string::npos) << m;
        EXPECT_NE(m.find("status 12"), std::string::npos) << m;
        EXPECT_NE(m.find("vendor error 0x81"), std::string::npos) << m;
        EXPECT_NE(m.find("wr_id 42"), std::string::npos) << m;
        EXPECT_NE(m.find("QP 17"), std::string::npos) << m;
    }
}

TEST(ClientCompletion, WriteResultFailureAndStrayOpcodes) {
    constexpr uint64_t kResult = uint64_t{1} << 63;
    ibv_wc wc{};
    wc.status = IBV_WC_SUCCESS;
    wc.opcode = IBV_WC_RDMA_WRITE;
    wc.wr_id = 5;
    EXPECT_EQ(classify_client_completion(wc, kResult), ClientCompletion::write_done);
    wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
    wc.wc_flags = IBV_WC_WITH_IMM;
    wc.wr_id = kResult;
    EXPECT_EQ(classify_client_completion(wc, kResult), ClientCompletion::result);
    wc.wc_flags = 0;  // a receive without its immediate is no result
    EXPECT_THROW(classify_client_completion(wc, kResult), Error);
    wc.wc_flags = IBV_WC_WITH_IMM;
    wc.opcode = IBV_WC_RECV;
    EXPECT_THROW(classify_client_completion(wc, kResult), Error);
    wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
    wc.status = IBV_WC_WR_FLUSH_ERR;
    try {
        classify_client_completion(wc, kResult);
        FAIL() << "a failed completion was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("receiving a result"), std::string::npos);
    }
    wc.wr_id = 5;
    try {
        classify_client_completion(wc, kResult);
        FAIL() << "a failed completion was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("writing a chunk"), std::string::npos);
    }
}

TEST(PathMtu, PowersOfTwoFrom256To4096Only) {
    EXPECT_EQ(path_mtu(256), IBV_MTU_256);
    EXPECT_EQ(path_mtu(1024), IBV_MTU_1024);
    EXPECT_EQ(path_mtu(4096), IBV_MTU_4096);
    EXPECT_THROW(path_mtu(1500), Error);
    EXPECT_THROW(path_mtu(8192), Error);
    EXPECT_THROW(path_mtu(0), Error);
}

TEST(ThrowErrno, CarriesTheCallAndTheErrnoText) {
    try {
        throw_errno("ibv_reg_mr of 4096 bytes", ENOMEM);
        FAIL() << "no exception";
    } catch (const Error& e) {
        EXPECT_STREQ(e.what(), "ibv_reg_mr of 4096 bytes: Cannot allocate memory");
    }
}

}  // namespace
}  // namespace ina::rdma
