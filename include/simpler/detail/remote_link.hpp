// simpler::detail::RemoteLink — the parent's end of one remote L3 session (SocketTransport).
//
// One TCP connection, driven by Boost.Asio on the thread that calls it: the lane thread during
// runs (TASK frames out, COMPLETION frames in, several in flight), the user's thread between runs
// (controls: buffers and copies), the lane thread's idle tick (heartbeats). A mutex keeps the
// idle tick and a control apart; tasks and controls never overlap (controls are refused during
// runs). Every wait has a deadline: the task's, the heartbeat timeout, or the control timeout. A
// link that fails for any reason is closed for good (the server then ends the session) and
// every task in flight or sent later fails as an endpoint failure naming host:port.
#pragma once

#include <fmt/format.h>

// Asio's scheduler trips -Wnull-dereference once inlined into a -Werror build: not our code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnull-dereference"
#include <boost/asio/buffer.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>
#pragma GCC diagnostic pop

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "simpler/detail/remote_info.hpp"
#include "simpler/detail/remote_trace.hpp"
#include "simpler/error.hpp"
#include "simpler/leaf/leaf.hpp"
#include "simpler/remote/auth.hpp"
#include "simpler/remote/remote.hpp"
#include "simpler/remote/wire.hpp"

namespace simpler::detail {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using SteadyClock = std::chrono::steady_clock;

/// Parses "host:port" (numeric IPv4, "[IPv6]", or "localhost"). Throws UsageError naming `what`.
inline tcp::endpoint parse_endpoint(std::string_view text, const char* what) {
  const auto colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || colon + 1 == text.size()) {
    throw UsageError(fmt::format("{}: '{}' is not host:port", what, text));
  }
  std::string_view host = text.substr(0, colon);
  const std::string_view port_text = text.substr(colon + 1);
  unsigned long port = 0;
  for (char c : port_text) {
    if (c < '0' || c > '9' || port > 65535) {
      throw UsageError(
          fmt::format("{}: port '{}' in '{}' is not a number in 0..65535", what, port_text, text));
    }
    port = port * 10 + static_cast<unsigned long>(c - '0');
  }
  if (port > 65535) {
    throw UsageError(fmt::format("{}: port {} in '{}' is over 65535", what, port, text));
  }
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host == "localhost") host = "127.0.0.1";
  boost::system::error_code ec;
  const auto addr = asio::ip::make_address(std::string(host), ec);
  if (ec) {
    throw UsageError(fmt::format(
        "{}: '{}' is not a numeric IP address or localhost (host names are refused: resolving "
        "one cannot be bounded by a deadline)",
        what, host));
  }
  return tcp::endpoint(addr, static_cast<std::uint16_t>(port));
}

/// Throws UsageError when a spec cannot be used.
inline void validate(const RemoteWorkerSpec& s) {
  static_cast<void>(parse_endpoint(s.endpoint, "RemoteWorkerSpec::endpoint"));
  auto positive = [](std::chrono::milliseconds v, const char* field) {
    if (v.count() <= 0) {
      throw UsageError(
          fmt::format("RemoteWorkerSpec::{} is {} ms; it must be > 0", field, v.count()));
    }
  };
  positive(s.connect_timeout, "connect_timeout");
  positive(s.attach_timeout, "attach_timeout");
  positive(s.heartbeat_period, "heartbeat_period");
  positive(s.heartbeat_timeout, "heartbeat_timeout");
  positive(s.control_timeout, "control_timeout");
  if (s.heartbeat_timeout <= s.heartbeat_period) {
    throw UsageError(fmt::format(
        "RemoteWorkerSpec::heartbeat_timeout ({} ms) must be longer than heartbeat_period ({} ms)",
        s.heartbeat_timeout.count(), s.heartbeat_period.count()));
  }
  if (s.window == 0 || s.window > 8) {
    throw UsageError(fmt::format("RemoteWorkerSpec::window is {}; it must be 1..8", s.window));
  }
  if (s.max_payload < 65536) {
    throw UsageError(
        fmt::format("RemoteWorkerSpec::max_payload is {}; it must be >= 65536", s.max_payload));
  }
}

