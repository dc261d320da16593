// SPDX-License-Identifier: Apache-2.0
// The control API's request policy: roles, the authentication decision, header, query and
// size checks, error bodies and the connection limiter (src/control/api_policy.h).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cctype>
#include <cstdio>
#include <fstream>
#include <string>

#include "control/api_policy.h"

namespace {

using ina::config::ApiClientConfig;
using ina::config::ApiRole;
namespace policy = ina::control::policy;

const std::string kWriteToken = "write-token-0123456789abcdef";
const std::string kReadToken = "read-token-fedcba9876543210";

policy::AuthTable table() {
    const std::string path = testing::TempDir() + "/api_policy_write.token";
    std::ofstream(path) << kWriteToken << "\n";
    std::vector<ApiClientConfig> clients(3);
    clients[0].name = "automation";
    clients[0].role = ApiRole::write;
    clients[0].token_file = path;
    clients[1].name = "dashboard";
    clients[1].role = ApiRole::read;
    clients[1].token_sha256 = policy::to_hex(policy::sha256(kReadToken));
    clients[2].name = "ops-cert";
    clients[2].role = ApiRole::write;
    clients[2].cert_cn = "ops";
    policy::AuthTable t;
    std::string error;
    EXPECT_TRUE(policy::AuthTable::build(clients, t, error)) << error;
    return t;
}

TEST(ApiRoles, ReadsAreGetAndHeadEverythingElseWrites) {
    EXPECT_EQ(policy::required_role("GET"), ApiRole::read);
    EXPECT_EQ(policy::required_role("HEAD"), ApiRole::read);
    for (const char* m : {"POST", "PUT", "DELETE", "PATCH", "OPTIONS", "get"}) {
        EXPECT_EQ(policy::required_role(m), ApiRole::write) << m;
    }
}

TEST(ApiAuth, Sha256OfAKnownInput) {
    EXPECT_EQ(policy::to_hex(policy::sha256("abc")),
              "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(ApiAuth, WithoutClientsEveryoneIsAllowed) {
    const policy::AuthTable none;
    const auto d = policy::authorize(none, "", "", ApiRole::write);
    EXPECT_EQ(d.status, 200);
    EXPECT_EQ(d.principal, "anonymous");
}

TEST(ApiAuth, TokensAndRoles) {
    const auto t = table();
    EXPECT_EQ(policy::authorize(t, "", "", ApiRole::read).status, 401);
    EXPECT_EQ(policy::authorize(t, "Basic dXNlcjpwYXNz", "", ApiRole::read).status, 401);
    EXPECT_EQ(policy::authorize(t, "Bearer ", "", ApiRole::read).status, 401);
    EXPECT_EQ(policy::authorize(t, "Bearer not-a-known-token-at-all", "", ApiRole::read).status,
              401);
    auto d = policy::authorize(t, "Bearer " + kReadToken, "", ApiRole::read);
    EXPECT_EQ(d.status, 200);
    EXPECT_EQ(d.principal, "dashboard");
    d = policy::authorize(t, "Bearer " + kReadToken, "", ApiRole::write);
    EXPECT_EQ(d.status, 403);
    EXPECT_EQ(d.principal, "dashboard");
    d = policy::authorize(t, "bearer  " + kWriteToken + " ", "", ApiRole::write);
    EXPECT_EQ(d.status, 200);
    EXPECT_EQ(d.principal, "automation");
    // A token is never part of an answer.
    EXPECT_EQ(policy::authorize(t, "Bearer " + kReadToken + "x", "", ApiRole::read)
                  .error.find(kReadToken), std::string::npos);
}

TEST(ApiAuth, ClientCertificates) {
    const auto t = table();
    auto d = policy::authorize(t, "", "ops", ApiRole::write);
    EXPECT_EQ(d.status, 200);
    EXPECT_EQ(d.principal, "ops-cert");
    EXPECT_EQ(policy::authorize(t, "", "intruder", ApiRole::read).status, 401);
    // A bearer token, when present, decides: a read token on an ops certificate reads only.
    EXPECT_EQ(policy::authorize(t, "Bearer " + kReadToken, "ops", ApiRole::write).status, 403);
}

TEST(ApiAuth, UnreadableTokenFileFailsTheBuild) {
    std::vector<ApiClientConfig> clients(1);
    clients[0].name = "gone";
    clients[0].token_file = testing::TempDir() + "/no-such.token";
    policy::AuthTable t;
    std::string error;
    EXPECT_FALSE(policy::AuthTable::build(clients, t, error));
    EXPECT_NE(error.find("gone"), std::string::npos) << error;
}

TEST(ApiHeaders, ContentTypeOfWrites) {
    EXPECT_FALSE(policy::check_content_type("GET", "text/plain", true));
    EXPECT_FALSE(policy::check_content_type("POST", "", false));  // POST /api/v1/reload
    for (const char* ok : {"application/json", "application/json; charset=utf-8",
                           "Application/YAML", "application/x-yaml", "text/yaml"}) {
        EXPECT_FALSE(policy::check_content_type("PUT", ok, true)) << ok;
    }
    for (const char* bad : {"text/plain", "application/x-www-form-urlencoded",
                            "multipart/form-data; boundary=x", "", "application/jsonx"}) {
        const auto r = policy::check_content_type("POST", bad, true);
        ASSERT_TRUE(r) << bad;
        EXPECT_EQ(r->status, 415);
    }
}

TEST(ApiHeaders, OriginOfWrites) {
    const std::vector<std::string> allowed = {"https://ops.example"};
    EXPECT_FALSE(policy::check_origin("GET", "https://evil.example", "cross-site", allowed));
    EXPECT_FALSE(policy::check_origin("POST", "", "", allowed));  // curl, scripts
    EXPECT_FALSE(policy::check_origin("POST", "HTTPS://ops.example", "same-site", allowed));
    auto r = policy::check_origin("DELETE", "https://evil.example", "", allowed);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 403);
    r = policy::check_origin("POST", "null", "", allowed);  // sandboxed frames, file://
    ASSERT_TRUE(r);
    r = policy::check_origin("PUT", "", "cross-site", allowed);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 403);
    EXPECT_FALSE(policy::check_origin("PUT", "", "none", allowed));  // typed by the user
}

