// RemoteServer's session process (see remote/server.hpp).
// Included once, at the end of its header; every function is inline (the library is header-only).
#pragma once

#include <fmt/format.h>

#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "simpler/detail/served_task.hpp"
#include "simpler/remote/server.hpp"

namespace simpler {

class RemoteServer::Session {
 public:
  Session(const RemoteServerOptions& o, int fd, std::uint64_t session, std::uint32_t worker,
          const wire::AuthBegin& begin, std::string peer)
      : options_(o),
        sock_(io_),
        hb_(io_),
        pool_(o.buffer_pool_bytes),
        session_(session),
        worker_(worker),
        period_(begin.heartbeat_ms),
        timeout_(begin.heartbeat_timeout_ms),
        peer_(std::move(peer)) {
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    const bool v6 = ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
                    local.ss_family == AF_INET6;
    sock_.assign(v6 ? tcp::v6() : tcp::v4(), fd);
    boost::system::error_code ignored;
    sock_.set_option(tcp::no_delay(true), ignored);
    rbuf_.resize(256 * 1024);
  }
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  /// Builds and initialises the inner Worker, sends HELLO, serves until the session ends.
  /// Returns the process's exit status.
  int run(const Setup& setup) {
    wire::Hello hello;
    try {
      inner_.emplace(options_.worker);
      RemoteSession rs(*inner_, session_, worker_);
      setup(rs);
      served_ = std::move(rs.served_);
      where_ = fmt::format("remote L{} Worker (pid {})", inner_->level(), ::getpid());
      inner_->init();  // forks its children: no thread of this session exists yet
      hello.level = inner_->level();
      hello.max_payload = options_.max_payload;
      hello.max_buffer_bytes = options_.max_buffer_bytes;
      hello.buffer_pool_bytes = options_.buffer_pool_bytes;
      hello.served = detail::served_list(served_);
    } catch (...) {
      Fault f;
      fault_from_current_exception(f);
      hello = wire::Hello{};
      hello.max_payload = options_.max_payload;
      hello.status = wire::Status::Failed;
      hello.kind = f.kind == ErrorKind::Other ? ErrorKind::Error : f.kind;
      hello.code = f.code;
      hello.message = fmt::format("setup or init() of the inner Worker failed: {}", f.message);
      warn("session {:#x}: {}", session_, hello.message);
    }
    const bool ok = hello.status == wire::Status::Ok;
    queue(wire::FrameType::Hello, [&](auto& out) { wire::encode(hello, out); });
    if (!ok) {
      // Send it, bounded, and end.
      io_.run_for(std::chrono::seconds(2));
      return 3;
    }
    executor_ = std::thread([this] { execute_loop(); });
    arm_heartbeat();
    start_read();
    serve_io();
    return finish();
  }

 private:
  struct Job {
    std::uint64_t sequence;
    wire::Task task;
    std::int64_t rx_ns = 0;  ///< a traced TASK: when it arrived (served_trace_now)
  };
  struct Out {
    std::vector<std::byte> bytes;
    std::span<const std::byte> extra;  ///< CopyFrom data, gathered from the pool
  };

  /// A line of the session's (info; warn for what went wrong), through the logger.
  template <class... A>
  void log(fmt::format_string<A...> f, A&&... a) const {
    if (options_.log) detail::log_as(LogLevel::Info, "remote session", f, std::forward<A>(a)...);
  }
  template <class... A>
  void warn(fmt::format_string<A...> f, A&&... a) const {
    if (options_.log) detail::log_as(LogLevel::Warn, "remote session", f, std::forward<A>(a)...);
  }

  // ---- I/O thread.

