// SPDX-License-Identifier: Apache-2.0
// The one place each feature folder (src/features/<f>/) is registered with the shared layers:
// its config section, snapshot compile step, stage, control hooks and API routes.
#pragma once

namespace ina::app {

// Call once at start-up, before any config is loaded or any worker runs. False if a hook
// could not be registered (a handle or a key taken twice).
bool register_features();

}  // namespace ina::app
