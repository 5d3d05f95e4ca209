// Replays every saved fuzz input (the seed corpus in tests/fuzz/corpus/<target>/ and the crash
// inputs kept in tests/fuzz/regressions/<target>/) through the fuzz targets' entry functions, in
// every build (not only the clang `fuzz` preset). A defect aborts the test process.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz/fuzz_targets.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_fuzz_regressions {

namespace {

namespace fs = std::filesystem;

using Entry = int (*)(const std::uint8_t*, std::size_t);

/// Replays every file under corpus/<target> and regressions/<target>; returns how many.
std::size_t replay(const std::string& target, Entry entry) {
  std::size_t n = 0;
  for (const char* kind : {"corpus", "regressions"}) {
    const fs::path dir = fs::path(SIMPLER_FUZZ_DIR) / kind / target;
    if (!fs::is_directory(dir)) continue;
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.is_regular_file() && e.path().filename().string().front() != '.')
        files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      std::ifstream is(f, std::ios::binary);
      const std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(is)),
                                            std::istreambuf_iterator<char>());
      INFO("input " << f.string());
      CHECK(entry(bytes.data(), bytes.size()) == 0);
      ++n;
    }
  }
  return n;
}

}  // namespace

TEST_CASE("the fuzz_args_blob corpus and regressions replay without a defect", "[fuzz]") {
  CHECK(replay("fuzz_args_blob", simpler_fuzz_args_blob) > 0);
}

TEST_CASE("the fuzz_mailbox_frame corpus and regressions replay without a defect", "[fuzz]") {
  CHECK(replay("fuzz_mailbox_frame", simpler_fuzz_mailbox_frame) > 0);
}

TEST_CASE("the fuzz_device corpus and regressions replay without a defect", "[fuzz][device]") {
  CHECK(replay("fuzz_device", simpler_fuzz_device) > 0);
}

TEST_CASE("the fuzz_remote_frame corpus and regressions replay without a defect",
          "[fuzz][remote][remote-wire]") {
  CHECK(replay("fuzz_remote_frame", simpler_fuzz_remote_frame) > 0);
}

}  // namespace simpler_test_fuzz_regressions
