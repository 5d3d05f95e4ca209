// Links tu_a and tu_b (each includes every header) and checks that what must be one per
// program is one, and that both translation units drive Workers.
#include <cstdio>

#include "tu.hpp"

int main() {
  const odr::Identity a = odr::identity_a();
  const odr::Identity b = odr::identity_b();
  int failures = 0;
  auto check = [&](bool ok, const char* what) {
    if (!ok) {
      std::fprintf(stderr, "ODR check failed: %s\n", what);
      ++failures;
    }
  };
  check(a.default_config == b.default_config, "default_call_config() differs between TUs");
  check(a.closed_list == b.closed_list, "the closed consumer-list sentinel differs between TUs");
  check(a.digest == b.digest, "callable_digest differs between TUs");
  check(odr::run_a() == 55, "a Worker in TU a computed the wrong sum");
  check(odr::run_b() == 210, "a Worker in TU b computed the wrong sum");
  if (failures == 0) std::puts("odr: one library in two translation units");
  return failures == 0 ? 0 : 1;
}
