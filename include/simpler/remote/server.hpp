// simpler — RemoteServer: serves remote L3 sessions to parents on other hosts.
//
// The accepting process is single-threaded (Boost.Asio, one io_context): it authenticates each
// connection (the challenge-response of remote/auth.hpp, bounded by auth_timeout) and forks a
// fresh session process for each that passes. The session process maps its buffer pool, builds
// the inner L3 Worker with the user's `setup`, init()s it (all its forks happen here, before any
// thread of the session starts), sends HELLO, and then serves frames with two threads: an I/O
// thread (reads, writes, heartbeats, controls) and an executor that runs TASKs one after another
// on the inner Worker. When the session ends for any reason (SHUTDOWN, EOF, heartbeat loss, a
// protocol error) it closes the inner Worker and exits; its children die with it
// (PR_SET_PDEATHSIG) and its buffers are anonymous memory, so nothing is left behind.
#pragma once

#include <fmt/format.h>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

// Asio's scheduler trips -Wnull-dereference once inlined into a -Werror build: not our code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wnull-dereference"
#include <boost/asio/buffer.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#pragma GCC diagnostic pop

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "simpler/detail/buffer_pool.hpp"
#include "simpler/detail/event_count.hpp"
#include "simpler/detail/process.hpp"
#include "simpler/detail/remote_link.hpp"
#include "simpler/detail/served_task.hpp"
#include "simpler/error.hpp"
#include "simpler/log.hpp"
#include "simpler/remote/auth.hpp"
#include "simpler/remote/session.hpp"
#include "simpler/remote/wire.hpp"
#include "simpler/worker.hpp"

