// Remote L3 faults, end to end over loopback: a session, the whole server or the client killed
// mid-task; a hang past the task's deadline; heartbeat loss; a wrong token; garbage and bad frames
// at the server's port; the session limit. Each case checks what the parent sees (which task
// failed, how, naming which remote), what the server side is left with (no stray process), and
// that the server serves a fresh client afterwards.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <simpler/simpler.hpp>

#include "support/gate.hpp"
#include "support/matchers.hpp"
#include "support/remote_probes.hpp"
#include "support/remote_server.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_remote_faults {

using namespace simpler;
using namespace simpler::testing;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

constexpr std::uint64_t kHoldMs = 20'000;  // far past every bound below: only a fault ends it

RemoteServerOptions faults_server_options() {
  RemoteServerOptions o;
  o.worker.num_sub_workers = 1;  // forked: the session has a child of its own
  o.worker.heap_ring_size = std::size_t{4} << 20;
  o.buffer_pool_bytes = std::size_t{64} << 20;
  o.log = false;
  return o;
}

/// Served: "hold" (a sub task that signals the beacon, then sleeps scalar 0 ms; reads and writes
/// tensor 0 if given), "stall" (the orchestration function itself signals, then sleeps: nothing
/// on the remote can stop it), "bump" (tensor 0, one Int64, += scalar 0 on a sub task).
RemoteServer::Setup fault_setup(int beacon) {
  return [beacon](RemoteSession& rs) {
    Worker& w = rs.worker();
    const auto hold = w.register_sub("hold", [beacon](TaskArgsView v) {
      Beacon::signal(beacon);
      std::this_thread::sleep_for(Millis(v.scalar(0)));
    });
    const auto bump = w.register_sub("bump", [](TaskArgsView v) {
      *v.tensor(0).as<std::int64_t>() += static_cast<std::int64_t>(v.scalar(0));
    });
    rs.serve_orch("hold", [hold](Orchestrator& o, TaskArgsView v, const CallConfig&) {
      TaskArgs a;
      if (v.tensor_count > 0) a.add_tensor(v.tensor(0), TensorArgType::InOut);
      a.add_scalar(v.scalar(0));
      o.submit_sub(hold, a);
    });
    rs.serve_orch("stall", [beacon](Orchestrator&, TaskArgsView v, const CallConfig&) {
      Beacon::signal(beacon);
      std::this_thread::sleep_for(Millis(v.scalar(0)));
    });
    rs.serve_orch("bump", [bump](Orchestrator& o, TaskArgsView v, const CallConfig&) {
      o.submit_sub(
          bump, TaskArgs().add_tensor(v.tensor(0), TensorArgType::InOut).add_scalar(v.scalar(0)));
    });
  };
}

/// The parent: an L4 Worker with one local sub worker (a thread) and one remote worker.
struct Parent {
  explicit Parent(RemoteWorkerSpec spec) : w(options()) {
    const auto none = [](Orchestrator&, TaskArgsView, const CallConfig&) {};
    hold = w.register_orch("hold", none);
    stall = w.register_orch("stall", none);
    bump = w.register_orch("bump", none);
    count = w.register_sub("count", [this](TaskArgsView) { ++local_done; });
    remote = w.add_remote_worker(std::move(spec));
  }
  static WorkerOptions options() {
    WorkerOptions o;
    o.level = 4;
    o.num_sub_workers = 1;
    o.child_mode = ChildMode::Thread;
    o.heap_ring_size = std::size_t{4} << 20;
    return o;
  }
  /// A round trip through the remote: 41 + 1 there, read back.
  std::int64_t bumped() {
    const RemoteBuffer b = w.remote_alloc(remote, sizeof(std::int64_t));
    std::int64_t v = 41;
    w.copy_to_remote(b, 0, &v, sizeof v);
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      o.submit_next_level(bump,
                          TaskArgs()
                              .add_tensor(b.tensor_of<std::int64_t>(0, 1), TensorArgType::InOut)
                              .add_scalar(1),
                          {}, remote);
    });
    w.copy_from_remote(b, 0, &v, sizeof v);
    w.remote_free(b);
    return v;
  }

  Worker w;
  CallableHandle hold, stall, bump, count;
  WorkerId remote = 0;
  std::atomic<int> local_done{0};
};