  /// The I/O loop. While a lone task runs its completion is near: the loop polls for
  /// up to the inner Worker's spin before it sleeps in epoll, so a short task's completion goes
  /// out without a wake-up of this thread (one less sleep/wake per round trip).
  void serve_io() {
    const auto spin = inner_->options().spin;
    while (!ended_ && !io_.stopped()) {
      // Only for a lone task: with a queue, completions leave in batches and spinning here
      // would take the core from the executor.
      if (spin.count() > 0 && jobs_posted_.load(std::memory_order_seq_cst) ==
                                  jobs_done_.load(std::memory_order_seq_cst) + 1) {
        const auto until = Clock::now() + spin;
        std::size_t ran = 0;
        while (ran == 0 && !io_.stopped() && Clock::now() < until &&
               jobs_posted_.load(std::memory_order_seq_cst) !=
                   jobs_done_.load(std::memory_order_seq_cst)) {
          ran = io_.poll_one();
          if (ran == 0) detail::cpu_relax();
        }
        if (ran != 0) continue;
      }
      io_.run_one();
    }
  }

  void start_read() {
    if (rend_ == rbuf_.size()) compact();
    sock_.async_read_some(detail::asio::buffer(rbuf_.data() + rend_, rbuf_.size() - rend_),
                          [this](const boost::system::error_code& ec, std::size_t n) {
                            if (ec) {
                              end(ec == detail::asio::error::eof
                                      ? std::string("the client closed the connection")
                                      : fmt::format("reading failed: {}", ec.message()));
                              return;
                            }
                            rend_ += n;
                            last_rx_ = Clock::now();
                            parse();
                          });
  }
  void compact() {
    if (rpos_ == 0) return;
    std::memmove(rbuf_.data(), rbuf_.data() + rpos_, rend_ - rpos_);
    rend_ -= rpos_;
    rpos_ = 0;
  }
  void reserve(std::size_t total) {
    compact();
    if (rbuf_.size() < total) rbuf_.resize(total);
  }

  /// Handles every whole frame buffered, then reads on (or waits for a direct read).
  void parse() {
    try {
      for (;;) {
        if (ended_) return;
        const std::size_t have = rend_ - rpos_;
        if (have < wire::kHeaderBytes) break;
        const auto h = wire::decode_header(std::span(rbuf_.data() + rpos_, wire::kHeaderBytes));
        wire::check_header(h, wire::Expect{session_, worker_, rx_seq_ + 1,
                                           options_.max_payload + static_cast<std::uint32_t>(
                                                                      wire::kControlHeadBytes)});
        if (h.type == wire::FrameType::Control && h.length > kDirectRead) {
          // A large COPY_TO: its head from the buffer, its bytes straight into the pool.
          if (have < wire::kHeaderBytes + wire::kControlHeadBytes) {
            reserve(wire::kHeaderBytes + wire::kControlHeadBytes);
            break;
          }
          const auto c = wire::decode_control_head(
              std::span(rbuf_.data() + rpos_ + wire::kHeaderBytes, wire::kControlHeadBytes),
              h.length);
          rpos_ += wire::kHeaderBytes + wire::kControlHeadBytes;
          ++rx_seq_;
          std::string why;
          std::byte* dst = pool_.resolve(c.a, c.b, c.n, why);
          const std::uint64_t take = std::min<std::uint64_t>(c.n, rend_ - rpos_);
          if (dst != nullptr && take != 0) std::memcpy(dst, rbuf_.data() + rpos_, take);
          rpos_ += take;
          if (take == c.n) {
            reply_copy_to(h.sequence, why);
            continue;
          }
          direct_read(dst == nullptr ? nullptr : dst + take, c.n - take, h.sequence,
                      std::move(why));
          return;
        }
        if (have < wire::kHeaderBytes + h.length) {
          reserve(wire::kHeaderBytes + h.length);
          break;
        }
        handle(h, std::span(rbuf_.data() + rpos_ + wire::kHeaderBytes, h.length));
        rpos_ += wire::kHeaderBytes + h.length;
        ++rx_seq_;
      }
    } catch (const std::exception& e) {
      end(fmt::format("the client sent a bad frame: {}", e.what()));
      return;
    }
    if (!ended_) start_read();
  }

