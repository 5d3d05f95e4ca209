// One conformance suite, run over transport types: the engine gives the same results whether its
// children are threads (ThreadTransport), forked processes (ForkShmTransport), a transport from
// outside the library (the test's PumpedTransport, pumped on a background thread) or an L3 Worker
// behind a RemoteServer on loopback (SocketTransport). The test bodies and callables live in
// support/conformance_suite.hpp: tests/mpi/ runs the same bodies over MpiTransport.
//
// Each transport has a fixture (OnTransport<T>) that owns the Worker, registers the suite's
// callables the way its children know them, and provides the memory the tasks use: the local
// transports instantiate BasicWorker<WorkerThread<T, SubWorker>>, run the callables as sub tasks
// and keep every word a task writes in shared memory (SharedArena, heap rings); SocketTransport
// instantiates BasicWorker<WorkerThread<SocketTransport, RemoteL3>> with one remote worker that
// serves every callable as an orchestration function running it as a sub task of its inner L3
// (serve_callables), and keeps the words in one RemoteBuffer there, copied in and out between
// runs (RemoteWords).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <simpler/simpler.hpp>

#include "support/conformance_suite.hpp"
#include "support/dag_program.hpp"
#include "support/pumped_transport.hpp"
#include "support/recording_leaf.hpp"
#include "support/remote_server.hpp"
#include "support/shared_arena.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_conformance {

using namespace simpler;
using namespace simpler::testing;
using namespace simpler::testing::conformance;
using Catch::Matchers::Contains;

namespace {

using Pumped = PumpedTransport<100>;

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
    return submit(o, dag_callable_name(c), std::move(a));
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
class OnTransport<SocketTransport>
    : public RemoteWords<BasicWorker<WorkerThread<SocketTransport, RemoteL3>>> {
 public:
  using W = BasicWorker<WorkerThread<SocketTransport, RemoteL3>>;
  static constexpr const char* kWorkerKind = "remote worker";

  OnTransport() : server_(server_options(), serve_callables), w_(options()) {
    register_callables(w_);
    const WorkerId remote = w_.add_remote_worker(server_.spec());
    w_.init();
    allocate(remote);
  }

  /// The remote's failure travels as text: the session names the served function and its
  /// Worker, the inner L3 names its sub worker, and the original message comes last.
  static void check_message(const TaskError& e, const std::string& original) {
    CHECK_THAT(e.message(), Contains("on remote worker 127.0.0.1:") &&
                                Contains("'" + e.callable() + "' on the remote L3 Worker") &&
                                Contains("sub worker") && Contains(": " + original));
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
  static WorkerOptions options() {
    WorkerOptions o = thread_options(0);
    o.level = 4;
    return o;
  }

  ServerProcess server_;  // first: forked before the Worker starts a thread
  W w_;
};

}  // namespace

TEMPLATE_TEST_CASE("random tagged DAGs match the oracle on every transport", "[conformance][dag]",
                   ThreadTransport, ForkShmTransport, Pumped, SocketTransport) {
  OnTransport<TestType> fx;
  random_dags_match_the_oracle(fx);
}

TEMPLATE_TEST_CASE("a failing task skips its cone and names itself on every transport",
                   "[conformance][failure]", ThreadTransport, ForkShmTransport, Pumped,
                   SocketTransport) {
  OnTransport<TestType> fx;
  a_failing_task_skips_its_cone(fx);
}

TEMPLATE_TEST_CASE("outputs written by a task are read by the next on every transport",
                   "[conformance][alloc]", ThreadTransport, ForkShmTransport, Pumped,
                   SocketTransport) {
  OnTransport<TestType> fx;
  outputs_written_are_read_by_the_next(fx);
}

}  // namespace simpler_test_conformance
