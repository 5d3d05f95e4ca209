// The libFuzzer entry point of one fuzz target; SIMPLER_FUZZ_ENTRY names its entry function
// (tests/fuzz/CMakeLists.txt builds this file once per target).
#include "fuzz/fuzz_targets.hpp"

#ifndef SIMPLER_FUZZ_ENTRY
#error "define SIMPLER_FUZZ_ENTRY to the target's entry function"
#endif

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return SIMPLER_FUZZ_ENTRY(data, size);
}
