// A remote L3 on "another host": examples/remote_l3 runs in a network namespace of its own, with
// a private /dev/shm, reached over a veth pair. The parent runs a DAG with copies there, then the
// link is cut during a running task. Needs root and `ip netns` (CI has both); elsewhere the test
// fails, unless SIMPLER_ALLOW_NETNS_SKIP is set (then it passes with a warning: Catch2 2 has no
// SKIP).
#include <catch2/catch.hpp>

#include <fmt/format.h>

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <simpler/simpler.hpp>

#include "support/commands.hpp"
#include "support/gate.hpp"
#include "support/remote_probes.hpp"

// The file's own namespace: the unity build compiles several test files as one unit, and
// their file-local names and using-directives must not meet (tests/CMakeLists.txt).
namespace simpler_test_remote_netns {

#ifndef SIMPLER_EXAMPLE_REMOTE_L3  // tests/CMakeLists.txt sets it when the examples are built
#define SIMPLER_EXAMPLE_REMOTE_L3 ""
#endif

using namespace simpler;
using namespace simpler::testing;
using namespace std::chrono_literals;
using Catch::Matchers::Contains;

namespace {

/// A network namespace with one end of a veth pair, the remote_l3 server in it, and a scratch
/// directory; the destructor takes all of it down, whatever happened.
class NetnsRemote {
 public:
  NetnsRemote() {
    const auto id = static_cast<unsigned>(::getpid());
    ns_ = fmt::format("simpler-{}", id);
    host_if_ = fmt::format("smp{}a", id);
    ns_if_ = fmt::format("smp{}b", id);
    // A /30 of 198.18.0.0/15 (the benchmarking range, never routed) picked by the pid.
    const unsigned net = (198U << 24) | (18U << 16) | ((id % 32768U) << 2);
    host_ip_ = address(net + 1);
    ns_ip_ = address(net + 2);
    char dir[] = "/tmp/simpler-netns-XXXXXX";
    if (::mkdtemp(dir) == nullptr) throw std::runtime_error("mkdtemp failed");
    dir_ = dir;
  }
  NetnsRemote(const NetnsRemote&) = delete;
  NetnsRemote& operator=(const NetnsRemote&) = delete;
  ~NetnsRemote() {
    stop_server();
    // Deleting the namespace deletes the veth pair too; the link delete is for a half setup (it
    // fails quietly when the pair is gone already).
    if (ns_made_) quietly({"ip", "netns", "del", ns_});
    if (link_made_) quietly({"ip", "link", "del", host_if_});
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }

  /// Runs a setup command; on failure the message names it and its output.
  void must(const std::vector<std::string>& argv) {
    const CommandResult r = run_command(argv, dir_ + "/cmd.log");
    if (r.code != 0) {
      throw std::runtime_error(
          fmt::format("`{}` exited with {}: {}", join(argv), r.code, r.output));
    }
  }

  void create_network() {
    must({"ip", "netns", "add", ns_});
    ns_made_ = true;
    must({"ip", "link", "add", host_if_, "type", "veth", "peer", "name", ns_if_});
    link_made_ = true;
    must({"ip", "link", "set", ns_if_, "netns", ns_});
    must({"ip", "addr", "add", host_ip_ + "/30", "dev", host_if_});
    must({"ip", "link", "set", host_if_, "up"});
    must({"ip", "netns", "exec", ns_, "ip", "addr", "add", ns_ip_ + "/30", "dev", ns_if_});
    must({"ip", "netns", "exec", ns_, "ip", "link", "set", ns_if_, "up"});
    must({"ip", "netns", "exec", ns_, "ip", "link", "set", "lo", "up"});
  }

  /// Starts remote_l3 in the namespace (private /dev/shm) and waits for its port. Before this
  /// process starts threads (it forks).
  void start_server(const std::string& token) {
    const std::string token_file = dir_ + "/token";
    std::ofstream(token_file) << token << '\n';
    ::chmod(token_file.c_str(), 0600);
    const std::string port_file = dir_ + "/port";
    const std::string script = fmt::format(
        "mount -t tmpfs tmpfs /dev/shm && exec '{}' --listen {}:0 --token-file '{}' --port-file "
        "'{}' --subs 2",
        SIMPLER_EXAMPLE_REMOTE_L3, ns_ip_, token_file, port_file);
    // ip netns exec and unshare exec their command, and sh execs the server: `server_` ends up
    // being the server itself.
    server_ =
        spawn_tied({"ip", "netns", "exec", ns_, "unshare", "-m", "sh", "-c", script}, server_log());
    const auto end = SteadyClock::now() + 20s;
    while (SteadyClock::now() < end) {
      std::ifstream f(port_file);
      unsigned port = 0;
      if (f >> port && port != 0) {
        port_ = static_cast<std::uint16_t>(port);
        return;
      }
      int status = 0;
      if (::waitpid(server_, &status, WNOHANG) == server_) {
        server_ = -1;
        throw std::runtime_error("remote_l3 exited before it listened: " + slurp(server_log()));
      }
      std::this_thread::sleep_for(20ms);  // waiting on another program's file, not ordering work
    }
    throw std::runtime_error("remote_l3 wrote no port within 20 s: " + slurp(server_log()));
  }

