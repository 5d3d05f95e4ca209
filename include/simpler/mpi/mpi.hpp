// simpler::mpi — a cluster on Open MPI: one SPMD program started with `mpirun -np N ./app`
// becomes an L4 Worker on rank 0 over N-1 L3 Workers, one on each other rank.
//
//   int main(int argc, char** argv) {
//     simpler::mpi::Session s(argc, argv);        // does not start MPI yet
//     if (s.rank() != 0) return s.serve(setup, inner_options);  // an L3 serving rank 0
//     simpler::Worker w4(l4_options);
//     w4.register_orch("step", ...);              // the names the ranks serve
//     auto ranks = w4.add_mpi_workers(s);         // one WorkerId per rank 1..N-1
//     w4.init();                                  // local forks, then MPI starts, then attach
//     w4.run(...);                                // submit_next_level(..., ranks[i])
//   }
//
// Every fork precedes every thread: a serving rank builds and init()s its inner L3 Worker (which
// forks its children) before it starts MPI (Open MPI starts threads in MPI_Init); rank 0 starts
// MPI when its first MPI lane launches, after its local children (the MPI lanes launch last).
//
// Messages. Everything travels on a duplicate of MPI_COMM_WORLD, point to point between rank 0 and
// one rank, so tasks on different ranks run at the same time (each rank has its own lane on rank
// 0, and rank 0 runs with MPI_THREAD_MULTIPLE, or serialises its MPI calls when the library does
// not grant it). Frames are the remote wire protocol's (remote/wire.hpp): one MPI message each,
// tag kFrameTag, with the session / worker / sequence checks of the socket transport. A copy's
// bytes travel as messages of their own (tag kDataTag, chunks of kChunkBytes), straight from and
// into the caller's memory and the rank's buffer pool: copies have no size cap. Tag kEndTag ends
// the job for a serving rank.
//
// Sessions. A rank serves one parent Worker at a time: the parent's init() attaches (a HELLO each
// way: the rank's says what it serves), its close() detaches (SHUTDOWN: the rank frees that
// session's buffers). The inner L3 Worker lives as long as the job.
//
// Failure. MPI is fail-stop (Open MPI 4 cannot survive a lost rank: mpirun tears the job down).
// So: a deadline that passes (a task's, an attach, a control), a frame that breaks the protocol or
// an MPI call that fails ends the job with MPI_Abort, after writing to stderr which rank, which
// callable and why. A callable that throws on a rank is an ordinary task failure: its message
// comes back to run() and the job goes on. A rank that dies is noticed by mpirun, which ends the
// job (every wait of a serving rank relies on that: it waits for rank 0 without a deadline).
#pragma once

#include <fmt/format.h>

// The C API only: MPI's deprecated C++ bindings are neither needed nor warning-free.
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "simpler/detail/buffer_pool.hpp"
#include "simpler/detail/process.hpp"
#include "simpler/detail/remote_info.hpp"
#include "simpler/detail/served_task.hpp"
#include "simpler/error.hpp"
#include "simpler/remote/auth.hpp"
#include "simpler/remote/session.hpp"
#include "simpler/remote/wire.hpp"
#include "simpler/transport/mpi_transport.hpp"
#include "simpler/worker.hpp"

namespace simpler::mpi {

inline constexpr int kFrameTag = 1;
inline constexpr int kDataTag = 2;
inline constexpr int kEndTag = 3;
/// A copy's bytes travel in messages of at most this (an MPI count is an int).
inline constexpr std::uint64_t kChunkBytes = std::uint64_t{64} << 20;

struct SessionOptions {
  /// Rank 0 waits this long for a rank's HELLO (its setup and init() ran before; this covers
  /// MPI's start on the slowest rank too).
  std::chrono::milliseconds attach_timeout{60'000};
  /// An alloc/free round trip, or a whole copy.
  std::chrono::milliseconds control_timeout{120'000};
  /// TASK frames in flight to one rank at once (1..8).
  std::uint32_t window = 8;
  /// The largest frame either side accepts (copies do not count: their bytes travel apart).
  std::uint32_t max_payload = 16U << 20;
  /// Each serving rank's buffer pool (reserved address space, shared with its forked children).
  std::uint64_t buffer_pool_bytes = std::uint64_t{1} << 30;
  /// The largest single buffer; 0 = the pool's size.
  std::uint64_t max_buffer_bytes = 0;
  /// How a wait for a message polls MPI (MPI has no blocking wait with a deadline, and none that
  /// sleeps): for poll_spin it polls, then for poll_yield it polls yielding the core between
  /// polls, then it sleeps between polls, doubling the sleep up to max_poll_sleep. Transfers
  /// (copies) poll yielding the core until they end.
  std::chrono::microseconds poll_spin{50};
  std::chrono::microseconds poll_yield{2000};
  std::chrono::microseconds max_poll_sleep{1000};
  /// Log attaches, detaches and the job's end on serving ranks through the logger
  /// (<simpler/log.hpp>, at info).
  bool log = false;
};

namespace detail {

using Clock = std::chrono::steady_clock;

/// Polls, then polls yielding the core, then sleeps between polls with a growing sleep: a wait
/// that answers fast when its message is near and does not spin when idle.
class Backoff {
 public:
  Backoff(std::chrono::microseconds spin, std::chrono::microseconds yield,
          std::chrono::microseconds max_sleep)
      : start_(Clock::now()), spin_(spin), yield_(spin + yield), max_sleep_(max_sleep) {}
  void pause() {
    const auto waited = Clock::now() - start_;
    if (waited < spin_) {
      simpler::detail::cpu_relax();
    } else if (waited < yield_) {
      ::sched_yield();
    } else {
      std::this_thread::sleep_for(sleep_);
      sleep_ = std::min(sleep_ * 2, max_sleep_);
    }
  }

 private:
  Clock::time_point start_;
  std::chrono::nanoseconds spin_, yield_;
  std::chrono::microseconds max_sleep_;
  std::chrono::microseconds sleep_{20};
};

/// The rank and size mpirun gives this process, read before MPI starts (Open MPI, MPICH/Hydra,
/// PMIx). Without them the process is a singleton: rank 0 of 1.
inline int env_int(std::initializer_list<const char*> names, int fallback) {
  for (const char* n : names) {
    if (const char* v = std::getenv(n); v != nullptr && *v != '\0') {
      char* end = nullptr;
      const long x = std::strtol(v, &end, 10);
      if (end != nullptr && *end == '\0' && x >= 0 && x < (1L << 30)) return static_cast<int>(x);
    }
  }
  return fallback;
}

inline std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof(buf) - 1) != 0) return "?";
  return buf;
}

class RankLinkImpl;

}  // namespace detail

