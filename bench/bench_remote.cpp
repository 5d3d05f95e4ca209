// Remote L3 workers (SocketTransport) on loopback, each figure side by side with raw TCP in the
// same binary (PERFORMANCE.md: ratios, never absolute pass/fail).
//
// Scenario rt (latency): a chain of empty remote tasks, each depending on the previous one (InOut
//   on one 8-byte remote tensor), so every hop is one TASK/COMPLETION round trip; against a raw
//   TCP ping-pong of the same frame sizes (TASK and COMPLETION as sent) between this process and
//   a forked echo process. Target: remote/raw <= 1.25.
// Scenario pipe (throughput): 10k independent empty remote tasks in one run (the lane keeps
//   RemoteWorkerSpec::window frames in flight), against the same tasks on a nested L3 Worker in
//   this process (ThreadTransport). Target: >= 200k remote tasks/s.
// Scenario copy: copy_to_remote / copy_from_remote of 256 MiB (8 MiB with --tiny) against a raw
//   TCP stream of the same size into / out of a buffer in the echo process. Target: raw/remote
//   time >= 0.8.
//
// Every server is a forked process (as on another host); the cross-core probe runs first.
#include <fmt/format.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <simpler/simpler.hpp>

#include "harness.hpp"

namespace sb = simpler_bench;
using namespace simpler;

namespace {

// Frame sizes of one empty remote task as the link sends them: a TASK with the default
// CallConfig and one tensor, a COMPLETION with an ok status.
std::size_t task_frame_bytes() {
  std::vector<std::byte> out;
  ContinuousTensor t =
      make_tensor(reinterpret_cast<void*>(std::uintptr_t{1}), {1}, DataType::Int64);
  t.child_memory = 1;
  TaskArgsView v;
  v.tensor_count = 1;
  v.tensors = &t;
  wire::encode_task(1, default_call_config(), v, out);
  return wire::kHeaderBytes + out.size();
}
std::size_t completion_frame_bytes() {
  std::vector<std::byte> out;
  wire::encode(wire::Completion{}, out);
  return wire::kHeaderBytes + out.size();
}

// ---- The raw TCP peer: a forked process with blocking sockets.

bool read_all(int fd, void* p, std::size_t n) {
  auto* b = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t k = ::read(fd, b, n);
    if (k <= 0) return false;
    b += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}
bool write_all(int fd, const void* p, std::size_t n) {
  const auto* b = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t k = ::send(fd, b, n, MSG_NOSIGNAL);
    if (k <= 0) return false;
    b += k;
    n -= static_cast<std::size_t>(k);
  }
  return true;
}
void no_delay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/// Serves one connection at a time: 'P' req rep = ping-pong of req/rep bytes until EOF;
/// 'S' n = read n bytes into a buffer, answer one byte; 'R' n = write n bytes from a buffer.
[[noreturn]] void raw_peer(int listener) {
  std::vector<char> buf;
  for (;;) {
    const int fd = ::accept(listener, nullptr, nullptr);
    if (fd < 0) ::_exit(0);
    no_delay(fd);
    char mode = 0;
    std::uint64_t a = 0, b = 0;
    while (read_all(fd, &mode, 1) && read_all(fd, &a, 8) && read_all(fd, &b, 8)) {
      if (mode == 'P') {
        std::vector<char> req(a), rep(b);
        while (read_all(fd, req.data(), a) && write_all(fd, rep.data(), b)) {
        }
        break;
      }
      if (buf.size() < a) buf.resize(a);
      if (mode == 'S') {
        if (!read_all(fd, buf.data(), a) || !write_all(fd, "k", 1)) break;
      } else if (mode == 'R') {
        if (!write_all(fd, buf.data(), a)) break;
      }
    }
    ::close(fd);
  }
}

