// SPDX-License-Identifier: Apache-2.0
// HTTP(S) + JSON control API and the Prometheus /metrics endpoint (docs/api.md): the API
// listener, and optionally a metrics-only listener with its own threads, both with the
// authentication, header and size rules of control/api_policy.h and an audit log of changes.
#pragma once

#include <memory>
#include <string>

#include "config/config.h"
#include "control/control_plane.h"

namespace httplib {
class Server;
}

namespace ina::control {

// A feature's API routes (src/features/<f>/control*), installed on the API listener after the
// shared ones; the listener's authentication, roles, size limits and audit log apply to them as
// to every route. Registered once at start-up (src/app), before any ApiServer starts.
using RouteInstaller = void (*)(httplib::Server& server, ControlPlane& control);
bool register_routes(RouteInstaller fn);

class ApiServer {
public:
    explicit ApiServer(ControlPlane& control);
    ~ApiServer();
    ApiServer(const ApiServer&) = delete;
    ApiServer& operator=(const ApiServer&) = delete;

    // Starts the listeners `settings` names (control.listen, control.metrics_listen); false
    // with `error` if one cannot bind or a TLS file, token file or the audit log fails.
    bool start(const config::ControlConfig& settings, std::string& error);
    void stop();

    struct Impl;

private:
    std::unique_ptr<Impl> impl_;
};

}  // namespace ina::control
