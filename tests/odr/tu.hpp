// The ODR check's interface between its translation units.
#pragma once

#include <cstdint>

namespace odr {
struct Identity {
  const void* default_config;
  const void* closed_list;
  std::uint64_t digest;
};
Identity identity_a();
Identity identity_b();
long run_a();
long run_b();
}  // namespace odr
