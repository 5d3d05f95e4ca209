// cluster — an L4 Worker on MPI rank 0 over one L3 Worker on each other rank.
//
//   mpirun -np 3 ./example_mpi_cluster [--n ELEMENTS]
//
//   rank 0: L4 Worker ── MPI rank 1: L3 Worker ── sub worker 0, 1 (forked)
//                     └─ MPI rank 2: L3 Worker ── sub worker 0, 1 (forked)
//
// Rank 0 splits y = a * x + y over the ranks: each rank's slice of x and y goes into buffers
// allocated on that rank, one "axpy" task per rank runs there (the ranks at the same time, each
// split over its forked sub workers), then "sum" reduces each slice there; rank 0 copies the
// results back and checks them against a sequential computation. Exits 0 when they match.
#include <simpler/mpi/mpi.hpp>
#include <simpler/simpler.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace simpler;

namespace {

/// tensor 1 (y) += scalar 0 * tensor 0 (x), Int64.
void axpy_kernel(TaskArgsView v) {
  const auto* x = v.tensor(0).as<const std::int64_t>();
  auto* y = v.tensor(1).as<std::int64_t>();
  const auto a = static_cast<std::int64_t>(v.scalar(0));
  for (std::uint64_t i = 0; i < v.tensor(0).numel(); ++i) y[i] += a * x[i];
}
/// tensor 1 (1 element) = the sum of tensor 0.
void sum_kernel(TaskArgsView v) {
  const auto* y = v.tensor(0).as<const std::int64_t>();
  std::int64_t s = 0;
  for (std::uint64_t i = 0; i < v.tensor(0).numel(); ++i) s += y[i];
  *v.tensor(1).as<std::int64_t>() = s;
}

/// What each rank serves: "axpy" split over the sub workers, "sum" on one.
void serve_rank(RemoteSession& rs) {
  const CallableHandle axpy = rs.worker().register_sub("axpy", axpy_kernel);
  const CallableHandle sum = rs.worker().register_sub("sum", sum_kernel);
  const int subs = rs.worker().options().num_sub_workers;
  rs.serve_orch("axpy", [axpy, subs](Orchestrator& o, TaskArgsView v, const CallConfig&) {
    const std::uint32_t n = static_cast<std::uint32_t>(v.tensor(0).numel());
    const std::uint32_t part =
        (n + static_cast<std::uint32_t>(subs) - 1) / static_cast<std::uint32_t>(subs);
    for (std::uint32_t at = 0; at < n; at += part) {
      const std::uint32_t k = std::min(part, n - at);
      auto* x = v.tensor(0).as<std::int64_t>() + at;
      auto* y = v.tensor(1).as<std::int64_t>() + at;
      o.submit_sub(axpy, TaskArgs()
                             .add_tensor(make_tensor(x, {k}, DataType::Int64), TensorArgType::Input)
                             .add_tensor(make_tensor(y, {k}, DataType::Int64), TensorArgType::InOut)
                             .add_scalar(v.scalar(0)));
    }
  });
  rs.serve_orch("sum", [sum](Orchestrator& o, TaskArgsView v, const CallConfig&) {
    o.submit_sub(sum, TaskArgs()
                          .add_tensor(v.tensor(0), TensorArgType::Input)
                          .add_tensor(v.tensor(1), TensorArgType::OutputExisting));
  });
}

}  // namespace