ContinuousTensor one(std::int64_t& x) {
  return make_tensor(&x, {1}, DataType::Int64);
}

/// close() returns within a few seconds; if it throws, it names the remote.
void check_close(Worker& w, const std::string& endpoint) {
  const auto start = SteadyClock::now();
  try {
    w.close();
  } catch (const TransportError& e) {
    CHECK_THAT(std::string(e.what()), Contains(endpoint));
  }
  CHECK(SteadyClock::now() - start < 5s);
}

/// Runs "hold" on the remote with a dependent "bump" on the same tensor (its downstream) and
/// independent local sub tasks; `fault()` is called once the remote task is running (false: it
/// could not strike, and stopped the server to end the run). Expects the
/// hold task to fail as an endpoint failure naming the remote, the downstream to end failed
/// without running, and the local work to complete.
template <class Fault>
void expect_endpoint_failure(ServerProcess& server, Beacon& beacon, Fault fault,
                             const char* cause) {
  Parent p(server.spec());
  p.w.init();
  const RemoteBuffer b = p.w.remote_alloc(p.remote, sizeof(std::int64_t));
  const ContinuousTensor t = b.tensor_of<std::int64_t>(0, 1);
  std::int64_t x = 0;
  bool started = false;
  bool struck = false;
  bool downstream_failed = false;
  std::optional<TaskError> error;
  try {
    p.w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      o.submit_next_level(
          p.hold, TaskArgs().add_tensor(t, TensorArgType::InOut).add_scalar(kHoldMs), {}, p.remote);
      const auto down = o.submit_next_level(
          p.bump, TaskArgs().add_tensor(t, TensorArgType::InOut).add_scalar(1), {}, p.remote);
      for (int i = 0; i < 4; ++i)
        o.submit_sub(p.count, TaskArgs().add_tensor(one(x), TensorArgType::InOut));
      started = beacon.wait();
      if (!started) {
        server.stop(SIGKILL);  // end the run now; the checks below fail
        return;
      }
      struck = fault();
      downstream_failed =
          eventually([&] { return o.state_of(down.slot_id) == TaskState::Failed; }, 10s);
    });
  } catch (const TaskError& e) {
    error = e;
  }
  INFO(cause);
  REQUIRE(started);
  REQUIRE(struck);
  REQUIRE(error.has_value());
  INFO(error->what());
  CHECK(error->outcome() == Outcome::EndpointFailure);
  CHECK(error->callable() == "hold");
  CHECK_THAT(std::string(error->what()), Contains(server.endpoint()));
  CHECK(downstream_failed);
  CHECK(p.local_done == 4);
  check_close(p.w, server.endpoint());
}

/// The body of a client process: connects to `server`, holds a task there (kHoldMs).
auto holding_client(ServerProcess& server) {
  return [&server] {
    Parent p(server.spec());
    p.w.init();
    const RemoteBuffer b = p.w.remote_alloc(p.remote, 64);
    p.w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      o.submit_next_level(p.hold,
                          TaskArgs()
                              .add_tensor(b.tensor_of<std::int64_t>(0, 8), TensorArgType::InOut)
                              .add_scalar(kHoldMs),
                          {}, p.remote);
    });
    return 0;
  };
}

/// Whether every process of `tree` ended and `server` has no child left.
bool all_gone(const ServerProcess& server, const std::vector<pid_t>& tree) {
  if (!children_of(server.pid()).empty()) return false;
  for (pid_t pid : tree)
    if (!process_gone(pid)) return false;
  return true;
}

/// Whether the remote lanes of `w` still have their links (the lane thread's idle tick gives a
/// link up when the remote is gone).
bool remotes_alive(Worker& w) {
  bool alive = true;
  w.scheduler().for_each_lane([&](auto& lane) {
    using Lane = std::remove_cvref_t<decltype(lane)>;
    if constexpr (std::is_same_v<typename Lane::leaf_type, RemoteL3>) {
      alive = alive && lane.endpoint().alive();
    }
  });
  return alive;
}
}  // namespace

