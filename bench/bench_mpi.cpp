// An L4 Worker on MPI rank 0 over the L3 Workers of ranks 1 and 2 (MpiTransport), each figure
// side by side with raw MPI in the same binary and the same run (PERFORMANCE.md: ratios, never
// absolute pass/fail). One SPMD program:
//
//   mpiexec --oversubscribe --bind-to none --mca btl self,tcp -np 3 bench_mpi [--tiny] ...
//
// Ranks 1 and 2 serve an empty orchestration function (and one that sleeps). The raw MPI
// baselines run on MPI_COMM_WORLD before the serving loop (rank 0 right after Session::start(),
// ranks 1..N-1 in serve()'s after_start hook); every rank derives the iteration counts from the
// same argv, so both sides agree on them. A rank a raw phase does not use waits in a barrier that
// sleeps, as an idle serving rank does. Raw and simpler figures therefore come from the same
// processes a few seconds apart, not interleaved A B A B (the serving ranks cannot leave their
// loop); the cross-core probe is printed at the start and at the end so a latency-mode switch in
// between shows.
//
// Scenario rt (latency): sequential single-task run()s, each one submit_next_level of the empty
//   orchestration to rank 1; median / p90 / p99 per run, against a raw MPI_Send/MPI_Recv
//   ping-pong of the same frame sizes (TASK / COMPLETION) between ranks 0 and 1. Target:
//   remote/raw <= 1.5. Also shown, to split the round trip: a chain of tasks in one run (InOut
//   on one remote cell: each hop is one TASK/COMPLETION round trip without run()'s own cost),
//   and the same single-task run() on an L3 Worker nested in this process on a thread (the
//   engine's share without a transport).
// Scenario tp (throughput): 10k independent empty tasks in one run, round-robin over ranks 1 and
//   2, against the same 10k on rank 1 alone, interleaved A B A B. Target: rate(2)/rate(1) >= 1.8.
//   Beside it: a raw MPI stream with the same window over the same ranks (what this host
//   allows: three processes on its cores), the nested local L3 (the engine's ceiling), the CPU
//   time of the whole job per task (all threads of all ranks, from /proc) with the cores it kept
//   busy, and tp_nap: 2000 tasks that sleep 100 us on their rank, 2 ranks vs 1 (the overlap the
//   transport gives when the ranks do not compete with rank 0 for cores; ideal 2).
// Scenario copy: copy_to_remote / copy_from_remote of 256 MiB (8 MiB with --tiny) to rank 1,
//   against a raw MPI_Send of the same size (0 -> 1, and 1 -> 0). The first copy into a fresh
//   remote buffer (fresh pages) is reported apart from the repeated ones into the same buffer;
//   the raw side likewise. Target: raw/remote time >= 0.8.
//
// Tunables (every rank reads them): mpi::SessionOptions --window N, --poll-spin-us N,
// --poll-yield-us N, --max-poll-sleep-us N; WorkerOptions::spin of rank 0's Workers
// --l4-spin-us N and of the ranks' L3s --l3-spin-us N. --only rt,tp,copy runs a subset.
#include <fmt/format.h>

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <simpler/mpi/mpi.hpp>
#include <simpler/simpler.hpp>

#include "harness.hpp"

namespace sb = simpler_bench;
using namespace simpler;

