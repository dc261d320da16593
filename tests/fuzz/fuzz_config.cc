// SPDX-License-Identifier: Apache-2.0
// libFuzzer: the YAML config loader never crashes, and every error it reports names the source.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    const auto r = ina::config::load_string(text, "fuzz.yaml");
    if (!r.ok()) {
        for (const auto& e : r.errors) {
            if (e.str().rfind("fuzz.yaml", 0) != 0) {
                std::abort();
            }
        }
    }
    return 0;
}