class Session {
 public:
  using Setup = std::function<void(RemoteSession&)>;

  /// Learns this process's rank and the job's size from mpirun's environment; does not start
  /// MPI (start(), serve() and the first MPI lane's launch do). Throws UsageError for bad options.
  Session(int& argc, char**& argv, SessionOptions options = {})
      : argc_(&argc), argv_(&argv), options_(options) {
    if (options_.window == 0 || options_.window > 8) {
      throw UsageError(
          fmt::format("mpi::SessionOptions::window is {}; it must be 1..8", options_.window));
    }
    if (options_.max_payload < 65536) {
      throw UsageError(fmt::format("mpi::SessionOptions::max_payload is {}; it must be >= 65536",
                                   options_.max_payload));
    }
    if (options_.attach_timeout.count() <= 0 || options_.control_timeout.count() <= 0) {
      throw UsageError("mpi::SessionOptions: attach_timeout and control_timeout must be > 0");
    }
    rank_ = detail::env_int({"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"}, 0);
    size_ = detail::env_int({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}, 1);
    if (rank_ >= size_) {
      throw UsageError(
          fmt::format("mpi::Session: the environment says rank {} of {}", rank_, size_));
    }
    host_ = detail::host_name();
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  /// Rank 0 ends the job for every serving rank; every rank finalizes MPI. The Workers that
  /// use this Session must be closed (or destroyed) first.
  ~Session() {
    if (finalized_) return;
    try {
      start();
      if (rank_ == 0) {
        for (int r = 1; r < size_; ++r) send_bytes(r, kEndTag, {}, "ending the job");
      }
    } catch (...) {
      // start() aborts on failure; send_bytes too. Nothing else can throw here.
    }
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (started_ && finalized == 0) {
      MPI_Comm_free(&comm_);
      MPI_Finalize();
    }
    finalized_ = true;
  }

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  [[nodiscard]] const std::string& host() const noexcept { return host_; }
  [[nodiscard]] const SessionOptions& options() const noexcept { return options_; }
  [[nodiscard]] bool started() const noexcept { return started_; }

  /// Starts MPI (MPI_Init_thread) if it is not started: call it only after every fork this process
  /// makes (Open MPI starts threads). Then `world()` is usable for the program's own MPI calls
  /// (never on the communicator the Session uses). Aborts the job when MPI cannot start as
  /// mpirun said (another rank or size).
  void start() {
    std::lock_guard lk(start_mu_);
    if (started_) return;
    int already = 0;
    MPI_Initialized(&already);
    int provided = MPI_THREAD_SINGLE;
    if (already == 0) {
      // MPI_Init waits for every rank to start MPI. A rank stuck before (its setup or its inner
      // Worker's init() hangs) would hold rank 0 here for ever: rank 0 bounds it by the attach
      // timeout. (Serving ranks may wait: rank 0 starts MPI when its program gets there.)
      StartWatchdog watchdog(*this, rank_ == 0 && size_ > 1);
      if (MPI_Init_thread(argc_, argv_, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS) {
        std::fprintf(stderr, "simpler mpi: rank %d (%s): MPI_Init_thread failed\n", rank_,
                     host_.c_str());
        std::fflush(stderr);
        std::_Exit(70);
      }
    } else {
      MPI_Query_thread(&provided);
    }
    started_ = true;
    simpler::detail::mpi_started_flag().store(true, std::memory_order_release);
    serialise_ = provided < MPI_THREAD_MULTIPLE;
    if (rank_ == 0 && provided < MPI_THREAD_SERIALIZED) {
      abort(
          fmt::format("MPI grants thread level {}; rank 0 needs at least MPI_THREAD_SERIALIZED "
                      "(its lanes call MPI from their own threads)",
                      provided));
    }
    int r = 0, n = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    if (r != rank_ || n != size_) {
      abort(fmt::format("the environment said rank {} of {}, MPI says rank {} of {}", rank_, size_,
                        r, n));
    }
    check(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "MPI_Comm_dup");
    check(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  }
  /// MPI_COMM_WORLD, for the program's own MPI calls (after start()).
  [[nodiscard]] MPI_Comm world() const {
    if (!started_) throw UsageError("mpi::Session::world: MPI is not started (call start())");
    return MPI_COMM_WORLD;
  }

  /// Writes `why` (naming this rank and host) to stderr and ends the whole job.
  [[noreturn]] void abort(std::string_view why, int code = 1) const noexcept {
    const std::string line = fmt::format(
        "simpler mpi: rank {} ({}, pid {}): {}; ending the job "
        "(MPI is fail-stop)\n",
        rank_, host_, ::getpid(), why);
    std::fputs(line.c_str(), stderr);
    std::fflush(nullptr);
    int init = 0;
    MPI_Initialized(&init);
    if (init != 0) MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }

  /// A serving rank (not 0): builds its inner L3 Worker from `inner`, lets `setup` register what
  /// it serves, init()s it (its forks), starts MPI, runs `after_start` (the program's own MPI
  /// work, on world()), then serves rank 0's Workers until rank 0 ends the job. Returns the
  /// process's exit status. A setup or init() that throws is reported to every parent that
  /// attaches (its init() throws RemoteError); the rank still serves until the end of the job.
  int serve(const Setup& setup, WorkerOptions inner,
            const std::function<void(Session&)>& after_start = {});

  /// For Worker::add_mpi_workers: rank 0's link to `rank`. A rank serves one Worker at a time:
  /// throws UsageError when another Worker holds it.
  std::shared_ptr<simpler::detail::RankLink> claim(int rank);

  // ---- For the links (internal; public for tests that inject bad messages on comm()).

  /// Throws nothing: a failed MPI call ends the job.
  void check(int rc, const char* call) const noexcept {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING] = {};
    int len = 0;
    MPI_Error_string(rc, text, &len);
    abort(
        fmt::format("{} failed: {}", call, std::string_view(text, static_cast<std::size_t>(len))));
  }
  /// Held around each MPI call when MPI did not grant MPI_THREAD_MULTIPLE.
  [[nodiscard]] std::unique_lock<std::mutex> lock_mpi() {
    return serialise_ ? std::unique_lock(mpi_mu_) : std::unique_lock<std::mutex>();
  }
  [[nodiscard]] MPI_Comm comm() const noexcept { return comm_; }

  /// Waits for `req` to complete, polling; false at `deadline`.
  bool wait(MPI_Request& req, detail::Clock::time_point deadline, const char* what) {
    detail::Backoff b(options_.poll_spin, options_.poll_yield, options_.max_poll_sleep);
    for (;;) {
      int done = 0;
      {
        auto lk = lock_mpi();
        check(MPI_Test(&req, &done, MPI_STATUS_IGNORE), what);
      }
      if (done != 0) return true;
      if (detail::Clock::now() >= deadline) return false;
      b.pause();
    }
  }
  /// Waits for every request; false at `deadline`. Transfers poll without sleeping (they are
  /// work, and Open MPI's TCP transport moves bytes only inside MPI calls).
  bool wait_all(std::vector<MPI_Request>& reqs, detail::Clock::time_point deadline,
                const char* what) {
    for (;;) {
      int done = 0;
      {
        auto lk = lock_mpi();
        check(MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE),
              what);
      }
      if (done != 0) return true;
      if (detail::Clock::now() >= deadline) return false;
      ::sched_yield();
    }
  }
  /// The next message from `source` with `tag` (MPI_ANY_TAG allowed) into `out`, by `deadline`
  /// (false). Sets `got_tag`.
  bool receive(int source, int tag, std::vector<std::byte>& out, int& got_tag,
               detail::Clock::time_point deadline, const char* what) {
    detail::Backoff b(options_.poll_spin, options_.poll_yield, options_.max_poll_sleep);
    for (;;) {
      {
        auto lk = lock_mpi();
        int flag = 0;
        MPI_Message msg;
        MPI_Status st;
        check(MPI_Improbe(source, tag, comm_, &flag, &msg, &st), what);
        if (flag != 0) {
          int count = 0;
          check(MPI_Get_count(&st, MPI_BYTE, &count), what);
          out.resize(static_cast<std::size_t>(count));
          check(MPI_Mrecv(out.data(), count, MPI_BYTE, &msg, MPI_STATUS_IGNORE), what);
          got_tag = st.MPI_TAG;
          return true;
        }
      }
      if (detail::Clock::now() >= deadline) return false;
      b.pause();
    }
  }
  /// Sends `bytes` to `dest` and waits until the buffer may be reused (bounded by the control
  /// timeout; past it the job ends).
  void send_bytes(int dest, int tag, std::span<const std::byte> bytes, const char* what) {
    MPI_Request req;
    {
      auto lk = lock_mpi();
      check(
          MPI_Isend(bytes.data(), static_cast<int>(bytes.size()), MPI_BYTE, dest, tag, comm_, &req),
          what);
    }
    if (!wait(req, detail::Clock::now() + options_.control_timeout, what)) {
      abort(fmt::format("sending to rank {} ({}) did not complete within {} ms", dest, what,
                        options_.control_timeout.count()));
    }
  }
  /// Starts moving `n` bytes at `p` to or from `peer` in chunks (tag kDataTag).
  void post_chunks(bool send, int peer, std::byte* p, std::uint64_t n,
                   std::vector<MPI_Request>& reqs, const char* what) {
    auto lk = lock_mpi();
    for (std::uint64_t at = 0; at < n; at += kChunkBytes) {
      const int k = static_cast<int>(std::min(kChunkBytes, n - at));
      MPI_Request req;
      if (send) {
        check(MPI_Isend(p + at, k, MPI_BYTE, peer, kDataTag, comm_, &req), what);
      } else {
        check(MPI_Irecv(p + at, k, MPI_BYTE, peer, kDataTag, comm_, &req), what);
      }
      reqs.push_back(req);
    }
  }

 private:
  class Server;
  friend class detail::RankLinkImpl;

  /// The line every fail-stop ending writes first.
  void say_ending(std::string_view why) const noexcept {
    try {
      const std::string line =
          fmt::format("simpler mpi: rank {} ({}, pid {}): {}; ending the job (MPI is fail-stop)\n",
                      rank_, host_, ::getpid(), why);
      std::fputs(line.c_str(), stderr);
    } catch (...) {
      std::fputs("simpler mpi: ending the job (MPI is fail-stop)\n", stderr);
    }
    std::fflush(nullptr);
  }

  /// Ends the process (mpirun then ends the job) when MPI_Init does not return within the attach
  /// timeout. Makes no MPI call: MPI is not started.
  class StartWatchdog {
   public:
    StartWatchdog(const Session& s, bool armed) : s_(s) {
      if (!armed) return;
      thread_ = std::thread([this] {
        std::unique_lock lk(mu_);
        if (!cv_.wait_for(lk, s_.options_.attach_timeout, [this] { return done_; })) {
          s_.say_ending(fmt::format(
              "MPI did not start within {} ms (attach_timeout): a rank is stuck before it starts "
              "MPI (its setup or its inner Worker's init() does not return), or did not start",
              s_.options_.attach_timeout.count()));
          std::_Exit(1);
        }
      });
    }
    StartWatchdog(const StartWatchdog&) = delete;
    StartWatchdog& operator=(const StartWatchdog&) = delete;
    ~StartWatchdog() {
      if (!thread_.joinable()) return;
      {
        std::lock_guard lk(mu_);
        done_ = true;
      }
      cv_.notify_all();
      thread_.join();
    }

   private:
    const Session& s_;
    std::mutex mu_;
    std::condition_variable cv_;
    bool done_ = false;
    std::thread thread_;
  };

  int* argc_;
  char*** argv_;
  SessionOptions options_;
  int rank_ = 0;
  int size_ = 1;
  std::string host_;
  std::mutex start_mu_;
  bool started_ = false;
  bool finalized_ = false;
  bool serialise_ = false;
  std::mutex mpi_mu_;
  MPI_Comm comm_ = MPI_COMM_NULL;
  std::mutex claim_mu_;
  std::vector<std::weak_ptr<simpler::detail::RankLink>> claimed_;
};

namespace detail {

/// Frames: encode one with the link's numbering; check one against it.
struct FrameCounter {
  std::uint64_t session = 0;
  std::uint32_t worker = 0;
  std::uint64_t tx = 0;
  std::uint64_t rx = 0;

