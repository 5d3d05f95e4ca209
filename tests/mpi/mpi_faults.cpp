// mpi_faults — the MPI transport's faults, one scenario per job: `mpirun -np 3 mpi_faults
// <scenario>`. tests/test_mpi_faults.cpp runs each under a watchdog and checks the exit code, the
// output and that no process of the job is left (it tags the job's environment with
// SIMPLER_TEST_MARKER).
//
//   rank 0: L4 Worker (no local children)
//   ├── MPI rank 1: L3 Worker ── sub 0, sub 1   (forked)
//   └── MPI rank 2: L3 Worker ── sub 0, sub 1   (forked)
//
// Scenarios:
//   kill       'die' on rank 2 raises SIGKILL once its sub holds a task, while rank 1's sub holds
//              one too: mpirun ends the job (rank 0 never gets an answer).
//   root_dies  rank 0 raises SIGKILL while both ranks' subs hold tasks: mpirun ends the job.
//   deadline   'stall' on rank 2 never returns; its 300 ms deadline on rank 0 ends the job.
//   throw      a sub task of 'fail' on rank 2 throws: rank 0's run() throws a TaskError, the
//              next run works, exit 0.
//   setup      rank 2's setup throws: rank 0's init() throws RemoteError naming rank 2, exit 0.
//   bad_frame  rank 2's after_start hook sends rank 0 a frame of another session on the
//              Session's communicator; rank 0 takes it for the answer to its HELLO and ends the
//              job.
//   stray_tag  rank 0 sends rank 2 a message with a tag the protocol does not use: rank 2 ends
//              the job.
//   stuck_setup  rank 2's setup never returns, so it never starts MPI; rank 0's attach_timeout
//              is 1 s. Today rank 0 waits in MPI_Init_thread (whose start-up exchange needs every
//              rank) without a deadline, and only a watchdog ends the job.
// Every rank prints the network and mount namespaces it runs in. After init() rank 0 prints how
// many live processes carry the marker (the test checks that the marker reached the ranks and
// their forked subs; bad_frame ends the job before). Rank 0 exits 3 when a fault that must end
// the job did not, 4 on an unexpected error.
#include <simpler/mpi/mpi.hpp>
#include <simpler/simpler.hpp>

#include <fmt/format.h>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "support/commands.hpp"
#include "support/gate.hpp"

using namespace simpler;
using namespace std::chrono_literals;