namespace simpler {

struct RemoteServerOptions {
  /// "host:port" to listen on; port 0 picks a free one (RemoteServer::port()). Anything but a
  /// loopback address needs a token.
  std::string listen = "127.0.0.1:0";
  /// The shared secret clients prove they hold (RemoteWorkerSpec::token).
  std::string token;
  /// The inner L3 Worker of each session.
  WorkerOptions worker;
  /// The largest frame payload accepted (copies travel in chunks of at most this).
  std::uint32_t max_payload = 16U << 20;
  /// Each session's buffer pool: reserved address space (MAP_NORESERVE), shared with the inner
  /// Worker's forked children; every remote_alloc of the session comes from it.
  std::uint64_t buffer_pool_bytes = std::uint64_t{1} << 30;
  /// The largest single buffer; 0 = the pool's size.
  std::uint64_t max_buffer_bytes = 0;
  /// Sessions (and connections still authenticating) at once; more are refused.
  std::uint32_t max_sessions = 16;
  /// A connection must finish authenticating within this, or it is dropped.
  std::chrono::milliseconds auth_timeout{5'000};
  /// Shortest heartbeat period and longest heartbeat timeout a client may ask for.
  std::chrono::milliseconds min_heartbeat_period{10};
  std::chrono::milliseconds max_heartbeat_timeout{600'000};
  /// At a session's end, how long its running task may take to finish before the session exits
  /// anyway (its children die with it).
  std::chrono::milliseconds drain_timeout{2'000};
  /// Log connections, refusals and session ends through the logger (<simpler/log.hpp>): sessions
  /// at info, refusals and failures at warn. False: never.
  bool log = true;
};

class RemoteServer {
 public:
  using Setup = std::function<void(RemoteSession&)>;

  /// Binds the listening socket (so port() is known at once). Throws UsageError for a
  /// non-loopback address without a token or bad limits, SystemError/TransportError when the
  /// address cannot be bound.
  RemoteServer(RemoteServerOptions options, Setup setup)
      : options_(std::move(options)), setup_(std::move(setup)), acceptor_(io_), signals_(io_) {
    if (!setup_) throw UsageError("RemoteServer: the setup function is empty");
    const auto ep = detail::parse_endpoint(options_.listen, "RemoteServerOptions::listen");
    if (!ep.address().is_loopback() && options_.token.empty()) {
      throw UsageError(fmt::format(
          "RemoteServerOptions: listening on {} (not a loopback address) without a token would "
          "let anyone who reaches it run code here; set RemoteServerOptions::token",
          options_.listen));
    }
    if (options_.max_payload < 65536) {
      throw UsageError(fmt::format("RemoteServerOptions::max_payload is {}; it must be >= 65536",
                                   options_.max_payload));
    }
    if (options_.buffer_pool_bytes == 0) {
      throw UsageError("RemoteServerOptions::buffer_pool_bytes is 0");
    }
    if (options_.max_buffer_bytes == 0 || options_.max_buffer_bytes > options_.buffer_pool_bytes) {
      options_.max_buffer_bytes = options_.buffer_pool_bytes;
    }
    if (options_.max_sessions == 0) throw UsageError("RemoteServerOptions::max_sessions is 0");
    if (options_.auth_timeout.count() <= 0) {
      throw UsageError("RemoteServerOptions::auth_timeout must be > 0");
    }
    boost::system::error_code ec;
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(detail::tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(64, ec);
    if (ec) {
      throw TransportError(
          fmt::format("RemoteServer: cannot listen on {}: {}", options_.listen, ec.message()));
    }
    port_ = acceptor_.local_endpoint().port();
    pid_ = ::getpid();
  }
  RemoteServer(const RemoteServer&) = delete;
  RemoteServer& operator=(const RemoteServer&) = delete;
  ~RemoteServer() {
    if (::getpid() != pid_) return;  // a session process never tears the server down
    end_sessions();
  }

  [[nodiscard]] std::uint16_t port() const noexcept { return port_; }
  /// Live session processes.
  [[nodiscard]] std::size_t sessions() const noexcept { return sessions_.size(); }

  /// Accepts and serves until stop(). Single-threaded: sessions run in their own processes.
  /// Ends the sessions still running when it returns.
  void serve() {
    signals_.add(SIGCHLD);
    watch_children();
    accept_next();
    io_.run();
    if (::getpid() == pid_) end_sessions();
  }
  /// Makes serve() return (from any thread).
  void stop() { io_.stop(); }
  /// Makes serve() return on SIGTERM or SIGINT, for server programs: the signals are taken by
  /// this server's io_context, so no handler runs in signal context. Call before serve(). A
  /// session process has them back at their default action (its copy of the set is cleared).
  void stop_on_signals() {
    signals_.add(SIGTERM);
    signals_.add(SIGINT);
  }

 private:
  using tcp = detail::tcp;
  using Clock = std::chrono::steady_clock;

  /// A connection that has not authenticated yet (in the accepting process).
  struct Pending : std::enable_shared_from_this<Pending> {
    explicit Pending(detail::asio::io_context& io) : sock(io), timer(io) {}
    tcp::socket sock;
    detail::asio::steady_timer timer;
    std::array<std::byte, wire::kHeaderBytes> head{};
    std::vector<std::byte> payload;
    wire::FrameHeader h;
    wire::AuthBegin begin;
    wire::Nonce server_nonce{};
    std::string peer;
    std::vector<std::byte> out;
  };

  /// A line of the server's (info; warn for what went wrong), through the logger.
  template <class... A>
  void log(fmt::format_string<A...> f, A&&... a) const {
    if (options_.log) detail::log_as(LogLevel::Info, "remote server", f, std::forward<A>(a)...);
  }
  template <class... A>
  void warn(fmt::format_string<A...> f, A&&... a) const {
    if (options_.log) detail::log_as(LogLevel::Warn, "remote server", f, std::forward<A>(a)...);
  }

  void watch_children() {
    signals_.async_wait([this](const boost::system::error_code& ec, int sig) {
      if (ec) return;
      if (sig == SIGTERM || sig == SIGINT) {  // only there after stop_on_signals()
        log("stopping on signal {}", sig);
        io_.stop();
        return;
      }
      reap(false);
      watch_children();
    });
  }
  /// Reaps ended sessions (only this server's children: the process may have others).
  void reap(bool block) {
    for (auto it = sessions_.begin(); it != sessions_.end();) {
      int status = 0;
      const pid_t r = ::waitpid(*it, &status, block ? 0 : WNOHANG);
      if (r == *it || (r < 0 && errno == ECHILD)) {
        if (r == *it && WIFSIGNALED(status)) {
          warn("session process {} was killed by signal {}", *it, WTERMSIG(status));
        }
        it = sessions_.erase(it);
      } else {
        ++it;
      }
    }
  }
  void end_sessions() noexcept {
    for (pid_t p : sessions_) ::kill(p, SIGKILL);
    reap(true);
  }

  void accept_next() {
    auto p = std::make_shared<Pending>(io_);
    acceptor_.async_accept(p->sock, [this, p](const boost::system::error_code& ec) {
      if (ec == detail::asio::error::operation_aborted) return;
      if (!ec) start_auth(p);
      accept_next();
    });
  }

  void drop(const std::shared_ptr<Pending>& p, const std::string& why) {
    if (!p->sock.is_open()) return;  // dropped already (the timer and a failed read both land here)
    warn("dropped connection from {}: {}", p->peer, why);
    boost::system::error_code ignored;
    p->timer.cancel();
    p->sock.close(ignored);
    --pending_;
  }

  void start_auth(const std::shared_ptr<Pending>& p) {
    boost::system::error_code ec;
    const auto remote = p->sock.remote_endpoint(ec);
    p->peer =
        ec ? std::string("?") : fmt::format("{}:{}", remote.address().to_string(), remote.port());
    ++pending_;
    reap(false);
    if (sessions_.size() + pending_ > options_.max_sessions) {
      drop(p, fmt::format("{} sessions are running, the limit (max_sessions)", sessions_.size()));
      return;
    }
    p->timer.expires_after(options_.auth_timeout);
    p->timer.async_wait([this, p](const boost::system::error_code& e) {
      if (!e && p->sock.is_open()) {
        drop(p, fmt::format("it did not authenticate within {} ms", options_.auth_timeout.count()));
      }
    });
    read_frame(p, [this, p] { on_auth_begin(p); });
  }

  /// Reads one frame (header, then a payload of at most 4 KiB) of a pending connection.
  template <class Then>
  void read_frame(const std::shared_ptr<Pending>& p, Then then) {
    detail::asio::async_read(
        p->sock, detail::asio::buffer(p->head),
        [this, p, then](const boost::system::error_code& ec, std::size_t) {
          if (ec) return drop(p, fmt::format("read failed: {}", ec.message()));
          try {
            p->h = wire::decode_header(p->head);
            if (p->h.length > 4096) {
              throw ProtocolError(fmt::format("{} frame: payload length {} during authentication",
                                              wire::to_string(p->h.type), p->h.length));
            }
          } catch (const std::exception& e) {
            return drop(p, e.what());
          }
          p->payload.resize(p->h.length);
          detail::asio::async_read(
              p->sock, detail::asio::buffer(p->payload),
              [this, p, then](const boost::system::error_code& e2, std::size_t) {
                if (e2) return drop(p, fmt::format("read failed: {}", e2.message()));
                try {
                  then();
                } catch (const std::exception& e) {
                  drop(p, e.what());
                }
              });
        });
  }

  void on_auth_begin(const std::shared_ptr<Pending>& p) {
    if (p->h.type != wire::FrameType::AuthBegin) {
      throw ProtocolError(
          fmt::format("the first frame is {}, expected AUTH_BEGIN", wire::to_string(p->h.type)));
    }
    if (p->h.session == 0) throw ProtocolError("AUTH_BEGIN frame: session id is 0");
    wire::check_header(p->h, wire::Expect{p->h.session, p->h.worker, 1, 4096});
    p->begin = wire::decode_auth_begin(p->payload);
    if (p->begin.heartbeat_ms < options_.min_heartbeat_period.count() ||
        p->begin.heartbeat_timeout_ms > options_.max_heartbeat_timeout.count()) {
      throw ProtocolError(fmt::format(
          "AUTH_BEGIN payload: heartbeat {} ms / timeout {} ms is outside this server's bounds "
          "(period >= {} ms, timeout <= {} ms)",
          p->begin.heartbeat_ms, p->begin.heartbeat_timeout_ms,
          options_.min_heartbeat_period.count(), options_.max_heartbeat_timeout.count()));
    }
    wire::AuthChallenge ch;
    ch.server_nonce = p->server_nonce = wire::random_nonce();
    ch.server_proof = wire::session_proof(options_.token, wire::kServerRole, p->h.session,
                                          p->begin.client_nonce, ch.server_nonce);
    p->out.assign(wire::kHeaderBytes, std::byte{0});
    wire::encode(ch, p->out);
    wire::FrameHeader h;
    h.type = wire::FrameType::AuthChallenge;
    h.session = p->h.session;
    h.worker = p->h.worker;
    h.sequence = 1;
    h.length = static_cast<std::uint32_t>(p->out.size() - wire::kHeaderBytes);
    wire::encode_header(h, p->out.data());
    detail::asio::async_write(
        p->sock, detail::asio::buffer(p->out),
        [this, p](const boost::system::error_code& ec, std::size_t) {
          if (ec) return drop(p, fmt::format("write failed: {}", ec.message()));
          const std::uint64_t session = p->h.session;
          const std::uint32_t worker = p->h.worker;
          read_frame(p, [this, p, session, worker] { on_auth_proof(p, session, worker); });
        });
  }

  void on_auth_proof(const std::shared_ptr<Pending>& p, std::uint64_t session,
                     std::uint32_t worker) {
    if (p->h.type != wire::FrameType::AuthProof) {
      throw ProtocolError(fmt::format("got {} during authentication, expected AUTH_PROOF",
                                      wire::to_string(p->h.type)));
    }
    wire::check_header(p->h, wire::Expect{session, worker, 2, 4096});
    const auto proof = wire::decode_auth_proof(p->payload);
    const auto want = wire::session_proof(options_.token, wire::kClientRole, session,
                                          p->server_nonce, p->begin.client_nonce);
    if (!wire::proofs_equal(want, proof.client_proof)) {
      return drop(p, "authentication failed: the client does not hold this server's token");
    }
    p->timer.cancel();
    --pending_;
    fork_session(p, session, worker);
  }

  void fork_session(const std::shared_ptr<Pending>& p, std::uint64_t session,
                    std::uint32_t worker) {
    std::fflush(nullptr);
    const pid_t server = ::getpid();
    const pid_t pid = ::fork();
    if (pid < 0) {
      const int err = errno;
      boost::system::error_code ignored;
      p->sock.close(ignored);
      warn("fork for a session of {} failed: {}", p->peer, std::strerror(err));
      return;
    }
    if (pid == 0) {
      detail::become_child_of(server);
      detail::bump_fork_generation();
      int code = 0;
      try {
        io_.notify_fork(detail::asio::io_context::fork_child);
        boost::system::error_code ignored;
        acceptor_.close(ignored);
        signals_.clear(ignored);
        ::signal(SIGCHLD, SIG_DFL);
        const int fd = p->sock.release();
        code = run_session(fd, session, worker, p->begin, p->peer);
      } catch (const std::exception& e) {
        warn("session {:#x}: {}", session, e.what());
        code = 1;
      } catch (...) {
        code = 1;
      }
      std::fflush(nullptr);
      ::_exit(code);
    }
    boost::system::error_code ignored;
    p->sock.close(ignored);
    sessions_.insert(pid);
    log("session {:#x} for worker {} of {} runs in process {}", session, worker, p->peer, pid);
  }

  class Session;
  int run_session(int fd, std::uint64_t session, std::uint32_t worker, const wire::AuthBegin& begin,
                  const std::string& peer);

  RemoteServerOptions options_;
  Setup setup_;
  detail::asio::io_context io_{1};
  tcp::acceptor acceptor_;
  detail::asio::signal_set signals_;
  std::uint16_t port_ = 0;
  pid_t pid_ = 0;
  std::set<pid_t> sessions_;
  std::size_t pending_ = 0;
};

}  // namespace simpler

#include "simpler/detail/remote_session.ipp"