TEST_CASE("a remote session killed mid-task fails its task as an endpoint failure",
          "[remote][faults]") {
  Beacon beacon;
  ServerProcess server(faults_server_options(), fault_setup(beacon.write_fd()));
  pid_t session = 0;
  expect_endpoint_failure(
      server, beacon,
      [&] {
        const auto sessions = children_of(server.pid());
        if (sessions.size() != 1) {
          server.stop(SIGKILL);
          return false;
        }
        session = sessions[0];
        return ::kill(session, SIGKILL) == 0;
      },
      "the session process was SIGKILLed");
  CHECK(poll_until([&] { return process_gone(session); }, 5s));

  // The server lives on and serves a fresh session.
  Parent again(server.spec());
  again.w.init();
  CHECK(again.bumped() == 42);
}

TEST_CASE("a remote server killed mid-task fails its task as an endpoint failure",
          "[remote][faults]") {
  Beacon beacon;
  ServerProcess server(faults_server_options(), fault_setup(beacon.write_fd()));
  std::vector<pid_t> tree;
  expect_endpoint_failure(
      server, beacon,
      [&] {
        tree = descendants_of(server.pid());
        server.stop(SIGKILL);
        return true;
      },
      "the server process was SIGKILLed");
  // Its session and the session's forked sub die with it (PR_SET_PDEATHSIG).
  CHECK(tree.size() >= 2);
  CHECK(poll_until([&] { return all_gone(server, tree); }, 5s));
}

TEST_CASE("a client killed mid-task leaves no session behind and the server serves the next",
          "[remote][faults]") {
  Beacon beacon;
  ServerProcess server(faults_server_options(), fault_setup(beacon.write_fd()));
  // The client in its own process, forked before any Worker exists here.
  ChildProcess client(holding_client(server));
  REQUIRE(beacon.wait());
  REQUIRE(children_of(server.pid()).size() == 1);
  const std::vector<pid_t> tree = descendants_of(server.pid());
  CHECK(tree.size() >= 2);  // the session and its forked sub
  client.stop(SIGKILL);

  // The session sees the connection drop, ends, and takes its children with it.
  CHECK(poll_until([&] { return all_gone(server, tree); }, 5s));

  Parent fresh(server.spec());
  fresh.w.init();
  CHECK(fresh.bumped() == 42);
  CHECK(children_of(server.pid()).size() == 1);
}

TEST_CASE("a client that goes silent is dropped by its session at the heartbeat timeout",
          "[remote][faults]") {
  Beacon beacon;
  ServerProcess server(faults_server_options(), fault_setup(beacon.write_fd()));
  ChildProcess client(holding_client(server));
  REQUIRE(beacon.wait());
  const std::vector<pid_t> tree = descendants_of(server.pid());
  CHECK(tree.size() >= 2);
  ::kill(client.pid(), SIGSTOP);  // the connection stays open, nothing arrives on it
  // Heartbeat timeout (2 s), then the abandoned task's drain (2 s).
  CHECK(poll_until([&] { return all_gone(server, tree); }, 8s));
  ::kill(client.pid(), SIGCONT);
}