namespace {

using sb::cpu_ns;
using sb::CpuMeter;

constexpr int kPingTag = 101;
constexpr int kBulkTag = 102;
constexpr std::uint64_t kNapUs = 100;

// ---- Options: the harness's, plus the MPI tunables and a scenario filter.

struct MpiArgs {
  sb::Options opt;
  mpi::SessionOptions so;
  /// WorkerOptions::spin of the L4 (and the local reference) and of the ranks' L3 Workers;
  /// negative = the default.
  long l4_spin_us = -1;
  long l3_spin_us = -1;
  bool rt = true, tp = true, copy = true;
  std::string tunables;  ///< as given, for the header line
};

long parse_long(const char* flag, const char* v, long lo, long hi) {
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (end == nullptr || *end != '\0' || n < lo || n > hi) {
    std::fprintf(stderr, "%s wants an integer in %ld..%ld, got '%s'\n", flag, lo, hi, v);
    std::exit(2);
  }
  return n;
}

MpiArgs parse_args(int argc, char** argv) {
  MpiArgs a;
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string f = argv[i];
    const bool has_value = i + 1 < argc;
    if (f == "--window" && has_value) {
      a.so.window = static_cast<std::uint32_t>(parse_long("--window", argv[++i], 1, 8));
    } else if (f == "--poll-spin-us" && has_value) {
      a.so.poll_spin = std::chrono::microseconds(parse_long(f.c_str(), argv[++i], 0, 10'000'000));
    } else if (f == "--poll-yield-us" && has_value) {
      a.so.poll_yield = std::chrono::microseconds(parse_long(f.c_str(), argv[++i], 0, 10'000'000));
    } else if (f == "--max-poll-sleep-us" && has_value) {
      a.so.max_poll_sleep =
          std::chrono::microseconds(parse_long(f.c_str(), argv[++i], 1, 10'000'000));
    } else if (f == "--l4-spin-us" && has_value) {
      a.l4_spin_us = parse_long(f.c_str(), argv[++i], 0, 10'000'000);
    } else if (f == "--l3-spin-us" && has_value) {
      a.l3_spin_us = parse_long(f.c_str(), argv[++i], 0, 10'000'000);
    } else if (f == "--only" && has_value) {
      const std::string v = argv[++i];
      a.rt = v.find("rt") != std::string::npos;
      a.tp = v.find("tp") != std::string::npos;
      a.copy = v.find("copy") != std::string::npos;
    } else {
      rest.push_back(argv[i]);
      continue;
    }
    a.tunables += fmt::format(" {} {}", f, argv[i]);
  }
  a.opt = sb::parse_options(
      static_cast<int>(rest.size()), rest.data(),
      "L4 on MPI rank 0 over L3s on ranks 1 and 2 against raw MPI: task round trip, 10k tasks "
      "over 2 ranks vs 1, 256 MiB copies.\n"
      "  --window N            mpi::SessionOptions::window (1..8)\n"
      "  --poll-spin-us N      mpi::SessionOptions::poll_spin\n"
      "  --poll-yield-us N     mpi::SessionOptions::poll_yield\n"
      "  --max-poll-sleep-us N mpi::SessionOptions::max_poll_sleep\n"
      "  --l4-spin-us N        WorkerOptions::spin of rank 0's Workers\n"
      "  --l3-spin-us N        WorkerOptions::spin of the ranks' L3 Workers\n"
      "  --only LIST           a subset of rt,tp,copy\n");
  if (a.opt.gap_ms < 0) a.opt.gap_ms = a.opt.tiny ? 0 : 20;
  a.so.log = false;
  return a;
}

// ---- Sizes: every rank computes the same ones from the same argv.

struct Sizes {
  std::uint32_t per_round;  ///< single-task runs (and raw ping-pongs) per repetition
  std::uint32_t chain;      ///< hops of the chained scenario
  std::uint32_t tasks;      ///< throughput scenario
  std::uint32_t naps;       ///< throughput of tasks that sleep kNapUs on their rank
  std::uint64_t copy_bytes;
  int warmup;
  int reps;
  /// Raw ping-pongs rank 1 answers: warm-up and measured rounds of per_round each.
  [[nodiscard]] std::uint64_t pingpongs() const {
    return static_cast<std::uint64_t>(warmup + reps) * per_round;
  }
  /// Raw bulk transfers each way: one fresh, then warm-up and measured repetitions.
  [[nodiscard]] int bulks() const { return 1 + warmup + reps; }
};

Sizes sizes_of(const sb::Options& o) {
  Sizes s = o.tiny ? Sizes{20, 50, 200, 40, 8U << 20, 0, 1}
                   : Sizes{500, 2000, 10000, 2000, 256U << 20, 2, 7};
  s.warmup = o.warmup;
  s.reps = o.reps;
  return s;
}

// Frame sizes of one empty task as the link sends them: a TASK with the default CallConfig and
// one tensor, a COMPLETION with an ok status (the ping-pong moves the same bytes).
std::size_t task_frame_bytes(int tensors = 1) {
  std::vector<std::byte> out;
  ContinuousTensor t =
      make_tensor(reinterpret_cast<void*>(std::uintptr_t{1}), {1}, DataType::Int64);
  t.child_memory = 1;
  TaskArgsView v;
  v.tensor_count = tensors;
  v.tensors = tensors > 0 ? &t : nullptr;
  wire::encode_task(1, default_call_config(), v, out);
  return wire::kHeaderBytes + out.size();
}
std::size_t completion_frame_bytes() {
  std::vector<std::byte> out;
  wire::encode(wire::Completion{}, out);
  return wire::kHeaderBytes + out.size();
}

void mpi_ok(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    std::fprintf(stderr, "bench_mpi: %s failed (%d)\n", what, rc);
    MPI_Abort(MPI_COMM_WORLD, 3);
  }
}

// ---- Latency distributions (the harness reports median and p99; the issue asks for p90).

struct Dist {
  double p10 = 0, p25 = 0, p75 = 0;
  double median = 0, p90 = 0, p99 = 0;
  int n = 0;
};

double nearest_rank(const std::vector<double>& sorted, double q) {
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  return sorted[std::min(sorted.size() - 1, rank == 0 ? 0 : rank - 1)];
}

