// Test double: a remote L3 that speaks the wire protocol from a thread of the test, for what a
// RemoteServer never does on purpose: hold completions back to count the TASKs in flight, answer
// the wrong task, refuse its HELLO, prove a token it does not hold.
//
// It accepts one connection on a free loopback port, authenticates it (and checks the client's
// proof), sends HELLO serving the callables of its Script, then answers TASKs (successfully: it
// runs nothing) and CONTROLs (ALLOC, FREE and PING succeed; copies are accepted, and read back as
// zeros: it keeps no memory), with heartbeats while it waits. Every wait has a deadline and the
// destructor stops the thread. Counters are safe to read from any thread; they are final once
// finished() returned true.
#pragma once

// First: Asio comes in through the library's headers, as it does for the library itself.
#include <simpler/simpler.hpp>

#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace simpler::testing {

class FakeRemote {
 public:
  struct Script {
    /// The token it proves it holds, and checks the client's proof with.
    std::string token;
    /// Prove another token in AUTH_CHALLENGE (the client must give up).
    bool wrong_proof = false;
    /// Non-empty: HELLO says the session could not start, with this message.
    std::string hello_failure;
    std::vector<std::string> serves{"work"};
    /// The first TASK is answered only after release_first() (so that the tasks that depend on
    /// it become ready together, when the test says).
    bool hold_first = false;
    /// COMPLETIONs wait until this many TASKs are unanswered, or until no TASK arrived for
    /// `hold_grace`; then every unanswered TASK is answered, oldest first.
    std::uint32_t hold_until = 1;
    std::chrono::milliseconds hold_grace{0};
    /// Added to the sequence number a COMPLETION answers (1: it answers the wrong TASK).
    std::uint64_t answer_skew = 0;
  };

  explicit FakeRemote(Script script) : script_(std::move(script)), acceptor_(io_), sock_(io_) {
    const tcp::endpoint at(boost::asio::ip::address_v4::loopback(), 0);
    acceptor_.open(at.protocol());
    acceptor_.bind(at);
    acceptor_.listen(1);
    port_ = acceptor_.local_endpoint().port();
    thread_ = std::thread([this] { serve(); });
  }
  FakeRemote(const FakeRemote&) = delete;
  FakeRemote& operator=(const FakeRemote&) = delete;
  ~FakeRemote() {
    stop_.store(true);
    thread_.join();
  }