  /// Reads the rest of a COPY_TO's bytes into `dst` (or discards them when the copy was refused).
  void direct_read(std::byte* dst, std::uint64_t left, std::uint64_t seq, std::string why) {
    std::byte* into = dst;
    std::uint64_t n = left;
    if (dst == nullptr) {
      sink_.resize(std::min<std::uint64_t>(left, 1 << 20));
      into = sink_.data();
      n = std::min<std::uint64_t>(left, sink_.size());
    }
    detail::asio::async_read(sock_, detail::asio::buffer(into, n),
                             [this, dst, left, n, seq, why = std::move(why)](
                                 const boost::system::error_code& ec, std::size_t) mutable {
                               if (ec) {
                                 end(fmt::format("reading a COPY_TO failed: {}", ec.message()));
                                 return;
                               }
                               last_rx_ = Clock::now();
                               if (left > n) {
                                 direct_read(dst == nullptr ? nullptr : dst + n, left - n, seq,
                                             std::move(why));
                                 return;
                               }
                               reply_copy_to(seq, why);
                               parse();
                             });
  }

  void handle(const wire::FrameHeader& h, std::span<const std::byte> payload) {
    switch (h.type) {
      case wire::FrameType::Heartbeat:
        wire::decode_payload(h.type, payload);
        return;
      case wire::FrameType::Shutdown:
        wire::decode_payload(h.type, payload);
        end("the client shut the session down");
        return;
      case wire::FrameType::Task: {
        Job job{h.sequence, wire::decode_task(payload)};
        if (job.task.trace_level != 0) [[unlikely]]
          job.rx_ns = detail::served_trace_now();
        {
          std::lock_guard lk(jobs_mu_);
          jobs_.push_back(std::move(job));
          ++jobs_posted_;
        }
        jobs_wake_.notify_all();
        return;
      }
      case wire::FrameType::Control:
        control(h.sequence, wire::decode_control(payload), payload);
        return;
      default:
        throw ProtocolError(fmt::format("a client does not send {} frames (after authentication)",
                                        wire::to_string(h.type)));
    }
  }

  void control(std::uint64_t seq, const wire::Control& c, std::span<const std::byte> payload) {
    wire::ControlReply r;
    r.answers = seq;
    r.op = c.op;
    std::string why;
    std::span<const std::byte> extra;
    switch (c.op) {
      case wire::ControlOp::Ping:
        break;
      case wire::ControlOp::Alloc:
        why = pool_.alloc(c.b, c.a, options_.max_buffer_bytes);
        if (why.empty()) {
          r.r0 = c.b;
          r.r1 = wire::buffer_address(c.b);
          r.r2 = c.a;
        }
        break;
      case wire::ControlOp::Free:
        if (!pool_.free(c.a))
          why = fmt::format("buffer {} is not a live buffer of this session", c.a);
        break;
      case wire::ControlOp::CopyTo: {
        std::byte* dst = pool_.resolve(c.a, c.b, c.n, why);
        if (dst != nullptr && c.n != 0)
          std::memcpy(dst, payload.data() + wire::kControlHeadBytes, c.n);
        break;
      }
      case wire::ControlOp::CopyFrom: {
        if (c.n > options_.max_payload) {
          why = fmt::format("{} bytes in one COPY_FROM, over the {}-byte frame limit", c.n,
                            options_.max_payload);
          break;
        }
        const std::byte* src = pool_.resolve(c.a, c.b, c.n, why);
        if (src != nullptr) {
          r.r0 = c.n;
          extra = std::span(src, c.n);
        }
        break;
      }
    }
    if (!why.empty()) {
      r.status = wire::Status::Failed;
      r.kind = ErrorKind::Usage;
      r.message = std::move(why);
      extra = {};
      r.r0 = r.r1 = r.r2 = 0;
    }
    queue(
        wire::FrameType::ControlReply, [&](auto& out) { wire::encode(r, out); }, extra);
  }
  void reply_copy_to(std::uint64_t seq, const std::string& why) {
    wire::ControlReply r;
    r.answers = seq;
    r.op = wire::ControlOp::CopyTo;
    if (!why.empty()) {
      r.status = wire::Status::Failed;
      r.kind = ErrorKind::Usage;
      r.message = why;
    }
    queue(wire::FrameType::ControlReply, [&](auto& out) { wire::encode(r, out); });
  }