TEST(ApiHeaders, HostWithoutAuthenticationMustBeAnAddressOrListed) {
    const std::vector<std::string> listed = {"switch1.example"};
    for (const char* ok : {"127.0.0.1:9464", "127.0.0.1", "localhost:9464", "[::1]:9464",
                           "10.1.2.3:9464", "Switch1.Example:9464", ""}) {
        EXPECT_FALSE(policy::check_host(ok, false, listed)) << ok;
    }
    const auto r = policy::check_host("rebind.evil.example:9464", false, listed);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 403);
    // With tokens a page cannot authenticate: names are enforced only when some are listed.
    EXPECT_FALSE(policy::check_host("rebind.evil.example:9464", true, {}));
    EXPECT_TRUE(policy::check_host("rebind.evil.example:9464", true, listed));
    EXPECT_TRUE(policy::check_host("[::1", false, {}));
}

TEST(ApiHeaders, HeadersTheChecksReadComeOnce) {
    std::multimap<std::string, std::string> headers = {
        {"host", "127.0.0.1"}, {"x-trace", "1"}, {"x-trace", "2"}, {"authorization", "Bearer a"}};
    const auto count = [&](const std::string& name) {
        std::string lower_name = name;
        for (char& c : lower_name) {
            c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
        }
        return headers.count(lower_name);
    };
    EXPECT_FALSE(policy::check_repeated_headers(count));  // other headers may repeat
    headers.emplace("authorization", "Bearer b");
    auto r = policy::check_repeated_headers(count);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400);
    EXPECT_NE(r->message.find("Authorization given 2 times"), std::string::npos) << r->message;
    headers.erase("authorization");
    headers.emplace("content-length", "5");
    headers.emplace("content-length", "500");
    EXPECT_TRUE(policy::check_repeated_headers(count));
}

TEST(ApiQuery, RepeatedAndUnknownParametersAreRefused) {
    using Params = std::multimap<std::string, std::string>;
    EXPECT_FALSE(policy::check_query({}, {}));
    EXPECT_FALSE(policy::check_query(Params{{"job_id", "1"}}, {"job_id"}));
    auto r = policy::check_query(Params{{"job_id", "1"}, {"job_id", "2"}}, {"job_id"});
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400);
    EXPECT_NE(r->message.find("given 2 times"), std::string::npos) << r->message;
    r = policy::check_query(Params{{"job_id", "1"}, {"force", "1"}}, {"job_id"});
    ASSERT_TRUE(r);
    EXPECT_NE(r->message.find("'force'"), std::string::npos) << r->message;
    r = policy::check_query(Params{{"verbose", ""}}, {});
    ASSERT_TRUE(r);
    EXPECT_NE(r->message.find("expected none"), std::string::npos) << r->message;
}

TEST(ApiLimits, DeclaredBodyLength) {
    EXPECT_FALSE(policy::check_body_length("", 1024));
    EXPECT_FALSE(policy::check_body_length("1024", 1024));
    auto r = policy::check_body_length("104857600", 4194304);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 413);
    EXPECT_NE(r->message.find("4194304"), std::string::npos) << r->message;
    r = policy::check_body_length("99999999999999999999999999", 4194304);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 413);
    r = policy::check_body_length("12abc", 4194304);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400);
}

TEST(ApiLimits, BodiesDeclareTheirLengthAndComeUncompressed) {
    EXPECT_FALSE(policy::check_body_framing("", ""));
    EXPECT_FALSE(policy::check_body_framing("", "identity"));
    auto r = policy::check_body_framing("chunked", "");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 411);
    r = policy::check_body_framing("", "gzip");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 415);
}

TEST(ApiErrors, InvalidUtf8IsReplacedNotThrown) {
    const std::string body = policy::error_body("got '\xff\xfe'");
    const auto j = nlohmann::json::parse(body);
    EXPECT_EQ(j["ok"], false);
    EXPECT_EQ(j["errors"][0].get<std::string>(), "got '\xef\xbf\xbd\xef\xbf\xbd'");
}

TEST(ApiLimits, ConnectionsPerClientAndInTotal) {
    using V = policy::ConnectionLimiter::Verdict;
    policy::ConnectionLimiter limits(3, 2);
    EXPECT_EQ(limits.acquire("10.0.0.1"), V::ok);
    EXPECT_EQ(limits.acquire("10.0.0.1"), V::ok);
    EXPECT_EQ(limits.acquire("10.0.0.1"), V::client_full);
    EXPECT_EQ(limits.acquire("10.0.0.2"), V::ok);
    EXPECT_EQ(limits.acquire("10.0.0.3"), V::total_full);
    limits.release("10.0.0.1");
    EXPECT_EQ(limits.open(), 2u);
    EXPECT_EQ(limits.acquire("10.0.0.3"), V::ok);
    limits.release("10.0.0.9");  // never acquired: no effect
    EXPECT_EQ(limits.open(), 3u);
}

}  // namespace