namespace {

constexpr std::array kScenarios{"kill",  "root_dies", "deadline",  "throw",
                                "setup", "bad_frame", "stray_tag", "stuck_setup"};
/// How long a held sub task sleeps: far past any test's watchdog (the job's end kills it).
constexpr std::uint64_t kHoldMs = 60'000;
constexpr std::uint64_t kBogusSession = 0xbad5e55;

template <class... A>
void say(fmt::format_string<A...> f, A&&... a) {
  const std::string line = "mpi_faults: " + fmt::format(f, std::forward<A>(a)...) + "\n";
  std::fputs(line.c_str(), stdout);
  std::fflush(stdout);
}

/// Says which network and mount namespaces this rank runs in (the network-namespace test checks
/// that the ranks are apart).
void say_where(int rank) {
  const auto ns = [](const char* kind) {
    char buf[64] = {};
    const ssize_t n = ::readlink(fmt::format("/proc/self/ns/{}", kind).c_str(), buf, sizeof(buf));
    return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : std::string("?");
  };
  say("rank {} runs in {} {}", rank, ns("net"), ns("mnt"));
}

/// What a serving rank registers: subs on its inner L3 and the orchestrations rank 0 submits.
void setup_rank(RemoteSession& rs, int rank, std::string_view scenario) {
  say_where(rank);
  Worker& w = rs.worker();
  const auto hold_sub = w.register_sub("hold", [](TaskArgsView v) {
    std::this_thread::sleep_for(std::chrono::milliseconds(v.scalar(0)));
  });
  const auto fill_sub = w.register_sub("fill", [](TaskArgsView v) {
    const ContinuousTensor& t = v.tensor(0);
    std::fill_n(t.as<std::int64_t>(), t.numel(), static_cast<std::int64_t>(v.scalar(0)));
  });
  const auto fail_sub = w.register_sub("fail", [rank](TaskArgsView) {
    throw std::runtime_error(fmt::format("mpi_faults: 'fail' failed as asked on rank {}", rank));
  });

  rs.serve_orch("hold", [hold_sub](Orchestrator& o, TaskArgsView v, const CallConfig&) {
    o.submit_sub(hold_sub, TaskArgs().add_scalar(v.scalar(0)));
  });
  rs.serve_orch("fill", [fill_sub](Orchestrator& o, TaskArgsView v, const CallConfig&) {
    o.submit_sub(
        fill_sub,
        TaskArgs().add_tensor(v.tensor(0), TensorArgType::OutputExisting).add_scalar(v.scalar(0)));
  });
  rs.serve_orch("fail", [fail_sub](Orchestrator& o, TaskArgsView, const CallConfig&) {
    o.submit_sub(fail_sub);
  });
  rs.serve_orch("die", [hold_sub, rank](Orchestrator& o, TaskArgsView, const CallConfig&) {
    // Die while a forked sub holds a task: nothing of this rank may outlive it.
    const auto t = o.submit_sub(hold_sub, TaskArgs().add_scalar(kHoldMs));
    if (!testing::eventually([&] { return o.state_of(t.slot_id) == TaskState::Running; })) {
      throw std::runtime_error("mpi_faults: the held sub task never started");
    }
    say("rank {} (pid {}) raises SIGKILL", rank, ::getpid());
    ::raise(SIGKILL);
  });
  rs.serve_orch("stall", [hold_sub](Orchestrator& o, TaskArgsView, const CallConfig&) {
    // Never returns (the inner run cannot end its own orchestration function): only rank 0's
    // deadline can end this; the job's end kills this process.
    o.submit_sub(hold_sub, TaskArgs().add_scalar(kHoldMs));
    for (;;) ::pause();
  });

  if (scenario == "setup" && rank == 2) {
    throw std::runtime_error("mpi_faults: rank 2's setup failed as asked");
  }
  if (scenario == "stuck_setup" && rank == 2) {
    say("rank 2's setup never returns");
    for (;;) ::pause();
  }
}

/// bad_frame on rank 2: a well-formed HELLO header of another session, ahead of the real answer.
void send_bogus_frame(mpi::Session& s) {
  wire::FrameHeader h;
  h.type = wire::FrameType::Hello;
  h.session = kBogusSession;
  h.worker = static_cast<std::uint32_t>(s.rank());
  h.sequence = 1;
  h.length = 0;
  std::vector<std::byte> bytes(wire::kHeaderBytes);
  wire::encode_header(h, bytes.data());
  auto lk = s.lock_mpi();
  s.check(
      MPI_Send(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, 0, mpi::kFrameTag, s.comm()),
      "MPI_Send (bogus frame)");
}

void count_marked_processes() {
  const char* marker = std::getenv("SIMPLER_TEST_MARKER");
  if (marker == nullptr) return;
  // This process is left out of the scan: add it.
  const auto found = testing::processes_with_env("SIMPLER_TEST_MARKER", marker);
  say("{} live processes carry the marker", found.size() + 1);
}

int drive(mpi::Session& s, std::string_view scenario) {
  say_where(0);
  WorkerOptions o4;
  o4.level = 4;
  Worker w4(o4);
  const auto none = [](Orchestrator&, TaskArgsView, const CallConfig&) {};
  const auto hold = w4.register_orch("hold", none);
  const auto fill = w4.register_orch("fill", none);
  const auto fail = w4.register_orch("fail", none);
  const auto die = w4.register_orch("die", none);
  const auto stall = w4.register_orch("stall", none);
  const std::vector<WorkerId> ranks = w4.add_mpi_workers(s);
  const WorkerId rank1 = ranks.at(0);
  const WorkerId rank2 = ranks.at(1);

  if (scenario == "setup") {
    try {
      w4.init();
    } catch (const RemoteError& e) {
      say("init() threw RemoteError: {}", e.what());
      count_marked_processes();
      return 0;
    }
    say("init() worked although rank 2's setup threw");
    return 3;
  }
  w4.init();  // bad_frame ends the job in here
  count_marked_processes();

  if (scenario == "kill") {
    w4.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      o.submit_next_level(hold, TaskArgs().add_scalar(kHoldMs), default_call_config(), rank1);
      o.submit_next_level(die, {}, default_call_config(), rank2);
    });
  } else if (scenario == "root_dies") {
    w4.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      const auto a =
          o.submit_next_level(hold, TaskArgs().add_scalar(kHoldMs), default_call_config(), rank1);
      const auto b =
          o.submit_next_level(hold, TaskArgs().add_scalar(kHoldMs), default_call_config(), rank2);
      if (!testing::eventually([&] {
            return o.state_of(a.slot_id) == TaskState::Running &&
                   o.state_of(b.slot_id) == TaskState::Running;
          })) {
        throw std::runtime_error("mpi_faults: the held tasks never started");
      }
      say("rank 0 (pid {}) raises SIGKILL", ::getpid());
      ::raise(SIGKILL);
    });
  } else if (scenario == "deadline") {
    CallConfig c = default_call_config();
    c.timeout = 300ms;
    w4.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      o.submit_next_level(hold, TaskArgs().add_scalar(kHoldMs), default_call_config(), rank1);
      o.submit_next_level(stall, {}, c, rank2);
    });
  } else if (scenario == "stray_tag") {
    {
      const std::byte stray{0x5a};
      auto lk = s.lock_mpi();
      s.check(MPI_Send(&stray, 1, MPI_BYTE, 2, 7, s.comm()), "MPI_Send (stray tag)");
    }
    w4.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      o.submit_next_level(hold, TaskArgs().add_scalar(kHoldMs), default_call_config(), rank2);
    });
  } else if (scenario == "throw") {
    constexpr std::uint32_t n = 16;
    const RemoteBuffer b = w4.remote_alloc(rank2, n * sizeof(std::int64_t));
    try {
      w4.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
        o.submit_next_level(fail, {}, default_call_config(), rank2);
      });
      say("run() returned although 'fail' threw on rank 2");
      return 3;
    } catch (const TaskError& e) {
      say("run() threw TaskError: outcome {}, level {}, worker '{}', callable '{}': {}",
          e.outcome() == Outcome::TaskFailure ? "TaskFailure" : "not TaskFailure", e.level(),
          e.worker(), e.callable(), e.what());
    }
    w4.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      o.submit_next_level(
          fill,
          TaskArgs()
              .add_tensor(b.tensor_of<std::int64_t>(0, n), TensorArgType::OutputExisting)
              .add_scalar(42),
          default_call_config(), rank2);
    });
    std::vector<std::int64_t> got(n);
    w4.copy_from_remote(b, 0, got.data(), n * sizeof(std::int64_t));
    if (std::count(got.begin(), got.end(), 42) != static_cast<std::ptrdiff_t>(n)) {
      say("the run after the failure did not fill the buffer");
      return 4;
    }
    w4.remote_free(b);
    w4.close();
    say("the next run works");
    return 0;
  }
  say("the job survived scenario '{}'", scenario);
  return 3;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::find(kScenarios.begin(), kScenarios.end(), std::string_view(argv[1])) ==
                      kScenarios.end()) {
    std::fprintf(stderr,
                 "usage: mpirun -np 3 mpi_faults "
                 "kill|deadline|throw|setup|bad_frame|stray_tag\n");
    return 2;
  }
  const std::string scenario = argv[1];
  try {
    mpi::SessionOptions so;
    if (scenario == "stuck_setup") so.attach_timeout = 1s;
    mpi::Session s(argc, argv, so);
    if (s.size() != 3) {
      std::fprintf(stderr, "mpi_faults: run it with 3 ranks (mpirun -np 3)\n");
      return 2;
    }
    if (s.rank() != 0) {
      const int rank = s.rank();
      WorkerOptions inner;
      inner.num_sub_workers = 2;
      inner.child_mode = ChildMode::Process;
      std::function<void(mpi::Session&)> after_start;
      if (scenario == "bad_frame" && rank == 2) after_start = send_bogus_frame;
      return s.serve([&](RemoteSession& rs) { setup_rank(rs, rank, scenario); }, inner,
                     after_start);
    }
    return drive(s, scenario);
  } catch (const std::exception& e) {
    say("unexpected error: {}", e.what());
    return 4;
  }
}