  /// SIGTERM (it stops cleanly), SIGKILL after 5 s; reaps it. Returns its wait status.
  std::optional<int> stop_server() noexcept {
    if (server_ <= 0) return std::nullopt;
    ::kill(server_, SIGTERM);
    int status = 0;
    const auto end = SteadyClock::now() + 5s;
    pid_t r = 0;
    while ((r = ::waitpid(server_, &status, WNOHANG)) == 0 && SteadyClock::now() < end) {
      std::this_thread::sleep_for(10ms);
    }
    if (r != server_) {
      ::kill(server_, SIGKILL);
      while (::waitpid(server_, &status, 0) < 0 && errno == EINTR) {
      }
    }
    server_ = -1;
    return status;
  }

  void quietly(const std::vector<std::string>& argv) noexcept {
    try {
      static_cast<void>(run_command(argv, dir_ + "/cleanup.log"));
    } catch (...) {
      // Cleanup goes on with the next step.
    }
  }

  void cut_link() { must({"ip", "link", "set", host_if_, "down"}); }

  [[nodiscard]] std::string endpoint() const { return fmt::format("{}:{}", ns_ip_, port_); }
  [[nodiscard]] pid_t server_pid() const noexcept { return server_; }
  [[nodiscard]] std::string server_log() const { return dir_ + "/server.log"; }

