// simpler benchmarks — the oneTBB peer: a task_arena of N threads, and for graphs with
// dependencies a small tagged-dependency layer over tbb::task_group.
//
// oneTBB has no tagged dependencies of its own (a flow graph wants its edges made before it
// runs), so TbbDag infers them the way a tagged runtime does, while it submits: per buffer the
// last writer and the readers since; a reader waits for the last writer, a writer for the readers
// since the last write (write-after-read) or, when there were none, for the last writer
// (write-after-write). Buffers are dense indices, so the tracking is an array lookup (no hash:
// a favour to the peer). Tasks start as soon as their predecessors are done, while the
// submitting thread goes on; a finished task releases its successors, spawning all but one into
// the task_group and running the last one itself.
//
// Edges are published lock-free: a task's successor list is a stack of edge indices whose head is
// swapped to kClosed when the task finishes; a submitter that finds kClosed knows the predecessor
// is done. A new task's pending count starts at kGuard so that predecessors finishing while it is
// being linked cannot release it early; the submitter takes kGuard - linked off at the end.
#pragma once

#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/task_group.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace simpler_bench {

class TbbDag {
 public:
  enum class Mode : std::uint8_t { In, Out, InOut };
  struct Access {
    std::uint32_t buffer;
    Mode mode;
  };
  /// A task's body: body(ctx, task index).
  using Body = void (*)(void* ctx, std::uint32_t task);

  explicit TbbDag(int threads) : arena_(threads) {}

  /// Runs `tasks` tasks over `buffers` buffers with at most `accesses` accesses in all, in the
  /// arena: submit(*this) must call add(t, accesses of t) for t = 0, 1, ... tasks-1 in order.
  /// Returns when every task has run. Storage grows to fit outside the measured part when
  /// prepare() was called first with the same sizes.
  template <class Submit>
  void run(std::uint32_t tasks, std::uint32_t buffers, std::size_t accesses, Body body, void* ctx,
           Submit&& submit) {
    prepare(tasks, buffers, accesses);
    body_ = body;
    ctx_ = ctx;
    edges_used_ = 0;
    records_used_ = 0;
    std::fill_n(last_writer_.get(), buffers, kNone);
    std::fill_n(readers_.get(), buffers, kNone);
    arena_.execute([&] {
      tbb::task_group tg;
      group_ = &tg;
      submit(*this);
      tg.wait();
      group_ = nullptr;
    });
  }

  /// Sizes the storage for run(tasks, buffers, accesses) (allocates only to grow).
  void prepare(std::uint32_t tasks, std::uint32_t buffers, std::size_t accesses) {
    if (tasks > task_cap_) {
      pending_ = std::make_unique<std::atomic<std::uint32_t>[]>(tasks);
      succ_head_ = std::make_unique<std::atomic<std::uint32_t>[]>(tasks);
      task_cap_ = tasks;
    }
    if (buffers > buffer_cap_) {
      last_writer_ = std::make_unique<std::uint32_t[]>(buffers);
      readers_ = std::make_unique<std::uint32_t[]>(buffers);
      buffer_cap_ = buffers;
    }
    // Each access adds at most one edge for itself, and each reader record is consumed by at most
    // one later writer: 2 edges per access at most.
    if (2 * accesses > edge_cap_) {
      edges_ = std::make_unique<Edge[]>(2 * accesses);
      records_ = std::make_unique<Edge[]>(accesses);
      edge_cap_ = 2 * accesses;
    }
  }

  /// Submits task t (the next in order) with its accesses; called from run's `submit` only.
  void add(std::uint32_t t, std::span<const Access> accesses) {
    pending_[t].store(kGuard, std::memory_order_relaxed);
    succ_head_[t].store(kNil, std::memory_order_relaxed);
    std::uint32_t linked = 0;
    for (const Access& a : accesses) {
      const std::uint32_t b = a.buffer;
      if (a.mode == Mode::In) {
        linked += link(last_writer_[b], t);
        Edge& r = records_[records_used_];
        r.task = t;
        r.next = readers_[b];
        readers_[b] = records_used_++;
        continue;
      }
      // A writer (Out or InOut): after the readers since the last write, each of which waits
      // for that writer already; after the last writer itself only when there were none.
      if (readers_[b] != kNone) {
        for (std::uint32_t r = readers_[b]; r != kNone; r = records_[r].next) {
          if (records_[r].task != t) linked += link(records_[r].task, t);
        }
        readers_[b] = kNone;
      } else {
        linked += link(last_writer_[b], t);
      }
      last_writer_[b] = t;
    }
    // Release the guard: predecessors that finished meanwhile have already taken their share.
    if (pending_[t].fetch_sub(kGuard - linked, std::memory_order_acq_rel) == kGuard - linked) {
      spawn(t);
    }
  }