TEST_CASE("a remote session that dies between runs is noticed while the parent is idle",
          "[remote][faults]") {
  Beacon beacon;
  ServerProcess server(faults_server_options(), fault_setup(beacon.write_fd()));
  Parent p(server.spec());
  p.w.init();
  CHECK(p.bumped() == 42);
  const RemoteBuffer b = p.w.remote_alloc(p.remote, sizeof(std::int64_t));
  const auto sessions = children_of(server.pid());
  REQUIRE(sessions.size() == 1);
  ::kill(sessions[0], SIGKILL);
  // No task is running: the heartbeat exchange of the idle lane finds the link gone.
  REQUIRE(poll_until([&] { return !remotes_alive(p.w); }, 5s));

  SECTION("copies and the next task fail naming the remote") {
    std::int64_t v = 1;
    CHECK_THROWS_MATCHES(p.w.copy_to_remote(b, 0, &v, sizeof v), TransportError,
                         WhatContains(server.endpoint()));
    std::optional<TaskError> error;
    try {
      p.w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
        o.submit_next_level(p.bump,
                            TaskArgs()
                                .add_tensor(b.tensor_of<std::int64_t>(0, 1), TensorArgType::InOut)
                                .add_scalar(1),
                            {}, p.remote);
      });
    } catch (const TaskError& e) {
      error = e;
    }
    REQUIRE(error.has_value());
    INFO(error->what());
    CHECK(error->outcome() == Outcome::EndpointFailure);
    CHECK(error->callable() == "bump");
    CHECK_THAT(std::string(error->what()), Contains(server.endpoint()));
    check_close(p.w, server.endpoint());
  }
  SECTION("close() reports it") {
    CHECK_THROWS_MATCHES(p.w.close(), TransportError, WhatContains(server.endpoint()));
  }
}

TEST_CASE("a remote task past its deadline fails and ends its session", "[remote][faults]") {
  Beacon beacon;
  ServerProcess server(faults_server_options(), fault_setup(beacon.write_fd()));
  Parent p(server.spec());
  p.w.init();
  CallConfig config;
  config.timeout = 500ms;
  pid_t session = 0;
  std::optional<TaskError> error;
  const auto start = SteadyClock::now();
  try {
    p.w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      o.submit_next_level(p.stall, TaskArgs().add_scalar(kHoldMs), config, p.remote);
      if (beacon.wait()) {
        const auto sessions = children_of(server.pid());
        if (sessions.size() == 1) session = sessions[0];
      }
    });
  } catch (const TaskError& e) {
    error = e;
  }
  const auto took = SteadyClock::now() - start;
  REQUIRE(error.has_value());
  INFO(error->what());
  CHECK(error->outcome() == Outcome::EndpointFailure);
  CHECK(error->error_kind() == ErrorKind::Timeout);
  CHECK(error->callable() == "stall");
  CHECK_THAT(std::string(error->what()), Contains(server.endpoint()));
  CHECK_THAT(std::string(error->what()), Contains("deadline of 500 ms"));
  CHECK(took < 5s);  // the deadline, not the 20 s the function sleeps
  // A remote task cannot be stopped on its own: the session was ended. Its process exits once
  // the running task is abandoned (RemoteServerOptions::drain_timeout, 2 s).
  REQUIRE(session != 0);
  CHECK(poll_until([&] { return process_gone(session) && children_of(server.pid()).empty(); }, 6s));
  check_close(p.w, server.endpoint());
}

TEST_CASE("a stopped remote session fails its running task at the heartbeat timeout",
          "[remote][faults]") {
  Beacon beacon;
  ServerProcess server(faults_server_options(), fault_setup(beacon.write_fd()));
  Parent p(server.spec());  // heartbeat timeout 2 s
  p.w.init();
  struct Continue {
    pid_t pid = 0;
    ~Continue() {
      if (pid > 0) ::kill(pid, SIGCONT);
    }
  } stopped;
  std::optional<TaskError> error;
  SteadyClock::time_point stop_at{};
  try {
    p.w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      o.submit_next_level(p.hold, TaskArgs().add_scalar(kHoldMs), {}, p.remote);
      if (!beacon.wait()) return;
      const auto sessions = children_of(server.pid());
      if (sessions.size() != 1) return;
      stopped.pid = sessions[0];
      stop_at = SteadyClock::now();
      ::kill(stopped.pid, SIGSTOP);
    });
  } catch (const TaskError& e) {
    error = e;
  }
  const auto took = SteadyClock::now() - stop_at;
  REQUIRE(stopped.pid != 0);
  REQUIRE(error.has_value());
  INFO(error->what());
  CHECK(error->outcome() == Outcome::EndpointFailure);
  CHECK(error->callable() == "hold");
  CHECK_THAT(std::string(error->what()), Contains(server.endpoint()));
  CHECK_THAT(std::string(error->what()), Contains("heartbeat timeout"));
  CHECK(took < 2s + 3s);
  // Woken up, the session finds its client gone and ends.
  const pid_t session = std::exchange(stopped.pid, 0);
  ::kill(session, SIGCONT);
  CHECK(poll_until([&] { return process_gone(session); }, 6s));
  check_close(p.w, server.endpoint());
}

