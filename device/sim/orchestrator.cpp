// The TRB orchestrator API: submit (checks, dependency discovery through the TensorMap, slot and
// heap allocation with back-pressure, wiring), scopes, runtime-allocated tensors and tensor
// reads. The ring allocation lives in rings.cpp, the TensorMap in tensor_map.cpp.
//
// Threads: everything here runs on the orchestrator thread only, so the TensorMap and the scope
// stack are orchestrator-private. Producers are claimed under their slot lock: schedulers
// complete and release them concurrently.

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>

#include "rings.hpp"
#include "sim.hpp"
#include "tensor_map.hpp"

namespace simpler::sim {

namespace {

std::uint64_t align_up(std::uint64_t v, std::uint64_t a) noexcept {
  return (v + a - 1) / a * a;
}

std::string task_name(std::uint64_t id) {
  return fmt::format("task {}:{}", ring_of(id), local_of(id));
}

}  // namespace

std::string shape_text(const std::uint32_t* shapes, std::uint32_t ndims, std::uint8_t dtype) {
  std::string s = "[";
  for (std::uint32_t i = 0; i < ndims && i < 5; ++i)  // ndims may be invalid: never past 5
    s += fmt::format("{}{}", i == 0 ? "" : ", ", shapes[i]);
  return s + fmt::format("] of dtype {}", dtype);
}

// ---- submit ------------------------------------------------------------------------------------
//
// A submit runs in phases: check the builder, the kernels and the tensors (nothing changes
// yet); find the producers and reserve every resource the task needs (TensorMap entries,
// dependency-list entries, then its slot and heap bytes) so that a failure leaves nothing
// behind; then fill the slot, publish it, record its writes and wire it to its producers.
// Every phase is a function of this file, called once, so the compiler inlines them into submit.

namespace {

const char* build_error(int e) noexcept {
  switch (e) {
    case SIMPLER_BUILD_TOO_MANY_TENSORS:
      return "too many tensor args";
    case SIMPLER_BUILD_TOO_MANY_SCALARS:
      return "too many scalar args";
    case SIMPLER_BUILD_TENSOR_AFTER_SCALAR:
      return "a tensor was added after a scalar";
    case SIMPLER_BUILD_BAD_TAG:
      return "an unknown tensor tag";
    case SIMPLER_BUILD_BAD_BLOCK_NUM:
      return "a negative SPMD block count";
    default:
      return "an unknown builder error";
  }
}

/// What the checks of a submit found out about the task.
struct TaskPlan {
  std::int32_t lanes[3] = {-1, -1, -1};  ///< func_id per lane (AIC, AIV0, AIV1); -1 = unused
  std::uint8_t lane_mask = 0;
  int lanes_used = 0;
  Shape shape = Shape::Aic;
  std::uint64_t out_bytes = 0;  ///< heap bytes of its runtime-allocated outputs
  std::int32_t blocks = 1;      ///< SPMD blocks, resolved (>= 1)
};

/// The builder is present, complete and within the task limits. Latches and returns false if
/// not.
bool check_builder(Context& ctx, std::uint64_t nth, const simpler_task_builder* b) {
  if (b == nullptr) {
    ctx.latch(SIMPLER_ERR_INVALID_TASK_ARGS,
              fmt::format("submit #{}: the task args are NULL", nth));
    return false;
  }
  if (b->error != 0) {
    ctx.latch(SIMPLER_ERR_INVALID_TASK_ARGS,
              fmt::format("submit #{}: {} ({} requested; a task takes at most {} tensors and {} "
                          "scalars, tensors first)",
                          nth, build_error(b->error), b->requested, SIMPLER_MAX_TASK_TENSORS,
                          SIMPLER_MAX_TASK_SCALARS));
    return false;
  }
  if (b->tensor_count < 0 || b->tensor_count > SIMPLER_MAX_TASK_TENSORS || b->scalar_count < 0 ||
      b->scalar_count > SIMPLER_MAX_TASK_SCALARS) {
    ctx.latch(SIMPLER_ERR_INVALID_TASK_ARGS,
              fmt::format("submit #{}: {} tensors and {} scalars; a task takes 0..{} and 0..{}",
                          nth, b->tensor_count, b->scalar_count, SIMPLER_MAX_TASK_TENSORS,
                          SIMPLER_MAX_TASK_SCALARS));
    return false;
  }
  return true;
}

/// Which lanes the task uses, and does every func_id have a kernel? Fills the lanes, mask and
/// shape of `plan`; latches and returns false on a bad func_id or no kernel at all.
bool plan_kernels(Context& ctx, std::uint64_t nth, simpler_mixed_kernels k, TaskPlan& plan) {
  const Callable& c = ctx.life.callables[ctx.run.callable];
  const std::int32_t lanes[3] = {k.aic, k.aiv0, k.aiv1};
  std::uint8_t mask = 0;
  for (int l = 0; l < 3; ++l) {
    plan.lanes[l] = lanes[l];
    if (lanes[l] == -1) continue;
    if (lanes[l] < 0) {
      ctx.latch(SIMPLER_ERR_UNKNOWN_FUNC_ID,
                fmt::format("submit #{}: func_id {} is negative; func_ids are 0..{} and -1 marks "
                            "an unused lane",
                            nth, lanes[l], SIMPLER_MAX_FUNC_ID - 1));
      return false;
    }
    if (lanes[l] >= SIMPLER_MAX_FUNC_ID || static_cast<std::size_t>(lanes[l]) >= c.kernels.size() ||
        c.kernels[lanes[l]] == nullptr) {
      ctx.latch(SIMPLER_ERR_UNKNOWN_FUNC_ID,
                fmt::format("submit #{}: func_id {} has no kernel in callable {} (register a "
                            "kernel with that func_id in the ChipCallable)",
                            nth, lanes[l], ctx.run.callable));
      return false;
    }
    mask = static_cast<std::uint8_t>(mask | (1U << l));
  }
  if (mask == 0) {
    ctx.latch(
        SIMPLER_ERR_INVALID_TASK_ARGS,
        fmt::format("submit #{}: the task names no kernel (aic, aiv0 and aiv1 are all -1)", nth));
    return false;
  }
  plan.lane_mask = mask;
  plan.lanes_used = std::popcount(static_cast<unsigned>(mask));
  plan.shape = plan.lanes_used > 1 ? Shape::Mix : (mask == 1 ? Shape::Aic : Shape::Aiv);
  return true;
}

/// The SPMD block count of the builder, resolved against the cores of the task's shape the run
/// may use. Latches and returns false on a count outside 1..SIMPLER_MAX_BLOCK_NUM.
bool plan_blocks(Context& ctx, std::uint64_t nth, const simpler_task_builder& b, TaskPlan& plan) {
  const std::int32_t n = b.block_num;
  const std::uint32_t clusters = ctx.run.clusters;
  if (n == 0) {
    plan.blocks = 1;
  } else if (n == SIMPLER_BLOCK_NUM_ALL) {
    plan.blocks = static_cast<std::int32_t>(plan.shape == Shape::Aiv ? 2 * clusters : clusters);
  } else if (n < 0 || n > SIMPLER_MAX_BLOCK_NUM) {
    const int lane = plan.lanes[0] >= 0 ? 0 : (plan.lanes[1] >= 0 ? 1 : 2);
    ctx.latch(SIMPLER_ERR_INVALID_TASK_ARGS,
              fmt::format("submit #{} (func_id {}): SPMD block count {} is outside 1..{} (0 "
                          "means one block per core of the task's shape)",
                          nth, plan.lanes[lane], n, SIMPLER_MAX_BLOCK_NUM));
    return false;
  } else {
    plan.blocks = n;
  }
  return true;
}

/// Valid tensor descriptors, and the heap bytes their runtime-allocated outputs need (into
/// `plan.out_bytes`). Latches and returns false on the first invalid tensor.
bool check_tensors(Context& ctx, std::uint64_t nth, const simpler_task_builder& b, TaskPlan& plan) {
  for (int i = 0; i < b.tensor_count; ++i) {
    const simpler_chip_tensor& t = b.tensors[i];
    if (t.ndims < 1 || t.ndims > 5 || simpler_dtype_size(t.dtype) == 0) {
      ctx.latch(SIMPLER_ERR_INVALID_TASK_ARGS,
                fmt::format("submit #{}: tensor {} has ndims {} and dtype {}; ndims must be 1..5 "
                            "and dtype a simpler DataType",
                            nth, i, t.ndims, t.dtype));
      return false;
    }
    std::uint64_t bytes = 0;
    if (!tensor_bytes(t, bytes)) {
      ctx.latch(
          SIMPLER_ERR_INVALID_TASK_ARGS,
          fmt::format("submit #{}: tensor {} has shape {}: more than "
                      "SIMPLER_MAX_TENSOR_BYTES ({}) bytes",
                      nth, i, shape_text(t.shapes, t.ndims, t.dtype), SIMPLER_MAX_TENSOR_BYTES));
      return false;
    }
    if (b.tags[i] == SIMPLER_TAG_OUTPUT) {
      // At most 16 x 2^48 bytes: the sum cannot overflow.
      plan.out_bytes += align_up(bytes, kHeapAlign);
      continue;
    }
    if (t.addr == 0) {
      ctx.latch(SIMPLER_ERR_INVALID_TASK_ARGS,
                fmt::format("submit #{}: tensor {} has no buffer (addr 0); only Output tensors "
                            "are allocated by the runtime",
                            nth, i));
      return false;
    }
    if (!view_fits(t, bytes)) {
      ctx.latch(SIMPLER_ERR_INVALID_TASK_ARGS,
                fmt::format("submit #{}: tensor {} is a view of {} bytes at offset {} of buffer "
                            "{:#x}: its end wraps past 2^64 (a negative or corrupt offset?)",
                            nth, i, bytes, t.offset, t.addr));
      return false;
    }
    if (t.owner_task != SIMPLER_INVALID_TASK_ID && !ctx.created_in_run(t.owner_task)) {
      ctx.latch(SIMPLER_ERR_INVALID_TASK_ARGS,
                fmt::format("submit #{}: tensor {} names owner {}, which this run never created "
                            "(a descriptor from another run, or a corrupt one)",
                            nth, i, task_name(t.owner_task)));
      return false;
    }
  }
  return true;
}

/// The TensorMap entries the task adds: one per tensor it writes in place and, with all hazards
/// on, one per tensor it reads (Input).
bool writes_in_place(int tag) noexcept {
  return tag == SIMPLER_TAG_INOUT || tag == SIMPLER_TAG_OUTPUT_EXISTING;
}
std::uint32_t tensormap_inserts(const simpler_task_builder& b, bool all_hazards) noexcept {
  std::uint32_t inserts = 0;
  for (int i = 0; i < b.tensor_count; ++i) {
    if (writes_in_place(b.tags[i]) || (all_hazards && b.tags[i] == SIMPLER_TAG_INPUT)) ++inserts;
  }
  return inserts;
}

/// The live producers the task reads from: the owners of its tensors and the TensorMap's writers
/// of the bytes it reads (read after write). Latches and returns false when there are too many.
bool find_producers(Context& ctx, std::uint64_t nth, const simpler_task_builder& b,
                    Candidates& cand) {
  ArenaHeader& h = ctx.header();
  // Drop TensorMap entries of retired tasks first: it keeps bucket chains short (a lookup
  // walks every entry of its buffer) and costs four checks when nothing retired.
  tm_reclaim(h, !ctx.diag.find_edges);
  if (ctx.diag.find_edges) diag_find_edges(ctx, b);
  for (int i = 0; i < b.tensor_count; ++i) {
    const simpler_chip_tensor& t = b.tensors[i];
    const int tag = b.tags[i];
    if (tag == SIMPLER_TAG_OUTPUT) continue;
    if (t.owner_task != SIMPLER_INVALID_TASK_ID && !retired(h, t.owner_task))
      cand.add(t.owner_task);
    if (tag != SIMPLER_TAG_INPUT && tag != SIMPLER_TAG_INOUT) continue;
    tm_find_producers(h, t.addr, t.offset, t.offset + simpler_tensor_nbytes(&t),
                      !ctx.diag.find_edges, cand);
  }
  if (cand.overflow) {
    ctx.latch(SIMPLER_ERR_TOO_MANY_PRODUCERS,
              fmt::format("submit #{}: the task depends on more than {} producer tasks; merge "
                          "inputs or add an intermediate task",
                          nth, kMaxFanin));
    return false;
  }
  return true;
}

/// With all hazards on, adds to `cand` (the task's producers) the pending tasks its in-place
/// writes must not overtake: the readers of those bytes since their last writer (write after
/// read) and, for an OutputExisting, that writer (write after write). These edges only order:
/// the writer reads nothing they wrote. A task waits for at most kMaxFanin tasks, and a writer
/// may follow any number of readers, so when they do not all fit this waits for some to
/// complete (completed ones need no edge) rather than drop an ordering: back-pressure, ended by
/// the resource_wait backstop (SIMPLER_ERR_FLOW_CONTROL_DEADLOCK) when none completes.
bool find_overtaken(Context& ctx, std::uint64_t nth, const simpler_task_builder& b,
                    Candidates& cand) {
  if (!ctx.config.all_hazards) return true;
  ArenaHeader& h = ctx.header();
  // Adding only appends: cutting `cand` back to its producers undoes a collection.
  const int producers = cand.n;
  auto collect = [&] {
    cand.n = producers;
    cand.overflow = false;
    for (int i = 0; i < b.tensor_count; ++i) {
      const int tag = b.tags[i];
      if (!writes_in_place(tag)) continue;
      const simpler_chip_tensor& t = b.tensors[i];
      tm_find_overtaken(h, t.addr, t.offset, t.offset + simpler_tensor_nbytes(&t),
                        tag == SIMPLER_TAG_OUTPUT_EXISTING, !ctx.diag.find_edges, cand);
    }
    return !cand.overflow;
  };
  if (collect()) return true;
  WantsCompletion wants(ctx);
  Backstop<std::uint64_t> backstop(ctx.sched.completed.load(std::memory_order_seq_cst),
                                   ctx.config.resource_wait);
  for (;;) {
    const std::uint64_t completed = ctx.sched.completed.load(std::memory_order_seq_cst);
    if (collect()) return true;
    if (ctx.fatal()) return false;
    if (backstop.expired(completed)) {
      ctx.latch(SIMPLER_ERR_FLOW_CONTROL_DEADLOCK,
                fmt::format("submit #{}: the task overwrites bytes that more than {} earlier tasks "
                            "still read or write (with its {} producers), and none of them "
                            "completed for {} ms; a task waits for at most {} tasks, so this "
                            "writer must wait for some of them to finish. Let fewer tasks read "
                            "the bytes before they are overwritten, or look for a task that "
                            "never finishes",
                            nth, kMaxFanin - producers, producers, ctx.config.resource_wait.count(),
                            kMaxFanin));
      return false;
    }
    ctx.orch.progress_event.await(
        [&] {
          return ctx.fatal() || ctx.sched.completed.load(std::memory_order_seq_cst) != completed;
        },
        std::chrono::microseconds(20), backstop.deadline());
  }
}

/// Writes what the task's kernels receive: its kernels, tensors (runtime-allocated outputs get
/// their bytes of the heap, from `heap_off` on, and the task as their owner) and scalars.
void fill_payload(Payload& p, const simpler_task_builder& b, const TaskPlan& plan,
                  const RingControl& rc, std::uint64_t heap_off, std::uint64_t id) noexcept {
  p.tensor_count = b.tensor_count;
  p.scalar_count = b.scalar_count;
  p.fanin_count = 0;
  for (int l = 0; l < 3; ++l) p.kernels[l] = plan.lanes[l];
  p.block_num = plan.blocks;
  p.next_block = 0;
  std::uint64_t cursor = heap_off;
  for (int i = 0; i < b.tensor_count; ++i) {
    p.tensors[i] = b.tensors[i];
    if (b.tags[i] == SIMPLER_TAG_OUTPUT) {
      simpler_chip_tensor& t = p.tensors[i];
      t.addr = reinterpret_cast<std::uintptr_t>(rc.heap + cursor);
      t.offset = 0;
      t.owner_task = id;
      cursor += align_up(simpler_tensor_nbytes(&t), kHeapAlign);
    }
  }
  std::memcpy(p.scalars, b.scalars,
              sizeof(std::uint64_t) * static_cast<std::size_t>(b.scalar_count));
}

/// Records what the task does to its tensors' bytes: it writes those it writes in place and,
/// with all hazards on, reads its Inputs. A writer first takes over the entries whose bytes it
/// covers and whose tasks it waits for: with all hazards on every writer's and reader's, else
/// (an InOut only) the writers'. All before any insert, so the task keeps its own entries.
void record_accesses(ArenaHeader& h, bool all_hazards, const simpler_task_builder& b,
                     const Payload& p, std::uint64_t id) noexcept {
  for (int i = 0; i < b.tensor_count; ++i) {
    const int tag = b.tags[i];
    if (!writes_in_place(tag)) continue;
    const simpler_chip_tensor& t = p.tensors[i];
    tm_supersede(h, t.addr, t.offset, t.offset + simpler_tensor_nbytes(&t),
                 all_hazards || tag == SIMPLER_TAG_INOUT, all_hazards);
  }
  for (int i = 0; i < b.tensor_count; ++i) {
    const int tag = b.tags[i];
    const bool write = writes_in_place(tag);
    if (!write && !(all_hazards && tag == SIMPLER_TAG_INPUT)) continue;
    const simpler_chip_tensor& t = p.tensors[i];
    tm_insert(h, t.addr, t.offset, t.offset + simpler_tensor_nbytes(&t), id,
              write ? kTmWrite : kTmRead);
  }
}

/// Wiring: claims each producer under its lock (a reference, held until the task completes) and
/// waits only for those not yet completed (a dependency-list entry on the producer, one count
/// of `fanin_remaining`). Producers consumed in the meantime are gone: their bytes are final.
void wire_producers(Context& ctx, const Candidates& cand, std::uint32_t ring, std::uint64_t id,
                    SlotState& s, Payload& p) noexcept {
  RingControl& rc = ctx.header().rings[ring];
  for (int i = 0; i < cand.n; ++i) {
    const std::uint64_t pid = cand.ids[i];
    SlotState& ps = ctx.slot_of(pid);
    SlotLock lk(ps);
    const std::uint32_t st_now = ps.state.load(std::memory_order_seq_cst);
    if (ps.task_id != pid || st_now == kSlotConsumed) continue;  // gone: its bytes are final
    ps.refs.fetch_add(1, std::memory_order_relaxed);             // under the slot lock
    p.fanin[p.fanin_count++] = pid;
    if (st_now == kSlotPending) {
      const std::uint64_t linear = rc.dep_top++;
      DepEntry& de = rc.deps[linear % rc.dep_capacity];
      de.consumer = id;
      de.next = ps.fanout_head;
      ps.fanout_head = dep_link(ring, linear);
      // relaxed: the wiring hold keeps the count above zero until the acq_rel release below.
      s.fanin_remaining.fetch_add(1, std::memory_order_relaxed);
    }
  }
  s.dep_pool_mark = rc.dep_top;
}

}  // namespace

std::uint64_t Context::submit(simpler_mixed_kernels k, const simpler_task_builder* b,
                              simpler_chip_tensor* outputs) {
  if (fatal()) return SIMPLER_INVALID_TASK_ID;
  const std::uint64_t t0 = diag.swimlane >= 4 ? trace_now_ns() : 0;
  const std::uint64_t nth = orch.submitted.load(std::memory_order_relaxed);
  TaskPlan plan;
  if (!check_builder(*this, nth, b) || !plan_kernels(*this, nth, k, plan) ||
      !plan_blocks(*this, nth, *b, plan) || !check_tensors(*this, nth, *b, plan)) {
    return SIMPLER_INVALID_TASK_ID;
  }

  ArenaHeader& h = header();
  ScopeStack& st = h.scopes;
  const std::uint32_t ring = std::min<std::uint32_t>(st.depth - 1, kRings - 1);
  // Dependencies first (they do not depend on the new slot), so a failure leaves nothing behind.
  Candidates cand;
  if (!find_producers(*this, nth, *b, cand) || !find_overtaken(*this, nth, *b, cand) ||
      !tm_ensure(*this, tensormap_inserts(*b, config.all_hazards)) ||
      !ensure_dep_space(*this, ring, static_cast<std::uint64_t>(cand.n))) {
    return SIMPLER_INVALID_TASK_ID;
  }

  // Slot and heap.
  std::uint64_t local = 0, heap_off = 0;
  if (!alloc_task(*this, ring, plan.out_bytes, local, heap_off)) return SIMPLER_INVALID_TASK_ID;
  RingControl& rc = h.rings[ring];
  const std::uint64_t id = make_task_id(ring, local);
  SlotState& s = rc.slots[local & rc.mask];
  Payload& p = rc.payloads[local & rc.mask];
  // The wiring hold on the fanin; references of the scope and of the completion.
  bind_slot(s, id,
            {1, 2, plan.lanes_used * plan.blocks, static_cast<std::uint8_t>(plan.shape),
             plan.lane_mask, heap_off, heap_off + plan.out_bytes, kSlotPending});
  fill_payload(p, *b, plan, rc, heap_off, id);
  if (run.dump_tensor) {
    for (int i = 0; i < b->tensor_count; ++i) p.tags[i] = static_cast<std::int8_t>(b->tags[i]);
  }
  // Publish the slot: schedulers read `current` (acquire) before looking at slots of this ring.
  rc.current.store(local + 1, std::memory_order_seq_cst);
  st.tasks[st.top++] = id;

  record_accesses(h, config.all_hazards, *b, p, id);
  wire_producers(*this, cand, ring, id, s, p);
  if (diag.find_edges) diag_submitted(*this, id, *b, p.tensors, plan.lanes, t0);
  orch.submitted.fetch_add(1, std::memory_order_seq_cst);
  sched.progress.fetch_add(1, std::memory_order_relaxed);
  if (outputs != nullptr) {
    std::memcpy(outputs, p.tensors,
                sizeof(simpler_chip_tensor) * static_cast<std::size_t>(p.tensor_count));
  }
  // Drop the wiring hold: the task is ready now unless a producer is still pending.
  if (s.fanin_remaining.fetch_sub(1, std::memory_order_acq_rel) == 1 && !dispatch_direct(id))
    push_ready(id);
  return id;
}

void Context::scope_begin() {
  if (fatal()) return;
  ScopeStack& st = header().scopes;
  if (st.depth >= static_cast<std::uint32_t>(kMaxScopeDepth)) {
    latch(SIMPLER_ERR_SCOPE_OVERFLOW,
          fmt::format("scope_begin: scopes nest at most {} deep (the run opens the outermost)",
                      kMaxScopeDepth));
    return;
  }
  st.begin[st.depth++] = st.top;
}

void Context::scope_end() {
  end_scope(false);
}

void Context::end_scope(bool by_runtime) {
  ScopeStack& st = header().scopes;
  if (st.depth == 0) return;
  if (st.depth == 1 && !by_runtime) {
    // Depth 1 is the run's own scope: only the runtime closes it.
    if (!fatal()) {
      latch(SIMPLER_ERR_SCOPE_OVERFLOW,
            "scope_end without a matching scope_begin in the orchestration");
    }
    return;
  }
  const std::uint64_t from = st.begin[st.depth - 1];
  for (std::uint64_t i = from; i < st.top; ++i) {
    const std::uint64_t id = st.tasks[i];
    slot_of(id).scope_open.store(0, std::memory_order_relaxed);
    release_ref(id);
  }
  st.top = from;
  --st.depth;
}

int Context::alloc_tensor(const std::uint32_t* shapes, std::uint32_t ndims, std::uint8_t dtype,
                          simpler_chip_tensor* out) {
  if (fatal()) return SIMPLER_ERR_ORCH_FATAL;
  if (out == nullptr || shapes == nullptr || ndims < 1 || ndims > 5 ||
      simpler_dtype_size(dtype) == 0) {
    latch(SIMPLER_ERR_INVALID_TASK_ARGS,
          fmt::format("alloc_tensor: ndims {} dtype {} (out {}); ndims must be 1..5 and dtype a "
                      "simpler DataType",
                      ndims, dtype, out == nullptr ? "NULL" : "set"));
    return SIMPLER_ERR_INVALID_TASK_ARGS;
  }
  simpler_chip_tensor t{};
  t.ndims = ndims;
  t.dtype = dtype;
  for (std::uint32_t i = 0; i < ndims; ++i) t.shapes[i] = shapes[i];
  std::uint64_t nbytes = 0;
  if (!tensor_bytes(t, nbytes)) {
    latch(SIMPLER_ERR_INVALID_TASK_ARGS,
          fmt::format("alloc_tensor: shape {} is more than SIMPLER_MAX_TENSOR_BYTES ({}) bytes",
                      shape_text(shapes, ndims, dtype), SIMPLER_MAX_TENSOR_BYTES));
    return SIMPLER_ERR_INVALID_TASK_ARGS;
  }
  const std::uint64_t bytes = align_up(nbytes, kHeapAlign);
  ArenaHeader& h = header();
  ScopeStack& st = h.scopes;
  const std::uint32_t ring = std::min<std::uint32_t>(st.depth - 1, kRings - 1);
  std::uint64_t local = 0, heap_off = 0;
  if (!alloc_task(*this, ring, bytes, local, heap_off)) return outcome.status.load();
  RingControl& rc = h.rings[ring];
  const std::uint64_t id = make_task_id(ring, local);
  SlotState& s = rc.slots[local & rc.mask];
  Payload& p = rc.payloads[local & rc.mask];
  // Only the scope holds it: it completed at birth.
  bind_slot(s, id, {0, 1, 0, 0, 0, heap_off, heap_off + bytes, kSlotCompleted});
  s.dep_pool_mark = rc.dep_top;
  p.tensor_count = 0;
  p.scalar_count = 0;
  p.fanin_count = 0;
  rc.current.store(local + 1, std::memory_order_seq_cst);
  st.tasks[st.top++] = id;
  orch.submitted.fetch_add(1, std::memory_order_seq_cst);
  sched.completed.fetch_add(1, std::memory_order_seq_cst);
  t.addr = reinterpret_cast<std::uintptr_t>(rc.heap + heap_off);
  t.offset = 0;
  t.owner_task = id;
  *out = t;
  return SIMPLER_OK;
}

int Context::read_tensor(const simpler_chip_tensor* t, std::uint64_t off, void* dst,
                         std::uint64_t n) {
  if (fatal()) return SIMPLER_ERR_ORCH_FATAL;
  auto refuse = [this](std::string message) {
    latch(SIMPLER_ERR_INVALID_TASK_ARGS, "read_tensor: " + std::move(message));
    return SIMPLER_ERR_INVALID_TASK_ARGS;
  };
  if (t == nullptr || dst == nullptr) {
    return refuse(fmt::format("the {} is NULL", t == nullptr ? "tensor" : "destination"));
  }
  std::uint64_t bytes = 0;
  if (!tensor_bytes(*t, bytes)) {
    return refuse(
        fmt::format("the tensor has shape {}: invalid, or more than "
                    "SIMPLER_MAX_TENSOR_BYTES ({}) bytes",
                    shape_text(t->shapes, t->ndims, t->dtype), SIMPLER_MAX_TENSOR_BYTES));
  }
  if (t->addr == 0) return refuse("the tensor has no buffer (addr 0)");
  // Each comparison is made so that it cannot overflow: a sum that wraps would let a huge
  // offset pass and read before the buffer.
  if (!view_fits(*t, bytes)) {
    return refuse(fmt::format("the view of {} bytes at offset {} of buffer {:#x} wraps past 2^64",
                              bytes, t->offset, t->addr));
  }
  if (n > bytes || off > bytes - n) {
    return refuse(
        fmt::format("{} bytes from byte {} are outside the tensor ({} bytes)", n, off, bytes));
  }
  if (t->owner_task != SIMPLER_INVALID_TASK_ID && !created_in_run(t->owner_task)) {
    return refuse(fmt::format("the tensor names owner {}, which this run never created",
                              task_name(t->owner_task)));
  }
  ArenaHeader& h = header();
  const std::uint64_t begin = t->offset + off, end = begin + n;
  Candidates writers;
  if (t->owner_task != SIMPLER_INVALID_TASK_ID) writers.add(t->owner_task);
  tm_find_writers(h, t->addr, begin, end, writers);
  if (writers.overflow) {
    // Waiting for only some of them would read bytes that are still being written.
    latch(SIMPLER_ERR_TOO_MANY_PRODUCERS,
          fmt::format("read_tensor: more than {} live tasks write the bytes read; read a smaller "
                      "view or after a task that depends on them",
                      kMaxFanin));
    return SIMPLER_ERR_TOO_MANY_PRODUCERS;
  }
  const auto deadline = Clock::now() + config.tensor_wait;
  // Completions wake this thread only while it waits here.
  WantsCompletion wants(*this);
  for (int i = 0; i < writers.n; ++i) {
    const std::uint64_t w = writers.ids[i];
    auto done = [&] {
      if (fatal() || retired(h, w)) return true;
      SlotState& s = slot_of(w);
      return s.task_id != w || s.state.load(std::memory_order_seq_cst) != kSlotPending;
    };
    if (!orch.progress_event.await(done, std::chrono::microseconds(20), deadline)) {
      latch(SIMPLER_ERR_TENSOR_WAIT_TIMEOUT,
            fmt::format("read_tensor waited {} ms for {} (which writes the tensor) to complete; it "
                        "has not (is it waiting on something the orchestration has yet to do?)",
                        config.tensor_wait.count(), task_name(w)));
      return SIMPLER_ERR_TENSOR_WAIT_TIMEOUT;
    }
    if (fatal()) return outcome.status.load();
  }
  std::memcpy(dst, reinterpret_cast<const std::byte*>(static_cast<std::uintptr_t>(t->addr)) + begin,
              n);
  return SIMPLER_OK;
}

}  // namespace simpler::sim