  template <class Encode>
  std::vector<std::byte> frame(wire::FrameType type, Encode&& encode) {
    std::vector<std::byte> out(wire::kHeaderBytes);
    encode(out);
    wire::FrameHeader h;
    h.type = type;
    h.session = session;
    h.worker = worker;
    h.sequence = ++tx;
    h.length = static_cast<std::uint32_t>(out.size() - wire::kHeaderBytes);
    wire::encode_header(h, out.data());
    return out;
  }
  /// The header of `bytes`, checked (the next sequence, this session and worker, the limit);
  /// `payload` is set to the rest. Throws ProtocolError.
  wire::FrameHeader take(std::span<const std::byte> bytes, std::uint32_t max_payload,
                         std::span<const std::byte>& payload) {
    if (bytes.size() < wire::kHeaderBytes) {
      throw ProtocolError(
          fmt::format("a message of {} bytes is shorter than a frame header", bytes.size()));
    }
    const auto h = wire::decode_header(bytes.first(wire::kHeaderBytes));
    wire::check_header(h, wire::Expect{session, worker, rx + 1, max_payload});
    if (bytes.size() != wire::kHeaderBytes + h.length) {
      throw ProtocolError(
          fmt::format("{} frame: the header says {} payload bytes, the message "
                      "carries {}",
                      wire::to_string(h.type), h.length, bytes.size() - wire::kHeaderBytes));
    }
    ++rx;
    payload = bytes.subspan(wire::kHeaderBytes);
    return h;
  }
};

/// Rank 0's end of one serving rank (MpiTransport's lanes reach it through RankLink).
class RankLinkImpl final : public simpler::detail::RankLink {
 public:
  RankLinkImpl(Session& s, int rank)
      : s_(s), rank_(rank), where_(fmt::format("MPI rank {}", rank)) {}

