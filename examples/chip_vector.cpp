// chip_vector — the vector example on one simulated chip (L2): five elementwise tasks.
//
//   ChipWorker (L2, device 0)
//   ├── AICPU: orchestrator (runs orch_vector_example.so) + schedulers
//   └── AICore clusters, each 1 AIC + 2 AIV (kernel_add, kernel_add_scalar, kernel_mul)
//
//   c = a + b ──► d = c + 1 ──┐
//             ├─► e = c + 2 ──┴─► g = d * e ──► f = g + c        f = (a+b+1)(a+b+2) + (a+b)
#include <simpler/simpler.hpp>

#include <cstdio>
#include <string>
#include <vector>

int main() {
  using namespace simpler;
  const std::string dir = SIMPLER_DEVICE_MODULE_DIR;
  ChipCallable vector{.name = "vector",
                      .orchestration = dir + "/orch_vector_example.so",
                      .kernels = {{0, dir + "/kernel_add.so"},
                                  {1, dir + "/kernel_add_scalar.so"},
                                  {2, dir + "/kernel_mul.so"}}};
  ChipWorker chip(/*device_id=*/0);
  chip.init();
  const int id = chip.register_callable(vector);

  constexpr std::uint32_t n = 128;
  std::vector<float> a(n * n, 2.0F), b(n * n, 3.0F), f(n * n, 0.0F);
  TaskArgs args;
  args.add_tensor(make_tensor(a.data(), {n, n}, DataType::Float32), TensorArgType::Input);
  args.add_tensor(make_tensor(b.data(), {n, n}, DataType::Float32), TensorArgType::Input);
  args.add_tensor(make_tensor(f.data(), {n, n}, DataType::Float32), TensorArgType::OutputExisting);
  chip.run(id, args);
  const auto stats = chip.stats();
  chip.finalize();

  for (std::size_t i = 0; i < f.size(); ++i) {
    const float c = a[i] + b[i];
    const float want = (c + 1.0F) * (c + 2.0F) + c;
    if (f[i] != want) {
      std::printf("chip_vector: f[%zu] = %f, expected %f\n", i, static_cast<double>(f[i]),
                  static_cast<double>(want));
      return 1;
    }
  }
  std::printf("chip_vector: f = %.1f for all %u elements (%llu tasks on %u clusters)\n",
              static_cast<double>(f[0]), n * n,
              static_cast<unsigned long long>(stats.tasks_completed), stats.num_clusters);
  return 0;
}