  [[nodiscard]] std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }
  /// A spec for this fake with short deadlines and `window` TASKs in flight.
  [[nodiscard]] RemoteWorkerSpec spec(std::uint32_t window = 8) const {
    RemoteWorkerSpec s;
    s.endpoint = endpoint();
    s.token = script_.token;
    s.connect_timeout = std::chrono::seconds(5);
    s.attach_timeout = std::chrono::seconds(10);
    s.heartbeat_period = std::chrono::milliseconds(100);
    s.heartbeat_timeout = std::chrono::seconds(3);
    s.control_timeout = std::chrono::seconds(10);
    s.window = window;
    return s;
  }

  /// Lets the first TASK's COMPLETION go (Script::hold_first).
  void release_first() { first_released_.store(true); }

  /// Waits until the connection ended (the client shut it down or went away); false after
  /// `limit`.
  bool finished(std::chrono::milliseconds limit = std::chrono::seconds(10)) {
    std::unique_lock lk(mu_);
    return done_cv_.wait_for(lk, limit, [this] { return done_; });
  }
  /// The most TASKs it held unanswered at once.
  [[nodiscard]] std::uint32_t max_in_flight() const { return max_in_flight_.load(); }
  [[nodiscard]] std::uint32_t tasks() const { return tasks_.load(); }
  /// What went wrong on its side: a frame the client should not have sent, a wrong client
  /// proof, a deadline. Empty when all was well.
  [[nodiscard]] std::string error() const {
    std::lock_guard lk(mu_);
    return error_;
  }

 private:
  using tcp = boost::asio::ip::tcp;
  using Clock = std::chrono::steady_clock;
  /// The client closed the connection.
  struct Closed {};
  struct Frame {
    wire::FrameHeader h;
    std::vector<std::byte> payload;
  };
  static constexpr std::chrono::milliseconds kSlice{20};  // how often it looks at stop_
  static constexpr std::uint32_t kMaxPayload = 1U << 20;

  void serve() noexcept {
    try {
      accept();
      if (authenticate()) answer();
    } catch (const Closed&) {
      // The client went away: the normal end (after SHUTDOWN, or when it refused us).
    } catch (const std::exception& e) {
      note(e.what());
    }
    boost::system::error_code ignored;
    sock_.close(ignored);
    {
      std::lock_guard lk(mu_);
      done_ = true;
    }
    done_cv_.notify_all();
  }

  void note(const std::string& what) {
    std::lock_guard lk(mu_);
    if (error_.empty()) error_ = what;
  }

  /// Runs io_ until `done` or `deadline` (then cancels the operation and returns false).
  bool run_until(bool& done, Clock::time_point deadline) {
    io_.restart();
    while (!done && Clock::now() < deadline && !stop_.load()) {
      io_.run_one_until(std::min(deadline, Clock::now() + kSlice));
    }
    if (done) return true;
    boost::system::error_code ignored;
    acceptor_.cancel(ignored);
    sock_.cancel(ignored);
    io_.restart();
    while (!done) io_.run_one();
    return false;
  }

  void accept() {
    bool done = false;
    boost::system::error_code ec;
    acceptor_.async_accept(sock_, [&](const boost::system::error_code& e) {
      ec = e;
      done = true;
    });
    if (!run_until(done, Clock::now() + std::chrono::seconds(20)) || ec) {
      throw std::runtime_error("FakeRemote: no client connected");
    }
    sock_.set_option(tcp::no_delay(true));
  }

  /// The next frame if one arrives by `deadline`. Throws Closed on EOF.
  std::optional<Frame> next_frame(Clock::time_point deadline) {
    for (;;) {
      if (rbuf_.size() >= wire::kHeaderBytes) {
        const wire::FrameHeader h =
            wire::decode_header(std::span(rbuf_.data(), wire::kHeaderBytes));
        if (rbuf_.size() >= wire::kHeaderBytes + h.length) {
          Frame f{h, std::vector<std::byte>(rbuf_.begin() + wire::kHeaderBytes,
                                            rbuf_.begin() + wire::kHeaderBytes + h.length)};
          rbuf_.erase(rbuf_.begin(), rbuf_.begin() + wire::kHeaderBytes + h.length);
          wire::check_header(
              f.h, wire::Expect{session_, worker_, rx_seq_ + 1, kMaxPayload + std::uint32_t{1024}});
          ++rx_seq_;
          return f;
        }
      }
      std::array<std::byte, 65536> chunk{};
      bool done = false;
      boost::system::error_code ec;
      std::size_t n = 0;
      sock_.async_read_some(boost::asio::buffer(chunk),
                            [&](const boost::system::error_code& e, std::size_t k) {
                              ec = e;
                              n = k;
                              done = true;
                            });
      if (!run_until(done, deadline)) return std::nullopt;
      if (ec == boost::asio::error::eof || ec == boost::asio::error::connection_reset) {
        throw Closed{};
      }
      if (ec) throw std::runtime_error("FakeRemote: read failed: " + ec.message());
      rbuf_.insert(rbuf_.end(), chunk.begin(), chunk.begin() + static_cast<std::ptrdiff_t>(n));
    }
  }
  Frame need_frame(wire::FrameType type, const char* during) {
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    for (;;) {
      auto f = next_frame(deadline);
      if (!f) throw std::runtime_error(std::string("FakeRemote: no frame during ") + during);
      if (f->h.type == wire::FrameType::Heartbeat) continue;
      if (f->h.type != type) {
        throw std::runtime_error(std::string("FakeRemote: got a ") + wire::to_string(f->h.type) +
                                 " frame during " + during);
      }
      return std::move(*f);
    }
  }

  void send(wire::FrameType type, const std::vector<std::byte>& payload,
            std::span<const std::byte> extra = {}) {
    std::vector<std::byte> out(wire::kHeaderBytes);
    wire::FrameHeader h;
    h.type = type;
    h.session = session_;
    h.worker = worker_;
    h.sequence = ++tx_seq_;
    h.length = static_cast<std::uint32_t>(payload.size() + extra.size());
    wire::encode_header(h, out.data());
    out.insert(out.end(), payload.begin(), payload.end());
    out.insert(out.end(), extra.begin(), extra.end());
    bool done = false;
    boost::system::error_code ec;
    boost::asio::async_write(sock_, boost::asio::buffer(out),
                             [&](const boost::system::error_code& e, std::size_t) {
                               ec = e;
                               done = true;
                             });
    if (!run_until(done, Clock::now() + std::chrono::seconds(10))) {
      throw std::runtime_error("FakeRemote: a write stalled");
    }
    if (ec) throw Closed{};
    last_tx_ = Clock::now();
  }
  template <class M>
  void send_message(wire::FrameType type, const M& m) {
    std::vector<std::byte> p;
    wire::encode(m, p);
    send(type, p);
  }

  /// AUTH_BEGIN -> AUTH_CHALLENGE -> AUTH_PROOF -> HELLO. False when the session ends there.
  bool authenticate() {
    // The first frame fixes the link: its session, worker and sequence 1.
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (rbuf_.size() < wire::kHeaderBytes) {
      std::array<std::byte, wire::kHeaderBytes> head{};
      bool done = false;
      boost::system::error_code ec;
      boost::asio::async_read(sock_, boost::asio::buffer(head),
                              [&](const boost::system::error_code& e, std::size_t) {
                                ec = e;
                                done = true;
                              });
      if (!run_until(done, deadline) || ec) throw std::runtime_error("FakeRemote: no AUTH_BEGIN");
      rbuf_.insert(rbuf_.end(), head.begin(), head.end());
    }
    const wire::FrameHeader first =
        wire::decode_header(std::span(rbuf_.data(), wire::kHeaderBytes));
    session_ = first.session;
    worker_ = first.worker;
    const Frame begin_frame = need_frame(wire::FrameType::AuthBegin, "authentication");
    const wire::AuthBegin begin = wire::decode_auth_begin(begin_frame.payload);
    period_ = std::chrono::milliseconds(begin.heartbeat_ms);

    wire::AuthChallenge ch;
    ch.server_nonce = wire::random_nonce();
    ch.server_proof =
        wire::session_proof(script_.wrong_proof ? script_.token + " (not it)" : script_.token,
                            wire::kServerRole, session_, begin.client_nonce, ch.server_nonce);
    send_message(wire::FrameType::AuthChallenge, ch);

    const Frame proof_frame = need_frame(wire::FrameType::AuthProof, "authentication");
    const wire::AuthProof proof = wire::decode_auth_proof(proof_frame.payload);
    const wire::Proof want = wire::session_proof(script_.token, wire::kClientRole, session_,
                                                 ch.server_nonce, begin.client_nonce);
    if (!wire::proofs_equal(want, proof.client_proof)) note("FakeRemote: wrong client proof");

    wire::Hello hello;
    hello.level = 3;
    hello.max_payload = kMaxPayload;
    hello.max_buffer_bytes = std::uint64_t{1} << 30;
    hello.buffer_pool_bytes = std::uint64_t{1} << 32;
    if (script_.hello_failure.empty()) {
      for (const auto& name : script_.serves) {
        hello.served.push_back({callable_digest(CallableKind::Orch, name), name});
      }
    } else {
      hello.status = wire::Status::Failed;
      hello.kind = ErrorKind::Error;
      hello.message = script_.hello_failure;
    }
    send_message(wire::FrameType::Hello, hello);
    if (!script_.hello_failure.empty()) {
      // A refused session ends here; wait (bounded) for the client to hang up.
      const auto until = Clock::now() + std::chrono::seconds(10);
      while (Clock::now() < until && !stop_.load()) static_cast<void>(next_frame(until));
      return false;
    }
    return true;
  }

  /// Serves TASKs and CONTROLs until SHUTDOWN, EOF or the destructor.
  void answer() {
    bool first_held = script_.hold_first;
    while (!stop_.load()) {
      const auto now = Clock::now();
      if (now - last_tx_ >= period_) send(wire::FrameType::Heartbeat, {});
      if (first_held && !held_.empty() && first_released_.load()) {
        complete(held_.front());
        held_.erase(held_.begin());
        first_held = false;
        last_task_ = now;
      }
      if (!first_held && !held_.empty() && now - last_task_ >= script_.hold_grace) release();
      auto f = next_frame(now + std::min<Clock::duration>(kSlice, period_));
      if (!f) continue;
      switch (f->h.type) {
        case wire::FrameType::Heartbeat:
          break;
        case wire::FrameType::Shutdown:
          return;
        case wire::FrameType::Task: {
          static_cast<void>(wire::decode_task(f->payload));
          held_.push_back(f->h.sequence);
          ++tasks_;
          const auto n = static_cast<std::uint32_t>(held_.size());
          if (n > max_in_flight_.load()) max_in_flight_.store(n);
          last_task_ = Clock::now();
          if (!first_held && held_.size() >= script_.hold_until) release();
          break;
        }
        case wire::FrameType::Control:
          control(f->h.sequence, wire::decode_control(f->payload));
          break;
        default:
          throw std::runtime_error(std::string("FakeRemote: the client sent a ") +
                                   wire::to_string(f->h.type) + " frame");
      }
    }
  }

  void release() {
    for (std::uint64_t seq : held_) complete(seq);
    held_.clear();
  }
  void complete(std::uint64_t seq) {
    wire::Completion c;
    c.answers = seq + script_.answer_skew;
    send_message(wire::FrameType::Completion, c);
  }

  void control(std::uint64_t seq, const wire::Control& c) {
    wire::ControlReply r;
    r.answers = seq;
    r.op = c.op;
    std::vector<std::byte> zeros;
    if (c.op == wire::ControlOp::Alloc) {
      r.r0 = c.b;
      r.r1 = wire::buffer_address(c.b);
      r.r2 = c.a;
    } else if (c.op == wire::ControlOp::CopyFrom) {
      r.r0 = c.n;
      zeros.assign(c.n, std::byte{0});
    }
    std::vector<std::byte> p;
    wire::encode(r, p);
    send(wire::FrameType::ControlReply, p, zeros);
  }

  Script script_;
  boost::asio::io_context io_{1};
  tcp::acceptor acceptor_;
  tcp::socket sock_;
  std::uint16_t port_ = 0;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> first_released_{false};

  // The serving thread's own state.
  std::vector<std::byte> rbuf_;
  std::uint64_t session_ = 0;
  std::uint32_t worker_ = 0;
  std::uint64_t rx_seq_ = 0;
  std::uint64_t tx_seq_ = 0;
  std::chrono::milliseconds period_{100};
  Clock::time_point last_tx_ = Clock::now();
  Clock::time_point last_task_ = Clock::now();
  std::vector<std::uint64_t> held_;

  std::atomic<std::uint32_t> max_in_flight_{0};
  std::atomic<std::uint32_t> tasks_{0};
  mutable std::mutex mu_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::string error_;
};

}  // namespace simpler::testing