class RemoteLink {
 public:
  RemoteLink(RemoteWorkerSpec spec, std::uint32_t worker)
      : spec_(std::move(spec)), worker_(worker), sock_(io_) {}
  RemoteLink(const RemoteLink&) = delete;
  RemoteLink& operator=(const RemoteLink&) = delete;
  ~RemoteLink() { close_socket(); }

  /// Connects, authenticates and waits for the remote's HELLO, all within the attach timeout.
  /// Throws TransportError (or TimeoutError, RemoteError when the remote's setup failed).
  void connect() {
    std::lock_guard lk(mu_);
    const auto target = parse_endpoint(spec_.endpoint, "RemoteWorkerSpec::endpoint");
    where_ = spec_.endpoint;
    const auto start = SteadyClock::now();
    const auto attach_end = start + spec_.attach_timeout;
    try {
      boost::system::error_code ec;
      bool done = false;
      sock_.async_connect(target, [&](const boost::system::error_code& e) {
        ec = e;
        done = true;
      });
      if (!run_until(done, ec, std::min(attach_end, start + spec_.connect_timeout))) {
        throw TimeoutError(fmt::format("remote worker {}: TCP connect took over {} ms", where_,
                                       spec_.connect_timeout.count()));
      }
      if (ec) {
        throw TransportError(
            fmt::format("remote worker {}: TCP connect failed: {} (is a RemoteServer listening "
                        "there?)",
                        where_, ec.message()));
      }
      sock_.set_option(tcp::no_delay(true));
      session_ = wire::random_session_id();
      // AUTH_BEGIN -> AUTH_CHALLENGE -> AUTH_PROOF -> HELLO.
      wire::AuthBegin begin;
      begin.client_nonce = wire::random_nonce();
      begin.heartbeat_ms = static_cast<std::uint32_t>(spec_.heartbeat_period.count());
      begin.heartbeat_timeout_ms = static_cast<std::uint32_t>(spec_.heartbeat_timeout.count());
      queue_frame(wire::FrameType::AuthBegin, [&](auto& out) { wire::encode(begin, out); });
      flush(attach_end);
      Frame f = next_frame(attach_end, "authentication");
      expect_type(f, wire::FrameType::AuthChallenge, "authentication");
      const auto challenge = wire::decode_auth_challenge(f.payload);
      const auto want = wire::session_proof(spec_.token, wire::kServerRole, session_,
                                            begin.client_nonce, challenge.server_nonce);
      if (!wire::proofs_equal(want, challenge.server_proof)) {
        throw TransportError(fmt::format(
            "remote worker {}: the server could not prove it holds this worker's token; the "
            "tokens differ (RemoteWorkerSpec::token vs RemoteServerOptions::token)",
            where_));
      }
      wire::AuthProof proof;
      proof.client_proof = wire::session_proof(spec_.token, wire::kClientRole, session_,
                                               challenge.server_nonce, begin.client_nonce);
      queue_frame(wire::FrameType::AuthProof, [&](auto& out) { wire::encode(proof, out); });
      flush(attach_end);
      f = next_frame(attach_end, "the remote's setup and init()");
      expect_type(f, wire::FrameType::Hello, "attach");
      wire::Hello hello = wire::decode_hello(f.payload);
      if (hello.status != wire::Status::Ok) {
        throw RemoteError(fmt::format("remote worker {}: its session could not start: {}", where_,
                                      hello.message));
      }
      info_.take(std::move(hello));
      connected_ = true;
    } catch (...) {
      close_socket();
      broken_.store(true, std::memory_order_release);
      throw;
    }
  }

  [[nodiscard]] const RemoteInfo& info() const noexcept { return info_; }
  [[nodiscard]] const std::string& where() const noexcept { return spec_.endpoint; }
  [[nodiscard]] std::uint64_t session() const noexcept { return session_; }
  [[nodiscard]] std::uint32_t window() const noexcept { return spec_.window; }

  // ---- Tasks (the lane thread, during runs).

