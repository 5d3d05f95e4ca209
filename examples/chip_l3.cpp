// chip_l3 — the main example: an L3 Worker with two simulated chips and a host sub worker.
//
//   Worker (L3, this process)
//   ├── chip 0        (forked child: ChipWorker on the simulated device 0)
//   ├── chip 1        (forked child: ChipWorker on the simulated device 1)
//   └── sub worker 0  (forked child: host code)
//
//   per chip k:  fill a_k, b_k (host)  ──►  vector example on chip k: f_k = (a+b+1)(a+b+2) + (a+b)
//   then:        check(f_0, f_1) on the sub worker (runs after both chips: it reads their outputs)
//
// Tensors live in the Worker's heap rings (orch.alloc), shared with every forked child.
#include <simpler/simpler.hpp>

#include <cstdio>
#include <stdexcept>
#include <string>

int main() {
  using namespace simpler;
  const std::string dir = SIMPLER_DEVICE_MODULE_DIR;
  WorkerOptions opts;
  opts.device_ids = {0, 1};
  opts.num_sub_workers = 1;
  Worker w(opts);

  const auto vector = w.register_chip({.name = "vector",
                                       .orchestration = dir + "/orch_vector_example.so",
                                       .kernels = {{0, dir + "/kernel_add.so"},
                                                   {1, dir + "/kernel_add_scalar.so"},
                                                   {2, dir + "/kernel_mul.so"}}});
  constexpr std::uint32_t n = 128 * 128;
  // f_k = (a+b+1)(a+b+2) + (a+b) with a = 2 + k, b = 3: 47 on chip 0, 62 on chip 1.
  const auto check = w.register_sub("check", [](TaskArgsView v) {
    for (int k = 0; k < 2; ++k) {
      const float s = 5.0F + static_cast<float>(k);
      const float want = (s + 1) * (s + 2) + s;
      const float* f = v.tensor(k).as<float>();
      for (std::uint32_t i = 0; i < n; ++i) {
        if (f[i] != want) {
          throw std::runtime_error("chip " + std::to_string(k) + ": f[" + std::to_string(i) +
                                   "] = " + std::to_string(f[i]) + ", want " +
                                   std::to_string(want));
        }
      }
    }
  });
  w.init();

  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    TaskArgs check_args;
    for (WorkerId chip = 0; chip < 2; ++chip) {
      const ContinuousTensor a = o.alloc({n}, DataType::Float32);
      const ContinuousTensor b = o.alloc({n}, DataType::Float32);
      const ContinuousTensor f = o.alloc({n}, DataType::Float32);
      for (std::uint32_t i = 0; i < n; ++i) {
        a.as<float>()[i] = 2.0F + static_cast<float>(chip);
        b.as<float>()[i] = 3.0F;
      }
      TaskArgs args;
      args.add_tensor(a, TensorArgType::Input)
          .add_tensor(b, TensorArgType::Input)
          .add_tensor(f, TensorArgType::OutputExisting);
      o.submit_next_level(vector, std::move(args), default_call_config(), chip);
      check_args.add_tensor(f, TensorArgType::Input);
    }
    o.submit_sub(check, std::move(check_args));
  });
  w.close();
  std::printf(
      "chip_l3: two simulated chips ran the vector example (f = 47 and 62 everywhere), "
      "checked on a host sub worker\n");
  return 0;
}
