// SPDX-License-Identifier: Apache-2.0
// Names for the rows of the table-driven transport tests: the row's index and its rule, as a
// gtest name (letters, digits and underscores), so a failure names the rule it broke.
#pragma once

#include <gtest/gtest.h>

#include <cctype>
#include <string>

namespace ina::roce::test {

template <class Row>
std::string rule_name(const testing::TestParamInfo<Row>& info) {
    std::string name = std::to_string(info.index) + "_";
    for (const char c : info.param.rule) {
        name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
    }
    return name.substr(0, 60);
}

}  // namespace ina::roce::test