int main(int argc, char** argv) {
  mpi::Session session(argc, argv);
  if (session.rank() != 0) {
    WorkerOptions l3;
    l3.num_sub_workers = 2;
    l3.child_mode = ChildMode::Process;  // forked before MPI starts
    return session.serve(serve_rank, l3);
  }
  std::uint32_t n = 1 << 16;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--n") == 0) n = static_cast<std::uint32_t>(std::atoi(argv[i + 1]));
  }
  if (session.size() < 2) {
    std::fprintf(stderr, "cluster: run it with mpirun -np 2 or more\n");
    return 2;
  }
  try {
    WorkerOptions l4;
    l4.level = 4;
    Worker w4(l4);
    // The bodies run on the ranks; here the names are what count.
    const auto noop = [](Orchestrator&, TaskArgsView, const CallConfig&) {};
    const CallableHandle axpy = w4.register_orch("axpy", noop);
    const CallableHandle sum = w4.register_orch("sum", noop);
    const std::vector<WorkerId> ranks = w4.add_mpi_workers(session);
    w4.init();

    std::vector<std::int64_t> x(n), y(n);
    for (std::uint32_t i = 0; i < n; ++i) {
      x[i] = i % 97;
      y[i] = (i * 7) % 13;
    }
    const std::int64_t a = 3;
    // Each rank gets a slice: x and y, and one word for its sum.
    const std::size_t r = ranks.size();
    const std::uint32_t slice = static_cast<std::uint32_t>((n + r - 1) / r);
    std::vector<RemoteBuffer> xb, yb, sb;
    std::vector<std::uint32_t> first, count;
    for (std::size_t k = 0; k < r; ++k) {
      first.push_back(static_cast<std::uint32_t>(std::min<std::size_t>(k * slice, n)));
      count.push_back(std::min(slice, n - first.back()));
      const std::size_t bytes = std::max<std::size_t>(count.back(), 1) * sizeof(std::int64_t);
      xb.push_back(w4.remote_alloc(ranks[k], bytes));
      yb.push_back(w4.remote_alloc(ranks[k], bytes));
      sb.push_back(w4.remote_alloc(ranks[k], sizeof(std::int64_t)));
      w4.copy_to_remote(xb[k], 0, x.data() + first[k], count[k] * sizeof(std::int64_t));
      w4.copy_to_remote(yb[k], 0, y.data() + first[k], count[k] * sizeof(std::int64_t));
    }
    w4.run([&](Orchestrator& o, TaskArgsView, const CallConfig&) {
      for (std::size_t k = 0; k < r; ++k) {
        if (count[k] == 0) continue;
        const auto xt = xb[k].tensor_of<std::int64_t>(0, count[k]);
        const auto yt = yb[k].tensor_of<std::int64_t>(0, count[k]);
        o.submit_next_level(axpy,
                            TaskArgs()
                                .add_tensor(xt, TensorArgType::Input)
                                .add_tensor(yt, TensorArgType::InOut)
                                .add_scalar(static_cast<std::uint64_t>(a)),
                            {}, ranks[k]);
        // Depends on the axpy through yt's bytes.
        o.submit_next_level(
            sum,
            TaskArgs()
                .add_tensor(yt, TensorArgType::Input)
                .add_tensor(sb[k].tensor_of<std::int64_t>(0, 1), TensorArgType::OutputExisting),
            {}, ranks[k]);
      }
    });
    std::vector<std::int64_t> got(n);
    std::int64_t total = 0;
    for (std::size_t k = 0; k < r; ++k) {
      w4.copy_from_remote(yb[k], 0, got.data() + first[k], count[k] * sizeof(std::int64_t));
      std::int64_t s = 0;
      w4.copy_from_remote(sb[k], 0, &s, sizeof s);
      if (count[k] != 0) total += s;
    }
    std::int64_t want_total = 0;
    for (std::uint32_t i = 0; i < n; ++i) {
      const std::int64_t want = y[i] + a * x[i];
      want_total += want;
      if (got[i] != want) {
        std::fprintf(stderr, "cluster: y[%u] is %lld, expected %lld\n", i,
                     static_cast<long long>(got[i]), static_cast<long long>(want));
        return 1;
      }
    }
    if (total != want_total) {
      std::fprintf(stderr, "cluster: the sum is %lld, expected %lld\n",
                   static_cast<long long>(total), static_cast<long long>(want_total));
      return 1;
    }
    std::printf("cluster: %u elements over %zu ranks, sum %lld: ok\n", n, r,
                static_cast<long long>(total));
    w4.close();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cluster: %s\n", e.what());
    return 1;
  }
  return 0;
}