  /// Queues a frame (its header numbered now) and starts writing if idle. I/O thread only.
  template <class Encode>
  void queue(wire::FrameType type, Encode&& encode, std::span<const std::byte> extra = {},
             bool start = true) {
    Out o;
    o.bytes.resize(wire::kHeaderBytes);
    encode(o.bytes);
    wire::FrameHeader h;
    h.type = type;
    h.session = session_;
    h.worker = worker_;
    h.sequence = ++tx_seq_;
    h.length = static_cast<std::uint32_t>(o.bytes.size() - wire::kHeaderBytes + extra.size());
    wire::encode_header(h, o.bytes.data());
    o.extra = extra;
    out_.push_back(std::move(o));
    last_tx_ = Clock::now();
    if (start && !writing_) write_next();
  }
  /// Writes every queued frame in one gathered write (completions of pipelined tasks that
  /// finished meanwhile leave together).
  void write_next() {
    if (out_.empty() || ended_) {
      writing_ = false;
      return;
    }
    writing_ = true;
    gather_.clear();
    std::size_t frames = 0;
    for (const Out& o : out_) {
      if (gather_.size() + 2 > kMaxGather) break;
      gather_.push_back(detail::asio::buffer(o.bytes));
      if (!o.extra.empty()) gather_.push_back(detail::asio::buffer(o.extra.data(), o.extra.size()));
      ++frames;
    }
    detail::asio::async_write(
        sock_, gather_, [this, frames](const boost::system::error_code& ec, std::size_t) {
          if (ec) {
            end(fmt::format("writing failed: {}", ec.message()));
            return;
          }
          out_.erase(out_.begin(), out_.begin() + static_cast<std::ptrdiff_t>(frames));
          write_next();
        });
  }

  void arm_heartbeat() {
    hb_.expires_after(std::chrono::milliseconds(std::max<std::uint32_t>(1, period_ / 2)));
    hb_.async_wait([this](const boost::system::error_code& ec) {
      if (ec || ended_) return;
      const auto now = Clock::now();
      if (now - last_rx_ >= std::chrono::milliseconds(timeout_)) {
        end(fmt::format("heard nothing from the client for {} ms (heartbeat timeout)", timeout_));
        return;
      }
      if (now - last_tx_ >= std::chrono::milliseconds(period_)) {
        queue(wire::FrameType::Heartbeat, [](auto&) {});
      }
      arm_heartbeat();
    });
  }

  void end(std::string why) {
    if (ended_) return;
    ended_ = true;
    end_reason_ = std::move(why);
    boost::system::error_code ignored;
    hb_.cancel();
    io_.stop();
  }

  // ---- Executor thread: runs TASKs in order on the inner Worker.

