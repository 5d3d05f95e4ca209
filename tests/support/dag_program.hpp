// Test support: a random task program with tags drawn at random, run through the engine and
// through a sequential oracle of the same program.
//
// So that a correct engine gives exactly the oracle's result although write-after-read is not
// tracked, buffers come in two classes: values are written once (Output auto-allocated, or
// OutputExisting into a slice of one shared array) and then only read (Input, possibly over
// several adjacent slices at once: a sub-view across producers); accumulators are only touched
// with InOut. A constant buffer is read with NoDep. Every task computes from what it reads, so any
// ordering error changes the result.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <stdexcept>
#include <utility>
#include <vector>

#include <simpler/simpler.hpp>

#include "support/shared_arena.hpp"

namespace simpler::testing {

inline constexpr std::uint32_t kValueElems = 8;

struct DagOp {
  std::int64_t write = -1;           // value written (index), or -1
  bool write_auto = false;           // Output with data == 0 (heap) instead of a slice
  std::vector<std::int64_t> reads;   // first value of each read range
  std::vector<std::uint32_t> spans;  // values covered by each read (adjacent slices)
  std::int64_t accum = -1;           // accumulator touched with InOut, or -1
  bool read_const = false;           // NoDep read of the constant buffer
};

struct DagProgram {
  std::uint32_t values = 0;
  std::uint32_t accums = 0;
  std::vector<DagOp> ops;
};

/// The task body shared by engine and oracle. Tensor order: [write][accum][reads...][const];
/// scalars: id, has_write, has_accum, n_reads, has_const.
inline void dag_kernel(TaskArgsView v) {
  const std::uint64_t id = v.scalar(0);
  const bool has_write = v.scalar(1) != 0;
  const bool has_accum = v.scalar(2) != 0;
  const auto n_reads = static_cast<std::int32_t>(v.scalar(3));
  const bool has_const = v.scalar(4) != 0;
  std::int32_t t = 0;
  std::int64_t* out = has_write ? v.tensor(t++).as<std::int64_t>() : nullptr;
  std::int64_t* acc = has_accum ? v.tensor(t++).as<std::int64_t>() : nullptr;
  std::uint64_t s = id * 0x9E3779B97F4A7C15ULL + 1;
  for (std::int32_t r = 0; r < n_reads; ++r) {
    const ContinuousTensor& in = v.tensor(t++);
    const auto* p = in.as<const std::int64_t>();
    for (std::uint64_t j = 0; j < in.numel(); ++j)
      s = s * 1315423911ULL + static_cast<std::uint64_t>(p[j]);
  }
  if (has_const) s += static_cast<std::uint64_t>(v.tensor(t++).as<const std::int64_t>()[0]);
  if (acc != nullptr) {
    acc[0] = static_cast<std::int64_t>(static_cast<std::uint64_t>(acc[0]) * 31 + s);
    s ^= static_cast<std::uint64_t>(acc[0]);
  }
  if (out != nullptr) {
    for (std::uint32_t j = 0; j < kValueElems; ++j) out[j] = static_cast<std::int64_t>(s + j);
  }
}

inline DagProgram random_program(std::uint32_t seed, std::uint32_t tasks, std::uint32_t accums) {
  std::mt19937 rng(seed);
  DagProgram p;
  p.accums = accums;
  auto pick = [&rng](std::uint32_t n) {
    return std::uniform_int_distribution<std::uint32_t>(0, n - 1)(rng);
  };
  std::vector<bool> on_heap;  // value lives in the heap ring, not in the shared array
  for (std::uint32_t i = 0; i < tasks; ++i) {
    DagOp op;
    const std::uint32_t kind = pick(4);
    if (kind != 0 || p.values == 0) {  // most tasks produce a value
      op.write = p.values++;
      op.write_auto = pick(3) == 0;
      on_heap.push_back(op.write_auto);
    }
    if (accums != 0 && pick(3) == 0) op.accum = pick(accums);
    const std::uint32_t existing = op.write >= 0 ? p.values - 1 : p.values;
    if (existing > 0) {
      const std::uint32_t n_reads = pick(3);
      for (std::uint32_t r = 0; r < n_reads; ++r) {
        const std::uint32_t first = pick(existing);
        // Sometimes read two adjacent slices with one tensor: a view across two producers.
        const bool wide =
            first + 1 < existing && !on_heap[first] && !on_heap[first + 1] && pick(2) == 0;
        op.reads.push_back(first);
        op.spans.push_back(wide ? 2 : 1);
      }
    }
    op.read_const = pick(4) == 0;
    p.ops.push_back(std::move(op));
  }
  return p;
}

/// Where the words of one execution live: host memory the tasks address directly (a SharedArena,
/// mapped before the Worker forked, for local workers and the oracle), or a remote worker's
/// buffer, with `words` as its host mirror: the runner copies the mirror there before the run and
/// reads the result back after it.
class DagMemory {
 public:
  explicit DagMemory(std::span<std::int64_t> host) : words_(host) {}
  DagMemory(RemoteBuffer remote, std::span<std::int64_t> mirror)
      : words_(mirror), remote_(std::move(remote)) {}