  /// Queues a TASK frame for `r` (sent at the next receive()). False when the link is down or
  /// the task cannot be encoded: `fault` says why, and the task is not in flight.
  bool send(const LeafRequest& r, Fault& fault) noexcept {
    std::lock_guard lk(mu_);
    if (broken_.load(std::memory_order_acquire)) {
      fault.set(ErrorKind::Transport, 0, death_message());
      return false;
    }
    try {
      if (!remote_tensors_only(r, where_, fault)) return false;
      const std::size_t mark = wbuf_.size();
      // A traced task asks for the remote's trace, as much as a COMPLETION this side reads.
      const auto level = static_cast<std::uint8_t>(r.trace != nullptr ? r.trace->level : 0);
      queue_frame(wire::FrameType::Task, [&](auto& out) {
        wire::encode_task(r.digest, *r.config, r.args, out, level, spec_.max_payload);
      });
      if (wbuf_.size() - mark - wire::kHeaderBytes > info_.max_payload) {
        wbuf_.resize(mark);
        --tx_seq_;
        fault.set(ErrorKind::Usage, 0,
                  fmt::format("the TASK frame takes {} bytes, over the {}-byte limit of {}",
                              wbuf_.size() - mark, info_.max_payload, where_));
        return false;
      }
      inflight_.push_back(
          InFlight{tx_seq_, r.deadline, r.deadline_ms, level != 0 ? r.trace : nullptr});
      trace_unsent_ = trace_unsent_ || level != 0;
      return true;
    } catch (...) {
      fault_from_current_exception(fault);
      return false;
    }
  }

  /// Sends what send() queued, then waits for the oldest task's COMPLETION: its outcome.
  /// Heartbeats go out meanwhile. An endpoint failure when the link fails, the remote goes
  /// silent past the heartbeat timeout, or the task passes its deadline (the session is then
  /// ended: a remote task cannot be stopped on its own).
  Outcome receive(Fault& fault) noexcept {
    std::lock_guard lk(mu_);
    if (inflight_.empty()) {
      fault.set(ErrorKind::Error, 0, "RemoteLink::receive: no task in flight");
      return Outcome::EndpointFailure;
    }
    InFlight task = inflight_.front();
    inflight_.pop_front();
    if (broken_.load(std::memory_order_acquire)) {
      fault.set(ErrorKind::Transport, 0, death_message());
      return Outcome::EndpointFailure;
    }
    try {
      if (trace_unsent_) [[unlikely]]
        stamp_traced_sends(task);
      flush(SteadyClock::now() + spec_.heartbeat_timeout);
      for (;;) {
        const auto now = SteadyClock::now();
        if (now >= task.deadline) {
          throw TimeoutError(fmt::format(
              "the task passed its deadline of {} ms on remote worker {}; the session was ended "
              "(a remote task cannot be stopped on its own)",
              task.deadline_ms, where_));
        }
        check_heard(now);
        heartbeat_if_due(now);
        const auto until = std::min(
            {task.deadline, last_rx_ + spec_.heartbeat_timeout, last_tx_ + spec_.heartbeat_period});
        Frame f;
        if (!try_next_frame(until, f)) continue;
        if (f.h.type == wire::FrameType::Heartbeat) continue;
        expect_type(f, wire::FrameType::Completion, "a task");
        auto c = wire::decode_completion(f.payload);
        if (c.answers != task.sequence) {
          throw ProtocolError(
              fmt::format("COMPLETION answers sequence {}, the oldest TASK in flight is {}",
                          c.answers, task.sequence));
        }
        if (task.trace != nullptr && c.traced) [[unlikely]]
          take_remote_trace(clock_, task.sent_ns, trace_now(), c.trace, *task.trace);
        if (c.status == wire::Status::Ok) return Outcome::Success;
        fault.set(c.kind, c.code, fmt::format("on remote worker {}: {}", where_, c.message));
        return Outcome::TaskFailure;
      }
    } catch (...) {
      Fault why;
      fault_from_current_exception(why);
      fail(why.message);
      fault.set(why.kind == ErrorKind::Timeout ? ErrorKind::Timeout : ErrorKind::Transport, 0,
                death_message());
      return Outcome::EndpointFailure;
    }
  }

  // ---- Idle (the lane thread, between tasks).

