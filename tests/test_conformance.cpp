// One conformance suite, run over transport types: the engine gives the same results whether its
// children are threads (ThreadTransport), forked processes (ForkShmTransport), a transport from
// outside the library (the test's PumpedTransport, pumped on a background thread) or an L3 Worker
// behind a RemoteServer on loopback (SocketTransport).
//
// Each transport has a fixture (OnTransport<T>) that owns the Worker, registers the suite's
// callables the way its children know them, and provides the memory the tasks use: the local
// transports instantiate BasicWorker<WorkerThread<T, SubWorker>>, run the callables as sub tasks
// and keep every word a task writes in shared memory (SharedArena, heap rings); SocketTransport
// instantiates BasicWorker<WorkerThread<SocketTransport, RemoteL3>> with one remote worker that
// serves every callable as an orchestration function running it as a sub task of its inner L3,
// and keeps the words in one RemoteBuffer there, copied in and out between runs.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <simpler/simpler.hpp>

#include "support/dag_program.hpp"
#include "support/pumped_transport.hpp"
#include "support/recording_leaf.hpp"
#include "support/remote_server.hpp"
#include "support/shared_arena.hpp"

using namespace simpler;
using namespace simpler::testing;
using Catch::Matchers::Contains;

namespace {

using Pumped = PumpedTransport<100>;

/// Words every fixture provides (1 MiB).
constexpr std::size_t kWords = std::size_t{1} << 17;

// The suite's callables: functions of their arguments alone (every effect lands in a tensor), so
// each transport can run them wherever its children are.
void fail_step(TaskArgsView) {
  throw std::runtime_error("calibration drifted");
}
/// Marks tensor 1 (read tensor 0 first: it depends on it).
void after_step(TaskArgsView v) {
  *v.tensor(1).as<std::int64_t>() = 1;
}
/// Counts in tensor 0.
void count_step(TaskArgsView v) {
  ++*v.tensor(0).as<std::int64_t>();
}
void fill_step(TaskArgsView v) {
  auto* p = v.tensor(0).as<std::int64_t>();
  for (int i = 0; i < 100; ++i) p[i] = i;
}
void add_step(TaskArgsView v) {
  const auto* p = v.tensor(0).as<const std::int64_t>();
  std::int64_t s = 0;
  for (int i = 0; i < 100; ++i) s += p[i];
  *v.tensor(1).as<std::int64_t>() = s;
}

const std::vector<std::pair<std::string, detail::SubFn>>& callables() {
  static const std::vector<std::pair<std::string, detail::SubFn>> all = {
      {"dag", dag_kernel},         {"snapshot", dag_snapshot_kernel},
      {"failing_step", fail_step}, {"after", after_step},
      {"other", count_step},       {"fill", fill_step},
      {"add", add_step},
  };
  return all;
}

/// The local transports: sub workers reached through T, host memory.
template <class T>
class OnTransport {
 public:
  using W = BasicWorker<WorkerThread<T, SubWorker>>;
  /// Who runs a callable, as TaskError::worker names it.
  static constexpr const char* kWorkerKind = "sub worker";

  OnTransport() : w_(options()) {  // the arena is declared first: mapped before init() forks
    for (const auto& [name, fn] : callables()) handles_[name] = w_.register_sub(name, fn);
    w_.init();
  }

  W& worker() { return w_; }
  SubmitResult submit(OrchestratorBase& o, const std::string& name, TaskArgs a) {
    return o.submit_sub(handles_.at(name), std::move(a));
  }
  /// `count` words from word `first` of the fixture's memory.
  ContinuousTensor words(std::size_t first, std::uint32_t count) {
    return make_tensor(words_.data() + first, {count}, DataType::Int64);
  }
  void put(std::size_t first, const std::vector<std::int64_t>& v) {
    std::copy(v.begin(), v.end(), words_.begin() + static_cast<std::ptrdiff_t>(first));
  }
  std::vector<std::int64_t> get(std::size_t first, std::size_t n) {
    const auto s = words_.subspan(first, n);
    return {s.begin(), s.end()};
  }
  /// A tensor a task writes for the next to read: auto-allocated in the heap ring here.
  std::pair<ContinuousTensor, TensorArgType> fresh_output(std::size_t, std::uint32_t count) {
    return {make_tensor(nullptr, {count}, DataType::Int64), TensorArgType::Output};
  }
  static ContinuousTensor written(const SubmitResult& r, const ContinuousTensor&) {
    return r.output(0);
  }
  static void check_message(const TaskError& e, const std::string& original) {
    CHECK(e.message() == original);
  }

  // The random DAG's runner (run_dag): its callables are sub callables, its words host memory.
  DagMemory dag_memory() { return DagMemory(words_.subspan(0, kWords)); }
  SubmitResult submit(OrchestratorBase& o, DagCallable c, TaskArgs a) {
    return submit(o, c == DagCallable::Kernel ? "dag" : "snapshot", std::move(a));
  }
  void upload(const DagState&) {}
  void download(const DagState& st, std::size_t first, std::span<std::int64_t> out) {
    const auto s = st.memory.words().subspan(first, out.size());
    std::copy(s.begin(), s.end(), out.begin());
  }

 private:
  static WorkerOptions options() {
    WorkerOptions o = thread_options(2);
    o.child_mode = T::kChildMode;
    return o;
  }
  struct Helper {};
  struct PumpHelper {
    Pumper pumper{Pumped::pump()};
  };

