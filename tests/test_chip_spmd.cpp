// SPMD tasks (Task::blocks, the run's block_dim) and the simulator's per-run diagnostic files
// (tensor dumps, counters), driven through the device runtime's C ABI.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <simpler/simpler.hpp>

#include "device/orchestration/spmd_cases.hpp"
#include "support/device_api.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_chip_spmd {

namespace {

using simpler_test::device_module;
using simpler_test::DeviceApi;
using simpler_test::sim_api;
using namespace spmd_cases;

namespace fs = std::filesystem;

constexpr int kRowInts = 8;

simpler_run_config base_config() {
  simpler_run_config c{};
  c.struct_size = sizeof c;
  return c;
}

/// A fresh directory under /tmp, removed with its contents at the end of the test.
struct TempDir {
  std::string path;
  TempDir() {
    std::string templ = "/tmp/simpler-spmd-XXXXXX";
    REQUIRE(::mkdtemp(templ.data()) != nullptr);
    path = templ;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

void set_prefix(simpler_run_config& c, const std::string& prefix) {
  REQUIRE(prefix.size() < sizeof c.output_prefix);
  std::memcpy(c.output_prefix, prefix.c_str(), prefix.size() + 1);
}

/// A context with `clusters` clusters and the spmd_cases callable (kernel 0: spmd_add) as id 0.
struct Spmd {
  const DeviceApi& api = sim_api();
  simpler_device_context* ctx = nullptr;
  std::string kernel = device_module("test_kernel_spmd_add.so");
  std::string orch = device_module("test_orch_spmd_cases.so");
  std::vector<float> x, y, z;
  std::vector<std::int32_t> rec;
  std::uint32_t clusters;

  explicit Spmd(std::uint32_t num_clusters = 2, std::int32_t device_id = 0)
      : clusters(num_clusters) {
    ctx = api.create_context();
    REQUIRE(ctx != nullptr);
    simpler_init_options o{};
    o.struct_size = sizeof o;
    o.num_clusters = num_clusters;
    REQUIRE(api.init(ctx, device_id, &o) == SIMPLER_OK);
    const simpler_kernel_desc k{0, kernel.c_str(), nullptr};
    simpler_chip_callable_desc d{};
    d.struct_size = sizeof d;
    d.orch_path = orch.c_str();
    d.kernel_count = 1;
    d.kernels = &k;
    REQUIRE(api.register_callable(ctx, 0, &d) == SIMPLER_OK);
  }
  Spmd(const Spmd&) = delete;
  Spmd& operator=(const Spmd&) = delete;
  ~Spmd() { api.destroy_context(ctx); }

  /// Runs case `which` on vectors of `n` (x[i] = i, y[i] = 2i + 1) with a record for
  /// `rec_blocks` blocks (3 rows each).
  int run(int which, std::int64_t blocks, std::uint32_t n, std::size_t rec_blocks,
          const simpler_run_config& cfg = base_config()) {
    setup(which, blocks, n, rec_blocks);
    return api.run(ctx, 0, &args_, &cfg);
  }
  /// The same through the four phases, calling `between` after prepare and before launch;
  /// returns the first failing phase's status.
  template <class F>
  int run_phases(int which, std::int64_t blocks, std::uint32_t n, std::size_t rec_blocks,
                 const simpler_run_config& cfg, F between) {
    setup(which, blocks, n, rec_blocks);
    if (const int rc = api.prepare_run(ctx, 0, &args_, &cfg); rc != SIMPLER_OK) return rc;
    between();
    if (const int rc = api.launch_run(ctx); rc != SIMPLER_OK) return rc;
    const int waited = api.wait_run(ctx);
    const int finished = api.finalize_run(ctx);
    return waited != SIMPLER_OK ? waited : finished;
  }
  void setup(int which, std::int64_t blocks, std::uint32_t n, std::size_t rec_blocks) {
    const std::size_t rows = 3 * rec_blocks;
    x.assign(n, 0.0F);
    y.assign(n, 0.0F);
    z.assign(n, -1.0F);
    for (std::uint32_t i = 0; i < n; ++i) {
      x[i] = static_cast<float>(i);
      y[i] = static_cast<float>(2 * i + 1);
    }
    rec.assign(rows * kRowInts, 0);
    void* data[4] = {x.data(), y.data(), z.data(), rec.data()};
    for (int i = 0; i < 4; ++i) {
      t_[i] = simpler_tensor{};
      t_[i].data = reinterpret_cast<std::uintptr_t>(data[i]);
      t_[i].ndims = 1;
      t_[i].shapes[0] = i == 3 ? static_cast<std::uint32_t>(rows * kRowInts) : n;
      t_[i].dtype = i == 3 ? SIMPLER_INT32 : SIMPLER_FLOAT32;
    }
    scalars_[0] = static_cast<std::uint64_t>(which);
    scalars_[1] = static_cast<std::uint64_t>(blocks);
    args_ = simpler_task_args{4, 2, t_, scalars_};
  }
  [[nodiscard]] std::string error() const { return api.last_error(ctx); }
  [[nodiscard]] const std::int32_t* row(std::size_t r) const { return rec.data() + r * kRowInts; }
  /// Runs of block b over its three lanes (rows 3b .. 3b + 2).
  [[nodiscard]] int block_runs(std::size_t b) const {
    return row(3 * b)[0] + row(3 * b + 1)[0] + row(3 * b + 2)[0];
  }

 private:
  simpler_tensor t_[4]{};
  std::uint64_t scalars_[2] = {};
  simpler_task_args args_{};
};

/// z == x + y exactly (the kernel's blocks together covered every element once or more).
void check_sum(const Spmd& d) {
  for (std::size_t i = 0; i < d.z.size(); ++i) {
    INFO("element " << i);
    REQUIRE(d.z[i] == d.x[i] + d.y[i]);
  }
}

/// Every block in 0..blocks-1 ran exactly once, saw block_num == blocks, and no other row ran.
void check_each_block_once(const Spmd& d, std::size_t blocks) {
  for (std::size_t b = 0; b < d.rec.size() / kRowInts / 3; ++b) {
    INFO("block " << b);
    CHECK(d.block_runs(b) == (b < blocks ? 1 : 0));
    for (int l = 0; l < 3; ++l) {
      const std::int32_t* r = d.row(3 * b + static_cast<std::size_t>(l));
      if (r[0] != 0) {
        CHECK(r[3] == static_cast<std::int32_t>(blocks));
        CHECK(r[5] == static_cast<std::int32_t>(b));
      }
    }
  }
}

/// The core ids the blocks ran on.
std::set<std::int32_t> cores_used(const Spmd& d) {
  std::set<std::int32_t> s;
  for (std::size_t r = 0; r < d.rec.size() / kRowInts; ++r) {
    if (d.row(r)[0] != 0) s.insert(d.row(r)[1]);
  }
  return s;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/// A .npy file as the test reads it back: dtype descr, shape, raw data.
struct Npy {
  std::string descr;
  std::vector<std::uint64_t> shape;
  std::string data;
};

/// A minimal reader of NumPy .npy v1.0 files (C order only).
Npy read_npy(const std::string& path) {
  const std::string f = slurp(path);
  REQUIRE(f.size() >= 10);
  REQUIRE(f.compare(0, 6, "\x93NUMPY") == 0);
  REQUIRE(f[6] == 1);
  REQUIRE(f[7] == 0);
  const std::size_t hlen = static_cast<unsigned char>(f[8]) |
                           (static_cast<std::size_t>(static_cast<unsigned char>(f[9])) << 8);
  REQUIRE(f.size() >= 10 + hlen);
  CHECK((10 + hlen) % 64 == 0);
  const std::string header = f.substr(10, hlen);
  CHECK(header.back() == '\n');
  std::smatch m;
  REQUIRE(std::regex_search(header, m, std::regex("'descr': '([^']+)'")));
  Npy out;
  out.descr = m[1];
  CHECK(header.find("'fortran_order': False") != std::string::npos);
  REQUIRE(std::regex_search(header, m, std::regex("'shape': \\(([0-9, ]*)\\)")));
  const std::string dims = m[1];
  const std::regex number("[0-9]+");
  for (std::sregex_iterator it(dims.begin(), dims.end(), number), end; it != end; ++it) {
    out.shape.push_back(std::stoull(it->str()));
  }
  out.data = f.substr(10 + hlen);
  return out;
}

std::string bytes_of(const void* p, std::size_t n) {
  return std::string(static_cast<const char*>(p), n);
}

/// One entry of tensors/index.json (one line per entry).
struct IndexEntry {
  std::uint64_t task_id;
  std::int32_t func_id, arg;
  std::string kernel, role, when, dtype, shape, file;
};

std::vector<IndexEntry> read_index(const std::string& path) {
  std::vector<IndexEntry> out;
  std::istringstream in(slurp(path));
  const std::regex re(
      "\"task_id\": ([0-9]+), \"task\": \"[0-9]+:[0-9]+\", \"func_id\": (-?[0-9]+), "
      "\"func_ids\": \\[[-0-9, ]+\\], \"kernel\": \"([^\"]*)\", \"arg\": ([0-9]+), \"role\": "
      "\"([a-z_]+)\", \"when\": \"([a-z]+)\", \"dtype\": \"([a-z0-9]+)\", \"shape\": \\[([0-9, "
      "]*)\\], \"file\": \"([^\"]+)\"");
  for (std::string line; std::getline(in, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, re)) continue;
    out.push_back(
        {std::stoull(m[1]), std::stoi(m[2]), std::stoi(m[4]), m[3], m[5], m[6], m[7], m[8], m[9]});
  }
  return out;
}

/// Redirects this process's stderr into a file while alive; text() reads what was written.
class CaptureStderr {
 public:
  CaptureStderr()
      : path_(fs::temp_directory_path() / ("simpler-stderr-" + std::to_string(::getpid()))) {
    std::fflush(stderr);
    saved_ = ::dup(2);
    const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    REQUIRE(fd >= 0);
    ::dup2(fd, 2);
    ::close(fd);
  }
  CaptureStderr(const CaptureStderr&) = delete;
  CaptureStderr& operator=(const CaptureStderr&) = delete;
  ~CaptureStderr() {
    restore();
    std::error_code ec;
    fs::remove(path_, ec);
  }
  std::string text() {
    restore();
    return slurp(path_);
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    saved_ = -1;
  }
  fs::path path_;
  int saved_ = -1;
};

}  // namespace

// ---- SPMD --------------------------------------------------------------------------------------

TEST_CASE("an SPMD kernel splits a vector by block index and each block runs exactly once",
          "[chip][spmd]") {
  Spmd d;
  const int rc = d.run(kAiv, 7, 1000, 8);
  INFO(d.error());
  REQUIRE(rc == SIMPLER_OK);
  check_sum(d);
  check_each_block_once(d, 7);
  for (std::int32_t core : cores_used(d)) {
    CHECK(core >= static_cast<std::int32_t>(d.clusters));  // AIV cores follow the AICs
  }
}

TEST_CASE("a task without blocks() runs its kernel as one block", "[chip][spmd]") {
  Spmd d;
  REQUIRE(d.run(kDefault, 0, 100, 2) == SIMPLER_OK);
  check_sum(d);
  check_each_block_once(d, 1);
}

TEST_CASE("more blocks than cores run in waves over the cores of the task's shape",
          "[chip][spmd]") {
  Spmd d(2);
  SECTION("AIV: 37 blocks over 4 cores") {
    REQUIRE(d.run(kAiv, 37, 1001, 37) == SIMPLER_OK);
    check_sum(d);
    check_each_block_once(d, 37);
    const auto used = cores_used(d);
    CHECK(used.size() <= 4);
    for (std::int32_t c : used) CHECK((c >= 2 && c < 6));
  }
  SECTION("AIC: 9 blocks over 2 cores") {
    REQUIRE(d.run(kAic, 9, 50, 9) == SIMPLER_OK);
    check_sum(d);
    check_each_block_once(d, 9);
    for (std::int32_t c : cores_used(d)) CHECK(c < 2);
  }
}

TEST_CASE("blocks(0) runs one block per core of the task's shape", "[chip][spmd]") {
  Spmd d(3);
  SECTION("AIV") {
    REQUIRE(d.run(kAiv, 0, 64, 7) == SIMPLER_OK);
    check_each_block_once(d, 6);
  }
  SECTION("AIC") {
    REQUIRE(d.run(kAic, 0, 64, 7) == SIMPLER_OK);
    check_each_block_once(d, 3);
  }
  SECTION("MIX: one block per cluster") {
    REQUIRE(d.run(kMix, 0, 64, 7) == SIMPLER_OK);
    for (std::size_t b = 0; b < 3; ++b) CHECK(d.block_runs(b) == 3);
  }
  check_sum(d);
}

TEST_CASE("each block of a MIX SPMD task runs its lanes on one cluster", "[chip][spmd]") {
  Spmd d(2);
  REQUIRE(d.run(kMix, 5, 300, 6) == SIMPLER_OK);
  check_sum(d);
  for (std::size_t b = 0; b < 6; ++b) {
    INFO("block " << b);
    for (int l = 0; l < 3; ++l) {
      const std::int32_t* r = d.row(3 * b + static_cast<std::size_t>(l));
      CHECK(r[0] == (b < 5 ? 1 : 0));
      if (b < 5) {
        CHECK(r[4] == (l == 0 ? 0 : 1));
        CHECK(r[2] == d.row(3 * b)[2]);  // the same cluster as the AIC lane
        CHECK(r[3] == 5);
      }
    }
  }
}

TEST_CASE("the run's block_dim caps the clusters the blocks use", "[chip][spmd]") {
  Spmd d(4);
  simpler_run_config cfg = base_config();
  SECTION("block_dim 2") {
    cfg.block_dim = 2;
    REQUIRE(d.run(kAiv, 20, 200, 20, cfg) == SIMPLER_OK);
    check_each_block_once(d, 20);
    for (std::size_t r = 0; r < 60; ++r) {
      if (d.row(r)[0] != 0) CHECK(d.row(r)[2] < 2);
    }
    // blocks(0) follows the cap: 2 clusters' AIV cores.
    REQUIRE(d.run(kAiv, 0, 200, 5, cfg) == SIMPLER_OK);
    check_each_block_once(d, 4);
  }
  SECTION("block_dim 1: cluster 0 only") {
    cfg.block_dim = 1;
    REQUIRE(d.run(kMix, 6, 200, 6, cfg) == SIMPLER_OK);
    for (std::size_t r = 0; r < 18; ++r) {
      CHECK(d.row(r)[0] == 1);
      CHECK(d.row(r)[2] == 0);
    }
  }
  SECTION("block_dim 0: every cluster") {
    REQUIRE(d.run(kAic, 0, 200, 4, cfg) == SIMPLER_OK);
    check_each_block_once(d, 4);
    for (std::int32_t c : cores_used(d)) CHECK(c < 4);
  }
  check_sum(d);
}

TEST_CASE("bad block counts fail with a clear error", "[chip][spmd][errors]") {
  Spmd d(2);
  SECTION("more than SIMPLER_MAX_BLOCK_NUM") {
    CHECK(d.run(kAiv, 70000, 16, 1) == SIMPLER_ERR_INVALID_TASK_ARGS);
    CHECK_THAT(d.error(), Catch::Contains("func_id 0") && Catch::Contains("70000") &&
                              Catch::Contains("65535"));
  }
  SECTION("a negative count") {
    CHECK(d.run(kNegative, 0, 16, 1) == SIMPLER_ERR_INVALID_TASK_ARGS);
    CHECK_THAT(d.error(), Catch::Contains("negative SPMD block count") && Catch::Contains("-3"));
  }
  SECTION("block_dim above the context's clusters") {
    simpler_run_config cfg = base_config();
    cfg.block_dim = 3;
    CHECK(d.run(kAiv, 1, 16, 1, cfg) == SIMPLER_ERR_INVALID_ARGUMENT);
    CHECK_THAT(d.error(), Catch::Contains("block_dim 3 is outside 0..2"));
    cfg.block_dim = -1;
    CHECK(d.run(kAiv, 1, 16, 1, cfg) == SIMPLER_ERR_INVALID_ARGUMENT);
  }
  // The context still runs after each.
  REQUIRE(d.run(kAiv, 3, 16, 3) == SIMPLER_OK);
  check_sum(d);
}

TEST_CASE("an SPMD task's consumer sees the outputs of all its blocks", "[chip][spmd][deps]") {
  Spmd d(2);
  for (int round = 0; round < 20; ++round) {
    const std::int64_t blocks = round % 2 == 0 ? 9 : 0;
    const std::size_t nb = blocks == 0 ? 4 : 9;
    REQUIRE(d.run(kConsumer, blocks, 999, nb + 1) == SIMPLER_OK);
    for (std::size_t i = 0; i < d.z.size(); ++i) {
      INFO("round " << round << " element " << i);
      REQUIRE(d.z[i] == d.x[i] + 2 * d.y[i]);
    }
    for (std::size_t b = 0; b < nb; ++b) CHECK(d.block_runs(b) == 1);
    CHECK(d.block_runs(nb) == 1);  // the consumer: one block
  }
}

// ---- tensor dumps ------------------------------------------------------------------------------

TEST_CASE("dump_tensor writes every task's tensors as .npy files that load back exactly",
          "[chip][diag][dump]") {
  TempDir dir;
  Spmd d(2, 3);
  simpler_run_config cfg = base_config();
  cfg.dump_tensor = 1;
  set_prefix(cfg, dir.path);
  constexpr std::uint32_t n = 40;
  for (int run = 0; run < 2; ++run) {
    const int rc = d.run(kConsumer, 3, n, 4, cfg);
    INFO(d.error());
    REQUIRE(rc == SIMPLER_OK);
    const std::string tdir = dir.path + "/chip3/run" + std::to_string(run) + "/tensors";
    const auto entries = read_index(tdir + "/index.json");
    // Two tasks, 4 tensors each: before = 2 inputs + no_dep, after = output + no_dep.
    REQUIRE(entries.size() == 10);
    std::vector<float> sum(n), expected_z(n);
    for (std::uint32_t i = 0; i < n; ++i) {
      sum[i] = d.x[i] + d.y[i];
      expected_z[i] = d.x[i] + 2 * d.y[i];
    }
    const std::vector<std::int32_t> zeros(d.rec.size(), 0);
    std::set<std::uint64_t> tasks;
    for (const auto& e : entries) tasks.insert(e.task_id);
    REQUIRE(tasks.size() == 2);
    const std::uint64_t producer = *tasks.begin(), consumer = *tasks.rbegin();
    std::map<std::string, std::string> expected = {
        {"P0before", bytes_of(d.x.data(), n * 4)},
        {"P1before", bytes_of(d.y.data(), n * 4)},
        {"P3before", bytes_of(zeros.data(), 9 * 8 * 4)},
        {"P2after", bytes_of(sum.data(), n * 4)},
        {"P3after", bytes_of(d.rec.data(), 9 * 8 * 4)},
        {"C0before", bytes_of(sum.data(), n * 4)},
        {"C1before", bytes_of(d.y.data(), n * 4)},
        {"C3before", bytes_of(zeros.data(), 3 * 8 * 4)},
        {"C2after", bytes_of(expected_z.data(), n * 4)},
        {"C3after", bytes_of(d.rec.data() + 9 * 8, 3 * 8 * 4)},
    };
    for (const auto& e : entries) {
      REQUIRE((e.task_id == producer || e.task_id == consumer));
      const std::string key =
          std::string(e.task_id == producer ? "P" : "C") + std::to_string(e.arg) + e.when;
      INFO(key << " " << e.file);
      REQUIRE(expected.count(key) == 1);
      CHECK(e.func_id == 0);
      CHECK(e.kernel == "test_kernel_spmd_add");
      CHECK(e.role == (e.arg == 3 ? "no_dep" : (e.arg == 2 ? "output" : "input")));
      const Npy f = read_npy(tdir + "/" + e.file);
      CHECK(f.descr == (e.arg == 3 ? "<i4" : "<f4"));
      CHECK(e.dtype == (e.arg == 3 ? "int32" : "float32"));
      const std::uint64_t elems = expected[key].size() / 4;
      CHECK(f.shape == std::vector<std::uint64_t>{elems});
      CHECK(e.shape == std::to_string(elems));
      CHECK(f.data == expected[key]);
      expected.erase(key);
    }
    CHECK(expected.empty());
    CHECK(d.z == expected_z);
  }
}

TEST_CASE("with every diagnostic off a run writes no file", "[chip][diag]") {
  TempDir dir;
  Spmd d;
  simpler_run_config cfg = base_config();
  set_prefix(cfg, dir.path);
  REQUIRE(d.run(kAiv, 4, 64, 4, cfg) == SIMPLER_OK);
  CHECK(fs::is_empty(dir.path));
}

TEST_CASE("a diagnostics directory that cannot be created fails prepare naming path and errno",
          "[chip][diag][errors]") {
  TempDir dir;
  const std::string blocker = dir.path + "/file";
  std::ofstream(blocker) << "not a directory";
  Spmd d;
  simpler_run_config cfg = base_config();
  SECTION("dump_tensor") {
    cfg.dump_tensor = 1;
  }
  SECTION("pmu") {
    cfg.pmu = 1;
  }
  set_prefix(cfg, blocker + "/out");
  CHECK(d.run(kAiv, 2, 16, 2, cfg) == SIMPLER_ERR_INVALID_ARGUMENT);
  CHECK_THAT(d.error(), Catch::Contains(blocker) && Catch::Contains(std::strerror(ENOTDIR)));
  cfg.output_prefix[0] = '\0';
  CHECK(d.run(kAiv, 2, 16, 2, cfg) == SIMPLER_ERR_INVALID_ARGUMENT);
  CHECK_THAT(d.error(), Catch::Contains("output_prefix is empty"));
  // Nothing was run or half-set: the next plain run works.
  REQUIRE(d.run(kAiv, 2, 16, 2) == SIMPLER_OK);
  check_sum(d);
}

TEST_CASE("a dump file that cannot be written during the run loses none of the run's results",
          "[chip][diag][dump][errors]") {
  TempDir dir;
  Spmd d(2, 1);
  simpler_run_config cfg = base_config();
  cfg.dump_tensor = 1;
  set_prefix(cfg, dir.path);
  std::string err;
  int rc = 0;
  {
    CaptureStderr capture;
    // After prepare checked the directory, it becomes a regular file: every write fails.
    rc = d.run_phases(kConsumer, 3, 50, 4, cfg, [&] {
      const std::string tensors = dir.path + "/chip1/run0/tensors";
      fs::remove_all(tensors);
      std::ofstream(tensors) << "in the way";
    });
    err = capture.text();
  }
  INFO(err);
  REQUIRE(rc == SIMPLER_OK);
  for (std::size_t i = 0; i < d.z.size(); ++i) REQUIRE(d.z[i] == d.x[i] + 2 * d.y[i]);
  CHECK_THAT(err, Catch::Contains("simpler chip 1: tensor dump incomplete: cannot create " +
                                  dir.path + "/chip1/run0/tensors/task") &&
                      Catch::Contains(std::strerror(ENOTDIR)));
  CHECK_THAT(err, Catch::Contains("simpler chip 1: cannot write the diagnostics of run 0"));
  // One line for the dump files per run, not one per file.
  CHECK(err.find("tensor dump incomplete") == err.rfind("tensor dump incomplete"));
  // The context goes on; the next run's dump lands in run1.
  REQUIRE(d.run(kAiv, 2, 16, 2, cfg) == SIMPLER_OK);
  CHECK(read_index(dir.path + "/chip1/run1/tensors/index.json").size() == 5);
}

// ---- counters ----------------------------------------------------------------------------------

namespace {

struct PmuRow {
  std::int32_t func_id;
  std::uint64_t invocations, wall_ns, cpu_ns;
  std::string cycles, instructions;
};

std::vector<PmuRow> pmu_rows(const std::string& text) {
  std::vector<PmuRow> out;
  const std::regex re(
      "\"func_id\": ([0-9]+), \"kernel\": \"[^\"]*\", \"invocations\": ([0-9]+), \"wall_ns\": "
      "([0-9]+), \"cpu_ns\": ([0-9]+), \"cycles\": (null|[0-9]+), \"instructions\": "
      "(null|[0-9]+)");
  for (std::sregex_iterator it(text.begin(), text.end(), re), end; it != end; ++it) {
    const auto& m = *it;
    out.push_back(
        {std::stoi(m[1]), std::stoull(m[2]), std::stoull(m[3]), std::stoull(m[4]), m[5], m[6]});
  }
  return out;
}

}  // namespace

TEST_CASE("pmu counts each kernel's invocations per kernel and per core", "[chip][diag][pmu]") {
  TempDir dir;
  Spmd d(2);
  simpler_run_config cfg = base_config();
  cfg.pmu = 1;
  set_prefix(cfg, dir.path);
  REQUIRE(d.run(kMix, 4, 64, 4, cfg) == SIMPLER_OK);  // 4 blocks x 3 lanes
  const std::string json = slurp(dir.path + "/chip0/run0/pmu.json");
  INFO(json);
  const std::size_t cores_at = json.find("\"cores\"");
  REQUIRE(cores_at != std::string::npos);
  const auto per_kernel = pmu_rows(json.substr(0, cores_at));
  const auto per_core = pmu_rows(json.substr(cores_at));
  REQUIRE(per_kernel.size() == 1);
  CHECK(per_kernel[0].func_id == 0);
  CHECK(per_kernel[0].invocations == 12);
  CHECK(per_kernel[0].wall_ns > 0);
  std::uint64_t sum = 0, wall = 0;
  for (const auto& r : per_core) {
    sum += r.invocations;
    wall += r.wall_ns;
  }
  CHECK(sum == 12);
  CHECK(wall == per_kernel[0].wall_ns);
  // A MIX block takes a whole cluster: one cluster or both ran.
  CHECK((per_core.size() == 3 || per_core.size() == 6));
  const bool hw = json.find("\"hardware_counters\": true") != std::string::npos;
  if (hw) {
    CHECK(per_kernel[0].cycles != "null");
    CHECK(per_kernel[0].instructions != "null");
    CHECK(json.find("\"unavailable_reason\": null") != std::string::npos);
  } else {
    CHECK(per_kernel[0].cycles == "null");
    CHECK_THAT(json, Catch::Contains("\"unavailable_reason\": \"perf_event_open("));
  }
  // The CSV has a header and one line per (core, kernel) that ran.
  const std::string csv = slurp(dir.path + "/chip0/run0/pmu.csv");
  CHECK(static_cast<std::size_t>(std::count(csv.begin(), csv.end(), '\n')) == 1 + per_core.size());
  // The second run counts only its own kernels.
  REQUIRE(d.run(kAiv, 5, 64, 5, cfg) == SIMPLER_OK);
  const auto second = pmu_rows(slurp(dir.path + "/chip0/run1/pmu.json"));
  REQUIRE(!second.empty());
  CHECK(second[0].invocations == 5);
}

TEST_CASE("unavailable hardware counters are reported once per context with the reason",
          "[chip][diag][pmu]") {
  TempDir dir;
  REQUIRE(::setenv("SIMPLER_SIM_PMU_FAIL", "EACCES", 1) == 0);
  std::string err;
  {
    CaptureStderr capture;
    Spmd d(1, 2);
    simpler_run_config cfg = base_config();
    cfg.pmu = 1;
    set_prefix(cfg, dir.path);
    REQUIRE(d.run(kAiv, 3, 30, 3, cfg) == SIMPLER_OK);
    REQUIRE(d.run(kAiv, 3, 30, 3, cfg) == SIMPLER_OK);
    check_sum(d);
    err = capture.text();
  }
  ::unsetenv("SIMPLER_SIM_PMU_FAIL");
  INFO(err);
  const std::string line =
      "simpler chip 2: hardware counters unavailable: perf_event_open(cycles): " +
      std::string(std::strerror(EACCES));
  CHECK_THAT(err, Catch::Contains(line) && Catch::Contains("perf_event_paranoid is") &&
                      Catch::Contains("wall and CPU time are still recorded"));
  CHECK(err.find(line) == err.rfind(line));  // once per context, not per run
  for (int run = 0; run < 2; ++run) {
    const std::string json = slurp(dir.path + "/chip2/run" + std::to_string(run) + "/pmu.json");
    CHECK_THAT(json, Catch::Contains("\"hardware_counters\": false") &&
                         Catch::Contains(std::strerror(EACCES)));
    const auto rows = pmu_rows(json);
    REQUIRE(rows.size() >= 2);  // the kernel, then the AIV cores that ran it
    CHECK(rows[0].invocations == 3);
    CHECK(rows[0].cycles == "null");
    CHECK(rows[0].instructions == "null");
  }
}

TEST_CASE("a pmu value without a counter set is refused", "[chip][diag][pmu][errors]") {
  TempDir dir;
  Spmd d;
  simpler_run_config cfg = base_config();
  cfg.pmu = 2;
  set_prefix(cfg, dir.path);
  CHECK(d.run(kAiv, 1, 16, 1, cfg) == SIMPLER_ERR_INVALID_ARGUMENT);
  CHECK_THAT(d.error(), Catch::Contains("pmu 2") && Catch::Contains("1 (wall and CPU time"));
  CHECK(fs::is_empty(dir.path));
}

// ---- through ChipWorker ------------------------------------------------------------------------

TEST_CASE("CallConfig's block_dim, dump_tensor and pmu reach the simulated chip through ChipWorker",
          "[chip][spmd][diag]") {
  TempDir dir;
  simpler::ChipWorker chip(5);
  chip.init();
  simpler::ChipCallable callable;
  callable.name = "spmd";
  callable.orchestration = device_module("test_orch_spmd_cases.so");
  callable.kernels.push_back({0, device_module("test_kernel_spmd_add.so"), "kernel_entry"});
  const int id = chip.register_callable(callable);
  std::vector<float> x(64, 1.0F), y(64, 2.0F), z(64, 0.0F);
  std::vector<std::int32_t> rec(3 * 3 * kRowInts, 0);
  simpler::TaskArgs args;
  args.add_tensor(simpler::make_tensor(std::span<float>(x)), simpler::TensorArgType::Input);
  args.add_tensor(simpler::make_tensor(std::span<float>(y)), simpler::TensorArgType::Input);
  args.add_tensor(simpler::make_tensor(std::span<float>(z)),
                  simpler::TensorArgType::OutputExisting);
  args.add_tensor(simpler::make_tensor(std::span<std::int32_t>(rec)),
                  simpler::TensorArgType::OutputExisting);
  args.add_scalar(kAiv);
  args.add_scalar(0);  // blocks(0): one per AIV core the run may use
  simpler::CallConfig cfg;
  cfg.block_dim = 1;
  cfg.enable_dump_tensor = 1;
  cfg.enable_pmu = 1;
  std::memcpy(cfg.output_prefix.data(), dir.path.c_str(), dir.path.size() + 1);
  chip.run(id, args, cfg);
  for (float v : z) CHECK(v == 3.0F);
  // block_dim 1: one cluster, so blocks(0) is its 2 AIV cores.
  for (std::size_t b = 0; b < 3; ++b) {
    const int runs = rec[(3 * b + 1) * kRowInts] + rec[(3 * b + 2) * kRowInts];
    CHECK(runs == (b < 2 ? 1 : 0));
  }
  CHECK(fs::exists(dir.path + "/chip5/run0/tensors/index.json"));
  CHECK(read_index(dir.path + "/chip5/run0/tensors/index.json").size() == 5);
  CHECK(pmu_rows(slurp(dir.path + "/chip5/run0/pmu.json")).at(0).invocations == 2);
  cfg.block_dim = 3;  // the chip has the default 2 clusters
  try {
    chip.run(id, args, cfg);
    FAIL("block_dim 3 was accepted");
  } catch (const simpler::DeviceError& e) {
    CHECK(e.status() == SIMPLER_ERR_INVALID_ARGUMENT);
    CHECK_THAT(e.what(), Catch::Contains("block_dim 3 is outside 0..2"));
  }
  chip.finalize();
}

}  // namespace simpler_test_chip_spmd