Dist dist_of(std::vector<double> v) {
  Dist d;
  d.n = static_cast<int>(v.size());
  if (v.empty()) return d;
  std::sort(v.begin(), v.end());
  const sb::Stats s = sb::summarise(v);
  d.median = s.median;
  d.p90 = nearest_rank(v, 0.90);
  d.p10 = nearest_rank(v, 0.10);
  d.p25 = nearest_rank(v, 0.25);
  d.p75 = nearest_rank(v, 0.75);
  d.p99 = s.p99;
  return d;
}

/// Adds a row (median, p99) and a p90 line for a per-sample latency distribution.
Dist add_dist(sb::Report& rep, const std::string& scenario, const std::string& contender,
              std::vector<double> samples) {
  const Dist d = dist_of(samples);
  rep.add(scenario, contender, "ns", sb::summarise(std::move(samples)));
  if (!rep.options().csv_only) {
    std::printf("  %-26s %-20s %-9s %12.2f   (p10 %.0f, p25 %.0f, p75 %.0f)\n", scenario.c_str(),
                contender.c_str(), "ns p90", d.p90, d.p10, d.p25, d.p75);
  }
  std::printf("csv,%s,%s,ns_p90,%.3f,,%d,%.3f\n", scenario.c_str(), contender.c_str(), d.p90, d.n,
              rep.last_probe());
  std::fflush(stdout);
  return d;
}