struct RawPeer {
  pid_t pid = -1;
  std::uint16_t port = 0;
  RawPeer() {
    const int l = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (l < 0 || ::bind(l, reinterpret_cast<sockaddr*>(&addr), len) != 0 || ::listen(l, 4) != 0 ||
        ::getsockname(l, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      sb::fail("raw peer: cannot listen on loopback");
    }
    port = ntohs(addr.sin_port);
    pid = ::fork();
    if (pid == 0) {
      detail::become_child_of(::getppid());
      raw_peer(l);
    }
    ::close(l);
  }
  ~RawPeer() {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
  [[nodiscard]] int connect() const {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(port);
    if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      sb::fail("raw peer: connect failed");
    }
    no_delay(fd);
    return fd;
  }
};

void send_mode(int fd, char mode, std::uint64_t a, std::uint64_t b) {
  if (!write_all(fd, &mode, 1) || !write_all(fd, &a, 8) || !write_all(fd, &b, 8)) {
    sb::fail("raw peer: write failed");
  }
}

// ---- The remote server: a forked RemoteServer serving empty orchestration functions.

struct ServerProc {
  pid_t pid = -1;
  std::uint16_t port = 0;
  ServerProc() {
    int fds[2];
    if (::pipe(fds) != 0) sb::fail("pipe");
    const pid_t parent = ::getpid();
    pid = ::fork();
    if (pid == 0) {
      detail::become_child_of(parent);
      detail::bump_fork_generation();
      RemoteServerOptions o;
      o.log = false;
      o.worker.level = 3;
      o.buffer_pool_bytes = std::uint64_t{1} << 30;
      RemoteServer s(o, [](RemoteSession& rs) {
        rs.serve_orch("empty", [](Orchestrator&, TaskArgsView, const CallConfig&) {});
      });
      const std::uint16_t p = s.port();
      if (::write(fds[1], &p, 2) != 2) ::_exit(1);
      s.serve();
      ::_exit(0);
    }
    ::close(fds[1]);
    if (::read(fds[0], &port, 2) != 2) sb::fail("remote server did not start");
    ::close(fds[0]);
  }
  ~ServerProc() {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
};

struct Sizes {
  std::uint32_t chain;
  std::uint32_t tasks;
  std::uint64_t copy_bytes;
};

int run(int argc, char** argv) {
  sb::Options opt = sb::parse_options(
      argc, argv,
      "Remote L3 workers over loopback TCP against raw TCP: task round trip, pipelined task "
      "throughput, 256 MiB copies.");
  if (opt.gap_ms < 0) opt.gap_ms = opt.tiny ? 0 : 20;
  const Sizes sz = opt.tiny ? Sizes{50, 500, 8U << 20} : Sizes{2000, 10000, 256U << 20};
  sb::Report rep(opt);
  ::signal(SIGPIPE, SIG_IGN);
  if (!opt.csv_only) {
    std::printf("bench_remote: %s, %d warm-up + %d measured repetitions, load average %s\n",
                opt.tiny ? "tiny sizes" : "full sizes", opt.warmup, opt.reps,
                sb::load_average().c_str());
  }
  rep.probe();  // its threads are joined before the forks below
  RawPeer raw;
  ServerProc server;

  WorkerOptions wo;
  wo.level = 4;
  Worker w(wo);
  const auto empty =
      w.register_orch("empty", [](Orchestrator&, TaskArgsView, const CallConfig&) {});
  RemoteWorkerSpec spec;
  spec.endpoint = fmt::format("127.0.0.1:{}", server.port);
  const WorkerId remote = w.add_remote_worker(spec);
  w.init();
  const RemoteBuffer cell = w.remote_alloc(remote, 8);

  // ---- rt: chained remote tasks vs raw ping-pong of the same sizes.
  const std::size_t req = task_frame_bytes();
  const std::size_t resp = completion_frame_bytes();
  rep.section(fmt::format("rt: one task round trip ({} chained hops; frames {} B / {} B)", sz.chain,
                          req, resp));
  const int pp = raw.connect();
  send_mode(pp, 'P', req, resp);
  std::vector<char> rq(req), rs(resp);
  std::vector<sb::Contender> rt;
  rt.push_back(
      {"remote_task",
       [&] {
         return sb::time_ns([&] {
           w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
             for (std::uint32_t i = 0; i < sz.chain; ++i) {
               o.submit_next_level(
                   empty,
                   TaskArgs().add_tensor(cell.tensor_of<std::int64_t>(0, 1), TensorArgType::InOut),
                   {}, remote);
             }
           });
         });
       },
       static_cast<double>(sz.chain)});
  rt.push_back({"raw_tcp_pingpong",
                [&] {
                  return sb::time_ns([&] {
                    for (std::uint32_t i = 0; i < sz.chain; ++i) {
                      if (!write_all(pp, rq.data(), req) || !read_all(pp, rs.data(), resp)) {
                        sb::fail("raw ping-pong failed");
                      }
                    }
                  });
                },
                static_cast<double>(sz.chain)});
  sb::run_scenario(rep, "rt_chain", "ns/hop", rt);
  rep.ratio("rt_chain", "remote_task", "raw_tcp_pingpong");
  ::close(pp);