  [[nodiscard]] std::chrono::milliseconds tick_period() const noexcept {
    return spec_.heartbeat_period;
  }
  /// Reads what arrived (heartbeats), gives the link up after heartbeat_timeout of silence, and
  /// sends a heartbeat when one is due. Never blocks past the heartbeat timeout.
  void tick() noexcept {
    std::unique_lock lk(mu_, std::try_to_lock);
    if (!lk.owns_lock() || !connected_ || broken_.load(std::memory_order_acquire)) return;
    try {
      Frame f;
      while (try_next_frame(SteadyClock::now() + spec_.heartbeat_timeout, f, /*idle=*/true)) {
        if (f.h.type != wire::FrameType::Heartbeat) {
          throw ProtocolError(
              fmt::format("unexpected {} frame while idle", wire::to_string(f.h.type)));
        }
      }
      check_heard(SteadyClock::now());
      heartbeat_if_due(SteadyClock::now());
    } catch (...) {
      Fault why;
      fault_from_current_exception(why);
      fail(why.message);
    }
  }

  // ---- Controls (the user's thread, between runs). Each throws on failure: TransportError when
  // the link failed (it is then down for good), RemoteError when the remote refused.

  RemoteBuffer alloc(WorkerId worker, std::uint64_t bytes) {
    std::lock_guard lk(mu_);
    const std::uint64_t id = next_remote_buffer_id();
    wire::Control c{wire::ControlOp::Alloc, bytes, id, 0};
    const auto r = control(c, {}, nullptr);
    if (r.r0 != id || r.r2 != bytes) {
      fail(fmt::format("ALLOC reply names buffer {} of {} bytes, asked for {} of {}", r.r0, r.r2,
                       id, bytes));
      throw TransportError(death_message());
    }
    live_.add(id, bytes);
    return RemoteBuffer(worker, session_, id, bytes);
  }
  void free(const RemoteBuffer& b) {
    std::lock_guard lk(mu_);
    control(wire::Control{wire::ControlOp::Free, b.id(), 0, 0}, {}, nullptr);
    live_.erase(b.id());
  }
  /// Whether [address, address + bytes) lies in a live buffer of this link.
  [[nodiscard]] bool holds(std::uint64_t address, std::uint64_t bytes) const {
    return live_.holds(address, bytes);
  }
  /// Whether `b` is a live buffer of this link (session and id).
  [[nodiscard]] bool owns(const RemoteBuffer& b) const { return live_.owns(b, session_); }
  void ping() {
    std::lock_guard lk(mu_);
    control(wire::Control{wire::ControlOp::Ping, 0, 0, 0}, {}, nullptr);
  }
  /// Copies in chunks of the frame limit, several chunks in flight.
  void copy_to(const RemoteBuffer& b, std::uint64_t offset, const void* src, std::uint64_t n) {
    std::lock_guard lk(mu_);
    const auto* p = static_cast<const std::byte*>(src);
    const std::uint64_t chunk = chunk_bytes();
    std::deque<std::uint64_t> pending;
    std::uint64_t done = 0;
    do {
      const std::uint64_t k = std::min(chunk, n - done);
      pending.push_back(
          send_control(wire::Control{wire::ControlOp::CopyTo, b.id(), offset + done, k},
                       std::span(p + done, k)));
      done += k;
      if (pending.size() >= kCopyWindow || done == n) {
        while (pending.size() > (done == n ? 0 : kCopyWindow / 2)) {
          await_reply(pending.front(), wire::ControlOp::CopyTo, nullptr, 0);
          pending.pop_front();
        }
      }
    } while (done < n);
  }
  void copy_from(const RemoteBuffer& b, std::uint64_t offset, void* dst, std::uint64_t n) {
    std::lock_guard lk(mu_);
    auto* p = static_cast<std::byte*>(dst);
    const std::uint64_t chunk = chunk_bytes();
    struct Want {
      std::uint64_t seq, at, n;
    };
    std::deque<Want> pending;
    std::uint64_t asked = 0;
    do {
      const std::uint64_t k = std::min(chunk, n - asked);
      pending.push_back(
          {send_control(wire::Control{wire::ControlOp::CopyFrom, b.id(), offset + asked, k}, {}),
           asked, k});
      asked += k;
      if (pending.size() >= kCopyWindow || asked == n) {
        while (pending.size() > (asked == n ? 0 : kCopyWindow / 2)) {
          const Want w = pending.front();
          await_reply(w.seq, wire::ControlOp::CopyFrom, p + w.at, w.n);
          pending.pop_front();
        }
      }
    } while (asked < n);
  }

