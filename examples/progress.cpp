// progress — a long-ish DAG whose progress another thread prints from Worker::stats().
//
//   Worker (L3)
//   ├── sub worker 0   (forked child)
//   └── sub worker 1   (forked child)
//
//   64 columns x 200 stages: stage s of column c reads column c's buffer of stage s-1 and
//   writes its buffer of stage s (ping-pong pair per column); a final task checks every column.
//   While run() works through the 12,800 tasks, a second thread prints a progress line every
//   50 ms: tasks done of submitted, in flight, ready in the queue, per-lane counts, heap use.
#include <simpler/simpler.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <thread>
#include <vector>

int main() {
  using namespace simpler;
  constexpr std::uint32_t kColumns = 64;
  constexpr std::uint32_t kStages = 200;
  constexpr std::uint32_t kFloats = 4096;

  WorkerOptions opts;
  opts.num_sub_workers = 2;  // forked children: buffers come from orch.alloc (shared memory)
  opts.heap_ring_size = std::size_t{16} << 20;
  Worker w(opts);
  // One step: out[i] = in[i] * 0.5 + 1 (from 0, every element converges towards 2).
  auto step = w.register_sub("step", [](TaskArgsView v) {
    const float* in = v.tensor(0).as<float>();
    float* out = v.tensor(1).as<float>();
    for (std::uint32_t i = 0; i < kFloats; ++i) out[i] = in[i] * 0.5F + 1.0F;
  });
  auto zero = w.register_sub("zero", [](TaskArgsView v) {
    float* out = v.tensor(0).as<float>();
    for (std::uint32_t i = 0; i < kFloats; ++i) out[i] = 0;
  });
  auto check = w.register_sub("check", [](TaskArgsView v) {
    for (std::int32_t t = 0; t < v.tensor_count; ++t) {
      const float* x = v.tensor(t).as<float>();
      if (x[0] < 1.99F || x[0] > 2.01F) throw std::runtime_error("a column did not converge");
    }
  });
  w.init();

  std::atomic<bool> done{false};
  std::thread reporter([&] {
    for (;;) {
      const bool last = done.load();
      const WorkerStats s = w.stats();
      std::printf(
          "progress: %llu/%llu tasks done, %llu in flight, %llu ready; lanes",
          static_cast<unsigned long long>(s.tasks_completed + s.tasks_failed + s.tasks_skipped),
          static_cast<unsigned long long>(s.tasks_submitted),
          static_cast<unsigned long long>(s.tasks_in_flight),
          static_cast<unsigned long long>(s.ready_queued));
      for (const LaneStats& l : s.lanes) {
        std::printf(" [%s: %llu done]", l.name.c_str(),
                    static_cast<unsigned long long>(l.completed));
      }
      std::printf("; heap ring 0: %zu of %zu KiB\n", s.heap_rings[0].used / 1024,
                  s.heap_rings[0].size / 1024);
      std::fflush(stdout);
      if (last) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));  // a display rate, not a sync
    }
  });

  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    std::vector<ContinuousTensor> ping(kColumns), pong(kColumns);
    for (std::uint32_t c = 0; c < kColumns; ++c) {
      ping[c] = o.alloc({kFloats}, DataType::Float32);
      pong[c] = o.alloc({kFloats}, DataType::Float32);
      o.submit_sub(zero, TaskArgs().add_tensor(ping[c], TensorArgType::OutputExisting));
    }
    for (std::uint32_t s = 0; s < kStages; ++s) {
      for (std::uint32_t c = 0; c < kColumns; ++c) {
        const auto& in = s % 2 == 0 ? ping[c] : pong[c];
        const auto& out = s % 2 == 0 ? pong[c] : ping[c];
        o.submit_sub(step, TaskArgs()
                               .add_tensor(in, TensorArgType::Input)
                               .add_tensor(out, TensorArgType::OutputExisting));
      }
    }
    TaskArgs all;
    for (std::uint32_t c = 0; c < kColumns; ++c)
      all.add_tensor(kStages % 2 == 0 ? ping[c] : pong[c]);
    o.submit_sub(check, std::move(all));
  });
  done = true;
  reporter.join();

  const WorkerStats s = w.stats();
  const std::uint64_t expected = kColumns + std::uint64_t{kColumns} * kStages + 1;
  std::printf("done: %llu tasks completed in %llu run(s)\n",
              static_cast<unsigned long long>(s.tasks_completed),
              static_cast<unsigned long long>(s.runs_completed));
  w.close();
  return s.tasks_completed == expected && s.tasks_failed == 0 ? 0 : 1;
}
