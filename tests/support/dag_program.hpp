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

#include <cstdint>
#include <random>
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

/// Memory for one execution of a program: value slices in one array (or heap tensors), the
/// accumulators and the constant. All in shared memory, so forked sub workers can run it too.
struct DagState {
  SharedArena& arena;
  std::span<std::int64_t> slices;  // values * kValueElems
  std::span<std::int64_t> accums;
  std::vector<ContinuousTensor> value_tensor;  // where each value lives
  std::int64_t& constant;

  /// Takes its memory from `a`, which must have been mapped before the Worker forked.
  DagState(const DagProgram& p, SharedArena& a)
      : arena((a.reset(), a)),
        slices(arena.make<std::int64_t>(static_cast<std::size_t>(p.values) * kValueElems + 1, -1)),
        accums(arena.make<std::int64_t>(p.accums + 1, 7)),
        value_tensor(p.values),
        constant(arena.one<std::int64_t>(12345)) {
    for (std::uint32_t v = 0; v < p.values; ++v) value_tensor[v] = slice(v, 1);
  }
  ContinuousTensor slice(std::int64_t first, std::uint32_t count) {
    return make_tensor(slices.data() + first * kValueElems, {count * kValueElems}, DataType::Int64);
  }
  /// A read of `span` values from `first`: one tensor when they are adjacent slices.
  ContinuousTensor read_tensor(std::int64_t first, std::uint32_t span) {
    return span == 1 ? value_tensor[static_cast<std::size_t>(first)] : slice(first, span);
  }
  /// The final content of every value, wherever it lived.
  std::vector<std::int64_t> snapshot() const {
    std::vector<std::int64_t> out;
    for (const ContinuousTensor& t : value_tensor) {
      const auto* p = t.as<const std::int64_t>();
      out.insert(out.end(), p, p + kValueElems);
    }
    out.insert(out.end(), accums.begin(), accums.end() - 1);
    return out;
  }
};

/// Builds the args of op `i`. With `for_engine`, auto-allocated writes are Output with data 0.
inline TaskArgs dag_args(const DagProgram& p, DagState& st, std::size_t i, bool for_engine) {
  const DagOp& op = p.ops[i];
  TaskArgs a;
  if (op.write >= 0) {
    ContinuousTensor t = st.value_tensor[static_cast<std::size_t>(op.write)];
    if (for_engine && op.write_auto) {
      t.data = 0;
      a.add_tensor(t, TensorArgType::Output);
    } else {
      a.add_tensor(t, TensorArgType::OutputExisting);
    }
  }
  if (op.accum >= 0) {
    a.add_tensor(make_tensor(&st.accums[static_cast<std::size_t>(op.accum)], {1}, DataType::Int64),
                 TensorArgType::InOut);
  }
  for (std::size_t r = 0; r < op.reads.size(); ++r) {
    a.add_tensor(st.read_tensor(op.reads[r], op.spans[r]), TensorArgType::Input);
  }
  if (op.read_const)
    a.add_tensor(make_tensor(&st.constant, {1}, DataType::Int64), TensorArgType::NoDep);
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

/// Runs `p` through `w` (with `kernel` = dag_kernel and `snap` = dag_snapshot_kernel registered
/// as sub callables) and returns the final state, read by a last task inside the run.
/// `arena` must have been mapped before w.init() when w's sub workers are forked processes.
template <class W>
std::vector<std::int64_t> run_engine(W& w, const CallableHandle& kernel, const CallableHandle& snap,
                                     const DagProgram& p, SharedArena& arena) {
  DagState st(p, arena);
  const std::size_t n = static_cast<std::size_t>(p.values) * kValueElems + p.accums;
  std::span<std::int64_t> result = st.arena.make<std::int64_t>(n, -2);
  w.run([&](OrchestratorBase& o, TaskArgsView, const CallConfig&) {
    for (std::size_t i = 0; i < p.ops.size(); ++i) {
      SubmitResult r = o.submit_sub(kernel, dag_args(p, st, i, true));
      const DagOp& op = p.ops[i];
      if (op.write >= 0 && op.write_auto)
        st.value_tensor[static_cast<std::size_t>(op.write)] = r.output(0);
    }
    TaskArgs a;
    a.add_tensor(
        make_tensor(result.data(), {static_cast<std::uint32_t>(result.size())}, DataType::Int64),
        TensorArgType::OutputExisting);
    for (const ContinuousTensor& t : st.value_tensor) a.add_tensor(t, TensorArgType::Input);
    for (std::uint32_t i = 0; i < p.accums; ++i) {
      a.add_tensor(make_tensor(&st.accums[i], {1}, DataType::Int64), TensorArgType::Input);
    }
    o.submit_sub(snap, std::move(a));
  });
  return {result.begin(), result.end()};
}

}  // namespace simpler::testing