  // ---- End and liveness.

  /// Sends SHUTDOWN (best effort, bounded) and closes the connection.
  void shutdown() noexcept {
    std::lock_guard lk(mu_);
    if (connected_ && !broken_.load(std::memory_order_acquire)) {
      try {
        queue_frame(wire::FrameType::Shutdown, [](auto&) {});
        flush(SteadyClock::now() + std::chrono::milliseconds(500));
      } catch (...) {
        // The server ends the session on EOF as well.
      }
    }
    connected_ = false;
    close_socket();
  }
  [[nodiscard]] bool alive() const noexcept { return !broken_.load(std::memory_order_acquire); }
  [[nodiscard]] std::string death() const {
    std::lock_guard lk(death_mu_);
    return death_;
  }
  /// Whether the link failed while no task was there to report it.
  [[nodiscard]] bool death_unreported() const noexcept {
    std::lock_guard lk(death_mu_);
    return !death_.empty() && !reported_;
  }
  void mark_reported() noexcept {
    std::lock_guard lk(death_mu_);
    reported_ = true;
  }

 private:
  static constexpr std::size_t kCopyWindow = 8;
  struct InFlight {
    std::uint64_t sequence;
    SteadyClock::time_point deadline;
    std::uint32_t deadline_ms;
    TraceReply* trace = nullptr;  ///< a traced task: where its remote trace goes
    std::int64_t sent_ns = 0;     ///< a traced task: when its TASK went out (trace_now)
  };

  /// Before a flush: the traced TASKs about to go out (`popped` and those still in flight) are
  /// stamped with the time they leave (the start of their clock-sync exchange).
  void stamp_traced_sends(InFlight& popped) noexcept {
    const std::int64_t now = trace_now();
    if (popped.trace != nullptr && popped.sent_ns == 0) popped.sent_ns = now;
    for (InFlight& f : inflight_) {
      if (f.trace != nullptr && f.sent_ns == 0) f.sent_ns = now;
    }
    trace_unsent_ = false;
  }
  struct Frame {
    wire::FrameHeader h;
    std::span<const std::byte> payload;
  };

  [[nodiscard]] std::uint64_t chunk_bytes() const noexcept {
    return std::min<std::uint64_t>(std::min(spec_.max_payload, info_.max_payload),
                                   std::uint64_t{8} << 20) -
           256;
  }

  /// Runs the io_context until the pending operation's handler ran (`done`) or `deadline`; on
  /// the deadline cancels it and waits for its handler. True when it completed (with `ec`, which
  /// may be an error), false when the deadline cut it off.
  bool run_until(bool& done, const boost::system::error_code& ec,
                 SteadyClock::time_point deadline) {
    io_.restart();
    while (!done && SteadyClock::now() < deadline) io_.run_one_until(deadline);
    if (done) return true;
    boost::system::error_code ignored;
    sock_.cancel(ignored);
    io_.restart();
    while (!done) io_.run_one();
    // It may have completed just before the cancel took effect.
    return ec != asio::error::operation_aborted;
  }

  template <class Encode>
  void queue_frame(wire::FrameType type, Encode&& encode) {
    const std::size_t at = wbuf_.size();
    wbuf_.resize(at + wire::kHeaderBytes);
    encode(wbuf_);
    wire::FrameHeader h;
    h.type = type;
    h.session = session_;
    h.worker = worker_;
    h.sequence = ++tx_seq_;
    h.length = static_cast<std::uint32_t>(wbuf_.size() - at - wire::kHeaderBytes);
    wire::encode_header(h, wbuf_.data() + at);
  }