 private:
  static std::string address(unsigned a) {
    return fmt::format("{}.{}.{}.{}", a >> 24, (a >> 16) & 255, (a >> 8) & 255, a & 255);
  }
  std::string ns_, host_if_, ns_if_, host_ip_, ns_ip_, dir_;
  bool ns_made_ = false;
  bool link_made_ = false;
  pid_t server_ = -1;
  std::uint16_t port_ = 0;
};

/// Why this host cannot run the test, or empty.
std::string netns_unavailable() {
  if (std::string(SIMPLER_EXAMPLE_REMOTE_L3).empty()) {
    return "this build has no examples/remote_l3 (SIMPLER_BUILD_EXAMPLES is OFF)";
  }
  if (::geteuid() != 0) return "it needs root (network namespaces, mounts)";
  char dir[] = "/tmp/simpler-netns-probe-XXXXXX";
  if (::mkdtemp(dir) == nullptr) return "mkdtemp failed";
  const std::string log = std::string(dir) + "/probe.log";
  CommandResult r;
  try {
    CommandOptions quick;
    quick.seconds = 5;
    r = run_command({"ip", "netns", "list"}, log, quick);
  } catch (const std::exception& e) {
    r.output = e.what();
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  if (r.code != 0) return fmt::format("`ip netns list` failed ({}): {}", r.code, r.output);
  return {};
}

}  // namespace

TEST_CASE("a remote L3 in another network namespace runs a DAG and fails fast when cut off",
          "[remote][netns]") {
  if (const std::string why = netns_unavailable(); !why.empty()) {
    if (std::getenv("SIMPLER_ALLOW_NETNS_SKIP") != nullptr) {
      WARN("skipped (SIMPLER_ALLOW_NETNS_SKIP is set): " << why);
      return;
    }
    FAIL("this test runs a remote L3 in a network namespace, and " << why
                                                                   << "; run as root, or set "
                                                                      "SIMPLER_ALLOW_NETNS_SKIP "
                                                                      "to skip it");
  }
  NetnsRemote net;
  net.create_network();
  const std::string token = "netns test token";
  net.start_server(token);

  WorkerOptions wo;
  wo.level = 4;
  Worker w(wo);
  const auto none = [](Orchestrator&, TaskArgsView, const CallConfig&) {};
  const auto fill = w.register_orch("fill", none);
  const auto axpy = w.register_orch("axpy", none);
  const auto sum = w.register_orch("sum", none);
  const auto sleep_ms = w.register_orch("sleep_ms", none);
  RemoteWorkerSpec spec;
  spec.endpoint = net.endpoint();
  spec.token = token;
  spec.connect_timeout = 5s;
  spec.attach_timeout = 20s;
  spec.heartbeat_period = 100ms;
  spec.heartbeat_timeout = 2s;
  spec.control_timeout = 20s;
  const WorkerId r = w.add_remote_worker(spec);
  w.init();

  // y = 5 + 3x over 2^20 Int64 (8 MiB each way: copies in several frames), s = sum(y); and a
  // Float32 axpy on the side: z = 1.5 + 0.5 * 2 = 2.5.
  constexpr std::uint32_t n = 1U << 20;
  const RemoteBuffer x_buf = w.remote_alloc(r, n * sizeof(std::int64_t));
  const RemoteBuffer y_buf = w.remote_alloc(r, n * sizeof(std::int64_t) + sizeof(std::int64_t));
  const RemoteBuffer f_buf = w.remote_alloc(r, 2 * 256 * sizeof(float));
  std::vector<std::int64_t> x(n);
  for (std::uint32_t i = 0; i < n; ++i) x[i] = static_cast<std::int64_t>(i % 1000);
  w.copy_to_remote(x_buf, 0, x.data(), x.size() * sizeof(std::int64_t));
  std::vector<float> fx(256, 2.0F);
  w.copy_to_remote(f_buf, 0, fx.data(), fx.size() * sizeof(float));
  const ContinuousTensor xt = x_buf.tensor_of<std::int64_t>(0, n);
  const ContinuousTensor yt = y_buf.tensor_of<std::int64_t>(0, n);
  const ContinuousTensor st = y_buf.tensor_of<std::int64_t>(n, 1);
  const ContinuousTensor fxt = f_buf.tensor_of<float>(0, 256);
  const ContinuousTensor fzt = f_buf.tensor_of<float>(256, 256);
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    o.submit_next_level(
        fill, TaskArgs().add_tensor(yt, TensorArgType::OutputExisting).add_scalar(5), {}, r);
    o.submit_next_level(
        axpy, TaskArgs().add_tensor(xt).add_tensor(yt, TensorArgType::InOut).add_scalar(3), {}, r);
    o.submit_next_level(
        sum, TaskArgs().add_tensor(yt).add_tensor(st, TensorArgType::OutputExisting), {}, r);
    o.submit_next_level(fill,
                        TaskArgs()
                            .add_tensor(fzt, TensorArgType::OutputExisting)
                            .add_scalar(std::bit_cast<std::uint64_t>(1.5)),
                        {}, r);
    o.submit_next_level(axpy,
                        TaskArgs()
                            .add_tensor(fxt)
                            .add_tensor(fzt, TensorArgType::InOut)
                            .add_scalar(std::bit_cast<std::uint64_t>(0.5)),
                        {}, r);
  });
  std::vector<std::int64_t> y(n + 1);
  w.copy_from_remote(y_buf, 0, y.data(), y.size() * sizeof(std::int64_t));
  std::vector<float> fz(256);
  w.copy_from_remote(f_buf, 256 * sizeof(float), fz.data(), fz.size() * sizeof(float));
  std::int64_t want_sum = 0;
  std::uint32_t wrong = 0;
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::int64_t want = 5 + 3 * x[i];
    want_sum += want;
    if (y[i] != want) ++wrong;
  }
  CHECK(wrong == 0);
  CHECK(y[n] == want_sum);
  CHECK(std::count(fz.begin(), fz.end(), 2.5F) == 256);

  // Cut the link while a task runs: it fails at the heartbeat timeout as an endpoint failure.
  std::optional<TaskError> error;
  SteadyClock::time_point cut_at{};
  try {
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      const auto t = o.submit_next_level(sleep_ms, TaskArgs().add_scalar(20'000), {}, r);
      if (!eventually([&] { return o.state_of(t.slot_id) == TaskState::Running; }, 10s)) return;
      cut_at = SteadyClock::now();
      net.cut_link();
    });
  } catch (const TaskError& e) {
    error = e;
  }
  const auto took = SteadyClock::now() - cut_at;
  INFO("remote_l3's log:\n" << slurp(net.server_log()));
  REQUIRE(error.has_value());
  INFO(error->what());
  CHECK(error->outcome() == Outcome::EndpointFailure);
  CHECK(error->callable() == "sleep_ms");
  CHECK_THAT(std::string(error->what()), Contains(net.endpoint()));
  CHECK(took < 2s + 3s);
  const auto close_start = SteadyClock::now();
  try {
    w.close();
  } catch (const TransportError& e) {
    CHECK_THAT(std::string(e.what()), Contains(net.endpoint()));
  }
  CHECK(SteadyClock::now() - close_start < 5s);

  // The server stops cleanly on SIGTERM.
  const auto status = net.stop_server();
  REQUIRE(status.has_value());
  CHECK(WIFEXITED(*status));
  CHECK(WEXITSTATUS(*status) == 0);
}

}  // namespace simpler_test_remote_netns