  SharedArena arena_{kWords * sizeof(std::int64_t) + 4096};
  std::span<std::int64_t> words_ = arena_.make<std::int64_t>(kWords, 0);
  [[no_unique_address]] std::conditional_t<std::is_same_v<T, Pumped>, PumpHelper, Helper> helper_;
  W w_;
  std::map<std::string, CallableHandle> handles_;
};

/// SocketTransport: one remote L3 Worker, served by a RemoteServer in a process of its own on
/// loopback, and one RemoteBuffer there.
template <>
class OnTransport<SocketTransport> {
 public:
  using W = BasicWorker<WorkerThread<SocketTransport, RemoteL3>>;
  static constexpr const char* kWorkerKind = "remote worker";

  OnTransport() : server_(server_options(), serve_callables), w_(options()) {
    for (const auto& [name, fn] : callables()) {
      // The body runs on the remote (RemoteSession::serve_orch), never here.
      handles_[name] =
          w_.register_orch(name, [](OrchestratorBase&, TaskArgsView, const CallConfig&) {});
    }
    remote_ = w_.add_remote_worker(server_.spec());
    w_.init();
    buffer_ = w_.remote_alloc(remote_, kWords * sizeof(std::int64_t));
    // Every word starts at 0, as the local fixtures' do.
    put(0, std::vector<std::int64_t>(kWords, 0));
  }

  W& worker() { return w_; }
  SubmitResult submit(OrchestratorBase& o, const std::string& name, TaskArgs a) {
    return o.submit_next_level(handles_.at(name), std::move(a), default_call_config(), remote_);
  }
  ContinuousTensor words(std::size_t first, std::uint32_t count) {
    return buffer_.tensor_of<std::int64_t>(first, count);
  }
  void put(std::size_t first, const std::vector<std::int64_t>& v) {
    w_.copy_to_remote(buffer_, first * sizeof(std::int64_t), v.data(), v.size() * sizeof(v[0]));
  }
  std::vector<std::int64_t> get(std::size_t first, std::size_t n) {
    std::vector<std::int64_t> out(n);
    w_.copy_from_remote(buffer_, first * sizeof(std::int64_t), out.data(), n * sizeof(out[0]));
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
  /// The remote's failure travels as text: the session names the served function and its
  /// Worker, the inner L3 names its sub worker, and the original message comes last.
  static void check_message(const TaskError& e, const std::string& original) {
    CHECK_THAT(e.message(), Contains("on remote worker 127.0.0.1:") &&
                                Contains("'" + e.callable() + "' on the remote L3 Worker") &&
                                Contains("sub worker") && Contains(": " + original));
  }

  DagMemory dag_memory() {
    mirror_.assign(kWords, 0);
    return DagMemory(buffer_, std::span<std::int64_t>(mirror_));
  }
  SubmitResult submit(OrchestratorBase& o, DagCallable c, TaskArgs a) {
    return submit(o, c == DagCallable::Kernel ? "dag" : "snapshot", std::move(a));
  }
  void upload(const DagState& st) {
    const std::size_t n = st.result_at + st.result_words;
    w_.copy_to_remote(buffer_, 0, st.memory.words().data(), n * sizeof(std::int64_t));
  }
  void download(const DagState&, std::size_t first, std::span<std::int64_t> out) {
    w_.copy_from_remote(buffer_, first * sizeof(std::int64_t), out.data(), out.size_bytes());
  }

 private:
  static RemoteServerOptions server_options() {
    RemoteServerOptions o;
    o.worker = thread_options(2);
    o.worker.child_mode = ChildMode::Process;  // the buffer pool is shared with forked subs
    o.buffer_pool_bytes = std::uint64_t{64} << 20;
    o.log = false;
    return o;
  }
  /// Serves each callable as an orchestration function that runs it as one sub task of the
  /// session's inner L3. Tags do not travel (the parent tracked the dependencies); inside, the
  /// task is alone in its run, so NoDep is exact.
  static void serve_callables(RemoteSession& session) {
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
  static WorkerOptions options() {
    WorkerOptions o = thread_options(0);
    o.level = 4;
    return o;
  }

  ServerProcess server_;  // first: forked before the Worker starts a thread
  W w_;
  WorkerId remote_ = 0;
  RemoteBuffer buffer_;
  std::map<std::string, CallableHandle> handles_;
  std::vector<std::int64_t> mirror_;
};

}  // namespace

TEMPLATE_TEST_CASE("random tagged DAGs match the oracle on every transport", "[conformance][dag]",
                   ThreadTransport, ForkShmTransport, Pumped, SocketTransport) {
  OnTransport<TestType> fx;
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

TEMPLATE_TEST_CASE("a failing task skips its cone and names itself on every transport",
                   "[conformance][failure]", ThreadTransport, ForkShmTransport, Pumped,
                   SocketTransport) {
  OnTransport<TestType> fx;
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
    OnTransport<TestType>::check_message(e, "calibration drifted");
    CHECK_THAT(e.worker(), Contains(OnTransport<TestType>::kWorkerKind));
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

TEMPLATE_TEST_CASE("outputs written by a task are read by the next on every transport",
                   "[conformance][alloc]", ThreadTransport, ForkShmTransport, Pumped,
                   SocketTransport) {
  OnTransport<TestType> fx;
  // Locally the written tensor is auto-allocated in the heap ring (Output with data == 0).
  const auto [out, tag] = fx.fresh_output(64, 100);
  fx.worker().run([&, out = out, tag = tag](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
    const auto r = fx.submit(o, "fill", TaskArgs().add_tensor(out, tag));
    fx.submit(o, "add",
              TaskArgs()
                  .add_tensor(OnTransport<TestType>::written(r, out))
                  .add_tensor(fx.words(0, 1), TensorArgType::OutputExisting));
  });
  CHECK(fx.get(0, 1)[0] == 4950);
}
