// SPDX-License-Identifier: Apache-2.0
// The worker's side of the server-to-switch connect exchange over the switch's control API
// (docs/api.md, "RDMA"): POST /api/v1/rdma/jobs/{id}/connect with the worker's QP and result
// buffer, the switch's QP and contribution area back; DELETE .../connect/{rank} at the end.
// No RDMA here, so it is tested against a small fake server.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "worker/rdma/switch_exchange.h"
#include "worker/rdma/verbs.h"

namespace ina::rdma {

class SwitchApi {
public:
    // `base_url`: "http://HOST:PORT" (https:// when the API serves TLS). `token`: sent as
    // "Authorization: Bearer <token>" when not empty. Throws Error on a malformed URL.
    SwitchApi(std::string base_url, std::string token, std::chrono::milliseconds timeout);

    // Throws Error with the switch's own error text ("connect to job 7: HTTP 409: rank 1 is
    // already connected"), or naming a transport failure or an answer that does not decode.
    SwitchConnectReply connect(uint32_t job_id, const SwitchConnectRequest& request) const;
    // DELETE; returns "" on 204, else the error text (teardown goes on regardless).
    std::string disconnect(uint32_t job_id, uint16_t rank) const;

    const std::string& base_url() const { return base_url_; }

private:
    std::string base_url_;
    std::string token_;
    std::chrono::milliseconds timeout_;
};

}  // namespace ina::rdma
