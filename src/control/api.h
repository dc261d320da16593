// SPDX-License-Identifier: Apache-2.0
// HTTP + JSON control API and the Prometheus /metrics endpoint, served from one listener on
// its own thread (documented in docs/api.md).
#pragma once

#include <memory>
#include <string>
#include <thread>

#include "control/control_plane.h"

namespace httplib {
class Server;
}

namespace ina::control {

class ApiServer {
public:
    explicit ApiServer(ControlPlane& control);
    ~ApiServer();
    ApiServer(const ApiServer&) = delete;
    ApiServer& operator=(const ApiServer&) = delete;

    // Binds `listen` ("host:port") and serves on a thread; false with `error` if it cannot bind.
    bool start(const std::string& listen, std::string& error);
    void stop();

private:
    ControlPlane& control_;
    std::unique_ptr<httplib::Server> server_;
    std::thread thread_;
};

}  // namespace ina::control