  /// Writes what is queued (plus `extra`, gathered without a copy) by `deadline`.
  void flush(SteadyClock::time_point deadline, std::span<const std::byte> extra = {}) {
    if (wbuf_.empty() && extra.empty()) return;
    boost::system::error_code ec;
    bool done = false;
    std::array<asio::const_buffer, 2> bufs{asio::buffer(wbuf_),
                                           asio::buffer(extra.data(), extra.size())};
    asio::async_write(sock_, bufs, [&](const boost::system::error_code& e, std::size_t) {
      ec = e;
      done = true;
    });
    if (!run_until(done, ec, deadline)) {
      throw TransportError(fmt::format(
          "sending to {} stalled for {} ms (the remote does not read)", where_,
          std::chrono::duration_cast<std::chrono::milliseconds>(spec_.heartbeat_timeout).count()));
    }
    if (ec) throw TransportError(fmt::format("sending to {} failed: {}", where_, ec.message()));
    wbuf_.clear();
    last_tx_ = SteadyClock::now();
  }

  /// Reads more bytes into rbuf_ by `deadline`; false on the deadline. Throws on EOF or error.
  bool fill(SteadyClock::time_point deadline, std::size_t want) {
    if (rpos_ != 0 && (rend_ == rpos_ || rbuf_.size() - rend_ < want)) {
      std::memmove(rbuf_.data(), rbuf_.data() + rpos_, rend_ - rpos_);
      rend_ -= rpos_;
      rpos_ = 0;
    }
    if (rbuf_.size() < rend_ + want) rbuf_.resize(std::max(rend_ + want, std::size_t{65536}));
    boost::system::error_code ec;
    std::size_t n = 0;
    bool done = false;
    sock_.async_read_some(asio::buffer(rbuf_.data() + rend_, rbuf_.size() - rend_),
                          [&](const boost::system::error_code& e, std::size_t k) {
                            ec = e;
                            n = k;
                            done = true;
                          });
    if (!run_until(done, ec, deadline)) return false;
    if (ec == asio::error::eof) {
      throw TransportError(
          fmt::format("{} closed the connection (the remote session ended: its "
                      "process died, or it refused a frame; see its log)",
                      where_));
    }
    if (ec) throw TransportError(fmt::format("reading from {} failed: {}", where_, ec.message()));
    rend_ += n;
    return true;
  }

  /// The next whole frame, if one arrives by `deadline` (returns false), checked against the
  /// link. The payload stays valid until the next read.
  bool try_next_frame(SteadyClock::time_point deadline, Frame& f, bool idle = false) {
    for (;;) {
      const std::size_t have = rend_ - rpos_;
      if (idle && !whole_frame_buffered()) {
        // Idle: read only what already arrived, never wait.
        boost::system::error_code ec;
        if (sock_.available(ec) == 0 || ec) return false;
      }
      if (have >= wire::kHeaderBytes) {
        f.h = wire::decode_header(std::span(rbuf_.data() + rpos_, wire::kHeaderBytes));
        wire::check_header(f.h, wire::Expect{session_, worker_, rx_seq_ + 1,
                                             connected_ ? spec_.max_payload : 65536});
        const std::size_t total = wire::kHeaderBytes + f.h.length;
        if (have >= total) {
          f.payload =
              std::span<const std::byte>(rbuf_.data() + rpos_ + wire::kHeaderBytes, f.h.length);
          rpos_ += total;
          ++rx_seq_;
          last_rx_ = SteadyClock::now();
          return true;
        }
        if (!fill(deadline, total - have)) return false;
        continue;
      }
      if (!fill(deadline, wire::kHeaderBytes - have)) return false;
    }
  }
  [[nodiscard]] bool whole_frame_buffered() const noexcept {
    const std::size_t have = rend_ - rpos_;
    if (have < wire::kHeaderBytes) return false;
    std::uint32_t len = 0;
    for (int i = 0; i < 4; ++i)
      len |= static_cast<std::uint32_t>(rbuf_[rpos_ + 32 + static_cast<std::size_t>(i)]) << (8 * i);
    return have >= wire::kHeaderBytes + len;
  }
  Frame next_frame(SteadyClock::time_point deadline, const char* during) {
    Frame f;
    if (!try_next_frame(deadline, f)) {
      throw TimeoutError(
          fmt::format("remote worker {}: no answer during {} within the deadline", where_, during));
    }
    return f;
  }
  void expect_type(const Frame& f, wire::FrameType want, const char* during) const {
    if (f.h.type != want) {
      throw ProtocolError(fmt::format("remote worker {}: got a {} frame during {}, expected {}",
                                      where_, wire::to_string(f.h.type), during,
                                      wire::to_string(want)));
    }
  }
  void check_heard(SteadyClock::time_point now) const {
    if (now - last_rx_ >= spec_.heartbeat_timeout) {
      throw TransportError(fmt::format(
          "heard nothing from {} for {} ms (heartbeat timeout): the remote died, hangs, or the "
          "network is cut",
          where_, spec_.heartbeat_timeout.count()));
    }
  }
  void heartbeat_if_due(SteadyClock::time_point now) {
    if (now - last_tx_ < spec_.heartbeat_period) return;
    queue_frame(wire::FrameType::Heartbeat, [](auto&) {});
    flush(now + spec_.heartbeat_timeout);
  }