  [[nodiscard]] std::span<std::int64_t> words() const noexcept { return words_; }
  [[nodiscard]] bool remote() const noexcept { return !remote_.empty(); }
  [[nodiscard]] const RemoteBuffer& buffer() const noexcept { return remote_; }
  /// `count` int64 words from word `first`.
  [[nodiscard]] ContinuousTensor tensor(std::size_t first, std::uint32_t count) const {
    if (remote()) return remote_.tensor_of<std::int64_t>(first, count);
    return make_tensor(words_.data() + first, {count}, DataType::Int64);
  }

 private:
  std::span<std::int64_t> words_;
  RemoteBuffer remote_;
};

/// The words of one execution of a program, laid out in a DagMemory: value slices in one array
/// (or heap tensors), the accumulators, the constant, and where the final snapshot goes.
struct DagState {
  static constexpr std::size_t kAlign = 8;  // words: regions start 64 bytes apart

  DagMemory memory;
  std::size_t slices_at = 0;  // values * kValueElems (+1 guard), -1 each
  std::size_t accums_at;      // accums (+1 guard), 7 each
  std::size_t constant_at;    // 12345
  std::size_t result_at;      // values * kValueElems + accums, -2 each
  std::size_t result_words;
  std::vector<ContinuousTensor> value_tensor;  // where each value lives

  static constexpr std::size_t round_up(std::size_t n) {
    return (n + kAlign - 1) / kAlign * kAlign;
  }
  /// The words a program's execution takes.
  static std::size_t words_needed(const DagProgram& p) {
    return DagState(p).result_at + static_cast<std::size_t>(p.values) * kValueElems + p.accums;
  }

  /// Lays the program out in `m` (at least words_needed(p) words) and initialises the words (the
  /// mirror, for a remote buffer).
  DagState(const DagProgram& p, DagMemory m) : DagState(p) {
    memory = std::move(m);
    if (memory.words().size() < result_at + result_words) {
      throw std::runtime_error("DagState: the memory is too small for the program");
    }
    auto fill = [&](std::size_t at, std::size_t n, std::int64_t v) {
      std::fill_n(memory.words().begin() + static_cast<std::ptrdiff_t>(at), n, v);
    };
    fill(slices_at, accums_at - slices_at, -1);
    fill(accums_at, constant_at - accums_at, 7);
    fill(constant_at, result_at - constant_at, 12345);
    fill(result_at, result_words, -2);
    for (std::uint32_t v = 0; v < p.values; ++v) value_tensor[v] = slice(v, 1);
  }
  /// In host memory from `a`, which must have been mapped before the Worker forked.
  DagState(const DagProgram& p, SharedArena& a)
      : DagState(p, DagMemory((a.reset(), a.make<std::int64_t>(words_needed(p), 0)))) {}

  ContinuousTensor slice(std::int64_t first, std::uint32_t count) const {
    return memory.tensor(slices_at + static_cast<std::size_t>(first) * kValueElems,
                         count * kValueElems);
  }
  ContinuousTensor accum(std::int64_t i) const {
    return memory.tensor(accums_at + static_cast<std::size_t>(i), 1);
  }
  ContinuousTensor constant() const { return memory.tensor(constant_at, 1); }
  ContinuousTensor result() const {
    return memory.tensor(result_at, static_cast<std::uint32_t>(result_words));
  }
  /// A read of `span` values from `first`: one tensor when they are adjacent slices.
  ContinuousTensor read_tensor(std::int64_t first, std::uint32_t span) const {
    return span == 1 ? value_tensor[static_cast<std::size_t>(first)] : slice(first, span);
  }
  /// The final content of every value, wherever it lived (host memory only: the oracle's).
  std::vector<std::int64_t> snapshot() const {
    std::vector<std::int64_t> out;
    for (const ContinuousTensor& t : value_tensor) {
      const auto* p = t.as<const std::int64_t>();
      out.insert(out.end(), p, p + kValueElems);
    }
    const auto a = memory.words().subspan(accums_at, accums_);
    out.insert(out.end(), a.begin(), a.end());
    return out;
  }

