// Test support: the transport conformance suite's callables and test bodies, shared by every
// executable that runs it (tests/test_conformance.cpp over the local and socket transports,
// tests/mpi/ over MpiTransport).
//
// A body is a function template over a fixture `Fx` that owns a Worker whose children reach the
// suite's callables through the transport under test, and provides the memory the tasks use:
//   Fx::W& fx.worker()
//   fx.submit(o, name, TaskArgs)            submits the callable `name` to the children
//   fx.words(first, count)                  int64 words of the fixture's memory as a tensor
//   fx.put(first, values) / fx.get(first, n) between runs
//   fx.fresh_output(first, count)           a tensor (and tag) a task writes for the next
//   Fx::written(result, given)              the tensor it wrote
//   Fx::check_message(e, original)          the TaskError's message, as this transport words it
//   Fx::kWorkerKind                         who runs a callable, as TaskError::worker names it
//   and the DAG runner's target (run_dag): dag_memory(), submit(o, DagCallable, a), upload(st),
//   download(st, first, out).
// RemoteWords<W> is that fixture's memory and submission for a Worker whose one remote L3 child
// (a RemoteServer session, an MPI rank) serves the callables with serve_callables.
#pragma once

#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <simpler/simpler.hpp>

#include "support/dag_program.hpp"

namespace simpler::testing::conformance {

/// Words every fixture provides (1 MiB).
inline constexpr std::size_t kWords = std::size_t{1} << 17;

// The suite's callables: functions of their arguments alone (every effect lands in a tensor), so
// each transport can run them wherever its children are.
inline void fail_step(TaskArgsView) {
  throw std::runtime_error("calibration drifted");
}
/// Marks tensor 1 (read tensor 0 first: it depends on it).
inline void after_step(TaskArgsView v) {
  *v.tensor(1).as<std::int64_t>() = 1;
}
/// Counts in tensor 0.
inline void count_step(TaskArgsView v) {
  ++*v.tensor(0).as<std::int64_t>();
}
inline void fill_step(TaskArgsView v) {
  auto* p = v.tensor(0).as<std::int64_t>();
  for (int i = 0; i < 100; ++i) p[i] = i;
}
inline void add_step(TaskArgsView v) {
  const auto* p = v.tensor(0).as<const std::int64_t>();
  std::int64_t s = 0;
  for (int i = 0; i < 100; ++i) s += p[i];
  *v.tensor(1).as<std::int64_t>() = s;
}

inline const std::vector<std::pair<std::string, detail::SubFn>>& callables() {
  static const std::vector<std::pair<std::string, detail::SubFn>> all = {
      {"dag", dag_kernel},         {"snapshot", dag_snapshot_kernel},
      {"failing_step", fail_step}, {"after", after_step},
      {"other", count_step},       {"fill", fill_step},
      {"add", add_step},
  };
  return all;
}

/// The suite's name of a DAG program's callable (run_dag).
inline std::string dag_callable_name(DagCallable c) {
  return c == DagCallable::Kernel ? "dag" : "snapshot";
}

/// A remote L3's setup: serves each callable as an orchestration function that runs it as one
/// sub task of the inner L3 (so the inner L3 needs sub workers; forked ones share the remote's
/// buffer pool). Tags do not travel (the parent tracked the dependencies); inside, the task is
/// alone in its run, so NoDep is exact.
inline void serve_callables(RemoteSession& session) {
  for (const auto& [name, fn] : callables()) {
    const CallableHandle sub = session.worker().register_sub(name, fn);
    session.serve_orch(name, [sub](Orchestrator& o, TaskArgsView v, const CallConfig&) {
      TaskArgs a;
      for (std::int32_t i = 0; i < v.tensor_count; ++i)
        a.add_tensor(v.tensor(i), TensorArgType::NoDep);
      for (std::int32_t i = 0; i < v.scalar_count; ++i) a.add_scalar(v.scalar(i));
      o.submit_sub(sub, std::move(a));
    });
  }
}

/// The memory and submission of a fixture whose tasks run on one remote L3 child of a W (it
/// serves the callables with serve_callables): W registers them as orchestration functions and
/// submits them to that child, and the words live in one RemoteBuffer there, copied in and out
/// between runs. The derived fixture owns the Worker: it calls register_callables(w) before
/// w.init() and allocate(remote) after.
template <class W>
class RemoteWords {
 public:
  W& worker() { return *w_; }
  SubmitResult submit(OrchestratorBase& o, const std::string& name, TaskArgs a) {
    return o.submit_next_level(handles_.at(name), std::move(a), default_call_config(), remote_);
  }
  ContinuousTensor words(std::size_t first, std::uint32_t count) {
    return buffer_.tensor_of<std::int64_t>(first, count);
  }
  void put(std::size_t first, const std::vector<std::int64_t>& v) {
    w_->copy_to_remote(buffer_, first * sizeof(std::int64_t), v.data(), v.size() * sizeof(v[0]));
  }
  std::vector<std::int64_t> get(std::size_t first, std::size_t n) {
    std::vector<std::int64_t> out(n);
    w_->copy_from_remote(buffer_, first * sizeof(std::int64_t), out.data(), n * sizeof(out[0]));
    return out;
  }
  /// Auto-allocated outputs (Output with data == 0) are refused on a remote worker: it cannot
  /// allocate at submit. The written tensor is a fresh range of the buffer, OutputExisting.
  std::pair<ContinuousTensor, TensorArgType> fresh_output(std::size_t first, std::uint32_t count) {
    return {words(first, count), TensorArgType::OutputExisting};
  }
  static ContinuousTensor written(const SubmitResult&, const ContinuousTensor& given) {
    return given;
  }

