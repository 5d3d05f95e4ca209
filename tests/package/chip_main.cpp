// Downstream consumer of an installed simpler package with its own device modules (see
// tests/package/CMakeLists.txt): an L3 Worker with one simulated chip (a forked child) runs the
// consumer's orchestration two_axpy.so and kernel axpy.so on the installed simulated device
// runtime, and checks the result.
//
//   Worker (L3)
//   └── chip 0   (forked child: ChipWorker on the installed simpler_device_sim.so)
//
//   two_axpy on chip 0:  u = 2x + y ──► out = 3u + x        out = 7x + 3y
#include <simpler/simpler.hpp>

#include <sys/mman.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>

int main() {
  using namespace simpler;
  // The package's default runtime (an installed simpler::simpler names its own prefix) and its
  // exported simpler::device_sim must be the same file.
  const std::string runtime = CONSUMER_DEVICE_RUNTIME;
  std::error_code ec;
  if (!std::filesystem::equivalent(default_device_runtime(), runtime, ec)) {
    std::fprintf(stderr, "chip consumer: default_device_runtime() is %s, not %s\n",
                 default_device_runtime().c_str(), runtime.c_str());
    return 1;
  }

  // The chip is a forked child: its tensors must be shared memory mapped before init().
  constexpr std::uint32_t n = 4096;
  void* mem = ::mmap(nullptr, 3 * n * sizeof(float), PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    std::perror("chip consumer: mmap");
    return 1;
  }
  float* x = static_cast<float*>(mem);
  float* y = x + n;
  float* out = y + n;
  for (std::uint32_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(i % 100);
    y[i] = 1.0F;
    out[i] = -1.0F;
  }

  WorkerOptions opts;
  opts.device_ids = {0};
  opts.device_runtime = runtime;
  Worker w(opts);
  const auto two_axpy = w.register_chip({.name = "two_axpy",
                                         .orchestration = CONSUMER_ORCHESTRATION,
                                         .kernels = {{0, CONSUMER_KERNEL_AXPY}}});
  w.init();
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    o.submit_next_level(two_axpy, TaskArgs()
                                      .add_tensor(make_tensor(x, {n}, DataType::Float32))
                                      .add_tensor(make_tensor(y, {n}, DataType::Float32))
                                      .add_tensor(make_tensor(out, {n}, DataType::Float32),
                                                  TensorArgType::OutputExisting));
  });
  int wrong = 0;
  for (std::uint32_t i = 0; i < n; ++i) {
    const float want = 7.0F * static_cast<float>(i % 100) + 3.0F;
    if (out[i] != want && wrong++ < 5) {
      std::fprintf(stderr, "chip consumer: out[%u] = %f, want %f\n", i, static_cast<double>(out[i]),
                   static_cast<double>(want));
    }
  }
  w.close();
  ::munmap(mem, 3 * n * sizeof(float));
  if (wrong != 0) return 1;
  std::printf("chip consumer: two_axpy ran on %s, out = 7x + 3y\n", runtime.c_str());
  return 0;
}