 private:
  /// The layout alone (no memory yet).
  explicit DagState(const DagProgram& p)
      : memory(std::span<std::int64_t>{}),
        accums_at(round_up(static_cast<std::size_t>(p.values) * kValueElems + 1)),
        constant_at(accums_at + round_up(p.accums + 1)),
        result_at(constant_at + kAlign),
        result_words(static_cast<std::size_t>(p.values) * kValueElems + p.accums),
        value_tensor(p.values),
        accums_(p.accums) {}
  std::size_t accums_;
};

/// Builds the args of op `i`. With `for_engine`, auto-allocated writes are Output with data 0,
/// except in a remote buffer: a remote worker cannot allocate at submit, so there they stay
/// OutputExisting into their slice (the dependencies are the same: a fresh range written once).
inline TaskArgs dag_args(const DagProgram& p, DagState& st, std::size_t i, bool for_engine) {
  const DagOp& op = p.ops[i];
  TaskArgs a;
  if (op.write >= 0) {
    ContinuousTensor t = st.value_tensor[static_cast<std::size_t>(op.write)];
    if (for_engine && op.write_auto && !st.memory.remote()) {
      t.data = 0;
      a.add_tensor(t, TensorArgType::Output);
    } else {
      a.add_tensor(t, TensorArgType::OutputExisting);
    }
  }
  if (op.accum >= 0) a.add_tensor(st.accum(op.accum), TensorArgType::InOut);
  for (std::size_t r = 0; r < op.reads.size(); ++r) {
    a.add_tensor(st.read_tensor(op.reads[r], op.spans[r]), TensorArgType::Input);
  }
  if (op.read_const) a.add_tensor(st.constant(), TensorArgType::NoDep);
  a.add_scalar(i)
      .add_scalar(op.write >= 0 ? 1 : 0)
      .add_scalar(op.accum >= 0 ? 1 : 0)
      .add_scalar(op.reads.size())
      .add_scalar(op.read_const ? 1 : 0);
  return a;
}

/// The sequential oracle.
inline std::vector<std::int64_t> run_oracle(const DagProgram& p) {
  SharedArena arena;
  DagState st(p, arena);
  for (std::size_t i = 0; i < p.ops.size(); ++i) dag_kernel(dag_args(p, st, i, false).view());
  return st.snapshot();
}

}  // namespace simpler::testing

namespace simpler::testing {

/// Copies every tensor it reads, in order, into its first tensor (OutputExisting).
inline void dag_snapshot_kernel(TaskArgsView v) {
  auto* out = v.tensor(0).as<std::int64_t>();
  for (std::int32_t t = 1; t < v.tensor_count; ++t) {
    const ContinuousTensor& in = v.tensor(t);
    const auto* p = in.as<const std::int64_t>();
    for (std::uint64_t j = 0; j < in.numel(); ++j) *out++ = p[j];
  }
}

/// The two callables of a program, however the workers that run it know them.
enum class DagCallable { Kernel, Snapshot };

/// Runs `p` through `w` in the words of `st` and returns the final state, read by a last task
/// inside the run. `target` says how: target.submit(o, DagCallable, TaskArgs) submits one task
/// (dag_kernel or dag_snapshot_kernel), target.upload(st) puts the initial words where the tasks
/// see them before the run, and target.download(st, first, out) reads words back after it (both
/// do nothing for host memory).
template <class W, class Target>
std::vector<std::int64_t> run_dag(W& w, Target& target, const DagProgram& p, DagState& st) {
  target.upload(st);
  w.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
    for (std::size_t i = 0; i < p.ops.size(); ++i) {
      SubmitResult r = target.submit(o, DagCallable::Kernel, dag_args(p, st, i, true));
      const DagOp& op = p.ops[i];
      if (op.write >= 0 && op.write_auto && !st.memory.remote())
        st.value_tensor[static_cast<std::size_t>(op.write)] = r.output(0);
    }
    TaskArgs a;
    a.add_tensor(st.result(), TensorArgType::OutputExisting);
    for (const ContinuousTensor& t : st.value_tensor) a.add_tensor(t, TensorArgType::Input);
    for (std::uint32_t i = 0; i < p.accums; ++i) a.add_tensor(st.accum(i), TensorArgType::Input);
    target.submit(o, DagCallable::Snapshot, std::move(a));
  });
  std::vector<std::int64_t> out(st.result_words);
  target.download(st, st.result_at, std::span<std::int64_t>(out));
  return out;
}

/// A program's callables as sub callables of a Worker, in host memory.
struct SubTarget {
  CallableHandle kernel;
  CallableHandle snap;
  SubmitResult submit(OrchestratorBase& o, DagCallable c, TaskArgs a) const {
    return o.submit_sub(c == DagCallable::Kernel ? kernel : snap, std::move(a));
  }
  void upload(const DagState&) const {}
  void download(const DagState& st, std::size_t first, std::span<std::int64_t> out) const {
    const auto w = st.memory.words().subspan(first, out.size());
    std::copy(w.begin(), w.end(), out.begin());
  }
};

/// Runs `p` through `w` (with `kernel` = dag_kernel and `snap` = dag_snapshot_kernel registered
/// as sub callables) and returns the final state, read by a last task inside the run.
/// `arena` must have been mapped before w.init() when w's sub workers are forked processes.
template <class W>
std::vector<std::int64_t> run_engine(W& w, const CallableHandle& kernel, const CallableHandle& snap,
                                     const DagProgram& p, SharedArena& arena) {
  DagState st(p, arena);
  SubTarget target{kernel, snap};
  return run_dag(w, target, p, st);
}

}  // namespace simpler::testing