/// A barrier that sleeps while it waits (MPI_Barrier spins): the serving ranks wait in it while
/// rank 0 measures the cross-core probe, and a rank a raw phase does not use waits in it.
void quiet_barrier(MPI_Comm w, bool sleep) {
  MPI_Request req;
  mpi_ok(MPI_Ibarrier(w, &req), "MPI_Ibarrier");
  for (;;) {
    int done = 0;
    mpi_ok(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test (barrier)");
    if (done != 0) return;
    // 1 ms, as an idle serving rank's longest sleep: a rank that wakes more often disturbs the
    // two that measure (3 processes on 2 cores); a phase starts at most 1 ms late (of >= 100).
    if (sleep) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

// ---- CPU time of the whole job (all threads of all ranks: they share this host), to show
// whether a throughput figure is bound by the host's cores.

/// Rank 0 learns every rank's pid (the others pass nullptr).
void gather_pids(std::vector<int>* out) {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int me = static_cast<int>(::getpid());
  if (out != nullptr) out->resize(static_cast<std::size_t>(size));
  mpi_ok(MPI_Gather(&me, 1, MPI_INT, out != nullptr ? out->data() : nullptr, 1, MPI_INT, 0,
                    MPI_COMM_WORLD),
         "MPI_Gather (pids)");
}

/// Wraps a contender so that its CPU time over the whole job accumulates in `m`.
sb::Contender metered(sb::Contender c, const std::vector<int>& pids, CpuMeter& m) {
  auto run = c.run;
  const double units = c.units;
  c.run = [run, units, &pids, &m] {
    const double cpu0 = cpu_ns(pids);
    const double wall = run();
    m.add(cpu_ns(pids) - cpu0, wall, units);
    return wall;
  };
  return c;
}

// ---- The raw MPI baselines on MPI_COMM_WORLD: both sides run exactly these counts.

struct RawResults {
  std::vector<double> pingpong_ns;                   ///< per round trip, measured rounds only
  double send_first_ns = 0;                          ///< 0 -> 1 into fresh pages on rank 1
  std::vector<double> send_ns;                       ///< 0 -> 1, measured repetitions
  double recv_first_ns = 0;                          ///< 1 -> 0, first transfer
  std::vector<double> recv_ns;                       ///< 1 -> 0, measured repetitions
  std::vector<double> stream_two_ns, stream_one_ns;  ///< per task, measured repetitions
  CpuMeter stream_two_cpu, stream_one_cpu;
};

// The raw throughput baseline: `tasks` TASK-sized messages, each answered by a COMPLETION-sized
// one, round-robin over ranks 1..over with at most `window` unanswered per rank (what the lanes
// do, from one thread). Rank r answers the messages i with i % over == r - 1.
std::uint64_t stream_share(std::uint32_t tasks, int over, int r) {
  if (r > over) return 0;
  return tasks / over + (static_cast<std::uint32_t>(r - 1) < tasks % over ? 1 : 0);
}

double raw_stream(int over, std::uint32_t tasks, std::uint32_t window) {
  std::vector<char> req(task_frame_bytes(0)), rep(completion_frame_bytes());
  const int req_n = static_cast<int>(req.size()), rep_n = static_cast<int>(rep.size());
  std::vector<std::uint32_t> inflight(static_cast<std::size_t>(over) + 1, 0);
  const MPI_Comm w = MPI_COMM_WORLD;
  return sb::time_ns([&] {
    for (std::uint32_t i = 0; i < tasks; ++i) {
      const int r = 1 + static_cast<int>(i % static_cast<std::uint32_t>(over));
      auto& n = inflight[static_cast<std::size_t>(r)];
      if (n == window) {
        mpi_ok(MPI_Recv(rep.data(), rep_n, MPI_BYTE, r, kPingTag, w, MPI_STATUS_IGNORE),
               "MPI_Recv (stream)");
        --n;
      }
      mpi_ok(MPI_Send(req.data(), req_n, MPI_BYTE, r, kPingTag, w), "MPI_Send (stream)");
      ++n;
    }
    for (int r = 1; r <= over; ++r) {
      for (; inflight[static_cast<std::size_t>(r)] > 0; --inflight[static_cast<std::size_t>(r)]) {
        mpi_ok(MPI_Recv(rep.data(), rep_n, MPI_BYTE, r, kPingTag, w, MPI_STATUS_IGNORE),
               "MPI_Recv (stream)");
      }
    }
  });
}

void raw_echo(std::uint64_t n) {
  std::vector<char> req(task_frame_bytes(0)), rep(completion_frame_bytes());
  const int req_n = static_cast<int>(req.size()), rep_n = static_cast<int>(rep.size());
  for (std::uint64_t i = 0; i < n; ++i) {
    mpi_ok(MPI_Recv(req.data(), req_n, MPI_BYTE, 0, kPingTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE),
           "MPI_Recv (stream)");
    mpi_ok(MPI_Send(rep.data(), rep_n, MPI_BYTE, 0, kPingTag, MPI_COMM_WORLD), "MPI_Send (stream)");
  }
}

/// Every rank's part of the raw throughput rounds (A B A B: two ranks, one rank); a rank without
/// messages in a phase waits in a sleeping barrier, as an idle serving rank sleeps.
void raw_streams(int rank, const MpiArgs& a, const Sizes& sz, RawResults* r,
                 const std::vector<int>& pids) {
  for (int round = 0; round < sz.warmup + sz.reps; ++round) {
    for (const int over : {2, 1}) {
      quiet_barrier(MPI_COMM_WORLD, rank != 0);
      if (rank == 0) {
        CpuMeter& m = over == 2 ? r->stream_two_cpu : r->stream_one_cpu;
        const double cpu0 = cpu_ns(pids);
        const double wall = raw_stream(over, sz.tasks, a.so.window);
        const double ns = wall / sz.tasks;
        if (round >= sz.warmup) {
          (over == 2 ? r->stream_two_ns : r->stream_one_ns).push_back(ns);
          m.add(cpu_ns(pids) - cpu0, wall, sz.tasks);
        }
      } else {
        raw_echo(stream_share(sz.tasks, over, rank));
      }
    }
  }
  quiet_barrier(MPI_COMM_WORLD, rank != 0);
}

/// Rank 0's side.
RawResults raw_rank0(const MpiArgs& a, const Sizes& sz, std::vector<char>& src,
                     std::vector<char>& dst, const std::vector<int>& pids) {
  RawResults r;
  const MPI_Comm w = MPI_COMM_WORLD;
  if (a.rt) {
    std::vector<char> req(task_frame_bytes()), rep(completion_frame_bytes());
    const int req_n = static_cast<int>(req.size()), rep_n = static_cast<int>(rep.size());
    r.pingpong_ns.reserve(static_cast<std::size_t>(sz.reps) * sz.per_round);
    for (int round = 0; round < sz.warmup + sz.reps; ++round) {
      for (std::uint32_t i = 0; i < sz.per_round; ++i) {
        const std::int64_t t0 = sb::now_ns();
        mpi_ok(MPI_Send(req.data(), req_n, MPI_BYTE, 1, kPingTag, w), "MPI_Send (ping)");
        mpi_ok(MPI_Recv(rep.data(), rep_n, MPI_BYTE, 1, kPingTag, w, MPI_STATUS_IGNORE),
               "MPI_Recv (pong)");
        const std::int64_t t1 = sb::now_ns();
        if (round >= sz.warmup) r.pingpong_ns.push_back(static_cast<double>(t1 - t0));
      }
    }
  }
  if (a.tp) raw_streams(0, a, sz, &r, pids);
  if (a.copy) {
    const int n = static_cast<int>(sz.copy_bytes);
    char ack = 0;
    for (int i = 0; i < sz.bulks(); ++i) {
      // Send: timed until rank 1 acknowledges having it all (MPI_Send alone may return once the
      // bytes are buffered).
      const std::int64_t t0 = sb::now_ns();
      mpi_ok(MPI_Send(src.data(), n, MPI_BYTE, 1, kBulkTag, w), "MPI_Send (bulk)");
      mpi_ok(MPI_Recv(&ack, 1, MPI_BYTE, 1, kBulkTag, w, MPI_STATUS_IGNORE), "MPI_Recv (ack)");
      const std::int64_t t1 = sb::now_ns();
      // Receive: rank 1 sends when asked.
      mpi_ok(MPI_Send(&ack, 1, MPI_BYTE, 1, kBulkTag, w), "MPI_Send (ask)");
      mpi_ok(MPI_Recv(dst.data(), n, MPI_BYTE, 1, kBulkTag, w, MPI_STATUS_IGNORE),
             "MPI_Recv (bulk)");
      const std::int64_t t2 = sb::now_ns();
      const auto send = static_cast<double>(t1 - t0), recv = static_cast<double>(t2 - t1);
      if (i == 0) {
        r.send_first_ns = send;
        r.recv_first_ns = recv;
      } else if (i > sz.warmup) {
        r.send_ns.push_back(send);
        r.recv_ns.push_back(recv);
      }
    }
    if (std::memcmp(src.data(), dst.data(), src.size()) != 0) sb::fail("raw bulk echo differs");
  }
  return r;
}

/// Rank 1's side (in serve()'s after_start: before its serving loop).
void raw_rank1(const MpiArgs& a, const Sizes& sz) {
  const MPI_Comm w = MPI_COMM_WORLD;
  if (a.rt) {
    std::vector<char> req(task_frame_bytes()), rep(completion_frame_bytes());
    const int req_n = static_cast<int>(req.size()), rep_n = static_cast<int>(rep.size());
    for (std::uint64_t i = 0; i < sz.pingpongs(); ++i) {
      mpi_ok(MPI_Recv(req.data(), req_n, MPI_BYTE, 0, kPingTag, w, MPI_STATUS_IGNORE),
             "MPI_Recv (ping)");
      mpi_ok(MPI_Send(rep.data(), rep_n, MPI_BYTE, 0, kPingTag, w), "MPI_Send (pong)");
    }
  }
  if (a.tp) raw_streams(1, a, sz, nullptr, {});
  if (a.copy) {
    // Not touched before the first receive: fresh pages, as a fresh remote buffer's.
    std::unique_ptr<char[]> buf(new char[sz.copy_bytes]);
    const int n = static_cast<int>(sz.copy_bytes);
    char ack = 1;
    for (int i = 0; i < sz.bulks(); ++i) {
      mpi_ok(MPI_Recv(buf.get(), n, MPI_BYTE, 0, kBulkTag, w, MPI_STATUS_IGNORE),
             "MPI_Recv (bulk)");
      mpi_ok(MPI_Send(&ack, 1, MPI_BYTE, 0, kBulkTag, w), "MPI_Send (ack)");
      mpi_ok(MPI_Recv(&ack, 1, MPI_BYTE, 0, kBulkTag, w, MPI_STATUS_IGNORE), "MPI_Recv (ask)");
      mpi_ok(MPI_Send(buf.get(), n, MPI_BYTE, 0, kBulkTag, w), "MPI_Send (bulk)");
    }
  }
}

// ---- Rank 0.

void empty_orch(Orchestrator&, TaskArgsView, const CallConfig&) {}
/// Sleeps scalar(0) microseconds: a task that takes time on its rank without taking a core.
void nap_orch(Orchestrator&, TaskArgsView args, const CallConfig&) {
  std::this_thread::sleep_for(std::chrono::microseconds(args.scalar(0)));
}

int run_rank0(mpi::Session& s, const MpiArgs& a, const Sizes& sz) {
  const sb::Options& opt = a.opt;
  sb::Report rep(opt);
  if (!opt.csv_only) {
    std::printf(
        "bench_mpi: %d ranks, %s, %d warm-up + %d measured repetitions, window %u, poll spin %lld "
        "us / yield %lld us / max sleep %lld us, engine spin L4 %lld us / L3 %lld us, load "
        "average %s\n",
        s.size(), opt.tiny ? "tiny sizes" : "full sizes", sz.warmup, sz.reps, a.so.window,
        static_cast<long long>(a.so.poll_spin.count()),
        static_cast<long long>(a.so.poll_yield.count()),
        static_cast<long long>(a.so.max_poll_sleep.count()),
        static_cast<long long>(a.l4_spin_us >= 0 ? a.l4_spin_us : WorkerOptions{}.spin.count()),
        static_cast<long long>(a.l3_spin_us >= 0 ? a.l3_spin_us : WorkerOptions{}.spin.count()),
        sb::load_average().c_str());
  }
  if (s.size() < 3) sb::fail("bench_mpi wants 3 ranks (mpirun -np 3): rank 0 over ranks 1 and 2");

  // Pre-touched on this side: "fresh pages" concern the receiving rank's buffer only.
  std::vector<char> src, dst;
  if (a.copy) {
    src.resize(sz.copy_bytes);
    dst.resize(sz.copy_bytes);
    for (std::size_t i = 0; i < src.size(); i += 64) src[i] = static_cast<char>((i >> 6) * 7 + 1);
    std::memset(dst.data(), 1, dst.size());
  }

  // Raw MPI first: the serving ranks answer it before they serve.
  s.start();  // no local forks on this rank
  // The probe while the other ranks sleep (in MPI_Init they would spin on the other core).
  rep.probe();
  quiet_barrier(MPI_COMM_WORLD, false);
  std::vector<int> pids;
  gather_pids(&pids);
  const RawResults raw = raw_rank0(a, sz, src, dst, pids);
  quiet_barrier(MPI_COMM_WORLD, false);

  WorkerOptions o4;
  o4.level = 4;
  if (a.l4_spin_us >= 0) o4.spin = std::chrono::microseconds(a.l4_spin_us);
  Worker w4(o4);
  const auto empty = w4.register_orch("empty", empty_orch);
  const auto nap = w4.register_orch("nap", nap_orch);
  const std::vector<WorkerId> ranks = w4.add_mpi_workers(s);
  w4.init();
  // The engine's own share, without a transport: the same L4 -> L3 shape in this process (an L3
  // Worker on a thread; threads only, no fork).
  WorkerOptions lo;
  lo.level = 4;
  lo.child_mode = ChildMode::Thread;
  lo.spin = o4.spin;
  Worker local(lo);
  const auto lempty = local.register_orch("empty", empty_orch);
  WorkerOptions linner;
  linner.child_mode = ChildMode::Thread;
  linner.spin = o4.spin;
  local.add_worker(Worker(linner));
  local.init();

  // ---- rt: one task round trip.
  if (a.rt) {
    const std::size_t req = task_frame_bytes(), resp = completion_frame_bytes();
    rep.section(fmt::format(
        "rt: one empty task L4 -> rank 1, {} x {} sequential single-task runs (frames {} B / {} "
        "B); raw ping-pong measured before serving",
        sz.reps, sz.per_round, req, resp));
    const RemoteBuffer cell = w4.remote_alloc(ranks[0], 8);
    const auto single = [&] {
      w4.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
        o.submit_next_level(
            empty, TaskArgs().add_tensor(cell.tensor_of<std::int64_t>(0, 1), TensorArgType::InOut),
            {}, ranks[0]);
      });
    };
    struct Lat {
      const char* name;
      std::function<void()> once;
      std::vector<double> samples;
    };
    std::vector<Lat> lats;
    lats.push_back({"remote_task_run", single, {}});
    lats.push_back({"local_nested_task_run",
                    [&] {
                      local.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
                        o.submit_next_level(lempty, TaskArgs(), {}, 0);
                      });
                    },
                    {}});
    std::vector<double> chain_samples;
    const auto chain = [&] {
      return sb::time_ns([&] {
        w4.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
          for (std::uint32_t i = 0; i < sz.chain; ++i) {
            o.submit_next_level(
                empty,
                TaskArgs().add_tensor(cell.tensor_of<std::int64_t>(0, 1), TensorArgType::InOut), {},
                ranks[0]);
          }
        });
      });
    };
    for (int round = 0; round < sz.warmup + sz.reps; ++round) {
      for (Lat& l : lats) {
        if (opt.gap_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(opt.gap_ms));
        for (std::uint32_t i = 0; i < sz.per_round; ++i) {
          const double ns = sb::time_ns(l.once);
          if (round >= sz.warmup) l.samples.push_back(ns);
        }
      }
      if (opt.gap_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(opt.gap_ms));
      const double ns = chain() / sz.chain;
      if (round >= sz.warmup) chain_samples.push_back(ns);
    }
    const Dist dr = add_dist(rep, "rt", "raw_mpi_pingpong", raw.pingpong_ns);
    const Dist dt = add_dist(rep, "rt", "remote_task_run", std::move(lats[0].samples));
    add_dist(rep, "rt", "local_nested_task_run", std::move(lats[1].samples));
    rep.add("rt", "remote_chain_hop", "ns/hop", sb::summarise(chain_samples));
    rep.ratio("rt", "remote_task_run", "raw_mpi_pingpong");
    if (dr.p90 > 0)
      rep.ratio_value("rt", "remote_task_run/raw_mpi_pingpong(p90)", dt.p90 / dr.p90, dt.n);
    rep.ratio("rt", "remote_chain_hop", "raw_mpi_pingpong");
    w4.remote_free(cell);
  }

  // ---- tp: 10k independent empty tasks over 2 ranks vs 1.
  if (a.tp) {
    rep.section(
        fmt::format("tp: {} independent empty tasks in one run, round-robin over ranks 1 "
                    "and 2 vs rank 1 alone (window {})",
                    sz.tasks, a.so.window));
    std::vector<sb::Contender> tp;
    const auto spread = [&](std::size_t over) {
      return sb::time_ns([&] {
        w4.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
          for (std::uint32_t i = 0; i < sz.tasks; ++i)
            o.submit_next_level(empty, TaskArgs(), {}, ranks[i % over]);
        });
      });
    };
    tp.push_back({"two_ranks", [&] { return spread(2); }, static_cast<double>(sz.tasks)});
    tp.push_back({"one_rank", [&] { return spread(1); }, static_cast<double>(sz.tasks)});
    tp.push_back({"local_nested_l3",
                  [&] {
                    return sb::time_ns([&] {
                      local.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
                        for (std::uint32_t i = 0; i < sz.tasks; ++i)
                          o.submit_next_level(lempty, TaskArgs(), {}, 0);
                      });
                    });
                  },
                  static_cast<double>(sz.tasks)});
    std::vector<CpuMeter> meters(tp.size());
    for (std::size_t k = 0; k < tp.size(); ++k) tp[k] = metered(tp[k], pids, meters[k]);
    sb::run_scenario(rep, "tp", "ns/task", tp);
    rep.add("tp", "raw_mpi_two_ranks", "ns/task", sb::summarise(raw.stream_two_ns));
    rep.add("tp", "raw_mpi_one_rank", "ns/task", sb::summarise(raw.stream_one_ns));
    for (const char* c : {"two_ranks", "one_rank", "raw_mpi_two_ranks", "raw_mpi_one_rank"}) {
      if (const sb::Row* r = rep.find("tp", c)) {
        rep.ratio_value("tp", fmt::format("{}_tasks_per_s", c), 1e9 / r->stats.median,
                        r->stats.reps);
      }
    }
    // The target: rate(two)/rate(one) = time(one)/time(two); and each against raw MPI (time).
    const auto rate_ratio = [&](const char* two, const char* one) {
      const sb::Row* t = rep.find("tp", two);
      const sb::Row* o = rep.find("tp", one);
      if (t == nullptr || o == nullptr || t->stats.median <= 0) return;
      rep.ratio_value("tp", fmt::format("rate({})/rate({})", two, one),
                      o->stats.median / t->stats.median, std::min(t->stats.reps, o->stats.reps));
    };
    rate_ratio("two_ranks", "one_rank");
    rate_ratio("raw_mpi_two_ranks", "raw_mpi_one_rank");
    rep.ratio("tp", "two_ranks", "raw_mpi_two_ranks");
    rep.ratio("tp", "one_rank", "raw_mpi_one_rank");
    // CPU of the whole job per task, and how many of the host's cores were busy meanwhile.
    for (std::size_t k = 0; k < tp.size(); ++k) meters[k].report(rep, "tp", tp[k].name);
    raw.stream_two_cpu.report(rep, "tp", "raw_mpi_two_ranks");
    raw.stream_one_cpu.report(rep, "tp", "raw_mpi_one_rank");

    // The same spread with tasks that sleep on their rank: what the transport overlaps when
    // the ranks do not compete with rank 0 for this host's cores (ideal ratio 2).
    rep.section(
        fmt::format("tp_nap: {} tasks that sleep {} us on their rank, in one run, ranks 1 "
                    "and 2 vs rank 1 alone",
                    sz.naps, kNapUs));
    const auto napping = [&](std::size_t over) {
      return sb::time_ns([&] {
        w4.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
          for (std::uint32_t i = 0; i < sz.naps; ++i)
            o.submit_next_level(nap, TaskArgs().add_scalar(kNapUs), {}, ranks[i % over]);
        });
      });
    };
    std::vector<sb::Contender> tn;
    tn.push_back({"two_ranks", [&] { return napping(2); }, static_cast<double>(sz.naps)});
    tn.push_back({"one_rank", [&] { return napping(1); }, static_cast<double>(sz.naps)});
    sb::run_scenario(rep, "tp_nap", "ns/task", tn);
    if (const sb::Row* t = rep.find("tp_nap", "two_ranks")) {
      if (const sb::Row* o = rep.find("tp_nap", "one_rank")) {
        rep.ratio_value("tp_nap", "rate(two_ranks)/rate(one_rank)",
                        o->stats.median / t->stats.median, t->stats.reps);
      }
    }
  }

  // ---- copy: 256 MiB to rank 1 and back.
  if (a.copy) {
    const double mib = static_cast<double>(sz.copy_bytes >> 20);
    rep.section(fmt::format("copy: {} MiB to rank 1 and back; raw MPI measured before serving",
                            sz.copy_bytes >> 20));
    std::memset(dst.data(), 1, dst.size());
    const RemoteBuffer big = w4.remote_alloc(ranks[0], sz.copy_bytes);
    const double to_first = sb::time_ns([&] { w4.copy_to_remote(big, 0, src.data(), src.size()); });
    const double from_first =
        sb::time_ns([&] { w4.copy_from_remote(big, 0, dst.data(), dst.size()); });
    if (std::memcmp(src.data(), dst.data(), src.size()) != 0) sb::fail("copy round trip differs");
    std::vector<sb::Contender> to, from;
    to.push_back({"copy_to_remote", [&] {
                    return sb::time_ns([&] { w4.copy_to_remote(big, 0, src.data(), src.size()); });
                  }});
    from.push_back({"copy_from_remote", [&] {
                      return sb::time_ns(
                          [&] { w4.copy_from_remote(big, 0, dst.data(), dst.size()); });
                    }});
    sb::run_scenario(rep, "copy_to", "ns", to);
    rep.add("copy_to", "raw_mpi_send", "ns", sb::summarise(raw.send_ns));
    rep.add("copy_to", "copy_to_remote_fresh", "ns", sb::summarise({to_first}));
    rep.add("copy_to", "raw_mpi_send_fresh", "ns", sb::summarise({raw.send_first_ns}));
    rep.ratio("copy_to", "raw_mpi_send", "copy_to_remote");
    rep.ratio("copy_to", "raw_mpi_send_fresh", "copy_to_remote_fresh");
    sb::run_scenario(rep, "copy_from", "ns", from);
    rep.add("copy_from", "raw_mpi_recv", "ns", sb::summarise(raw.recv_ns));
    rep.add("copy_from", "copy_from_remote_first", "ns", sb::summarise({from_first}));
    rep.add("copy_from", "raw_mpi_recv_first", "ns", sb::summarise({raw.recv_first_ns}));
    rep.ratio("copy_from", "raw_mpi_recv", "copy_from_remote");
    rep.ratio("copy_from", "raw_mpi_recv_first", "copy_from_remote_first");
    if (std::memcmp(src.data(), dst.data(), src.size()) != 0) sb::fail("copy round trip differs");
    for (const char* scen : {"copy_to", "copy_from"}) {
      for (const char* c :
           {"copy_to_remote", "raw_mpi_send", "copy_to_remote_fresh", "raw_mpi_send_fresh",
            "copy_from_remote", "raw_mpi_recv", "copy_from_remote_first", "raw_mpi_recv_first"}) {
        if (const sb::Row* r = rep.find(scen, c)) {
          const double gbs = static_cast<double>(sz.copy_bytes) / r->stats.median;
          rep.note(fmt::format("{} {:.0f} MiB: {:.2f} GB/s", c, mib, gbs));
          std::printf("csv,%s,%s,GB/s,%.3f,,%d,%.3f\n", scen, c, gbs, r->stats.reps, r->probe_ns);
        }
      }
    }
    w4.remote_free(big);
  }

  local.close();
  w4.close();
  // The probe again: these VMs switch latency modes; a switch between the raw and the simpler
  // halves of a scenario shows here.
  const double probe_end = sb::cross_core_round_trip_ns(opt.tiny ? 2'000 : 20'000);
  rep.note(fmt::format("cross-core spin round trip (probe, at the end): {:.0f} ns", probe_end));
  std::printf("csv,probe,cross_core_rtt_end,ns,%.3f,,5,%.3f\n", probe_end, probe_end);
  rep.note("load average at the end: " + sb::load_average());
  return 0;
}

int run(int argc, char** argv) {
  const MpiArgs a = parse_args(argc, argv);
  const Sizes sz = sizes_of(a.opt);
  mpi::Session s(argc, argv, a.so);
  if (s.rank() != 0) {
    WorkerOptions inner;
    inner.level = 3;
    if (a.l3_spin_us >= 0) inner.spin = std::chrono::microseconds(a.l3_spin_us);
    return s.serve(
        [](RemoteSession& rs) {
          rs.serve_orch("empty", empty_orch);
          rs.serve_orch("nap", nap_orch);
        },
        inner,
        [&](mpi::Session& ss) {
          quiet_barrier(ss.world(), true);
          gather_pids(nullptr);
          if (ss.rank() == 1) raw_rank1(a, sz);
          if (ss.rank() == 2 && a.tp) raw_streams(2, a, sz, nullptr, {});
          // Asleep until every raw phase is over (as an idle serving rank).
          quiet_barrier(ss.world(), true);
        });
  }
  return run_rank0(s, a, sz);
}

}  // namespace

int main(int argc, char** argv) {
  return sb::guarded_main("bench_mpi", run, argc, argv);
}