TEST_CASE("a client with the wrong token is refused before a session is forked",
          "[remote][faults][auth]") {
  RemoteServerOptions options = faults_server_options();
  options.token = "the right token";
  Beacon beacon;
  ServerProcess server(options, fault_setup(beacon.write_fd()));
  {
    Parent wrong(server.spec("a wrong token"));
    CHECK_THROWS_MATCHES(wrong.w.init(), TransportError, WhatContains("tokens differ"));
  }
  CHECK(children_of(server.pid()).empty());

  Parent right(server.spec("the right token"));
  right.w.init();
  CHECK(right.bumped() == 42);
  CHECK(children_of(server.pid()).size() == 1);
}

TEST_CASE("a server on a non-loopback address needs a token", "[remote][faults][auth]") {
  RemoteServerOptions options = faults_server_options();
  options.listen = "0.0.0.0:0";
  CHECK_THROWS_MATCHES(RemoteServer(options, fault_setup(-1)), UsageError,
                       WhatContains("without a token"));
}

namespace {

wire::AuthBegin auth_begin() {
  wire::AuthBegin b;
  b.client_nonce = wire::random_nonce();
  b.heartbeat_ms = 100;
  b.heartbeat_timeout_ms = 2000;
  return b;
}

template <class M>
std::vector<std::byte> payload_of(const M& m) {
  std::vector<std::byte> out;
  wire::encode(m, out);
  return out;
}

constexpr std::uint64_t kSession = 0x5e55'1011'cafe'0001;

/// Authenticates by hand on `c` (AUTH_BEGIN, AUTH_CHALLENGE, AUTH_PROOF) and waits for the
/// session's HELLO. The next frame the client sends is sequence 3.
bool authenticate(RawClient& c, const std::string& token) {
  const wire::AuthBegin b = auth_begin();
  if (!c.send(frame_bytes(wire::FrameType::AuthBegin, kSession, 0, 1, payload_of(b)))) return false;
  const auto challenge = c.read_frame();
  if (!challenge || challenge->first.type != wire::FrameType::AuthChallenge) return false;
  const auto ch = wire::decode_auth_challenge(challenge->second);
  wire::AuthProof proof;
  proof.client_proof =
      wire::session_proof(token, wire::kClientRole, kSession, ch.server_nonce, b.client_nonce);
  if (!c.send(frame_bytes(wire::FrameType::AuthProof, kSession, 0, 2, payload_of(proof))))
    return false;
  const auto hello = c.read_frame(20s);
  return hello && hello->first.type == wire::FrameType::Hello &&
         wire::decode_hello(hello->second).status == wire::Status::Ok;
}

}  // namespace