  void execute_loop() {
    std::uint64_t taken = 0;
    std::vector<wire::Completion> batch;
    for (;;) {
      jobs_wake_.await(
          [&] {
            return jobs_posted_.load(std::memory_order_seq_cst) != taken ||
                   stop_exec_.load(std::memory_order_seq_cst);
          },
          inner_->options().spin, Clock::now() + std::chrono::seconds(1));
      if (stop_exec_.load(std::memory_order_seq_cst)) break;
      if (jobs_posted_.load(std::memory_order_seq_cst) == taken) continue;
      Job job;
      {
        std::lock_guard lk(jobs_mu_);
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      ++taken;
      batch.push_back(execute(job));
      jobs_done_.store(taken, std::memory_order_seq_cst);
      // While more tasks wait, completions gather and leave together (one wake of the I/O
      // thread, one write); the last one of a burst leaves at once.
      if (batch.size() >= 8 || jobs_posted_.load(std::memory_order_seq_cst) == taken) {
        auto done = std::make_shared<std::vector<wire::Completion>>(std::move(batch));
        batch.clear();
        detail::asio::post(io_, [this, done] {
          if (ended_) return;
          for (auto& c : *done) {
            if (c.traced) [[unlikely]]
              c.trace.tx_ns = detail::served_trace_now();
            queue(
                wire::FrameType::Completion, [&](auto& out) { wire::encode(c, out); }, {},
                /*start=*/false);
          }
          if (!writing_) write_next();
        });
      }
    }
    exec_done_.store(true, std::memory_order_seq_cst);
    exec_done_wake_.notify_all();
  }

  wire::Completion execute(Job& job) {
    return detail::run_served_task(*inner_, served_, pool_, job.sequence, job.task, where_,
                                   job.rx_ns);
  }

  /// After the I/O loop ended: stop the executor (bounded), close the inner Worker.
  int finish() {
    log("session {:#x} (worker {} of {}) ends: {}", session_, worker_, peer_, end_reason_);
    stop_exec_.store(true, std::memory_order_seq_cst);
    jobs_wake_.notify_all();
    const auto until = Clock::now() + options_.drain_timeout;
    exec_done_wake_.await([&] { return exec_done_.load(std::memory_order_seq_cst); },
                          std::chrono::nanoseconds(0), until);
    if (!exec_done_.load(std::memory_order_seq_cst)) {
      warn("session {:#x}: its running task did not finish within {} ms; exiting without it",
           session_, options_.drain_timeout.count());
      executor_.detach();
      std::fflush(nullptr);
      ::_exit(2);  // the inner Worker's children die with this process
    }
    executor_.join();
    int code = 0;
    try {
      inner_->close();
    } catch (const std::exception& e) {
      warn("session {:#x}: closing the inner Worker: {}", session_, e.what());
      code = 4;
    }
    boost::system::error_code ignored;
    sock_.close(ignored);
    return code;
  }

  static constexpr std::uint32_t kDirectRead = 64 * 1024;

  const RemoteServerOptions& options_;
  detail::asio::io_context io_{1};
  tcp::socket sock_;
  detail::asio::steady_timer hb_;
  detail::BufferPool pool_;  // mapped before the inner Worker forks, so its children share it
  std::optional<Worker> inner_;
  detail::ServedOrchs served_;
  std::string where_;
  std::uint64_t session_;
  std::uint32_t worker_;
  std::uint32_t period_, timeout_;
  std::string peer_;
  // The sequences of the authentication: AUTH_BEGIN and AUTH_PROOF in, AUTH_CHALLENGE out.
  std::uint64_t rx_seq_ = 2;
  std::uint64_t tx_seq_ = 1;
  std::vector<std::byte> rbuf_;
  std::size_t rpos_ = 0, rend_ = 0;
  std::vector<std::byte> sink_;
  std::deque<Out> out_;
  static constexpr std::size_t kMaxGather = 64;
  std::vector<detail::asio::const_buffer> gather_;
  bool writing_ = false;
  bool ended_ = false;
  std::string end_reason_;
  Clock::time_point last_rx_ = Clock::now();
  Clock::time_point last_tx_ = Clock::now();

  std::thread executor_;
  std::mutex jobs_mu_;
  std::deque<Job> jobs_;
  std::atomic<std::uint64_t> jobs_posted_{0};
  std::atomic<std::uint64_t> jobs_done_{0};
  detail::EventCount jobs_wake_;
  std::atomic<bool> stop_exec_{false};
  std::atomic<bool> exec_done_{false};
  detail::EventCount exec_done_wake_;
};

inline int RemoteServer::run_session(int fd, std::uint64_t session, std::uint32_t worker,
                                     const wire::AuthBegin& begin, const std::string& peer) {
  Session s(options_, fd, session, worker, begin, peer);
  return s.run(setup_);
}

}  // namespace simpler