  void attach(std::uint32_t worker) override {
    s_.start();
    fc_ = FrameCounter{};
    fc_.session = wire::random_session_id();
    fc_.worker = static_cast<std::uint32_t>(rank_);
    worker_ = worker;
    wire::Hello ask;
    ask.level = 4;
    ask.max_payload = s_.options().max_payload;
    const auto frame =
        fc_.frame(wire::FrameType::Hello, [&](auto& out) { wire::encode(ask, out); });
    s_.send_bytes(rank_, kFrameTag, frame, "sending HELLO");
    std::span<const std::byte> payload;
    wire::FrameHeader h;
    try {
      h = next_frame(Clock::now() + s_.options().attach_timeout, payload,
                     "to HELLO (its setup, init() and MPI start)");
    } catch (const std::exception& e) {
      protocol_abort(e.what());
    }
    if (h.type != wire::FrameType::Hello) {
      protocol_abort(fmt::format("it answered the attach with a {} frame, not HELLO",
                                 wire::to_string(h.type)));
    }
    wire::Hello hello;
    try {
      hello = wire::decode_hello(payload);
    } catch (const std::exception& e) {
      protocol_abort(e.what());
    }
    if (hello.status != wire::Status::Ok) {
      // The rank stays in its loop, unattached; the parent's init() fails.
      throw RemoteError(
          fmt::format("{}: its L3 Worker could not start: {}", where_, hello.message));
    }
    info_.take(std::move(hello));
    attached_ = true;
  }

