// SPDX-License-Identifier: Apache-2.0
// The worker's connect exchange against a fake switch API on loopback (cpp-httplib server):
// the POST it sends (path, JSON, bearer token), the answer it decodes, the switch's own error
// text on a refusal, an answer that does not decode, a dead API, and the DELETE.
#include <gtest/gtest.h>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "worker/rdma/switch_api.h"

namespace ina::rdma {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;

// A fake API whose answer to the next POST is set by the test; it records what it got.
class FakeSwitchApi {
public:
    FakeSwitchApi() {
        server_.Post(R"(/api/v1/rdma/jobs/(\d+)/connect)",
                     [this](const httplib::Request& req, httplib::Response& res) {
                         std::lock_guard lock(mu_);
                         paths_.push_back("POST " + req.path);
                         bodies_.push_back(req.body);
                         auth_ = req.get_header_value("Authorization");
                         res.status = status_;
                         res.set_content(answer_, "application/json");
                     });
        server_.Delete(R"(/api/v1/rdma/jobs/(\d+)/connect/(\d+))",
                       [this](const httplib::Request& req, httplib::Response& res) {
                           std::lock_guard lock(mu_);
                           paths_.push_back("DELETE " + req.path);
                           res.status = delete_status_;
                           if (delete_status_ != 204) {
                               res.set_content(R"({"error": "rank 2 is not connected"})",
                                               "application/json");
                           }
                       });
        port_ = server_.bind_to_any_port("127.0.0.1");
        thread_ = std::thread([this] { server_.listen_after_bind(); });
        const auto deadline = std::chrono::steady_clock::now() + 10s;
        while (!server_.is_running() && std::chrono::steady_clock::now() < deadline) {
            std::this_thread::yield();
        }
    }
    ~FakeSwitchApi() {
        server_.stop();
        thread_.join();
    }
    std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
    void answer(int status, std::string body) {
        std::lock_guard lock(mu_);
        status_ = status;
        answer_ = std::move(body);
    }
    void delete_answer(int status) {
        std::lock_guard lock(mu_);
        delete_status_ = status;
    }
    std::vector<std::string> paths() {
        std::lock_guard lock(mu_);
        return paths_;
    }
    std::string last_body() {
        std::lock_guard lock(mu_);
        return bodies_.empty() ? "" : bodies_.back();
    }
    std::string auth() {
        std::lock_guard lock(mu_);
        return auth_;
    }

private:
    httplib::Server server_;
    std::thread thread_;
    int port_ = 0;
    std::mutex mu_;
    int status_ = 200;
    int delete_status_ = 204;
    std::string answer_;
    std::vector<std::string> paths_, bodies_;
    std::string auth_;
};

SwitchConnectRequest request() {
    SwitchConnectRequest r;
    r.rank = 2;
    r.qpn = 0x11;
    r.psn = 0xABCDE;
    r.ip = "10.77.2.2";
    r.result_addr = 0x7f0000001000;
    r.result_rkey = 0x99;
    r.result_length = 65536;
    r.chunk_bytes = 1024;
    r.window = 64;
    r.elem_type = reduce::ElemType::int32;
    r.world = 2;
    return r;
}

constexpr const char* kReply = R"({"qpn": 256, "psn": 5000, "ip": "10.77.2.1",
  "gid": "::ffff:10.77.2.1", "area_addr": 4096, "area_rkey": 305419896, "area_length": 65536,
  "pmtu": 1024})";

TEST(SwitchApi, PostsTheRequestAndDecodesTheAnswer) {
    FakeSwitchApi fake;
    fake.answer(200, kReply);
    SwitchApi api(fake.url(), "s3cret-token-0123456789", 5s);
    const SwitchConnectReply r = api.connect(7, request());
    EXPECT_EQ(r.qpn, 256u);
    EXPECT_EQ(r.psn, 5000u);
    EXPECT_EQ(r.gid, "::ffff:10.77.2.1");
    EXPECT_EQ(r.area_rkey, 305419896u);
    ASSERT_EQ(fake.paths(), std::vector<std::string>{"POST /api/v1/rdma/jobs/7/connect"});
    EXPECT_EQ(json::parse(fake.last_body()), json::parse(request().to_json()));
    EXPECT_EQ(json::parse(fake.last_body())["dtype"], "int32");
    EXPECT_EQ(fake.auth(), "Bearer s3cret-token-0123456789");
    EXPECT_EQ(api.disconnect(7, 2), "");
    EXPECT_EQ(fake.paths().back(), "DELETE /api/v1/rdma/jobs/7/connect/2");
}

TEST(SwitchApi, NoTokenNoAuthorizationHeader) {
    FakeSwitchApi fake;
    fake.answer(200, kReply);
    SwitchApi(fake.url(), "", 5s).connect(1, request());
    EXPECT_EQ(fake.auth(), "");
}

TEST(SwitchApi, RefusalsCarryTheSwitchsErrorText) {
    FakeSwitchApi fake;
    SwitchApi api(fake.url(), "", 5s);
    for (const auto& [status, text] :
         std::vector<std::pair<int, std::string>>{{404, "no rdma job 7"},
                                                  {409, "rank 2 is already connected"},
                                                  {409, "chunk_bytes 1024 differs from the job's 512"},
                                                  {503, "no QP resources"},
                                                  {400, "\"qpn\" exceeds 24 bits"}}) {
        fake.answer(status, json{{"error", text}}.dump());
        try {
            api.connect(7, request());
            ADD_FAILURE() << status << " was accepted";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("HTTP " + std::to_string(status) + ": " + text),
                      std::string::npos)
                << e.what();
            EXPECT_NE(std::string(e.what()).find("job 7"), std::string::npos) << e.what();
        }
    }
}

TEST(SwitchApi, AnAnswerThatDoesNotDecodeIsAnError) {
    FakeSwitchApi fake;
    json bad = json::parse(kReply);
    bad["qpn"] = 1 << 24;
    fake.answer(200, bad.dump());
    try {
        SwitchApi(fake.url(), "", 5s).connect(7, request());
        FAIL() << "a 25-bit QPN was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("does not decode"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("qpn"), std::string::npos) << e.what();
    }
}

TEST(SwitchApi, DeleteErrorsAreReturnedNotThrown) {
    FakeSwitchApi fake;
    fake.delete_answer(404);
    const std::string err = SwitchApi(fake.url(), "", 5s).disconnect(7, 2);
    EXPECT_NE(err.find("HTTP 404: rank 2 is not connected"), std::string::npos) << err;
}

TEST(SwitchApi, NoServerAndBadUrlsFailWithAMessage) {
    std::string url;
    {
        FakeSwitchApi gone;  // a port that was just free and is closed again
        url = gone.url();
    }
    try {
        SwitchApi(url, "", 2s).connect(7, request());
        FAIL() << "connected to nothing";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("connect to job 7 at " + url), std::string::npos)
            << e.what();
    }
    EXPECT_NE(SwitchApi(url, "", 2s).disconnect(7, 2), "");
    EXPECT_THROW(SwitchApi("10.77.1.1:9464", "", 2s), Error);
    EXPECT_THROW(SwitchApi("ftp://10.77.1.1", "", 2s), Error);
}

}  // namespace
}  // namespace ina::rdma