 private:
  static constexpr std::uint32_t kNone = 0xFFFF'FFFFu;    // no task / no record
  static constexpr std::uint32_t kNil = 0xFFFF'FFFFu;     // empty successor list
  static constexpr std::uint32_t kClosed = 0xFFFF'FFFEu;  // the task has finished
  static constexpr std::uint32_t kGuard = 1u << 30;

  struct Edge {
    std::uint32_t task;  // the successor (edges) or the reader (records)
    std::uint32_t next;
  };

  /// Makes `succ` wait for `pred` unless pred is none or already finished; returns 1 if linked.
  std::uint32_t link(std::uint32_t pred, std::uint32_t succ) {
    if (pred == kNone) return 0;
    const std::uint32_t e = edges_used_;
    edges_[e].task = succ;
    std::atomic<std::uint32_t>& head = succ_head_[pred];
    std::uint32_t h = head.load(std::memory_order_acquire);
    do {
      if (h == kClosed) return 0;
      edges_[e].next = h;
      // release: the finishing predecessor reads edges_[e] after its exchange (acq_rel).
    } while (
        !head.compare_exchange_weak(h, e, std::memory_order_release, std::memory_order_acquire));
    ++edges_used_;
    return 1;
  }

  void spawn(std::uint32_t t) {
    group_->run([this, t] { execute(t); });
  }

  /// Runs t, then releases its successors; runs the last one released itself (a continuation),
  /// and so on down a chain.
  void execute(std::uint32_t t) {
    while (true) {
      body_(ctx_, t);
      // acq_rel: acquire the edges pushed by submitters (release CAS), release this task's
      // writes to the successors it makes ready.
      std::uint32_t e = succ_head_[t].exchange(kClosed, std::memory_order_acq_rel);
      std::uint32_t next = kNone;
      for (; e != kNil; e = edges_[e].next) {
        const std::uint32_t s = edges_[e].task;
        if (pending_[s].fetch_sub(1, std::memory_order_acq_rel) == 1) {
          if (next != kNone) spawn(next);
          next = s;
        }
      }
      if (next == kNone) return;
      t = next;
    }
  }

  tbb::task_arena arena_;
  tbb::task_group* group_ = nullptr;
  Body body_ = nullptr;
  void* ctx_ = nullptr;
  std::unique_ptr<std::atomic<std::uint32_t>[]> pending_;
  std::unique_ptr<std::atomic<std::uint32_t>[]> succ_head_;
  std::unique_ptr<std::uint32_t[]> last_writer_;  // per buffer: the last writer, or kNone
  std::unique_ptr<std::uint32_t[]> readers_;      // per buffer: readers since (records_ list)
  std::unique_ptr<Edge[]> edges_;                 // successor lists
  std::unique_ptr<Edge[]> records_;               // reader lists
  std::uint32_t task_cap_ = 0;
  std::uint32_t buffer_cap_ = 0;
  std::size_t edge_cap_ = 0;
  std::uint32_t edges_used_ = 0;
  std::uint32_t records_used_ = 0;
};

/// Independent tasks in the same arena shape: one task_group, body(ctx, i) for i < n.
class TbbFlat {
 public:
  explicit TbbFlat(int threads) : arena_(threads) {}
  template <class F>
  void run(std::uint32_t n, F f) {
    arena_.execute([&] {
      tbb::task_group tg;
      for (std::uint32_t i = 0; i < n; ++i) tg.run([&f, i] { f(i); });
      tg.wait();
    });
  }

 private:
  tbb::task_arena arena_;
};

}  // namespace simpler_bench