  void detach() noexcept override {
    released_.store(true, std::memory_order_release);
    if (!attached_) return;
    attached_ = false;
    live_.clear();
    const auto frame = fc_.frame(wire::FrameType::Shutdown, [](auto&) {});
    s_.send_bytes(rank_, kFrameTag, frame, "sending SHUTDOWN");
  }

  [[nodiscard]] bool released() const noexcept override {
    return released_.load(std::memory_order_acquire);
  }
  [[nodiscard]] int rank() const noexcept override { return rank_; }
  [[nodiscard]] std::uint32_t window() const noexcept override { return s_.options().window; }

  bool send(const simpler::LeafRequest& r, Fault& fault) noexcept override {
    try {
      if (!simpler::detail::remote_tensors_only(r, where_, fault)) return false;
      InFlight f;
      // A traced task asks for the rank's trace, as much as a COMPLETION this side reads.
      const auto level = static_cast<std::uint8_t>(r.trace != nullptr ? r.trace->level : 0);
      f.bytes = fc_.frame(wire::FrameType::Task, [&](auto& out) {
        wire::encode_task(r.digest, *r.config, r.args, out, level, s_.options().max_payload);
      });
      if (f.bytes.size() - wire::kHeaderBytes > info_.max_payload) {
        --fc_.tx;
        fault.set(ErrorKind::Usage, 0,
                  fmt::format("the TASK frame takes {} bytes, over the {}-byte limit of {}",
                              f.bytes.size(), info_.max_payload, where_));
        return false;
      }
      f.sequence = fc_.tx;
      f.digest = r.digest;
      f.deadline = r.deadline;
      f.deadline_ms = r.deadline_ms;
      f.run_deadline = r.run_deadline;
      if (level != 0) [[unlikely]] {
        f.trace = r.trace;
        f.sent_ns = simpler::detail::trace_now();
      }
      inflight_.push_back(std::move(f));
      InFlight& g = inflight_.back();
      auto lk = s_.lock_mpi();
      s_.check(MPI_Isend(g.bytes.data(), static_cast<int>(g.bytes.size()), MPI_BYTE, rank_,
                         kFrameTag, s_.comm(), &g.req),
               "MPI_Isend (TASK)");
      return true;
    } catch (...) {
      fault_from_current_exception(fault);
      return false;
    }
  }

  Outcome receive(Fault& fault) noexcept override {
    if (inflight_.empty()) {
      fault.set(ErrorKind::Error, 0, "RankLink::receive: no task in flight");
      return Outcome::EndpointFailure;
    }
    InFlight& task = inflight_.front();
    std::span<const std::byte> payload;
    wire::FrameHeader h;
    bool arrived = false;
    try {
      arrived = try_next_frame(task.deadline, h, payload);
    } catch (const std::exception& e) {
      protocol_abort(e.what());
    }
    if (!arrived) {
      s_.abort(fmt::format("the task '{}' on {} passed {} deadline of {} ms",
                           info_.name_of(task.digest), where_,
                           task.run_deadline ? "its run's" : "its", task.deadline_ms));
    }
    if (h.type != wire::FrameType::Completion) {
      protocol_abort(fmt::format("got a {} frame while waiting for the COMPLETION of '{}'",
                                 wire::to_string(h.type), info_.name_of(task.digest)));
    }
    wire::Completion c;
    try {
      c = wire::decode_completion(payload);
    } catch (const std::exception& e) {
      protocol_abort(e.what());
    }
    if (c.answers != task.sequence) {
      protocol_abort(fmt::format("its COMPLETION answers TASK {}, the oldest in flight is {}",
                                 c.answers, task.sequence));
    }
    if (task.trace != nullptr && c.traced) [[unlikely]] {
      simpler::detail::take_remote_trace(clock_, task.sent_ns, simpler::detail::trace_now(),
                                         c.trace, *task.trace);
    }
    // The TASK's send finished long ago (the rank answered it); release its buffer.
    if (task.req != MPI_REQUEST_NULL) s_.wait(task.req, Clock::time_point::max(), "MPI_Test");
    inflight_.pop_front();
    if (c.status == wire::Status::Ok) return Outcome::Success;
    fault.set(c.kind, c.code, fmt::format("on {}: {}", where_, c.message));
    return Outcome::TaskFailure;
  }

  [[nodiscard]] const simpler::detail::RemoteInfo& info() const noexcept override { return info_; }
  [[nodiscard]] const std::string& where() const noexcept override { return where_; }
  [[nodiscard]] std::uint64_t session() const noexcept override { return fc_.session; }