TEST_CASE("garbage at the server's port is dropped without a session", "[remote][faults][wire]") {
  RemoteServerOptions options = faults_server_options();
  options.auth_timeout = 300ms;
  options.max_sessions = 2;  // a leaked connection slot would refuse the real client below
  Beacon beacon;
  ServerProcess server(options, fault_setup(beacon.write_fd()));
  const std::vector<std::byte> begin =
      frame_bytes(wire::FrameType::AuthBegin, kSession, 0, 1, payload_of(auth_begin()));

  SECTION("random bytes") {
    std::mt19937 rng(7);
    std::vector<std::byte> junk(512);
    for (auto& b : junk) b = static_cast<std::byte>(rng());
    RawClient c(server.port());
    c.send(junk);
    CHECK(c.closed_by_peer(5s));
  }
  SECTION("a truncated header, then silence") {
    RawClient c(server.port());
    c.send(std::span(begin).first(17));
    CHECK(c.closed_by_peer(5s));  // at the auth timeout
  }
  SECTION("a valid header announcing a huge payload") {
    wire::FrameHeader h;
    h.type = wire::FrameType::AuthBegin;
    h.session = kSession;
    h.sequence = 1;
    h.length = 0xfff0'0000;
    std::vector<std::byte> head(wire::kHeaderBytes);
    wire::encode_header(h, head.data());
    RawClient c(server.port());
    c.send(head);
    c.send(std::vector<std::byte>(4096, std::byte{0x55}));
    CHECK(c.closed_by_peer(5s));
  }
  SECTION("a first frame that is not AUTH_BEGIN") {
    RawClient c(server.port());
    c.send(frame_bytes(wire::FrameType::Task, kSession, 0, 1));
    CHECK(c.closed_by_peer(5s));
  }
  SECTION("AUTH_BEGIN, then silence past the auth timeout") {
    RawClient c(server.port());
    c.send(begin);
    const auto challenge = c.read_frame(5s);
    REQUIRE(challenge.has_value());
    CHECK(challenge->first.type == wire::FrameType::AuthChallenge);
    CHECK(c.closed_by_peer(5s));
  }
  SECTION("a wrong proof") {
    RawClient c(server.port());
    CHECK_FALSE(authenticate(c, "not the token"));  // the server's token is empty
    CHECK(c.closed_by_peer(5s));
  }
  SECTION("connect, then close") {
    RawClient c(server.port());
    c.close();
  }
  SECTION("many of the above at once") {
    std::vector<std::unique_ptr<RawClient>> clients;
    for (int i = 0; i < 8; ++i) {
      clients.push_back(std::make_unique<RawClient>(server.port()));
      clients.back()->send(std::span(begin).first(static_cast<std::size_t>(i) * 5));
    }
    for (auto& c : clients) CHECK(c->closed_by_peer(5s));
  }
  CHECK(children_of(server.pid()).empty());

  Parent p(server.spec());
  p.w.init();
  CHECK(p.bumped() == 42);
  CHECK(children_of(server.pid()).size() == 1);
}

TEST_CASE("a bad frame after authentication ends the session, not the server",
          "[remote][faults][wire]") {
  Beacon beacon;
  ServerProcess server(faults_server_options(), fault_setup(beacon.write_fd()));
  RawClient c(server.port());
  REQUIRE(authenticate(c, ""));
  const auto sessions = children_of(server.pid());
  REQUIRE(sessions.size() == 1);

  SECTION("a frame out of sequence") {
    c.send(frame_bytes(wire::FrameType::Heartbeat, kSession, 0, 9));
  }
  SECTION("a frame of an unknown type") {
    auto bytes = frame_bytes(wire::FrameType::Heartbeat, kSession, 0, 3);
    bytes[6] = std::byte{0xee};  // the type byte
    c.send(bytes);
  }
  SECTION("a frame only a server sends") {
    wire::Hello hello;
    c.send(frame_bytes(wire::FrameType::Hello, kSession, 0, 3, payload_of(hello)));
  }
  SECTION("a frame of another session") {
    c.send(frame_bytes(wire::FrameType::Heartbeat, kSession + 1, 0, 3));
  }
  CHECK(c.closed_by_peer(5s));
  CHECK(poll_until([&] { return process_gone(sessions[0]) && children_of(server.pid()).empty(); },
                   5s));

  Parent p(server.spec());
  p.w.init();
  CHECK(p.bumped() == 42);
}

TEST_CASE("a server at its session limit refuses the next client and keeps serving the first",
          "[remote][faults]") {
  RemoteServerOptions options = faults_server_options();
  options.max_sessions = 1;
  Beacon beacon;
  ServerProcess server(options, fault_setup(beacon.write_fd()));
  Parent first(server.spec());
  first.w.init();
  CHECK(first.bumped() == 42);
  {
    Parent second(server.spec());
    CHECK_THROWS_MATCHES(second.w.init(), TransportError, WhatContains(server.endpoint()));
  }
  CHECK(children_of(server.pid()).size() == 1);
  CHECK(first.bumped() == 42);
}

}  // namespace simpler_test_remote_faults
