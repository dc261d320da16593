// SPDX-License-Identifier: Apache-2.0
// Prometheus exposition of the switch's counters. Built at scrape time from per-lcore counters
// summed by the control plane: nothing on the packet path touches a Prometheus object.
#pragma once

#include <prometheus/metric_family.h>

#include <string>
#include <vector>

#include "metrics/stats.h"

namespace ina::metrics {

std::vector<prometheus::MetricFamily> families(const Stats& stats);
std::string render(const Stats& stats);  // text format 0.0.4

}  // namespace ina::metrics