  /// Sends one CONTROL (with `data` gathered after it); returns its sequence.
  std::uint64_t send_control(const wire::Control& c, std::span<const std::byte> data) {
    check_usable();
    try {
      const std::size_t at = wbuf_.size();
      queue_frame(wire::FrameType::Control, [&](auto& out) { wire::encode(c, out); });
      // The data follows the head in the same frame: fix the length, then gather it.
      wire::FrameHeader h = wire::decode_header(std::span(wbuf_.data() + at, wire::kHeaderBytes));
      h.length += static_cast<std::uint32_t>(data.size());
      wire::encode_header(h, wbuf_.data() + at);
      flush(SteadyClock::now() + spec_.control_timeout, data);
      return h.sequence;
    } catch (...) {
      fail_from_current();
      throw;
    }
  }
  /// Waits for the CONTROL_REPLY to `seq`; a CopyFrom's bytes go straight to `dst`.
  wire::ControlReply await_reply(std::uint64_t seq, wire::ControlOp op, std::byte* dst,
                                 std::uint64_t n) {
    try {
      const auto deadline = SteadyClock::now() + spec_.control_timeout;
      for (;;) {
        // Read the header, then (for a large reply) only its head: the data goes to dst.
        while (rend_ - rpos_ < wire::kHeaderBytes) {
          if (!fill(deadline, wire::kHeaderBytes - (rend_ - rpos_))) throw_control_timeout(op);
        }
        const auto h = wire::decode_header(std::span(rbuf_.data() + rpos_, wire::kHeaderBytes));
        wire::check_header(h, wire::Expect{session_, worker_, rx_seq_ + 1, spec_.max_payload});
        const bool streamed = h.type == wire::FrameType::ControlReply &&
                              op == wire::ControlOp::CopyFrom && h.length > wire::kOkReplyHeadBytes;
        const std::size_t need = streamed ? wire::kOkReplyHeadBytes : h.length;
        while (rend_ - rpos_ < wire::kHeaderBytes + need) {
          if (!fill(deadline, wire::kHeaderBytes + need - (rend_ - rpos_)))
            throw_control_timeout(op);
        }
        const std::byte* payload = rbuf_.data() + rpos_ + wire::kHeaderBytes;
        if (h.type == wire::FrameType::Heartbeat) {
          wire::decode_payload(h.type, std::span(payload, h.length));
          rpos_ += wire::kHeaderBytes + h.length;
          ++rx_seq_;
          last_rx_ = SteadyClock::now();
          continue;
        }
        if (h.type != wire::FrameType::ControlReply) {
          throw ProtocolError(fmt::format("got a {} frame while waiting for a CONTROL_REPLY",
                                          wire::to_string(h.type)));
        }
        std::size_t head = 0;
        const auto r = wire::decode_control_reply_head(std::span(payload, need), h.length, head);
        if (r.answers != seq || r.op != op) {
          throw ProtocolError(fmt::format("CONTROL_REPLY answers {} #{}, expected {} #{}",
                                          wire::to_string(r.op), r.answers, wire::to_string(op),
                                          seq));
        }
        rpos_ += wire::kHeaderBytes + head;
        std::uint64_t data = h.length - head;
        if (r.status == wire::Status::Ok && op == wire::ControlOp::CopyFrom && data != n) {
          throw ProtocolError(
              fmt::format("COPY_FROM reply carries {} bytes, {} were asked for", data, n));
        }
        // The data: first what is buffered, then straight from the socket into dst.
        const std::uint64_t buffered = std::min<std::uint64_t>(data, rend_ - rpos_);
        if (buffered != 0) std::memcpy(dst, rbuf_.data() + rpos_, buffered);
        rpos_ += buffered;
        if (data > buffered) read_exact(dst + buffered, data - buffered, deadline, op);
        ++rx_seq_;
        last_rx_ = SteadyClock::now();
        if (r.status != wire::Status::Ok) {
          throw RemoteError(fmt::format("remote worker {} refused {}: {}", where_,
                                        wire::to_string(op), r.message));
        }
        return r;
      }
    } catch (const RemoteError&) {
      throw;  // a refusal: the link is fine
    } catch (...) {
      fail_from_current();
      throw;
    }
  }
  void read_exact(std::byte* dst, std::uint64_t n, SteadyClock::time_point deadline,
                  wire::ControlOp op) {
    boost::system::error_code ec;
    bool done = false;
    asio::async_read(sock_, asio::buffer(dst, n),
                     [&](const boost::system::error_code& e, std::size_t) {
                       ec = e;
                       done = true;
                     });
    if (!run_until(done, ec, deadline)) throw_control_timeout(op);
    if (ec) throw TransportError(fmt::format("reading from {} failed: {}", where_, ec.message()));
  }
  wire::ControlReply control(const wire::Control& c, std::span<const std::byte> data,
                             std::byte* dst) {
    const std::uint64_t seq = send_control(c, data);
    return await_reply(seq, c.op, dst, c.n);
  }
  [[noreturn]] void throw_control_timeout(wire::ControlOp op) const {
    throw TimeoutError(fmt::format("remote worker {}: no reply to {} within {} ms", where_,
                                   wire::to_string(op), spec_.control_timeout.count()));
  }
  void check_usable() const {
    if (!connected_) {
      throw UsageError(
          fmt::format("remote worker {}: not connected (call Worker::init first)", spec_.endpoint));
    }
    if (broken_.load(std::memory_order_acquire)) throw TransportError(death_message());
  }