  RemoteBuffer alloc(WorkerId self, std::uint64_t bytes) override {
    check_attached("remote_alloc");
    const std::uint64_t id = simpler::detail::next_remote_buffer_id();
    const auto r = control(wire::Control{wire::ControlOp::Alloc, bytes, id, 0});
    if (r.r0 != id || r.r2 != bytes) {
      protocol_abort(fmt::format("its ALLOC reply names buffer {} of {} bytes, asked for {} of {}",
                                 r.r0, r.r2, id, bytes));
    }
    live_.add(id, bytes);
    return RemoteBuffer(self, fc_.session, id, bytes);
  }
  void free(const RemoteBuffer& b) override {
    check_attached("remote_free");
    control(wire::Control{wire::ControlOp::Free, b.id(), 0, 0});
    live_.erase(b.id());
  }
  void copy_to(const RemoteBuffer& b, std::uint64_t offset, const void* src,
               std::uint64_t n) override {
    check_attached("copy_to_remote");
    const auto deadline = Clock::now() + s_.options().control_timeout;
    // The rank checks the range and posts its receives into the buffer, then says go.
    control(wire::Control{wire::ControlOp::CopyTo, b.id(), offset, n});
    std::vector<MPI_Request> reqs;
    s_.post_chunks(true, rank_, static_cast<std::byte*>(const_cast<void*>(src)), n, reqs,
                   "MPI_Isend (COPY_TO data)");
    if (!s_.wait_all(reqs, deadline, "MPI_Testall (COPY_TO data)")) {
      s_.abort(fmt::format("copying {} bytes to {} took over {} ms", n, where_,
                           s_.options().control_timeout.count()));
    }
  }
  void copy_from(const RemoteBuffer& b, std::uint64_t offset, void* dst, std::uint64_t n) override {
    check_attached("copy_from_remote");
    const auto deadline = Clock::now() + s_.options().control_timeout;
    // Receives posted first, so the data lands straight in dst.
    std::vector<MPI_Request> reqs;
    s_.post_chunks(false, rank_, static_cast<std::byte*>(dst), n, reqs,
                   "MPI_Irecv (COPY_FROM data)");
    try {
      control(wire::Control{wire::ControlOp::CopyFrom, b.id(), offset, n});
    } catch (...) {
      // Refused: no data comes; withdraw the receives.
      auto lk = s_.lock_mpi();
      for (auto& r : reqs) {
        MPI_Cancel(&r);
        MPI_Request_free(&r);
      }
      throw;
    }
    if (!s_.wait_all(reqs, deadline, "MPI_Testall (COPY_FROM data)")) {
      s_.abort(fmt::format("copying {} bytes from {} took over {} ms", n, where_,
                           s_.options().control_timeout.count()));
    }
  }
  [[nodiscard]] bool holds(std::uint64_t address, std::uint64_t bytes) const override {
    return live_.holds(address, bytes);
  }
  [[nodiscard]] bool owns(const RemoteBuffer& b) const override {
    return live_.owns(b, fc_.session);
  }

 private:
  struct InFlight {
    std::vector<std::byte> bytes;
    MPI_Request req = MPI_REQUEST_NULL;
    std::uint64_t sequence = 0;
    std::uint64_t digest = 0;
    Clock::time_point deadline;
    std::uint32_t deadline_ms = 0;
    bool run_deadline = false;
    simpler::detail::TraceReply* trace = nullptr;  ///< a traced task: where its trace goes
    std::int64_t sent_ns = 0;                      ///< a traced task: when it was sent
  };

  void check_attached(const char* api) const {
    if (!attached_) {
      throw UsageError(
          fmt::format("Worker::{}: {} is not attached (call Worker::init first)", api, where_));
    }
  }
  [[noreturn]] void protocol_abort(std::string_view why) const noexcept {
    s_.abort(fmt::format("{} broke the protocol: {}", where_, why), 2);
  }

  /// The next frame from the rank, if one arrives by `deadline` (else false). Throws
  /// ProtocolError for a bad frame.
  bool try_next_frame(Clock::time_point deadline, wire::FrameHeader& h,
                      std::span<const std::byte>& payload) {
    int tag = 0;
    if (!s_.receive(rank_, kFrameTag, rbuf_, tag, deadline, "MPI_Improbe (frame)")) return false;
    h = fc_.take(rbuf_, s_.options().max_payload, payload);
    return true;
  }
  /// The same, ending the job past the deadline (naming what it waited for).
  wire::FrameHeader next_frame(Clock::time_point deadline, std::span<const std::byte>& payload,
                               std::string_view during) {
    wire::FrameHeader h;
    if (!try_next_frame(deadline, h, payload)) {
      s_.abort(fmt::format("no answer from {} {} within the deadline", where_, during));
    }
    return h;
  }

  /// A CONTROL round trip (bounded by the control timeout). Throws RemoteError when the rank
  /// refused it.
  wire::ControlReply control(const wire::Control& c) {
    const auto frame =
        fc_.frame(wire::FrameType::Control, [&](auto& out) { wire::encode(c, out); });
    const std::uint64_t seq = fc_.tx;
    s_.send_bytes(rank_, kFrameTag, frame, "sending a CONTROL");
    std::span<const std::byte> payload;
    wire::FrameHeader h;
    wire::ControlReply r;
    try {
      h = next_frame(Clock::now() + s_.options().control_timeout, payload,
                     fmt::format("to {}", wire::to_string(c.op)));
      if (h.type != wire::FrameType::ControlReply) {
        throw ProtocolError(fmt::format("got a {} frame while waiting for a CONTROL_REPLY",
                                        wire::to_string(h.type)));
      }
      r = wire::decode_control_reply_detached(payload);
      if (r.answers != seq || r.op != c.op) {
        throw ProtocolError(fmt::format("CONTROL_REPLY answers {} #{}, expected {} #{}",
                                        wire::to_string(r.op), r.answers, wire::to_string(c.op),
                                        seq));
      }
    } catch (const std::exception& e) {
      protocol_abort(e.what());
    }
    if (r.status != wire::Status::Ok) {
      throw RemoteError(fmt::format("{} refused {}: {}", where_, wire::to_string(c.op), r.message));
    }
    return r;
  }

