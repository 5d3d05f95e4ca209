// remote_l3 — a ready remote L3 server: run it on a host, and parents elsewhere add it with
// Worker::add_remote_worker({.endpoint = "host:port", .token = ...}).
//
//   RemoteServer (this process: accepts, authenticates, forks one session per parent)
//   └── session process (one per connected parent)
//       └── inner Worker (L3)
//           ├── sub worker 0 .. N-1   (forked children, --subs N)
//           └── chip 0                (forked child on the simulated device, with --chip)
//
// Served orchestration functions (the parent registers each under the same name with
// register_orch and submits it to the remote worker; tensors lie in its RemoteBuffers):
//   "fill"      tensor 0 (Int64 or Float32, OutputExisting) = scalar 0, on one sub task
//   "axpy"      tensor 1 (y, InOut) += scalar 0 * tensor 0 (x, Input), same dtype and size,
//               split over the sub workers
//   "sum"       tensor 1 (1 element, OutputExisting) = the sum of tensor 0, on one sub task
//   "sleep_ms"  sleeps scalar 0 milliseconds on a sub task (to test deadlines and faults)
//   "fail"      throws std::runtime_error("remote_l3: 'fail' failed as asked")
// Scalars of Float32 tensors are the bits of a double (std::bit_cast<std::uint64_t>(2.5)).
//
// Options:
//   --listen HOST:PORT  where to listen (default 127.0.0.1:0, a free loopback port)
//   --token-file PATH   the shared token: the file's content without its trailing newline
//                       (else $SIMPLER_REMOTE_TOKEN); needed for a non-loopback address
//   --subs N            sub workers of each session's inner Worker (default 2, at least 1)
//   --chip              one simulated chip (device id 0) in each inner Worker
//   --port-file PATH    write the bound port there (for scripts and tests)
//   --quiet             no log of connections and sessions on stderr
//   --self-test         serve in a child process, run every callable once from a parent Worker
//                       here, check the results, stop the server with SIGTERM (ctest runs this)
// SIGTERM or SIGINT stops the server; its sessions end with it.
#include <simpler/simpler.hpp>

#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace simpler;

namespace {

struct Options {
  std::string listen = "127.0.0.1:0";
  std::string token;
  int subs = 2;
  bool chip = false;
  std::string port_file;
  bool quiet = false;
  bool self_test = false;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "remote_l3: %s\nusage: remote_l3 [--listen HOST:PORT] [--token-file PATH] "
               "[--subs N] [--chip] [--port-file PATH] [--quiet] [--self-test]\n",
               why.c_str());
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options o;
  bool token_file = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(a + " needs a value");
      return argv[++i];
    };
    if (a == "--listen") {
      o.listen = value();
    } else if (a == "--token-file") {
      std::ifstream f(value(), std::ios::binary);
      if (!f) usage("cannot read the token file " + std::string(argv[i]));
      std::ostringstream s;
      s << f.rdbuf();
      o.token = s.str();
      while (!o.token.empty() && (o.token.back() == '\n' || o.token.back() == '\r')) {
        o.token.pop_back();
      }
      token_file = true;
    } else if (a == "--subs") {
      o.subs = std::atoi(value().c_str());
      if (o.subs < 1) usage("--subs must be at least 1 (the served functions run on sub workers)");
    } else if (a == "--chip") {
      o.chip = true;
    } else if (a == "--port-file") {
      o.port_file = value();
    } else if (a == "--quiet") {
      o.quiet = true;
    } else if (a == "--self-test") {
      o.self_test = true;
    } else {
      usage("unknown option " + a);
    }
  }
  if (!token_file) {
    if (const char* t = std::getenv("SIMPLER_REMOTE_TOKEN")) o.token = t;
  }
  return o;
}

/// Whether the tensor is Int64 or Float32, else throws naming the callable.
void check_dtype(const char* fn, const ContinuousTensor& t) {
  if (t.dtype != DataType::Int64 && t.dtype != DataType::Float32) {
    throw UsageError(std::string("remote_l3 '") + fn + "': tensors must be Int64 or Float32");
  }
}
void check_args(const char* fn, TaskArgsView v, int tensors, int scalars) {
  if (v.tensor_count < tensors || v.scalar_count < scalars) {
    throw UsageError(std::string("remote_l3 '") + fn + "': needs " + std::to_string(tensors) +
                     " tensors and " + std::to_string(scalars) + " scalars");
  }
}

