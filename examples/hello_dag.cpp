// hello_dag — the smallest useful L3 program: a diamond of host tasks.
//
//   Worker (L3)
//   ├── sub worker 0   (thread)
//   └── sub worker 1   (thread)
//
//   fill(a) ──► scale(a → b) ──┐
//          └──► shift(a → c) ──┴─► add(b, c → d)      d[i] = 2a[i] + (a[i] + 1)
#include <simpler/simpler.hpp>

#include <cstdio>
#include <vector>

int main() {
  using namespace simpler;
  WorkerOptions opts;
  opts.num_sub_workers = 2;
  opts.child_mode = ChildMode::Thread;
  Worker w(opts);

  constexpr std::uint32_t n = 1024;
  auto fill = w.register_sub("fill", [](TaskArgsView v) {
    float* a = v.tensor(0).as<float>();
    for (std::uint32_t i = 0; i < n; ++i) a[i] = static_cast<float>(i);
  });
  auto scale = w.register_sub("scale", [](TaskArgsView v) {
    const float* a = v.tensor(0).as<float>();
    float* b = v.tensor(1).as<float>();
    for (std::uint32_t i = 0; i < n; ++i) b[i] = 2 * a[i];
  });
  auto shift = w.register_sub("shift", [](TaskArgsView v) {
    const float* a = v.tensor(0).as<float>();
    float* c = v.tensor(1).as<float>();
    for (std::uint32_t i = 0; i < n; ++i) c[i] = a[i] + 1;
  });
  auto add = w.register_sub("add", [](TaskArgsView v) {
    const float* b = v.tensor(0).as<float>();
    const float* c = v.tensor(1).as<float>();
    float* d = v.tensor(2).as<float>();
    for (std::uint32_t i = 0; i < n; ++i) d[i] = b[i] + c[i];
  });
  w.init();

  std::vector<float> d(n);
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    // Intermediates come from the heap ring and live until the run's scope ends.
    ContinuousTensor a = o.alloc({n}, DataType::Float32);
    ContinuousTensor b = o.alloc({n}, DataType::Float32);
    ContinuousTensor c = o.alloc({n}, DataType::Float32);
    o.submit_sub(fill, TaskArgs().add_tensor(a, TensorArgType::OutputExisting));
    o.submit_sub(scale, TaskArgs().add_tensor(a).add_tensor(b, TensorArgType::OutputExisting));
    o.submit_sub(shift, TaskArgs().add_tensor(a).add_tensor(c, TensorArgType::OutputExisting));
    o.submit_sub(add, TaskArgs().add_tensor(b).add_tensor(c).add_tensor(
                          make_tensor(std::span<float>(d)), TensorArgType::OutputExisting));
  });
  w.close();

  for (std::uint32_t i = 0; i < n; ++i) {
    const float want = 3.0F * static_cast<float>(i) + 1.0F;
    if (d[i] != want) {
      std::printf("hello_dag: d[%u] = %f, expected %f\n", i, static_cast<double>(d[i]),
                  static_cast<double>(want));
      return 1;
    }
  }
  std::printf("hello_dag: d[i] = 3i + 1 for all %u elements\n", n);
  return 0;
}