  Session& s_;
  int rank_;
  std::string where_;
  std::uint32_t worker_ = 0;
  FrameCounter fc_;
  bool attached_ = false;
  std::atomic<bool> released_{false};
  simpler::detail::RemoteInfo info_;
  simpler::detail::LiveBuffers live_;
  std::deque<InFlight> inflight_;
  simpler::detail::ClockSync clock_;  ///< the rank's clock against this one (traced tasks)
  std::vector<std::byte> rbuf_;
};

}  // namespace detail

inline std::shared_ptr<simpler::detail::RankLink> Session::claim(int rank) {
  if (rank < 1 || rank >= size_) {
    throw UsageError(
        fmt::format("mpi::Session::claim: rank {} is not a serving rank (1..{})", rank, size_ - 1));
  }
  std::lock_guard lk(claim_mu_);
  claimed_.resize(static_cast<std::size_t>(size_));
  auto& slot = claimed_[static_cast<std::size_t>(rank)];
  if (const auto held = slot.lock(); held && !held->released()) {
    throw UsageError(fmt::format(
        "Worker::add_mpi_workers: MPI rank {} already serves another Worker; a rank serves one "
        "Worker at a time (close or destroy that one first)",
        rank));
  }
  auto link = std::make_shared<detail::RankLinkImpl>(*this, rank);
  slot = link;
  return link;
}

/// A serving rank's loop (Session::serve).
class Session::Server {
 public:
  Server(Session& s, WorkerOptions inner) : s_(s), pool_(s.options().buffer_pool_bytes) {
    inner_.emplace(std::move(inner));
  }

  int run(const Setup& setup, const std::function<void(Session&)>& after_start) {
    try {
      RemoteSession rs(*inner_, 0, static_cast<std::uint32_t>(s_.rank()));
      setup(rs);
      served_ = std::move(rs.served_);
      inner_->init();  // forks its children: MPI is not started yet
    } catch (...) {
      Fault f;
      fault_from_current_exception(f);
      setup_failure_ = fmt::format("setup or init() of the inner Worker failed: {}", f.message);
      log("{}", setup_failure_);
    }
    where_ = fmt::format("L{} Worker of MPI rank {} ({}, pid {})", inner_->level(), s_.rank(),
                         s_.host(), ::getpid());
    s_.start();
    if (after_start) after_start(s_);
    serve_loop();
    log("rank 0 ended the job");
    int code = 0;
    try {
      inner_->close();
    } catch (const std::exception& e) {
      log("closing the inner Worker: {}", e.what());
      code = 4;
    }
    return code;
  }

 private:
  /// A serving rank's line (info), through the logger, when SessionOptions::log is set.
  template <class... A>
  void log(fmt::format_string<A...> f, A&&... a) const {
    if (!s_.options().log) return;
    char who[32];
    const auto r = fmt::format_to_n(who, sizeof who - 1, "MPI rank {}", s_.rank());
    simpler::detail::log_as(LogLevel::Info, std::string_view(who, r.out - who), f,
                            std::forward<A>(a)...);
  }
  [[noreturn]] void protocol_abort(std::string_view why) const noexcept {
    s_.abort(fmt::format("rank 0 broke the protocol: {}", why), 2);
  }

  void serve_loop() {
    std::vector<std::byte> msg;
    for (;;) {
      int tag = 0;
      s_.receive(0, MPI_ANY_TAG, msg, tag, detail::Clock::time_point::max(), "MPI_Improbe (serve)");
      if (tag == kEndTag) return;
      if (tag != kFrameTag)
        protocol_abort(fmt::format("a message with tag {} between frames", tag));
      try {
        // A HELLO starts a session, even over one whose Worker never detached.
        if (!attached_ ||
            (msg.size() >= wire::kHeaderBytes &&
             wire::decode_header(std::span<const std::byte>(msg).first(wire::kHeaderBytes)).type ==
                 wire::FrameType::Hello)) {
          end_session();
          attach(msg);
        } else {
          std::span<const std::byte> payload;
          const auto h = fc_.take(msg, s_.options().max_payload, payload);
          handle(h, payload);
        }
      } catch (const std::exception& e) {
        protocol_abort(e.what());
      }
    }
  }

  void attach(std::span<const std::byte> msg) {
    if (msg.size() < wire::kHeaderBytes) throw ProtocolError("a message shorter than a header");
    const auto h = wire::decode_header(msg.first(wire::kHeaderBytes));
    if (h.type != wire::FrameType::Hello) {
      throw ProtocolError(
          fmt::format("a {} frame before HELLO (no Worker is attached)", wire::to_string(h.type)));
    }
    fc_ = detail::FrameCounter{};
    fc_.session = h.session;
    fc_.worker = static_cast<std::uint32_t>(s_.rank());
    std::span<const std::byte> payload;
    fc_.take(msg, s_.options().max_payload, payload);
    static_cast<void>(wire::decode_hello(payload));
    wire::Hello hello;
    hello.level = inner_->level();
    hello.max_payload = s_.options().max_payload;
    hello.max_buffer_bytes = max_buffer();
    hello.buffer_pool_bytes = s_.options().buffer_pool_bytes;
    if (setup_failure_.empty()) {
      hello.served = simpler::detail::served_list(served_);
      attached_ = true;
      log("attached (session {:#x})", fc_.session);
    } else {
      hello.status = wire::Status::Failed;
      hello.kind = ErrorKind::Error;
      hello.message = setup_failure_;
    }
    send(fc_.frame(wire::FrameType::Hello, [&](auto& out) { wire::encode(hello, out); }));
  }