  DagMemory dag_memory() {
    mirror_.assign(kWords, 0);
    return DagMemory(buffer_, std::span<std::int64_t>(mirror_));
  }
  SubmitResult submit(OrchestratorBase& o, DagCallable c, TaskArgs a) {
    return submit(o, dag_callable_name(c), std::move(a));
  }
  void upload(const DagState& st) {
    const std::size_t n = st.result_at + st.result_words;
    w_->copy_to_remote(buffer_, 0, st.memory.words().data(), n * sizeof(std::int64_t));
  }
  void download(const DagState&, std::size_t first, std::span<std::int64_t> out) {
    w_->copy_from_remote(buffer_, first * sizeof(std::int64_t), out.data(), out.size_bytes());
  }

 protected:
  /// Registers the callables on `w` (before its init()); their bodies run on the remote, never
  /// here.
  void register_callables(W& w) {
    w_ = &w;
    for (const auto& [name, fn] : callables()) {
      handles_[name] =
          w.register_orch(name, [](OrchestratorBase&, TaskArgsView, const CallConfig&) {});
    }
  }
  /// After init(): the words, in a buffer of `remote`, every one 0 as the local fixtures' start.
  void allocate(WorkerId remote) {
    remote_ = remote;
    buffer_ = w_->remote_alloc(remote_, kWords * sizeof(std::int64_t));
    put(0, std::vector<std::int64_t>(kWords, 0));
  }

 private:
  W* w_ = nullptr;
  WorkerId remote_ = 0;
  RemoteBuffer buffer_;
  std::map<std::string, CallableHandle> handles_;
  std::vector<std::int64_t> mirror_;
};

// ---- The test bodies.

template <class Fx>
void random_dags_match_the_oracle(Fx& fx) {
  for (std::uint32_t seed = 1; seed <= 4; ++seed) {
    const auto p = random_program(seed * 104729, 200, 3);
    const auto want = run_oracle(p);
    for (int rep = 0; rep < 2; ++rep) {
      INFO("seed " << seed << " rep " << rep);
      DagState st(p, fx.dag_memory());
      REQUIRE(run_dag(fx.worker(), fx, p, st) == want);
    }
  }
  CHECK(fx.worker().orchestrator().live_tasks() == 0);
}

template <class Fx>
void a_failing_task_skips_its_cone(Fx& fx) {
  using Catch::Matchers::Contains;
  // Words 0..3: what the failing task writes, what its consumer writes, unused, a counter.
  auto t = [&](std::size_t i) { return fx.words(i, 1); };
  try {
    fx.worker().run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
      // Independent work first, so the failure cannot make these submits throw.
      for (int i = 0; i < 8; ++i)
        fx.submit(o, "other", TaskArgs().add_tensor(t(3), TensorArgType::InOut));
      fx.submit(o, "failing_step", TaskArgs().add_tensor(t(0), TensorArgType::OutputExisting));
      fx.submit(o, "after",
                TaskArgs().add_tensor(t(0)).add_tensor(t(1), TensorArgType::OutputExisting));
    });
    FAIL("run() did not throw");
  } catch (const TaskError& e) {
    CHECK(e.callable() == "failing_step");
    Fx::check_message(e, "calibration drifted");
    CHECK_THAT(e.worker(), Contains(Fx::kWorkerKind));
    CHECK(e.outcome() == Outcome::TaskFailure);
  }
  CHECK(fx.get(1, 1)[0] == 0);  // the consumer was skipped
  CHECK(fx.get(3, 1)[0] == 8);  // the independent tasks ran
  // The next run is clean.
  fx.worker().run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
    fx.submit(o, "other", TaskArgs().add_tensor(t(3), TensorArgType::InOut));
  });
  CHECK(fx.get(3, 1)[0] == 9);
}

template <class Fx>
void outputs_written_are_read_by_the_next(Fx& fx) {
  // Locally the written tensor is auto-allocated in the heap ring (Output with data == 0).
  const auto [out, tag] = fx.fresh_output(64, 100);
  fx.worker().run([&, out = out, tag = tag](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
    const auto r = fx.submit(o, "fill", TaskArgs().add_tensor(out, tag));
    fx.submit(o, "add",
              TaskArgs()
                  .add_tensor(Fx::written(r, out))
                  .add_tensor(fx.words(0, 1), TensorArgType::OutputExisting));
  });
  CHECK(fx.get(0, 1)[0] == 4950);
}

}  // namespace simpler::testing::conformance