/// Registers the sub callables and serves the orchestration functions (in each session).
void serve(RemoteSession& rs, int subs) {
  Worker& w = rs.worker();
  const auto fill_sub = w.register_sub("fill", [](TaskArgsView v) {
    const ContinuousTensor& t = v.tensor(0);
    if (t.dtype == DataType::Int64) {
      std::fill_n(t.as<std::int64_t>(), t.numel(), static_cast<std::int64_t>(v.scalar(0)));
    } else {
      std::fill_n(t.as<float>(), t.numel(), static_cast<float>(std::bit_cast<double>(v.scalar(0))));
    }
  });
  const auto axpy_sub = w.register_sub("axpy", [](TaskArgsView v) {
    const ContinuousTensor& x = v.tensor(0);
    const ContinuousTensor& y = v.tensor(1);
    if (x.dtype == DataType::Int64) {
      const auto a = static_cast<std::int64_t>(v.scalar(0));
      for (std::uint64_t i = 0; i < y.numel(); ++i)
        y.as<std::int64_t>()[i] += a * x.as<std::int64_t>()[i];
    } else {
      const auto a = static_cast<float>(std::bit_cast<double>(v.scalar(0)));
      for (std::uint64_t i = 0; i < y.numel(); ++i) y.as<float>()[i] += a * x.as<float>()[i];
    }
  });
  const auto sum_sub = w.register_sub("sum", [](TaskArgsView v) {
    const ContinuousTensor& x = v.tensor(0);
    if (x.dtype == DataType::Int64) {
      std::int64_t s = 0;
      for (std::uint64_t i = 0; i < x.numel(); ++i) s += x.as<std::int64_t>()[i];
      *v.tensor(1).as<std::int64_t>() = s;
    } else {
      double s = 0;
      for (std::uint64_t i = 0; i < x.numel(); ++i) s += x.as<float>()[i];
      *v.tensor(1).as<float>() = static_cast<float>(s);
    }
  });
  const auto sleep_sub = w.register_sub("sleep_ms", [](TaskArgsView v) {
    std::this_thread::sleep_for(std::chrono::milliseconds(v.scalar(0)));
  });

  rs.serve_orch("fill", [fill_sub](Orchestrator& o, TaskArgsView v, const CallConfig&) {
    check_args("fill", v, 1, 1);
    check_dtype("fill", v.tensor(0));
    o.submit_sub(
        fill_sub,
        TaskArgs().add_tensor(v.tensor(0), TensorArgType::OutputExisting).add_scalar(v.scalar(0)));
  });
  rs.serve_orch("axpy", [axpy_sub, subs](Orchestrator& o, TaskArgsView v, const CallConfig&) {
    check_args("axpy", v, 2, 1);
    const ContinuousTensor& x = v.tensor(0);
    const ContinuousTensor& y = v.tensor(1);
    check_dtype("axpy", x);
    if (x.dtype != y.dtype || x.numel() != y.numel()) {
      throw UsageError("remote_l3 'axpy': x and y differ in dtype or size");
    }
    // One contiguous chunk per sub worker: they run at once and touch disjoint bytes.
    const std::uint64_t n = y.numel();
    const std::uint64_t parts = std::min<std::uint64_t>(static_cast<std::uint64_t>(subs), n);
    const std::size_t elem = element_size(x.dtype);
    for (std::uint64_t p = 0; p < parts; ++p) {
      const std::uint64_t lo = n * p / parts;
      const std::uint64_t hi = n * (p + 1) / parts;
      const auto len = static_cast<std::uint32_t>(hi - lo);
      o.submit_sub(axpy_sub,
                   TaskArgs()
                       .add_tensor(make_tensor(x.as<std::byte>() + lo * elem, {len}, x.dtype))
                       .add_tensor(make_tensor(y.as<std::byte>() + lo * elem, {len}, y.dtype),
                                   TensorArgType::InOut)
                       .add_scalar(v.scalar(0)));
    }
  });
  rs.serve_orch("sum", [sum_sub](Orchestrator& o, TaskArgsView v, const CallConfig&) {
    check_args("sum", v, 2, 0);
    check_dtype("sum", v.tensor(0));
    if (v.tensor(1).dtype != v.tensor(0).dtype || v.tensor(1).numel() != 1) {
      throw UsageError("remote_l3 'sum': the output is one element of the input's dtype");
    }
    o.submit_sub(
        sum_sub,
        TaskArgs().add_tensor(v.tensor(0)).add_tensor(v.tensor(1), TensorArgType::OutputExisting));
  });
  rs.serve_orch("sleep_ms", [sleep_sub](Orchestrator& o, TaskArgsView v, const CallConfig&) {
    check_args("sleep_ms", v, 0, 1);
    o.submit_sub(sleep_sub, TaskArgs().add_scalar(v.scalar(0)));
  });
  rs.serve_orch("fail", [](Orchestrator&, TaskArgsView, const CallConfig&) {
    throw std::runtime_error("remote_l3: 'fail' failed as asked");
  });
}