  void handle(const wire::FrameHeader& h, std::span<const std::byte> payload) {
    switch (h.type) {
      case wire::FrameType::Task: {
        wire::Task task = wire::decode_task(payload);
        const std::int64_t rx = task.trace_level != 0 ? simpler::detail::served_trace_now() : 0;
        auto c =
            simpler::detail::run_served_task(*inner_, served_, pool_, h.sequence, task, where_, rx);
        if (c.traced) [[unlikely]]
          c.trace.tx_ns = simpler::detail::served_trace_now();
        send(fc_.frame(wire::FrameType::Completion, [&](auto& out) { wire::encode(c, out); }));
        return;
      }
      case wire::FrameType::Control:
        control(h.sequence, wire::decode_control_detached(payload));
        return;
      case wire::FrameType::Shutdown:
        wire::decode_payload(h.type, payload);
        end_session();
        return;
      default:
        throw ProtocolError(fmt::format("rank 0 does not send {} frames to a serving rank",
                                        wire::to_string(h.type)));
    }
  }

  /// Frees the session's buffers; the rank waits for the next HELLO.
  void end_session() {
    if (!attached_) return;
    for (const auto id : buffers_) pool_.free(id);
    buffers_.clear();
    attached_ = false;
    log("detached (session {:#x})", fc_.session);
  }

  void control(std::uint64_t seq, const wire::Control& c) {
    wire::ControlReply r;
    r.answers = seq;
    r.op = c.op;
    std::string why;
    std::byte* data = nullptr;
    switch (c.op) {
      case wire::ControlOp::Ping:
        break;
      case wire::ControlOp::Alloc:
        why = pool_.alloc(c.b, c.a, max_buffer());
        if (why.empty()) {
          buffers_.push_back(c.b);
          r.r0 = c.b;
          r.r1 = wire::buffer_address(c.b);
          r.r2 = c.a;
        }
        break;
      case wire::ControlOp::Free:
        if (pool_.free(c.a)) {
          buffers_.erase(std::remove(buffers_.begin(), buffers_.end(), c.a), buffers_.end());
        } else {
          why = fmt::format("buffer {} is not a live buffer of this session", c.a);
        }
        break;
      case wire::ControlOp::CopyTo:
      case wire::ControlOp::CopyFrom:
        data = pool_.resolve(c.a, c.b, c.n, why);
        if (data != nullptr && c.op == wire::ControlOp::CopyFrom) r.r0 = c.n;
        break;
    }
    if (!why.empty()) {
      r.status = wire::Status::Failed;
      r.kind = ErrorKind::Usage;
      r.message = std::move(why);
      r.r0 = r.r1 = r.r2 = 0;
      data = nullptr;
    }
    const auto deadline = detail::Clock::now() + s_.options().control_timeout;
    std::vector<MPI_Request> reqs;
    // COPY_TO: the receives are posted before the reply lets rank 0 send.
    if (data != nullptr && c.op == wire::ControlOp::CopyTo) {
      s_.post_chunks(false, 0, data, c.n, reqs, "MPI_Irecv (COPY_TO data)");
    }
    send(fc_.frame(wire::FrameType::ControlReply, [&](auto& out) { wire::encode(r, out); }));
    if (data != nullptr && c.op == wire::ControlOp::CopyFrom) {
      s_.post_chunks(true, 0, data, c.n, reqs, "MPI_Isend (COPY_FROM data)");
    }
    if (!reqs.empty() && !s_.wait_all(reqs, deadline, "MPI_Testall (copy data)")) {
      s_.abort(fmt::format("moving {} bytes of a {} with rank 0 took over {} ms", c.n,
                           wire::to_string(c.op), s_.options().control_timeout.count()));
    }
  }

  void send(const std::vector<std::byte>& frame) {
    s_.send_bytes(0, kFrameTag, frame, "sending a frame to rank 0");
  }
  [[nodiscard]] std::uint64_t max_buffer() const noexcept {
    return s_.options().max_buffer_bytes != 0 ? s_.options().max_buffer_bytes
                                              : s_.options().buffer_pool_bytes;
  }

  Session& s_;
  simpler::detail::BufferPool pool_;  // mapped before the inner Worker forks
  std::optional<Worker> inner_;
  simpler::detail::ServedOrchs served_;
  std::string setup_failure_;
  std::string where_;
  detail::FrameCounter fc_;
  bool attached_ = false;
  std::vector<std::uint64_t> buffers_;  ///< this session's, freed at its end
};

inline int Session::serve(const Setup& setup, WorkerOptions inner,
                          const std::function<void(Session&)>& after_start) {
  if (rank_ == 0) {
    throw UsageError(
        "mpi::Session::serve: rank 0 drives the other ranks (Worker::add_mpi_workers); only "
        "ranks 1..N-1 serve");
  }
  if (!setup) throw UsageError("mpi::Session::serve: the setup function is empty");
  if (started_) {
    throw UsageError(
        "mpi::Session::serve: MPI is started already; serve() starts it after the inner Worker "
        "forked its children");
  }
  Server server(*this, std::move(inner));
  return server.run(setup, after_start);
}

}  // namespace simpler::mpi
