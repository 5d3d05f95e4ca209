// Test support: Catch2 matchers shared by the test files.
#pragma once

#include <catch2/catch.hpp>

#include <exception>
#include <string>
#include <string_view>
#include <utility>

namespace simpler::testing {

/// Matches an exception whose what() contains `needle` (for CHECK_THROWS_MATCHES, which also
/// checks the exception type).
class WhatContains : public Catch::MatcherBase<std::exception> {
 public:
  explicit WhatContains(std::string needle) : needle_(std::move(needle)) {}
  bool match(const std::exception& e) const override {
    return std::string_view(e.what()).find(needle_) != std::string_view::npos;
  }
  std::string describe() const override { return "what() contains \"" + needle_ + "\""; }

 private:
  std::string needle_;
};

}  // namespace simpler::testing
