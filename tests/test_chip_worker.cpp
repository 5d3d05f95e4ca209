// ChipWorker (L2): loading device runtimes, what it passes through the device ABI, its errors,
// and running chip callables on the simulated chip.
#include <catch2/catch.hpp>

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <simpler/detail/device_runtime.hpp>
#include <simpler/simpler.hpp>

#include "support/chip_modules.hpp"
#include "support/matchers.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_chip_worker {

using namespace simpler;
using namespace simpler::testing;
using Catch::Matchers::Contains;

namespace {
/// A file that is not a shared library, removed at the end of the test.
class TempFile {
 public:
  explicit TempFile(const std::string& content) {
    char name[] = "/tmp/simpler_chipw_XXXXXX";
    const int fd = ::mkstemp(name);
    if (fd < 0) throw std::runtime_error("mkstemp failed");
    ::close(fd);
    path_ = name;
    std::ofstream(path_) << content;
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() { std::remove(path_.c_str()); }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

ChipOptions runtime_at(std::string path) {
  ChipOptions o;
  o.device_runtime = std::move(path);
  return o;
}

std::vector<std::int64_t> filled_i64(std::size_t n, std::int64_t v) {
  return std::vector<std::int64_t>(n, v);
}
}  // namespace

// ---- Loading device runtimes ----------------------------------------------------------------

TEST_CASE("a ChipWorker refuses a device runtime that does not exist", "[chip][loader][failure]") {
  ChipWorker chip(0, runtime_at("/nonexistent/simpler/libno_runtime.so"));
  try {
    chip.init();
    FAIL("init() succeeded");
  } catch (const DeviceError& e) {
    CHECK(e.status() == SIMPLER_ERR_LOAD_FAILED);
    CHECK_THAT(e.what(), Contains("ChipWorker::init on device 0") &&
                             Contains("/nonexistent/simpler/libno_runtime.so") &&
                             Contains("does not exist") && Contains("SIMPLER_DEVICE_RUNTIME"));
  }
  CHECK_FALSE(chip.ready());
  CHECK_THROWS_MATCHES(chip.run(0, TaskArgs{}), UsageError, WhatContains("call init() first"));
}

TEST_CASE("a ChipWorker reports dlopen's error for a file that is not a shared library",
          "[chip][loader][failure]") {
  TempFile not_a_library("this is not an ELF file\n");
  ChipWorker chip(1, runtime_at(not_a_library.path()));
  try {
    chip.init();
    FAIL("init() succeeded");
  } catch (const DeviceError& e) {
    CHECK(e.status() == SIMPLER_ERR_LOAD_FAILED);
    CHECK_THAT(e.what(), Contains(not_a_library.path()) && Contains("dlopen failed"));
  }
}

TEST_CASE("a ChipWorker refuses a device runtime built for another ABI version",
          "[chip][loader][failure]") {
  const std::string path = device_module_file("test_runtime_wrong_abi.so");
  ChipWorker chip(0, runtime_at(path));
  try {
    chip.init();
    FAIL("init() succeeded");
  } catch (const DeviceError& e) {
    CHECK(e.status() == SIMPLER_ERR_LOAD_FAILED);
    CHECK_THAT(e.what(),
               Contains(path) &&
                   Contains(fmt::format("ABI version {}", SIMPLER_DEVICE_ABI_VERSION + 41)) &&
                   Contains(fmt::format("needs version {}", SIMPLER_DEVICE_ABI_VERSION)));
  }
  CHECK_FALSE(chip.ready());
}

TEST_CASE("a ChipWorker names every function a device runtime lacks", "[chip][loader][failure]") {
  const std::string path = device_module_file("test_runtime_missing_symbol.so");
  ChipWorker chip(0, runtime_at(path));
  try {
    chip.init();
    FAIL("init() succeeded");
  } catch (const DeviceError& e) {
    CHECK(e.status() == SIMPLER_ERR_LOAD_FAILED);
    CHECK_THAT(e.what(), Contains(path) && Contains("does not export") &&
                             Contains("simpler_wait_run") && Contains("simpler_run"));
    CHECK_THAT(e.what(), !Contains("simpler_init"));
  }
}

TEST_CASE("a failing simpler_init surfaces the runtime's status and message and leaves no context",
          "[chip][loader][failure]") {
  FakeRuntime fake("init_fails");
  ChipWorker chip(3, fake.options());
  for (int attempt = 1; attempt <= 2; ++attempt) {
    try {
      chip.init();
      FAIL("init() succeeded");
    } catch (const DeviceError& e) {
      CHECK(e.status() == SIMPLER_ERR_SYSTEM);
      CHECK_THAT(e.what(), Contains("ChipWorker::init on device 3") &&
                               Contains("SIMPLER_ERR_SYSTEM (an OS call failed)") &&
                               Contains("could not start the AICPU threads of device 3"));
    }
    // The context was destroyed, and init() may be called again (it fails again here).
    CHECK(fake.record().creates == attempt);
    CHECK(fake.record().destroys == attempt);
    CHECK_FALSE(chip.ready());
  }
}

TEST_CASE("a device runtime is loaded once per path, and a failed load is tried again",
          "[chip][loader]") {
  FakeRuntime fake("fake");
  const auto& a = detail::load_device_runtime(fake.path());
  // A relative spelling of the same file is the same library.
  const auto relative = std::filesystem::relative(fake.path()).string();
  const auto& b = detail::load_device_runtime(relative);
  CHECK(&a == &b);
  CHECK(a.run != nullptr);
  CHECK(a.device_abi_version() == SIMPLER_DEVICE_ABI_VERSION);

  // Not there yet: the load fails; once the file exists, it loads.
  const std::string later = fmt::format("/tmp/simpler_chipw_later_{}.so", ::getpid());
  std::remove(later.c_str());
  CHECK_THROWS_AS(detail::load_device_runtime(later), DeviceError);
  std::filesystem::copy_file(fake.path(), later);
  const auto& c = detail::load_device_runtime(later);
  CHECK(c.path == later);
  std::remove(later.c_str());  // the loaded library stays mapped
}

TEST_CASE("default_device_runtime prefers $SIMPLER_DEVICE_RUNTIME, then the built simulator",
          "[chip][loader]") {
  ::unsetenv("SIMPLER_DEVICE_RUNTIME");
  const std::string built = default_device_runtime();
  CHECK_THAT(built, Contains("simpler_device_sim.so"));
  ::setenv("SIMPLER_DEVICE_RUNTIME", "/opt/elsewhere/runtime.so", 1);
  CHECK(default_device_runtime() == "/opt/elsewhere/runtime.so");
  CHECK(ChipWorker(0).runtime_path() == "/opt/elsewhere/runtime.so");
  ::setenv("SIMPLER_DEVICE_RUNTIME", "", 1);  // empty counts as unset
  CHECK(default_device_runtime() == built);
  ::unsetenv("SIMPLER_DEVICE_RUNTIME");
}

// ---- What ChipWorker passes through the device ABI (a fake runtime records it) ---------------

TEST_CASE("a ChipWorker passes its device id and options to simpler_init", "[chip][abi]") {
  FakeRuntime fake("fake");
  ChipOptions o = fake.options();
  o.num_clusters = 3;
  o.aicpu_thread_num = 4;
  o.scheduler_timeout = std::chrono::milliseconds(1234);
  o.resource_wait = std::chrono::milliseconds(55);
  o.tensor_wait = std::chrono::seconds(2);
  ChipWorker chip(5, o);
  CHECK(chip.device_id() == 5);
  chip.init();
  CHECK(chip.ready());
  const fake_record& r = fake.record();
  CHECK(r.inits == 1);
  CHECK(r.init_device_id == 5);
  REQUIRE(r.init_had_options);
  CHECK(r.init_options.struct_size == sizeof(simpler_init_options));
  CHECK(r.init_options.num_clusters == 3);
  CHECK(r.init_options.aicpu_thread_num == 4);
  CHECK(r.init_options.scheduler_timeout_ms == 1234);
  CHECK(r.init_options.resource_wait_ms == 55);
  CHECK(r.init_options.tensor_wait_ms == 2000);
  CHECK(r.init_options.hazards == SIMPLER_HAZARDS_ALL);
}

TEST_CASE("a ChipWorker passes its hazards option to simpler_init", "[chip][abi][hazards]") {
  FakeRuntime fake("fake");
  ChipOptions o = fake.options();
  o.hazards = Hazards::ReadAfterWrite;
  ChipWorker chip(0, o);
  chip.init();
  const fake_record& r = fake.record();
  REQUIRE(r.init_had_options);
  CHECK(r.init_options.hazards == SIMPLER_HAZARDS_READ_AFTER_WRITE);
}

TEST_CASE("a ChipWorker refuses a hazards value outside the enum", "[chip][abi][hazards]") {
  ChipOptions o;
  o.hazards = static_cast<Hazards>(5);
  CHECK_THROWS_MATCHES(ChipWorker(0, o), UsageError, WhatContains("ChipOptions::hazards is 5"));
}

TEST_CASE("a ChipWorker constructor rejects negative device ids and options",
          "[chip][abi][failure]") {
  CHECK_THROWS_MATCHES(ChipWorker(-1), UsageError, WhatContains("device id -1"));
  ChipOptions o;
  o.aicpu_thread_num = -2;
  CHECK_THROWS_MATCHES(ChipWorker(0, o), UsageError, WhatContains("aicpu_thread_num"));
  o = {};
  o.tensor_wait = std::chrono::milliseconds(-5);
  CHECK_THROWS_MATCHES(ChipWorker(0, o), UsageError, WhatContains("tensor_wait"));
  o = {};
  o.scheduler_timeout = std::chrono::hours(24 * 365);
  CHECK_THROWS_MATCHES(ChipWorker(0, o), UsageError, WhatContains("scheduler_timeout"));
}

TEST_CASE("register_callable passes absolute paths and the kernel table, and picks free ids",
          "[chip][abi]") {
  FakeRuntime fake("fake");
  ChipWorker chip(0, fake.options());
  chip.init();
  ChipCallable c;
  c.name = "two_kernels";
  // Relative to the working directory: the device must get absolute paths.
  c.orchestration =
      std::filesystem::relative(device_module_file("test_orch_chipw_one.so")).string();
  c.entry = "custom_entry";
  c.kernels.push_back({7, device_module_file("test_kernel_chipw_fill.so"), "fill_entry"});
  c.kernels.push_back({1023, device_module_file("test_kernel_chipw_fail.so")});
  CHECK(chip.register_callable(c) == 0);
  const fake_record& r = fake.record();
  CHECK(r.registers == 1);
  CHECK(r.reg_callable_id == 0);
  CHECK(std::string(r.reg_orch_path) == device_module_file("test_orch_chipw_one.so"));
  CHECK(std::string(r.reg_orch_entry) == "custom_entry");
  REQUIRE(r.reg_kernel_count == 2);
  CHECK(r.reg_func_ids[0] == 7);
  CHECK(std::string(r.reg_kernel_paths[0]) == device_module_file("test_kernel_chipw_fill.so"));
  CHECK(std::string(r.reg_kernel_symbols[0]) == "fill_entry");
  CHECK(r.reg_func_ids[1] == 1023);
  CHECK(std::string(r.reg_kernel_symbols[1]) == "kernel_entry");

  // Lowest free id, an explicit id, and ids freed by unregister_callable.
  CHECK(chip.register_callable(c) == 1);
  CHECK(chip.register_callable(c, 7) == 7);
  CHECK(chip.register_callable(c) == 2);
  chip.unregister_callable(0);
  CHECK(fake.record().unregisters == 1);
  CHECK(chip.register_callable(c, -1) == 0);
  CHECK(chip.register_callable(c, 63) == 63);
}

TEST_CASE("register_callable rejects bad callables and ids before the device sees them",
          "[chip][abi][failure]") {
  FakeRuntime fake("fake");
  ChipWorker chip(0, fake.options());
  chip.init();
  const ChipCallable good = chipw_callable("good", "fill");
  SECTION("an empty name") {
    ChipCallable c = good;
    c.name.clear();
    CHECK_THROWS_MATCHES(chip.register_callable(c), UsageError, WhatContains("name is empty"));
  }
  SECTION("a missing orchestration file") {
    ChipCallable c = good;
    c.orchestration = "/nonexistent/orch.so";
    CHECK_THROWS_MATCHES(chip.register_callable(c), UsageError,
                         WhatContains("orchestration '/nonexistent/orch.so' does not exist"));
  }
  SECTION("an empty entry") {
    ChipCallable c = good;
    c.entry.clear();
    CHECK_THROWS_MATCHES(chip.register_callable(c), UsageError, WhatContains("entry is empty"));
  }
  SECTION("a func_id out of range") {
    ChipCallable c = good;
    c.kernels[0].func_id = 1024;
    CHECK_THROWS_MATCHES(chip.register_callable(c), UsageError,
                         WhatContains("kernels[0].func_id is 1024"));
    c.kernels[0].func_id = -1;
    CHECK_THROWS_MATCHES(chip.register_callable(c), UsageError,
                         WhatContains("kernels[0].func_id is -1"));
  }
  SECTION("a func_id used twice") {
    ChipCallable c = good;
    c.kernels.push_back(c.kernels[0]);
    CHECK_THROWS_MATCHES(chip.register_callable(c), UsageError,
                         WhatContains("kernels[1].func_id 0 is used by an earlier kernel"));
  }
  SECTION("a missing kernel file") {
    ChipCallable c = good;
    c.kernels[0].path = "/nonexistent/kernel.so";
    CHECK_THROWS_MATCHES(chip.register_callable(c), UsageError,
                         WhatContains("kernels[0].path '/nonexistent/kernel.so'"));
  }
  SECTION("an empty kernel symbol") {
    ChipCallable c = good;
    c.kernels[0].symbol.clear();
    CHECK_THROWS_MATCHES(chip.register_callable(c), UsageError, WhatContains("kernels[0].symbol"));
  }
  SECTION("an id out of range or in use") {
    CHECK_THROWS_MATCHES(chip.register_callable(good, 64), UsageError,
                         WhatContains("callable id 64 is out of range"));
    CHECK_THROWS_MATCHES(chip.register_callable(good, -2), UsageError,
                         WhatContains("callable id -2 is out of range"));
    CHECK(chip.register_callable(good, 5) == 5);
    CHECK_THROWS_MATCHES(chip.register_callable(good, 5), UsageError,
                         WhatContains("callable id 5 is already taken by 'good'"));
    CHECK(fake.record().registers == 1);
  }
  SECTION("no free id") {
    for (int i = 0; i < ChipWorker::kMaxCallables; ++i) CHECK(chip.register_callable(good) == i);
    CHECK_THROWS_MATCHES(chip.register_callable(good), UsageError,
                         WhatContains("all 64 callable ids are in use"));
  }
  SECTION("unregistering an id that is not registered") {
    CHECK_THROWS_MATCHES(chip.unregister_callable(3), UsageError,
                         WhatContains("callable id 3 is not registered"));
  }
  CHECK(fake.record().registers <= ChipWorker::kMaxCallables);
}

TEST_CASE("run passes the args in place and the call config's runtime sizing", "[chip][abi]") {
  FakeRuntime fake("fake");
  ChipWorker chip(2, fake.options());
  chip.init();
  const int id = chip.register_callable(chipw_callable("fill", "fill"), 9);
  auto out = filled_i64(6, 0);
  TaskArgs args;
  args.add_tensor(make_tensor(std::span(out)), TensorArgType::OutputExisting)
      .add_scalar(77)
      .add_scalar(5);
  CallConfig config;
  config.aicpu_thread_num = 4;
  config.runtime_env.ring_task_window[1] = 64;
  config.runtime_env.ring_heap[2] = 4096;
  config.runtime_env.ring_dep_pool[3] = 16;
  chip.run(id, args, config);
  const fake_record& r = fake.record();
  CHECK(r.runs == 1);
  CHECK(r.run_callable_id == 9);
  CHECK(r.run_tensor_count == 1);
  CHECK(r.run_scalar_count == 2);
  CHECK(r.run_tensor0.data == reinterpret_cast<std::uintptr_t>(out.data()));
  CHECK(r.run_tensor0.ndims == 1);
  CHECK(r.run_tensor0.shapes[0] == 6);
  CHECK(r.run_tensor0.dtype == static_cast<std::uint8_t>(DataType::Int64));
  CHECK(r.run_scalars[0] == 77);
  CHECK(r.run_scalars[1] == 5);
  CHECK(r.run_config.struct_size == sizeof(simpler_run_config));
  CHECK(r.run_config.aicpu_thread_num == 4);
  CHECK(r.run_config.ring_task_window[0] == 0);
  CHECK(r.run_config.ring_task_window[1] == 64);
  CHECK(r.run_config.ring_heap[2] == 4096);
  CHECK(r.run_config.ring_dep_pool[3] == 16);
  CHECK(out == filled_i64(6, 77));  // the fake wrote through the host pointer

  // The default CallConfig passes its aicpu_thread_num (3) and device-default sizing.
  chip.run(id, args.view());
  CHECK(fake.record().run_config.aicpu_thread_num == 3);
  CHECK(fake.record().run_config.ring_task_window[1] == 0);

  // An invalid config is refused before the device sees it.
  config.runtime_env.ring_task_window[0] = 5;
  CHECK_THROWS_MATCHES(chip.run(id, args, config), UsageError, WhatContains("ring_task_window[0]"));
  CHECK(fake.record().runs == 2);
}

TEST_CASE("a failing run is a DeviceError with the runtime's status and message",
          "[chip][abi][failure]") {
  FakeRuntime fake("fake");
  ChipWorker chip(2, fake.options());
  chip.init();
  const int id = chip.register_callable(chipw_callable("told_to_fail", "fail"));
  auto out = filled_i64(2, 0);
  TaskArgs args;
  args.add_tensor(make_tensor(std::span(out))).add_scalar(1).add_scalar(FAKE_FAIL_MAGIC);
  try {
    chip.run(id, args);
    FAIL("run() succeeded");
  } catch (const DeviceError& e) {
    CHECK(e.status() == SIMPLER_ERR_KERNEL_FAILED);
    CHECK(std::string(e.what()) ==
          "ChipWorker::run('told_to_fail' as callable 0) on device 2: SIMPLER_ERR_KERNEL_FAILED "
          "(a kernel reported failure): fake kernel of callable 0 on device 2: told to fail");
  }
  // The chip stays usable.
  TaskArgs ok;
  ok.add_tensor(make_tensor(std::span(out))).add_scalar(8);
  chip.run(id, ok);
  CHECK(out == filled_i64(2, 8));
  CHECK_THROWS_MATCHES(chip.run(1, ok), UsageError,
                       WhatContains("callable id 1 is not registered"));
  CHECK_THROWS_MATCHES(chip.run(-1, ok), UsageError,
                       WhatContains("callable id -1 is not registered"));
}

TEST_CASE("a ChipWorker is unusable before init() and after finalize(), which is idempotent",
          "[chip][abi][failure]") {
  FakeRuntime fake("fake");
  {
    ChipWorker chip(0, fake.options());
    CHECK_THROWS_MATCHES(chip.register_callable(chipw_callable("x", "fill")), UsageError,
                         WhatContains("call init() first"));
    CHECK_THROWS_MATCHES(chip.device_malloc(64), UsageError, WhatContains("call init() first"));
    CHECK_THROWS_MATCHES(chip.stats(), UsageError, WhatContains("call init() first"));
    chip.init();
    CHECK_THROWS_MATCHES(chip.init(), UsageError, WhatContains("already initialised"));
    chip.finalize();
    CHECK_FALSE(chip.ready());
    chip.finalize();
    CHECK(fake.record().finalizes == 1);
    CHECK(fake.record().destroys == 1);
    CHECK_THROWS_MATCHES(chip.run(0, TaskArgs{}), UsageError, WhatContains("was finalised"));
    CHECK_THROWS_MATCHES(chip.copy_to_device(nullptr, nullptr, 0), UsageError,
                         WhatContains("was finalised"));
    CHECK_THROWS_MATCHES(chip.init(), UsageError, WhatContains("create a new ChipWorker"));
  }
  {
    ChipWorker chip(1, fake.options());
    chip.init();
    ChipWorker moved(std::move(chip));  // the context moves with it
    CHECK(moved.ready());
    CHECK_FALSE(chip.ready());  // NOLINT(bugprone-use-after-move): the moved-from state is defined
    CHECK(moved.stats().num_clusters == 2);
  }
  // The destructor finalised the moved-to worker, and only it.
  CHECK(fake.record().creates == 2);
  CHECK(fake.record().finalizes == 2);
  CHECK(fake.record().destroys == 2);
}

TEST_CASE("device memory calls reach the runtime and their failures are DeviceErrors",
          "[chip][abi]") {
  FakeRuntime fake("fake");
  ChipWorker chip(0, fake.options());
  chip.init();
  void* dev = chip.device_malloc(3000);
  REQUIRE(dev != nullptr);
  CHECK(reinterpret_cast<std::uintptr_t>(dev) % 1024 == 0);
  CHECK(chip.stats().committed_bytes == 3072);
  const std::vector<int> in{1, 2, 3, 4};
  std::vector<int> back(4, 0);
  chip.copy_to_device(dev, in.data(), sizeof(int) * 4);
  chip.copy_from_device(back.data(), dev, sizeof(int) * 4);
  CHECK(back == in);
  try {
    chip.copy_to_device(back.data(), in.data(), sizeof(int) * 4);
    FAIL("copy_to_device to host memory succeeded");
  } catch (const DeviceError& e) {
    CHECK(e.status() == SIMPLER_ERR_INVALID_ARGUMENT);
    CHECK_THAT(e.what(), Contains("copy_to_device") && Contains("outside the device's memory"));
  }
  CHECK_THROWS_MATCHES(chip.device_malloc(0), UsageError, WhatContains("0 bytes"));
  try {
    static_cast<void>(chip.device_malloc(std::size_t{2} << 30));
    FAIL("device_malloc of 2 GiB succeeded");
  } catch (const DeviceError& e) {
    CHECK(e.status() == SIMPLER_ERR_OUT_OF_MEMORY);
    CHECK_THAT(e.what(), Contains("at most 1 GiB"));
  }
  chip.device_free(nullptr);  // nothing
  chip.device_free(dev);
  CHECK(chip.stats().committed_bytes == 0);
  CHECK_THROWS_AS(chip.device_free(dev), DeviceError);
  CHECK(fake.record().mallocs == 1);
  CHECK(fake.record().frees == 1);
}

// ---- The leaf side: a ChipWorker over a Worker's registry ------------------------------------

TEST_CASE("a chip leaf registers the registry's chip callables and runs them by digest",
          "[chip][leaf]") {
  FakeRuntime fake("fake");
  detail::CallableRegistry registry(detail::next_worker_token());
  const auto sub = registry.add(CallableKind::Sub, "host", [](TaskArgsView) {}, {});
  const auto add_chip = [&](const std::string& name) {
    auto c = std::make_shared<const ChipCallable>(chipw_callable(name, "fill"));
    return registry.add(CallableKind::Chip, name, {}, {}, c);
  };
  const auto a = add_chip("a");
  const auto b = add_chip("b");
  ChipWorker chip(4, fake.options(), registry);
  chip.start();
  CHECK(fake.record().registers == 2);

  auto out = filled_i64(3, 0);
  TaskArgs args;
  args.add_tensor(make_tensor(std::span(out))).add_scalar(31);
  LeafRequest r;
  r.args = args.view();
  r.config = &default_call_config();
  r.digest = b.digest;
  r.index_hint = 0;  // a wrong hint: the digest decides
  chip.run(r);
  CHECK(fake.record().run_callable_id == 1);
  CHECK(out == filled_i64(3, 31));
  CHECK(chip.callable_name(r) == "b");

  SECTION("a digest nobody registered is an error naming it") {
    r.digest = 0x1234;
    CHECK_THROWS_MATCHES(chip.run(r), Error,
                         WhatContains("no chip callable with digest 0x0000000000001234"));
  }
  SECTION("a callable of another kind is an error naming it") {
    r.digest = sub.digest;
    r.index_hint = sub.index;
    CHECK_THROWS_MATCHES(chip.run(r), Error, WhatContains("'host' is not a chip callable"));
  }
  SECTION("a chip callable registered after start() is registered at its first run, once") {
    const auto c = add_chip("late");
    r.digest = c.digest;
    r.index_hint = c.index;
    chip.run(r);
    chip.run(r);
    CHECK(fake.record().registers == 3);
    CHECK(fake.record().run_callable_id == 2);
  }
  SECTION("a chip callable in a control payload is registered, run and withdrawn by digest") {
    // What a forked chip child does when Worker::register_chip runs after init().
    const std::uint64_t digest = callable_digest(CallableKind::Chip, "late");
    const std::string payload = detail::encode_chip_callable(chipw_callable("late", "fill"));
    const auto bytes = std::as_bytes(std::span(payload));
    const auto id = chip.control(ChipWorker::kControlRegisterChip, digest, bytes);
    REQUIRE(id.has_value());
    CHECK(*id == 2);
    CHECK(fake.record().registers == 3);
    r.digest = digest;
    chip.run(r);
    CHECK(fake.record().run_callable_id == 2);
    CHECK(chip.control(ChipWorker::kControlUnregisterChip, digest, {}) == std::uint64_t{0});
    CHECK(fake.record().unregisters == 1);
    CHECK_THROWS_MATCHES(chip.run(r), Error, WhatContains("no chip callable with digest"));
    CHECK_THROWS_MATCHES(chip.control(ChipWorker::kControlUnregisterChip, digest, {}), Error,
                         WhatContains("no late chip callable with digest"));
    CHECK_THROWS_MATCHES(
        chip.control(ChipWorker::kControlRegisterChip, digest, bytes.first(bytes.size() - 1)),
        Error, WhatContains("chip callable payload") && WhatContains("truncated"));
    CHECK_FALSE(chip.control(12345, 0, {}).has_value());  // not a chip command
  }
  SECTION("a failing run names the callable and the device") {
    TaskArgs bad;
    bad.add_tensor(make_tensor(std::span(out))).add_scalar(0).add_scalar(FAKE_FAIL_MAGIC);
    r.args = bad.view();
    CHECK_THROWS_MATCHES(chip.run(r), DeviceError,
                         WhatContains("ChipWorker::run('b' as callable 1) on device 4"));
  }
  chip.stop();
  CHECK(fake.record().finalizes == 1);
  CHECK(a.kind == CallableKind::Chip);
}

TEST_CASE("a chip callable survives the control payload encoding, and a bad payload is refused",
          "[chip][leaf][bad-input]") {
  ChipCallable c;
  c.name = "two kernels";
  c.orchestration = "/orch/o.so";
  c.entry = "entry_fn";
  c.kernels = {{7, "/k/a.so", "kernel_a"}, {1023, "/k/b b.so", "kernel_entry"}};
  const std::string payload = detail::encode_chip_callable(c);
  const ChipCallable back = detail::decode_chip_callable(std::as_bytes(std::span(payload)));
  CHECK(back.name == c.name);
  CHECK(back.orchestration == c.orchestration);
  CHECK(back.entry == c.entry);
  REQUIRE(back.kernels.size() == 2);
  CHECK(back.kernels[1].func_id == 1023);
  CHECK(back.kernels[1].path == "/k/b b.so");
  CHECK(back.kernels[0].symbol == "kernel_a");

  const auto decode = [](std::string text) {
    return detail::decode_chip_callable(std::as_bytes(std::span(text)));
  };
  CHECK_THROWS_MATCHES(decode(""), Error, WhatContains("truncated"));
  CHECK_THROWS_MATCHES(decode(std::string("a\0b\0", 4)), Error, WhatContains("2 fields"));
  CHECK_THROWS_MATCHES(decode(std::string("n\0o\0e\0x\0p\0s\0", 12)), Error,
                       WhatContains("func_id 'x' is not a number"));
  CHECK_THROWS_MATCHES(decode(std::string("n\0o\0e\0\x37\0p\0", 10)), Error,  // 5 fields
                       WhatContains("5 fields"));
  c.name = std::string("nul\0inside", 10);
  CHECK_THROWS_MATCHES(detail::encode_chip_callable(c), UsageError,
                       WhatContains("name holds a NUL byte"));
}

TEST_CASE("a chip leaf without a registry refuses to start", "[chip][leaf][failure]") {
  ChipWorker chip(0);
  CHECK_THROWS_MATCHES(chip.start(), UsageError,
                       WhatContains("not built over a Worker's registry"));
}

// ---- On the simulated chip ------------------------------------------------------------------

TEST_CASE("a ChipWorker runs a chip callable on the simulated chip, loading it once",
          "[chip][sim]") {
  ChipWorker chip(0);
  chip.init();
  const int id = chip.register_callable(chipw_callable("fill", "fill"));
  auto out = filled_i64(8, 0);
  for (std::int64_t v : {42, -7}) {
    TaskArgs args;
    args.add_tensor(make_tensor(std::span(out)), TensorArgType::OutputExisting).add_scalar(v);
    chip.run(id, args);
    CHECK(out == filled_i64(8, v));
  }
  const simpler_context_stats s = chip.stats();
  CHECK(s.runs == 2);
  CHECK(s.orch_so_loads == 1);
  CHECK(s.kernel_so_loads == 1);
  CHECK(s.tasks_completed >= 2);
  chip.finalize();
}

TEST_CASE("a kernel failure on the simulated chip is a DeviceError with the kernel's message",
          "[chip][sim][failure]") {
  ChipWorker chip(0);
  chip.init();
  const int fail = chip.register_callable(chipw_callable("fail", "fail"));
  const int fill = chip.register_callable(chipw_callable("fill", "fill"));
  auto out = filled_i64(4, 0);
  TaskArgs args;
  args.add_tensor(make_tensor(std::span(out)), TensorArgType::OutputExisting).add_scalar(5);
  try {
    chip.run(fail, args);
    FAIL("run() succeeded");
  } catch (const DeviceError& e) {
    CHECK(e.status() == SIMPLER_ERR_KERNEL_FAILED);
    CHECK_THAT(e.what(), Contains("ChipWorker::run('fail' as callable 0) on device 0") &&
                             Contains("SIMPLER_ERR_KERNEL_FAILED") &&
                             Contains("chipw_fail: this kernel always fails"));
  }
  chip.run(fill, args);  // the chip stays usable
  CHECK(out == filled_i64(4, 5));
}

TEST_CASE("the simulated chip refuses a callable whose orchestration entry does not exist",
          "[chip][sim][failure]") {
  ChipWorker chip(0);
  chip.init();
  ChipCallable c = chipw_callable("no_entry", "fill");
  c.entry = "no_such_entry";
  try {
    chip.register_callable(c);
    FAIL("register_callable succeeded");
  } catch (const DeviceError& e) {
    CHECK(e.status() == SIMPLER_ERR_LOAD_FAILED);
    CHECK_THAT(e.what(), Contains("register_callable('no_entry' as callable 0)") &&
                             Contains("no_such_entry"));
  }
  CHECK(chip.register_callable(chipw_callable("fill", "fill")) == 0);  // the id is still free
}

TEST_CASE("two ChipWorkers in one process run at the same time without sharing state",
          "[chip][sim]") {
  std::int32_t counter = 0;
  std::array<std::int64_t, 2> out{};
  std::array<std::exception_ptr, 2> errors{};
  std::array<ChipWorker, 2> chips{ChipWorker(0), ChipWorker(1)};
  for (auto& c : chips) {
    c.init();
    CHECK(c.register_callable(chipw_callable("meet", "meet")) == 0);
  }
  std::vector<std::thread> threads;
  for (std::size_t i = 0; i < 2; ++i) {
    threads.emplace_back([&, i] {
      try {
        TaskArgs args;
        args.add_tensor(make_tensor(&counter, {1}, DataType::Int32), TensorArgType::NoDep)
            .add_tensor(make_tensor(&out[i], {1}, DataType::Int64), TensorArgType::OutputExisting)
            .add_scalar(2)
            .add_scalar(100 + i);
        chips[i].run(0, args);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  CHECK(counter == 2);
  CHECK(out[0] == 100);
  CHECK(out[1] == 101);
  CHECK(chips[0].stats().runs == 1);
  CHECK(chips[1].stats().runs == 1);
}

TEST_CASE("device memory on the simulated chip round-trips through copies", "[chip][sim]") {
  ChipWorker chip(0);
  chip.init();
  void* dev = chip.device_malloc(4096);
  CHECK(reinterpret_cast<std::uintptr_t>(dev) % 1024 == 0);
  CHECK(chip.stats().committed_bytes >= 4096);
  std::vector<std::int64_t> in(512, 9);
  std::vector<std::int64_t> back(512, 0);
  chip.copy_to_device(dev, in.data(), 4096);
  chip.copy_from_device(back.data(), dev, 4096);
  CHECK(back == in);
  chip.device_free(dev);
  CHECK(chip.stats().committed_bytes == 0);
}

}  // namespace simpler_test_chip_worker
