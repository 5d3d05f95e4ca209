// nested_l4 — an L4 Worker over two L3 Workers, with one task graph that crosses both.
//
//   Worker (L4, this process)
//   ├── L3 worker 0   (forked child: an inner Worker)
//   │   ├── chip 0        (forked grandchild: ChipWorker on the simulated device 0)
//   │   └── sub worker 0  (forked grandchild: host code)
//   └── L3 worker 1   (forked child: an inner Worker)
//       ├── sub worker 0  (forked grandchild: host code)
//       └── sub worker 1  (forked grandchild: host code)
//
//   L4 task graph (each task is an orchestration function run on one L3, which submits its own
//   tasks to its children):
//
//   prepare on L3 1:  a[i] = i % 10, split over its two sub workers
//        │
//        ▼
//   on_chip on L3 0:  b = 3 on its sub worker, then the vector example on its chip:
//        │            f = (a+b+1)(a+b+2) + (a+b)
//        ▼
//   reduce on L3 1:   s = sum(f) on one sub worker
//
// The L4 orders the three tasks by their tensors (a, then f), exactly as an L3 orders sub tasks.
// Tensors live in memory every process of the tree sees at the same address: the L4's heap rings
// (orch.alloc) for a, b and f, and a MAP_SHARED mapping made before init() for the result s.
#include <simpler/simpler.hpp>

#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

int main() {
  using namespace simpler;
  const std::string dir = SIMPLER_DEVICE_MODULE_DIR;
  constexpr std::uint32_t n = 4096;

  // The result, read here after the run: shared memory mapped before any fork.
  void* mem = ::mmap(nullptr, sizeof(std::int64_t), PROT_READ | PROT_WRITE,
                     MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) {
    std::perror("nested_l4: mmap");
    return 1;
  }
  auto* s = static_cast<std::int64_t*>(mem);
  *s = -1;

  // L3 worker 0: one chip and one sub worker.
  WorkerOptions o0;
  o0.device_ids = {0};
  o0.num_sub_workers = 1;
  Worker l3_0(o0);
  const auto vector = l3_0.register_chip({.name = "vector",
                                          .orchestration = dir + "/orch_vector_example.so",
                                          .kernels = {{0, dir + "/kernel_add.so"},
                                                      {1, dir + "/kernel_add_scalar.so"},
                                                      {2, dir + "/kernel_mul.so"}}});
  const auto fill_b = l3_0.register_sub("fill_b", [](TaskArgsView v) {
    float* b = v.tensor(0).as<float>();
    for (std::uint64_t i = 0; i < v.tensor(0).numel(); ++i) b[i] = 3.0F;
  });

  // L3 worker 1: two sub workers.
  WorkerOptions o1;
  o1.num_sub_workers = 2;
  Worker l3_1(o1);
  // Fills a slice of a: element k of the slice is (first + k) % 10, first = scalar 0.
  const auto fill_a = l3_1.register_sub("fill_a", [](TaskArgsView v) {
    float* a = v.tensor(0).as<float>();
    for (std::uint64_t k = 0; k < v.tensor(0).numel(); ++k) {
      a[k] = static_cast<float>((v.scalar(0) + k) % 10);
    }
  });
  const auto sum = l3_1.register_sub("sum", [](TaskArgsView v) {
    const float* f = v.tensor(0).as<float>();
    std::int64_t total = 0;
    for (std::uint64_t i = 0; i < v.tensor(0).numel(); ++i)
      total += static_cast<std::int64_t>(f[i]);
    *v.tensor(1).as<std::int64_t>() = total;
  });

  WorkerOptions o4;
  o4.level = 4;
  Worker w4(o4);
  // The L4's orchestration functions run on an L3 (inside its process) and submit to its
  // children, with the handles that L3 issued.
  const auto prepare =
      w4.register_orch("prepare", [fill_a](Orchestrator& o, TaskArgsView v, const CallConfig&) {
        const ContinuousTensor& a = v.tensor(0);
        const std::uint32_t half = static_cast<std::uint32_t>(a.numel() / 2);
        for (std::uint32_t first : {0U, half}) {
          const std::uint32_t len =
              first == 0 ? half : static_cast<std::uint32_t>(a.numel()) - half;
          o.submit_sub(fill_a,
                       TaskArgs()
                           .add_tensor(make_tensor(a.as<float>() + first, {len}, DataType::Float32),
                                       TensorArgType::OutputExisting)
                           .add_scalar(first));
        }
      });
  const auto on_chip = w4.register_orch(
      "on_chip", [fill_b, vector](Orchestrator& o, TaskArgsView v, const CallConfig&) {
        const ContinuousTensor& a = v.tensor(0);
        const ContinuousTensor& b = v.tensor(1);
        const ContinuousTensor& f = v.tensor(2);
        o.submit_sub(fill_b, TaskArgs().add_tensor(b, TensorArgType::OutputExisting));
        // Waits for fill_b (it reads b); the L4 already ordered it after prepare (a).
        o.submit_next_level(vector, TaskArgs()
                                        .add_tensor(a, TensorArgType::Input)
                                        .add_tensor(b, TensorArgType::Input)
                                        .add_tensor(f, TensorArgType::OutputExisting));
      });
  const auto reduce =
      w4.register_orch("reduce", [sum](Orchestrator& o, TaskArgsView v, const CallConfig&) {
        o.submit_sub(sum, TaskArgs()
                              .add_tensor(v.tensor(0), TensorArgType::Input)
                              .add_tensor(v.tensor(1), TensorArgType::OutputExisting));
      });
  const WorkerId left = w4.add_worker(std::move(l3_0));   // 0
  const WorkerId right = w4.add_worker(std::move(l3_1));  // 1
  w4.init();

  w4.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    const ContinuousTensor a = o.alloc({n}, DataType::Float32);
    const ContinuousTensor b = o.alloc({n}, DataType::Float32);
    const ContinuousTensor f = o.alloc({n}, DataType::Float32);
    const ContinuousTensor total = make_tensor(s, {1}, DataType::Int64);
    o.submit_next_level(prepare, TaskArgs().add_tensor(a, TensorArgType::OutputExisting),
                        default_call_config(), right);
    o.submit_next_level(on_chip,
                        TaskArgs()
                            .add_tensor(a, TensorArgType::Input)
                            .add_tensor(b, TensorArgType::OutputExisting)
                            .add_tensor(f, TensorArgType::OutputExisting),
                        default_call_config(), left);
    o.submit_next_level(reduce,
                        TaskArgs()
                            .add_tensor(f, TensorArgType::Input)
                            .add_tensor(total, TensorArgType::OutputExisting),
                        default_call_config(), right);
  });
  w4.close();

  // f = (a+4)(a+5) + (a+3) for a = i % 10, exact in float.
  std::int64_t want = 0;
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::int64_t a = i % 10;
    want += (a + 4) * (a + 5) + (a + 3);
  }
  const std::int64_t got = *s;
  ::munmap(mem, sizeof(std::int64_t));
  if (got != want) {
    std::printf("nested_l4: sum(f) = %lld, expected %lld\n", static_cast<long long>(got),
                static_cast<long long>(want));
    return 1;
  }
  std::printf(
      "nested_l4: sum(f) = %lld across L3 worker 1 (prepare, reduce) and L3 worker 0 "
      "(chip)\n",
      static_cast<long long>(want));
  return 0;
}