  // ---- pipe: independent remote tasks vs the same on a nested L3 in this process.
  rep.section(fmt::format("pipe: {} independent empty tasks in one run", sz.tasks));
  WorkerOptions lo;
  lo.level = 4;
  lo.child_mode = ChildMode::Thread;
  Worker local(lo);
  const auto lempty =
      local.register_orch("empty", [](Orchestrator&, TaskArgsView, const CallConfig&) {});
  WorkerOptions inner;
  inner.child_mode = ChildMode::Thread;
  local.add_worker(Worker(inner));
  local.init();
  std::vector<sb::Contender> pipe;
  pipe.push_back({"remote_pipelined",
                  [&] {
                    return sb::time_ns([&] {
                      w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
                        for (std::uint32_t i = 0; i < sz.tasks; ++i)
                          o.submit_next_level(empty, TaskArgs(), {}, remote);
                      });
                    });
                  },
                  static_cast<double>(sz.tasks)});
  pipe.push_back({"local_nested_l3",
                  [&] {
                    return sb::time_ns([&] {
                      local.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
                        for (std::uint32_t i = 0; i < sz.tasks; ++i)
                          o.submit_next_level(lempty, TaskArgs(), {}, 0);
                      });
                    });
                  },
                  static_cast<double>(sz.tasks)});
  sb::run_scenario(rep, "pipe_independent", "ns/task", pipe);
  rep.ratio("pipe_independent", "remote_pipelined", "local_nested_l3");
  if (const auto* r = rep.find("pipe_independent", "remote_pipelined")) {
    rep.ratio_value("pipe_independent", "remote_tasks_per_s", 1e9 / r->stats.median, r->stats.reps);
  }
  local.close();

  // ---- copy: 256 MiB each way vs a raw TCP stream.
  rep.section(fmt::format("copy: {} MiB each way", sz.copy_bytes >> 20));
  std::vector<char> src(sz.copy_bytes), dst(sz.copy_bytes);
  for (std::size_t i = 0; i < src.size(); i += 4096) src[i] = static_cast<char>(i >> 12);
  std::memset(dst.data(), 1, dst.size());
  const RemoteBuffer big = w.remote_alloc(remote, sz.copy_bytes);
  const int st = raw.connect();
  char ack = 0;
  std::vector<sb::Contender> to;
  to.push_back({"copy_to_remote", [&] {
                  return sb::time_ns([&] { w.copy_to_remote(big, 0, src.data(), src.size()); });
                }});
  to.push_back({"raw_tcp_send", [&] {
                  return sb::time_ns([&] {
                    send_mode(st, 'S', src.size(), 0);
                    if (!write_all(st, src.data(), src.size()) || !read_all(st, &ack, 1))
                      sb::fail("raw stream failed");
                  });
                }});
  sb::run_scenario(rep, "copy_to", "ns", to);
  rep.ratio("copy_to", "raw_tcp_send", "copy_to_remote");
  std::vector<sb::Contender> from;
  from.push_back({"copy_from_remote", [&] {
                    return sb::time_ns([&] { w.copy_from_remote(big, 0, dst.data(), dst.size()); });
                  }});
  from.push_back({"raw_tcp_recv", [&] {
                    return sb::time_ns([&] {
                      send_mode(st, 'R', dst.size(), 0);
                      if (!read_all(st, dst.data(), dst.size())) sb::fail("raw stream failed");
                    });
                  }});
  sb::run_scenario(rep, "copy_from", "ns", from);
  rep.ratio("copy_from", "raw_tcp_recv", "copy_from_remote");
  ::close(st);
  w.copy_from_remote(big, 0, dst.data(), dst.size());
  if (std::memcmp(src.data(), dst.data(), src.size()) != 0) sb::fail("copy round trip differs");
  for (const char* s : {"copy_to_remote", "raw_tcp_send"}) {
    if (const auto* r = rep.find("copy_to", s))
      rep.note(
          fmt::format("{}: {:.2f} GB/s", s, static_cast<double>(sz.copy_bytes) / r->stats.median));
  }
  for (const char* s : {"copy_from_remote", "raw_tcp_recv"}) {
    if (const auto* r = rep.find("copy_from", s))
      rep.note(
          fmt::format("{}: {:.2f} GB/s", s, static_cast<double>(sz.copy_bytes) / r->stats.median));
  }
  w.remote_free(big);
  w.close();
  rep.note("load average at the end: " + sb::load_average());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return sb::guarded_main("bench_remote", run, argc, argv);
}