  void fail_from_current() noexcept {
    Fault why;
    fault_from_current_exception(why);
    fail(why.message);
  }
  /// Gives the link up for good: the first reason wins.
  void fail(const std::string& why) noexcept {
    {
      std::lock_guard lk(death_mu_);
      if (death_.empty()) {
        try {
          death_ = why;
        } catch (...) {
          death_.clear();
        }
      }
    }
    broken_.store(true, std::memory_order_release);
    close_socket();
  }
  [[nodiscard]] std::string death_message() const {
    std::lock_guard lk(death_mu_);
    reported_ = true;
    return fmt::format("the link to remote worker {} is down: {}", spec_.endpoint,
                       death_.empty() ? std::string("it was closed") : death_);
  }
  void close_socket() noexcept {
    boost::system::error_code ignored;
    if (sock_.is_open()) {
      sock_.shutdown(tcp::socket::shutdown_both, ignored);
      sock_.close(ignored);
    }
  }

  RemoteWorkerSpec spec_;
  std::uint32_t worker_;
  std::string where_;
  asio::io_context io_{1};
  tcp::socket sock_;
  RemoteInfo info_;
  std::uint64_t session_ = 0;
  std::uint64_t tx_seq_ = 0;
  std::uint64_t rx_seq_ = 0;
  SteadyClock::time_point last_tx_ = SteadyClock::now();
  SteadyClock::time_point last_rx_ = SteadyClock::now();
  std::vector<std::byte> wbuf_;
  std::vector<std::byte> rbuf_;
  std::size_t rpos_ = 0, rend_ = 0;
  std::deque<InFlight> inflight_;
  bool trace_unsent_ = false;  ///< a traced TASK is queued but not yet stamped
  ClockSync clock_;            ///< the remote's clock against this one (traced tasks)
  LiveBuffers live_;
  bool connected_ = false;
  std::atomic<bool> broken_{false};
  std::mutex mu_;
  mutable std::mutex death_mu_;
  std::string death_;
  mutable bool reported_ = false;
};

}  // namespace simpler::detail