/// The parent's side of --self-test: every callable once against the server at `endpoint`.
int self_test(const std::string& endpoint, const std::string& token) {
  WorkerOptions wo;
  wo.level = 4;
  Worker w(wo);
  auto noop = [](Orchestrator&, TaskArgsView, const CallConfig&) {};
  const auto fill = w.register_orch("fill", noop);
  const auto axpy = w.register_orch("axpy", noop);
  const auto sum = w.register_orch("sum", noop);
  const auto sleep_ms = w.register_orch("sleep_ms", noop);
  const auto fail = w.register_orch("fail", noop);
  RemoteWorkerSpec spec;
  spec.endpoint = endpoint;
  spec.token = token;
  const WorkerId r = w.add_remote_worker(spec);
  w.init();

  constexpr std::uint32_t n = 1000;
  const RemoteBuffer buf = w.remote_alloc(r, (2 * n + 1) * sizeof(std::int64_t));
  const ContinuousTensor x = buf.tensor_of<std::int64_t>(0, n);
  const ContinuousTensor y = buf.tensor_of<std::int64_t>(n, n);
  const ContinuousTensor s = buf.tensor_of<std::int64_t>(2 * n, 1);
  std::vector<std::int64_t> host(n);
  for (std::uint32_t i = 0; i < n; ++i) host[i] = i;
  w.copy_to_remote(buf, 0, host.data(), n * sizeof(std::int64_t));
  // y = 5; y += 3x; s = sum(y) = 5n + 3 n(n-1)/2.
  w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
    o.submit_next_level(fill, TaskArgs().add_tensor(y, TensorArgType::OutputExisting).add_scalar(5),
                        {}, r);
    o.submit_next_level(
        axpy, TaskArgs().add_tensor(x).add_tensor(y, TensorArgType::InOut).add_scalar(3), {}, r);
    o.submit_next_level(sum, TaskArgs().add_tensor(y).add_tensor(s, TensorArgType::OutputExisting),
                        {}, r);
    o.submit_next_level(sleep_ms, TaskArgs().add_scalar(1), {}, r);
  });
  std::int64_t got = 0;
  w.copy_from_remote(buf, 2 * n * sizeof(std::int64_t), &got, sizeof got);
  const std::int64_t want = 5 * std::int64_t{n} + 3 * std::int64_t{n} * (n - 1) / 2;
  bool failed_as_asked = false;
  try {
    w.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      o.submit_next_level(fail, TaskArgs(), {}, r);
    });
  } catch (const TaskError& e) {
    failed_as_asked = std::string(e.what()).find("failed as asked") != std::string::npos;
  }
  w.remote_free(buf);
  w.close();
  if (got != want || !failed_as_asked) {
    std::fprintf(stderr, "remote_l3 self-test: sum %lld (want %lld), 'fail' %s\n",
                 static_cast<long long>(got), static_cast<long long>(want),
                 failed_as_asked ? "failed as asked" : "did not fail as asked");
    return 1;
  }
  std::printf("remote_l3 self-test: sum(5 + 3x) = %lld over %u elements; 'fail' failed\n",
              static_cast<long long>(got), n);
  return 0;
}

/// Binds, reports the port (`bound`), and serves until SIGTERM or SIGINT.
template <class Bound>
void run_server(const Options& opt, Bound bound) {
  RemoteServerOptions so;
  so.listen = opt.listen;
  so.token = opt.token;
  so.log = !opt.quiet;
  so.worker.num_sub_workers = opt.subs;
  if (opt.chip) so.worker.device_ids = {0};
  const int subs = opt.subs;
  RemoteServer server(so, [subs](RemoteSession& rs) { serve(rs, subs); });
  server.stop_on_signals();  // before the port is out: whoever learns it may signal at once
  if (!opt.port_file.empty()) {
    // Written whole, then renamed: a script polling for the file never reads half of it.
    const std::string tmp = opt.port_file + ".tmp";
    std::ofstream(tmp) << server.port() << '\n';
    if (std::rename(tmp.c_str(), opt.port_file.c_str()) != 0) {
      throw std::runtime_error("cannot write the port file " + opt.port_file);
    }
  }
  if (!opt.quiet) std::fprintf(stderr, "remote_l3: listening on port %u\n", server.port());
  bound(server.port());
  server.serve();
}

}  // namespace

int main(int argc, char** argv) {
  const Options opt = parse(argc, argv);
  try {
    if (!opt.self_test) {
      run_server(opt, [](std::uint16_t) {});
      return 0;
    }
    // --self-test: the server in a child forked before this process starts any thread; it
    // sends its port back through a pipe.
    int fds[2];
    if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
    std::fflush(nullptr);
    const pid_t child = ::fork();
    if (child < 0) throw std::runtime_error("fork failed");
    if (child == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the test
      ::close(fds[0]);
      int code = 0;
      try {
        run_server(opt, [&](std::uint16_t port) {
          if (::write(fds[1], &port, sizeof port) != sizeof port) std::_Exit(3);
          ::close(fds[1]);
        });
      } catch (const std::exception& e) {
        std::fprintf(stderr, "remote_l3 self-test server: %s\n", e.what());
        code = 1;
      }
      std::fflush(nullptr);
      ::_exit(code);
    }
    ::close(fds[1]);
    std::uint16_t port = 0;
    const bool got_port = ::read(fds[0], &port, sizeof port) == sizeof port;
    ::close(fds[0]);
    int code = 1;
    if (got_port) {
      try {
        const std::string host = opt.listen.substr(0, opt.listen.rfind(':'));
        code = self_test(host + ":" + std::to_string(port), opt.token);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "remote_l3 self-test: %s\n", e.what());
      }
    }
    ::kill(child, SIGTERM);
    int status = 0;
    ::waitpid(child, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "remote_l3 self-test: the server did not stop cleanly on SIGTERM\n");
      return 1;
    }
    return code;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "remote_l3: %s\n", e.what());
    return 1;
  }
}
