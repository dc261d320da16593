// SPDX-License-Identifier: Apache-2.0
#include "worker/rdma/switch_api.h"

#include <httplib.h>

namespace ina::rdma {

namespace {

httplib::Client make_client(const std::string& base_url, const std::string& token,
                            std::chrono::milliseconds timeout) {
    httplib::Client cli(base_url);
    if (!cli.is_valid()) {
        throw Error("--switch-api '" + base_url + "' is not an http://HOST:PORT URL");
    }
    const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(timeout);
    const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(timeout - seconds);
    cli.set_connection_timeout(seconds.count(), static_cast<time_t>(micros.count()));
    cli.set_read_timeout(seconds.count(), static_cast<time_t>(micros.count()));
    cli.set_write_timeout(seconds.count(), static_cast<time_t>(micros.count()));
    if (!token.empty()) {
        cli.set_bearer_token_auth(token);
    }
    return cli;
}

}  // namespace

SwitchApi::SwitchApi(std::string base_url, std::string token, std::chrono::milliseconds timeout)
    : base_url_(std::move(base_url)), token_(std::move(token)), timeout_(timeout) {
    if (base_url_.rfind("http://", 0) != 0 && base_url_.rfind("https://", 0) != 0) {
        throw Error("--switch-api '" + base_url_ + "' is not an http://HOST:PORT URL");
    }
    make_client(base_url_, token_, timeout_);
}

SwitchConnectReply SwitchApi::connect(uint32_t job_id, const SwitchConnectRequest& request) const {
    auto cli = make_client(base_url_, token_, timeout_);
    const std::string path = "/api/v1/rdma/jobs/" + std::to_string(job_id) + "/connect";
    const std::string what = "connect to job " + std::to_string(job_id) + " at " + base_url_;
    const auto res = cli.Post(path, request.to_json(), "application/json");
    if (!res) {
        throw Error(what + ": " + httplib::to_string(res.error()));
    }
    if (res->status != 200) {
        throw Error(what + ": " + api_error_text(res->status, res->body));
    }
    std::string why;
    auto reply = SwitchConnectReply::from_json(res->body, &why);
    if (!reply) {
        throw Error(what + ": the answer does not decode (" + why + "): " +
                    res->body.substr(0, 200));
    }
    return std::move(*reply);
}

std::string SwitchApi::disconnect(uint32_t job_id, uint16_t rank) const {
    auto cli = make_client(base_url_, token_, timeout_);
    const std::string path = "/api/v1/rdma/jobs/" + std::to_string(job_id) + "/connect/" +
                             std::to_string(rank);
    const auto res = cli.Delete(path);
    if (!res) {
        return "DELETE " + path + ": " + httplib::to_string(res.error());
    }
    if (res->status != 204 && res->status != 200) {
        return "DELETE " + path + ": " + api_error_text(res->status, res->body);
    }
    return {};
}

}  // namespace ina::rdma
