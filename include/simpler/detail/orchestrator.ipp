// The Orchestrator: submit, dependency inference, scopes, heap rings, retirement.
// Included once, at the end of its header; every function is inline (the library is header-only).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <thread>

#include "simpler/detail/scheduler_core.hpp"
#include "simpler/error.hpp"
#include "simpler/orchestrator.hpp"
#include "simpler/remote/wire.hpp"

namespace simpler {

using detail::Edge;
using detail::Role;
using detail::Slot;

inline const ContinuousTensor& SubmitResult::output(std::size_t i) const {
  if (i >= outputs.size()) {
    throw UsageError(fmt::format(
        "SubmitResult::output({}): the task auto-allocated {} outputs (Output tensors with "
        "data == 0)",
        i, outputs.size()));
  }
  return outputs[i];
}

inline OrchestratorBase::OrchestratorBase(detail::EngineCore& core,
                                          const detail::CallableRegistry& registry,
                                          std::size_t heap_ring_size)
    : core_(core),
      light_ready_push_(core.sched_wake.asymmetric()),
      registry_(registry),
      heap_ring_size_(heap_ring_size) {
  // Mapped here, in the Worker constructor, before any child is forked: children inherit every
  // ring at the same address.
  int made = 0;
  try {
    for (; made < detail::kHeapRingCount; ++made) {
      if (heap_ring_size_ != 0) {
        heaps_[made] =
            detail::HeapRing(detail::map_shared_region(heap_ring_size_), heap_ring_size_);
      }
    }
  } catch (...) {
    for (int i = 0; i < made; ++i) detail::unmap_region(heaps_[i].base(), heap_ring_size_);
    throw;
  }
  if (heap_ring_size_ != 0) {
    std::uintptr_t lo = UINTPTR_MAX;
    std::uintptr_t hi = 0;
    for (const auto& h : heaps_) {
      lo = std::min(lo, reinterpret_cast<std::uintptr_t>(h.base()));
      hi = std::max(hi, reinterpret_cast<std::uintptr_t>(h.base()) + h.size());
    }
    heap_lo_ = lo;
    heap_span_ = hi - lo;
  }
}

inline OrchestratorBase::~OrchestratorBase() {
  for (auto& h : heaps_) detail::unmap_region(h.base(), h.size());
}

inline void OrchestratorBase::throw_not_owner(const char* api) const {
  if (!in_run_.load(std::memory_order_acquire)) {
    throw UsageError(fmt::format(
        "Orchestrator::{}: called outside Worker::run; submit from inside the orchestration "
        "function",
        api));
  }
  if (helping_.load(std::memory_order_relaxed) == std::this_thread::get_id()) {
    throw UsageError(fmt::format(
        "Orchestrator::{}: called from inside a task of this Worker (run by the run's thread "
        "itself, at a submit or while it waits for the run's tasks); a task cannot submit to "
        "the run it belongs to: "
        "submit follow-up work from the orchestration function, or give the task a nested "
        "Worker",
        api));
  }
  throw UsageError(fmt::format(
      "Orchestrator::{}: called from a thread that is not running the orchestration function; "
      "an Orchestrator belongs to the thread inside Worker::run (collect the work on other "
      "threads and submit it from that one)",
      api));
}

inline void OrchestratorBase::check_open(const char* api) const {
  check_owner(api);
  if (core_.run.failed()) std::rethrow_exception(core_.run.first_error());
}

// Past the run's deadline the run fails (a TimeoutError) and every later submit throws it.
inline void OrchestratorBase::run_deadline_slow() {
  const std::int64_t dl = core_.run_deadline_ns.load(std::memory_order_relaxed);
  if (dl == 0 || detail::steady_ns(std::chrono::steady_clock::now()) < dl) return;
  core_.fail_run_deadline();
  core_.notify_scheduler();  // queued work is skipped at its next pass
  std::rethrow_exception(core_.run.first_error());
}

inline void OrchestratorBase::record_shared_memory(bool sub_separate, bool next_level_separate) {
  separate_[static_cast<std::size_t>(Role::Sub)] = sub_separate;
  separate_[static_cast<std::size_t>(Role::NextLevel)] = next_level_separate;
  shared_ranges_.clear();
  if (sub_separate || next_level_separate) shared_ranges_ = detail::shared_mappings();
}

inline void OrchestratorBase::check_tensor_slow(const char* api, Role role, std::int32_t index,
                                                const ContinuousTensor& t,
                                                TensorArgType tag) const {
  if (t.data == 0) {
    if (tag == TensorArgType::Output) return;  // allocated from the heap ring
    throw UsageError(fmt::format(
        "Orchestrator::{}: tensor {} is tagged {} but its data pointer is null; only an Output "
        "tensor may be null (it is then allocated from the heap ring)",
        api, index, to_string(tag)));
  }
  if (!separate_[static_cast<std::size_t>(role)] || t.child_memory != 0) return;
  const std::uint64_t bytes = t.nbytes();
  const std::uintptr_t begin = t.data;
  const std::uintptr_t end = begin + (bytes == 0 ? 1 : bytes);  // validate() ruled out a wrap
  for (const auto& h : heaps_) {
    const auto base = reinterpret_cast<std::uintptr_t>(h.base());
    if (h.size() != 0 && begin >= base && end <= base + h.size()) return;
  }
  const auto* m = detail::mapping_holding(shared_ranges_, begin);
  if (m != nullptr && end <= m->second) return;
  throw_not_shared(api, role, index, t, m != nullptr);
}

inline void OrchestratorBase::throw_not_shared(const char* api, Role role, std::int32_t index,
                                               const ContinuousTensor& t,
                                               bool starts_shared) const {
  const char* who = role == Role::Sub ? "sub workers" : "next-level workers";
  std::string where;
  if (starts_shared) {
    where = fmt::format(
        "starts in a shared mapping but runs past its end, into memory the forked {} may not "
        "share",
        who);
  } else {
    // Only now, on the error path: is it shared memory that was mapped too late?
    bool late_shared = false;
    try {
      late_shared = detail::mapping_holding(detail::shared_mappings(), t.data) != nullptr;
    } catch (...) {
      late_shared = false;
    }
    where = late_shared
                ? fmt::format(
                      "lies in a shared mapping made after Worker::init(); the forked {} were "
                      "started before it existed and cannot see it",
                      who)
                : fmt::format(
                      "lies in this process's private memory, which the forked {} do not share: "
                      "what they write there would be lost and what they read stale",
                      who);
  }
  throw UsageError(fmt::format(
      "Orchestrator::{}: tensor {} ({:#x}, {} bytes) {}. Put it in memory they share: "
      "(1) orch.alloc(shape, dtype), or an Output tensor with data == 0 (allocated from the heap "
      "rings); (2) your own MAP_SHARED mapping made before Worker::init(); or (3) run the "
      "children in this process with WorkerOptions::child_mode = ChildMode::Thread",
      api, index, t.data, t.nbytes(), where));
}

inline void OrchestratorBase::check_targets(Role role, const detail::CallableRegistry::Entry& entry,
                                            std::size_t members, std::span<const WorkerId> targets,
                                            const char* api) const {
  const auto& lanes = role == Role::Sub ? core_.subs : core_.next_level;
  const char* what = role == Role::Sub ? "sub" : "next-level";
  if (lanes.empty()) {
    throw UsageError(fmt::format("Orchestrator::{}: this Worker has no {} workers{}", api, what,
                                 role == Role::Sub ? "; set WorkerOptions::num_sub_workers" : ""));
  }
  // The usual submit, one sub task for any sub worker, needs no count: a sub worker's leaf runs
  // sub callables only (Worker::add_child), and the callable's kind was checked.
  if (role == Role::Sub && members == 1 && (targets.empty() || targets[0] == any_worker)) return;
  if (members == 0) {
    throw UsageError(fmt::format("Orchestrator::{}: a group needs at least one member", api));
  }
  // Which lanes can run this kind of callable (a chip callable never lands on a nested Worker,
  // nor an orchestration function on a chip).
  const std::uint8_t bit = kind_bit(entry.kind);
  std::size_t capable = 0;
  for (const detail::LaneCore* l : lanes) capable += (l->runs & bit) != 0 ? 1U : 0U;
  if (capable == 0) {
    throw UsageError(fmt::format(
        "Orchestrator::{}: '{}' is a {} callable and none of this Worker's {} workers runs {} "
        "callables",
        api, entry.name, to_string(entry.kind), what, to_string(entry.kind)));
  }
  if (targets.empty() || (members == 1 && targets[0] == any_worker)) {
    if (members > capable) {
      throw UsageError(fmt::format(
          "Orchestrator::{}: a group of {} members needs as many {} workers that run {} "
          "callables, this Worker has {}",
          api, members, what, to_string(entry.kind), capable));
    }
    if (targets.empty()) return;
  }
  if (targets.size() != members) {
    throw UsageError(
        fmt::format("Orchestrator::{}: {} workers given for {} members; give one per "
                    "member, or none to use any idle workers",
                    api, targets.size(), members));
  }
  for (std::size_t i = 0; i < targets.size(); ++i) {
    const WorkerId w = targets[i];
    if (w == any_worker && members == 1) continue;
    if (w < 0 || static_cast<std::size_t>(w) >= lanes.size()) {
      throw UsageError(
          fmt::format("Orchestrator::{}: {} worker id {} does not exist (valid ids: "
                      "0..{}{})",
                      api, what, w, lanes.size() - 1, members == 1 ? ", or any_worker" : ""));
    }
    const detail::LaneCore& lane = *lanes[static_cast<std::size_t>(w)];
    if ((lane.runs & bit) == 0) {
      throw UsageError(fmt::format(
          "Orchestrator::{}: {} worker {} ('{}') cannot run '{}', a {} callable; direct it to a "
          "worker that runs {} callables, or use any_worker",
          api, what, w, lane.name, entry.name, to_string(entry.kind), to_string(entry.kind)));
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (targets[j] == w) {
        throw UsageError(fmt::format("Orchestrator::{}: {} worker id {} appears twice in the group",
                                     api, what, w));
      }
    }
  }
}

inline void OrchestratorBase::check_restricted(const detail::CallableRegistry::Entry& entry,
                                               std::span<const TaskArgs> members,
                                               std::span<const WorkerId> targets,
                                               const char* api) const {
  const std::uint8_t bit = kind_bit(entry.kind);
  const auto lane_text = [](const detail::LaneCore& l) {
    const std::string where = l.restrictions->where();
    return where.empty() || l.name.find(where) != std::string::npos
               ? fmt::format("next-level worker {} ('{}')", l.id, l.name)
               : fmt::format("next-level worker {} ('{}', at {})", l.id, l.name, where);
  };
  const auto check = [&](const detail::LaneCore& l, const TaskArgs& a, bool chosen) {
    const detail::LaneRestrictions* r = l.restrictions;
    if (r == nullptr || (l.runs & bit) == 0) return;
    const char* hint =
        chosen ? "" : "; the task names no worker and may go there: direct it (worker=)";
    if (!r->serves(entry.digest)) {
      throw UsageError(fmt::format(
          "Orchestrator::{}: {} does not serve '{}' (it serves {}); register it there with "
          "RemoteSession::serve_orch under the same name{}",
          api, lane_text(l), entry.name, r->served_names(), hint));
    }
    if (!r->remote_memory()) return;
    for (std::int32_t i = 0; i < a.tensor_count(); ++i) {
      const ContinuousTensor& t = a.tensor(i);
      if (t.data == 0) {
        throw UsageError(fmt::format(
            "Orchestrator::{}: tensor {} is an Output with data == 0, which {} cannot allocate at "
            "submit; allocate a RemoteBuffer there (Worker::remote_alloc) and pass "
            "buffer.tensor(...) tagged OutputExisting{}",
            api, i, lane_text(l), hint));
      }
      if (t.child_memory == 0) {
        throw UsageError(fmt::format(
            "Orchestrator::{}: tensor {} ({:#x}) is host memory, and {} is on another host: "
            "pointers never cross hosts; put the data in a RemoteBuffer (Worker::remote_alloc, "
            "copy_to_remote) and pass buffer.tensor(...){}",
            api, i, t.data, lane_text(l), hint));
      }
      if (!r->holds(t.data, t.nbytes())) {
        throw UsageError(fmt::format(
            "Orchestrator::{}: tensor {} (buffer {}, bytes [{}, {})) lies in no live buffer of "
            "{}: a buffer of another worker, one that was freed, or a range past its end",
            api, i, wire::buffer_of(t.data), wire::offset_of(t.data),
            wire::offset_of(t.data) + t.nbytes(), lane_text(l)));
      }
    }
  };
  for (std::size_t m = 0; m < members.size(); ++m) {
    const WorkerId target = targets.empty() ? any_worker : targets[m];
    if (target != any_worker) {
      check(*core_.next_level[static_cast<std::size_t>(target)], members[m], true);
    } else {
      for (const detail::LaneCore* l : core_.next_level) check(*l, members[m], false);
    }
  }
}

inline SubmitResult OrchestratorBase::submit_next_level(const CallableHandle& callable,
                                                        const TaskArgs& args,
                                                        const CallConfig& config, WorkerId worker) {
  return submit(Role::NextLevel, callable, std::span<const TaskArgs>(&args, 1), config,
                std::span<const WorkerId>(&worker, 1), "submit_next_level");
}

inline SubmitResult OrchestratorBase::submit_next_level_group(const CallableHandle& callable,
                                                              std::vector<TaskArgs> args,
                                                              const CallConfig& config,
                                                              std::vector<WorkerId> workers) {
  return submit(Role::NextLevel, callable, args, config, workers, "submit_next_level_group");
}

inline SubmitResult OrchestratorBase::submit_sub(const CallableHandle& callable,
                                                 const TaskArgs& args, WorkerId worker) {
  return submit(Role::Sub, callable, std::span<const TaskArgs>(&args, 1), default_call_config(),
                std::span<const WorkerId>(&worker, 1), "submit_sub");
}

inline SubmitResult OrchestratorBase::submit_sub(const CallableHandle& callable,
                                                 const TaskArgs& args, const CallConfig& config,
                                                 WorkerId worker) {
  return submit(Role::Sub, callable, std::span<const TaskArgs>(&args, 1), config,
                std::span<const WorkerId>(&worker, 1), "submit_sub");
}

inline SubmitResult OrchestratorBase::submit_sub_group(const CallableHandle& callable,
                                                       std::vector<TaskArgs> args,
                                                       std::vector<WorkerId> workers,
                                                       const CallConfig& config) {
  return submit(Role::Sub, callable, args, config, workers, "submit_sub_group");
}

namespace detail {
// Key space of a tensor: host memory is one space; memory owned by a next-level child is keyed
// per child, since the same device address recurs on every chip.
inline std::uint64_t space_of(const ContinuousTensor& t, WorkerId target) noexcept {
  return t.child_memory != 0 ? static_cast<std::uint64_t>(target) + 1 : 0;
}
}  // namespace detail

inline SubmitResult OrchestratorBase::submit(Role role, const CallableHandle& callable,
                                             std::span<const TaskArgs> members,
                                             const CallConfig& config,
                                             std::span<const WorkerId> targets, const char* api) {
  check_open(api);
  check_run_deadline();
  const auto& entry = registry_.check(callable);
  if (role == Role::Sub && entry.kind != CallableKind::Sub) {
    throw UsageError(
        fmt::format("Orchestrator::{}: '{}' is a {} callable; sub workers run only "
                    "callables from Worker::register_sub",
                    api, entry.name, to_string(entry.kind)));
  }
  if (role == Role::NextLevel && entry.kind == CallableKind::Sub) {
    throw UsageError(
        fmt::format("Orchestrator::{}: '{}' is a sub callable; submit it with "
                    "submit_sub, or register an orchestration/chip callable",
                    api, entry.name));
  }
  check_targets(role, entry, members.size(), targets, api);
  if (role == Role::NextLevel && core_.restricted_lanes)
    check_restricted(entry, members, targets, api);
  const bool custom_config = &config != &default_call_config();
  if (custom_config) config.validate();

  // Auto-allocated outputs, and the tensors that may not appear in this task. Tensors in heap
  // rings hold their allocation's owner (released on a throw until the slot takes them over).
  std::size_t auto_bytes = 0;
  scratch_holds_.clear();
  struct Holds {
    OrchestratorBase& o;
    bool armed = true;
    ~Holds() {
      if (armed && !o.scratch_holds_.empty()) o.release_scratch_holds();
    }
  } holds{*this};
  for (std::size_t m = 0; m < members.size(); ++m) {
    const TaskArgs& a = members[m];
    const WorkerId target = targets.empty() ? any_worker : targets[m];
    for (std::int32_t i = 0; i < a.tensor_count(); ++i) {
      const ContinuousTensor& t = a.tensor(i);
      if (t.child_memory != 0 && (role == Role::Sub || target == any_worker)) {
        throw UsageError(fmt::format(
            "Orchestrator::{}: tensor {} is child memory; it can only go to a named next-level "
            "worker (pass the worker id)",
            api, i));
      }
      check_tensor(api, role, i, t, a.tag(i));
      if (t.data != 0 && t.child_memory == 0) hold_heap_owner(api, i, t);
      if (a.tag(i) == TensorArgType::Output && t.data == 0) {
        auto_bytes += detail::HeapRing::round_up(t.nbytes());
      }
    }
  }

  // A single sub task may run here, before this submit returns (submit_runner). One that does
  // over settled bytes and allocates no output needs no slot at all: nothing links to it or
  // waits for it, it holds nothing once it ended, and nothing of it is left to ask about (its
  // SubmitResult names no slot). It takes no place in the task window either.
  // Without outputs to allocate the look at its bytes comes now; with them, once they are
  // placed (below).
  detail::LaneCore* runner = nullptr;
  bool looked = false;  // settled_at_submit was asked here and said no: the task is tracked
  if (members.size() == 1 && role == Role::Sub) {
    const WorkerId target = targets.empty() ? any_worker : targets[0];
    runner = submit_runner(role, config, callable.index, target);
    if (runner != nullptr && auto_bytes == 0) {
      if (settled_at_submit(members[0], target, nullptr)) {
        note_settled_run();
        core_.stats.submitted.add();
        (void)run_here(*runner, callable.digest, callable.index, members[0].view(), &config,
                       &entry.sub);
        count_submit();
        return {};  // the guard releases the holds: the task is over
      }
      looked = true;
    }
  }

  // A place in the task window, then heap space: both may block or throw, and nothing has been
  // changed yet.
  if (core_.pool.live() >= core_.task_window) [[unlikely]]
    wait_for_window(api);
  const int ring = ring_for_depth();
  std::optional<detail::HeapRing::Allocation> heap;
  if (auto_bytes != 0) heap = heap_alloc(ring, auto_bytes, api);

  auto& frame = frames_[static_cast<std::size_t>(depth_ - 1)];
  if (frame.size() >= frame_compact_at_[static_cast<std::size_t>(depth_ - 1)]) [[unlikely]] {
    compact_frame(static_cast<std::size_t>(depth_ - 1));
    drain_retired();
  }
  reclaim_before_growing();
  Slot* sp = nullptr;
  try {
    sp = &core_.pool.alloc();
  } catch (...) {
    if (heap) heaps_[ring].release(heap->seq);
    throw;
  }
  Slot& s = *sp;
  // The waits above (task window, heap space) may have outlived the lane or the run.
  if (runner != nullptr && (runner->lost.load(std::memory_order_relaxed) || core_.run.cancelled()))
      [[unlikely]]
    runner = nullptr;
  // From here a throw (out of memory: a slot's argument storage, the frame, the TensorMap, the
  // edges or the holds growing) must not leave the slot behind: before it is in the frame it
  // goes back to the pool; after, the fence waits for it, so it is failed and published.
  bool in_frame = false;
  SubmitResult result;
  try {
    fill_slot(s, role, entry, callable, members, config, custom_config, targets);
    if (heap) place_outputs(s, members, ring, *heap, result);
    // Two references: the task's own (dropped when it ends) and its scope's.
    s.refs.store(2, std::memory_order_relaxed);
    s.pending.store(1, std::memory_order_relaxed);  // held while wiring
    s.consumers.store(nullptr, std::memory_order_relaxed);
    s.poisoned.store(false, std::memory_order_relaxed);
    s.failed.store(false, std::memory_order_relaxed);
    s.state.store(TaskState::Building, std::memory_order_relaxed);
    frame.push_back(s.id);
    in_frame = true;
    const bool traced = trace_level_ != 0 || dag_ != nullptr;
    s.trace_id = traced ? ++trace_next_ : 0;
    if (traced) [[unlikely]] {
      trace_reads_.clear();
      trace_orders_.clear();
    }
    // A task that will run here, before this submit returns, over bytes whose tasks have all
    // finished needs no edge and no TensorMap entry (settled_at_submit); one with outputs
    // allocated here is looked at now that they are placed.
    if (runner != nullptr && !looked &&
        settled_at_submit(members[0], s.target(0), heap ? s.tensors.data() : nullptr)) {
      note_settled_run();
    } else {
      track_tensors(s, members, heap.has_value(), traced);
      infer_and_wire(s);
    }
    // The heap owners' references go with the task: it drops them when it ends.
    s.holds.clear();
    for (TaskSlot h : scratch_holds_) s.holds.push_back(h);
    if (traced) [[unlikely]]
      trace_submitted(s, entry, members);
  } catch (...) {
    // The guard, still armed, releases the holds: the slot keeps none of them.
    abandon_submit(s, in_frame, heap ? &*heap : nullptr, ring, api);
    throw;
  }
  holds.armed = false;  // the task owns them now
  publish(s, runner);
  result.slot_id = s.id;
  count_submit();
  return result;
}

inline std::uint32_t OrchestratorBase::task_timeout_ms(const CallConfig& config) const noexcept {
  return detail::clamp_ms(config.timeout.count() > 0 ? config.timeout : core_.timing.task_timeout);
}

inline void OrchestratorBase::note_settled_run() noexcept {
  // The map's entries of finished tasks make each settled look walk them; once as many tasks
  // ran settled as the map has entries, they go in one sweep (O(1) per task).
  if (++settled_since_sweep_ > tmap_.entries() + kSettledSweepMin) [[unlikely]]
    sweep_settled();
}

inline void OrchestratorBase::count_submit() noexcept {
  // Retirements are collected every kDrainEvery submits, so each collection has a batch whose
  // cache misses overlap (see drain_retired); anything that needs a slot or heap space back
  // collects first, and the run's end collects the rest.
  if (++submits_since_drain_ >= kDrainEvery) {
    submits_since_drain_ = 0;
    if (!core_.retire_inbox.empty()) drain_retired();
  }
}

inline void OrchestratorBase::fill_slot(Slot& s, Role role,
                                        const detail::CallableRegistry::Entry& entry,
                                        const CallableHandle& callable,
                                        std::span<const TaskArgs> members, const CallConfig& config,
                                        bool custom_config, std::span<const WorkerId> targets) {
  s.role = role;
  s.callable_kind = entry.kind;
  s.callable_index = callable.index;
  s.digest = callable.digest;
  s.run_id = core_.run.id();
  s.group_size = static_cast<std::uint32_t>(members.size());
  s.members.clear();
  if (members.size() == 1) {
    // A single task: its target in the slot, its arguments all of tensors and scalars.
    s.target0 = targets.empty() ? any_worker : targets[0];
    const TaskArgsView v = members[0].view();
    s.tensors.assign(v.tensors, static_cast<std::size_t>(v.tensor_count));
    s.scalars.assign(v.scalars, static_cast<std::size_t>(v.scalar_count));
  } else {
    s.target0 = any_worker;
    s.tensors.clear();
    s.scalars.clear();
    for (std::size_t m = 0; m < members.size(); ++m) {
      s.members.push_back({static_cast<std::uint32_t>(s.tensors.size()),
                           static_cast<std::uint32_t>(s.scalars.size()),
                           targets.empty() ? any_worker : targets[m]});
      const TaskArgsView v = members[m].view();
      for (std::int32_t i = 0; i < v.tensor_count; ++i) s.tensors.push_back(v.tensors[i]);
      for (std::int32_t i = 0; i < v.scalar_count; ++i) s.scalars.push_back(v.scalars[i]);
    }
    s.members.push_back({static_cast<std::uint32_t>(s.tensors.size()),
                         static_cast<std::uint32_t>(s.scalars.size()), any_worker});
  }
  s.has_config = custom_config;
  s.timeout_ms = task_timeout_ms(config);
  if (s.timeout_ms != 0 && !core_.task_timeouts_seen.load(std::memory_order_relaxed)) [[unlikely]]
    core_.task_timeouts_seen.store(true, std::memory_order_relaxed);  // published with the task
  if (custom_config) {
    if (!s.config) s.config = std::make_unique<CallConfig>();
    *s.config = config;
  }
}

inline void OrchestratorBase::place_outputs(Slot& s, std::span<const TaskArgs> members, int ring,
                                            const detail::HeapRing::Allocation& heap,
                                            SubmitResult& result) {
  s.heap_ring = static_cast<std::int8_t>(ring);
  s.heap_seq = heap.seq;
  heaps_[ring].set_owner(heap.seq, s.id);
  std::byte* p = heaps_[ring].base() + heap.offset;
  std::size_t k = 0;
  for (std::size_t m = 0; m < members.size(); ++m) {
    const TaskArgs& a = members[m];
    for (std::int32_t i = 0; i < a.tensor_count(); ++i, ++k) {
      ContinuousTensor& t = s.tensors[k];
      if (a.tag(i) == TensorArgType::Output && t.data == 0) {
        t.data = reinterpret_cast<std::uintptr_t>(p);
        p += detail::HeapRing::round_up(t.nbytes());
        result.outputs.push_back(t);
      }
    }
  }
}

inline void OrchestratorBase::track_tensors(Slot& s, std::span<const TaskArgs> members,
                                            bool auto_outputs, bool traced) {
  // Tags of each member, walked in step with the stored tensors.
  scratch_producers_.clear();
  std::size_t k = 0;
  for (std::size_t m = 0; m < members.size(); ++m) {
    const TaskArgs& a = members[m];
    const WorkerId target = s.target(m);
    for (std::int32_t i = 0; i < a.tensor_count(); ++i, ++k) {
      // The caller's copy, not the slot's: the slot's lines were just written over a copy that
      // the core which ran the slot's last task read, and reading them back here stalled on it.
      // Only an auto-allocated output's address is the slot's alone.
      const ContinuousTensor& t = a.tensor(i);
      const TensorArgType tag = a.tag(i);
      const std::uint64_t bytes = t.nbytes();
      const std::uint64_t data =
          auto_outputs && tag == TensorArgType::Output && t.data == 0 ? s.tensors[k].data : t.data;
      if (data == 0 || bytes == 0 || tag == TensorArgType::NoDep) continue;
      const std::uint64_t space = detail::space_of(t, target);
      const std::uint64_t begin = data;
      const std::uint64_t end = data + bytes;
      if (tag == TensorArgType::Input || tag == TensorArgType::InOut) {
        if (traced) [[unlikely]]
          trace_reads(space, begin, end, s.id);
      }
      // Producers go to scratch_producers_ as (slot << 1) | order_only.
      const auto reads_from = [&](TaskSlot p) {
        if (p != s.id) scratch_producers_.push_back(p << 1);
      };
      if (hazards_ == Hazards::All) {
        if (tag == TensorArgType::Input) {
          tmap_.add_reader(space, begin, end, {s.id, s.gen}, reads_from,
                           [this](const detail::TensorReader& r) { return reader_live(r); });
          continue;
        }
        // A writer: after the earlier writer (whose bytes an InOut reads; the others only
        // overwrite them) and after the readers since.
        const TaskSlot writer_bit = tag == TensorArgType::InOut ? 0U : 1U;
        tmap_.insert(
            space, begin, end, s.id,
            [&](TaskSlot p) {
              if (p == s.id) return;
              scratch_producers_.push_back((p << 1) | writer_bit);
              if (traced && writer_bit != 0) [[unlikely]]
                trace_orders_.push_back(p);
            },
            [&](const detail::TensorReader& r) {
              if (r.slot == s.id || core_.pool.at(r.slot).gen != r.gen) return;
              // The graph names a reader that already finished too: it is the program's order.
              if (traced) [[unlikely]]
                trace_orders_.push_back(r.slot);
              if (reader_live(r)) scratch_producers_.push_back((r.slot << 1) | 1U);
            });
      } else {
        if (tag == TensorArgType::Input || tag == TensorArgType::InOut)
          tmap_.lookup(space, begin, end, reads_from);
        if (tag == TensorArgType::Input) continue;
        tmap_.insert(space, begin, end, s.id);
      }
      s.outputs.push_back({space, begin, end});
    }
  }
  // Only writer-less segments go stale (a writer takes its own out at retire): sweep once as many
  // were made as the map held after the last sweep, so sweeping costs O(1) per segment made.
  if (tmap_.writerless_made() > tmap_sweep_at_) [[unlikely]]
    sweep_tensor_map();
}

inline bool OrchestratorBase::settled_at_submit(const TaskArgs& a, WorkerId target,
                                                const ContinuousTensor* placed) const noexcept {
  const auto done = [this](TaskSlot p) { return writer_settled(p); };
  const auto live = [this](const detail::TensorReader& r) { return reader_live(r); };
  for (std::int32_t i = 0; i < a.tensor_count(); ++i) {
    // The same bytes track_tensors would record (it explains the choice of copy).
    const ContinuousTensor& t = a.tensor(i);
    const TensorArgType tag = a.tag(i);
    const std::uint64_t bytes = t.nbytes();
    const std::uint64_t data =
        placed != nullptr && tag == TensorArgType::Output && t.data == 0 ? placed[i].data : t.data;
    if (data == 0 || bytes == 0 || tag == TensorArgType::NoDep) continue;
    // A write must also come after the readers of what it overwrites (Hazards::All). Its
    // earlier writers must have succeeded even where it only overwrites them: their entries
    // stay, and a later reader must not be skipped for a failure this task wrote over.
    const bool readers = tag != TensorArgType::Input && hazards_ == Hazards::All;
    if (!tmap_.settled(detail::space_of(t, target), data, data + bytes, readers, done, live)) {
      return false;
    }
  }
  return true;
}

inline void OrchestratorBase::abandon_submit(Slot& s, bool in_frame,
                                             const detail::HeapRing::Allocation* heap, int ring,
                                             const char* api) noexcept {
  if (!in_frame) {
    // Nobody knows the slot yet: it goes back, and so does its heap space.
    if (heap != nullptr) heaps_[ring].release(heap->seq);
    core_.pool.free(s);
    return;
  }
  // The slot is in the frame, maybe linked to producers, and the TensorMap may hold part of
  // what it writes: tasks submitted after it would not be ordered as the program says. So the
  // run fails with this error, which every later submit of the run then throws (check_open);
  // the tasks already submitted were wired in full and go on, as after a task failure. The task
  // itself is published poisoned: it ends as skipped through the usual path, and the run's fence
  // does not wait for it forever.
  try {
    detail::log_worker(LogLevel::Warn, core_.level,
                       "Orchestrator::{}: the submit failed after its task was placed; the run "
                       "fails",
                       api);
  } catch (...) {  // out of memory for the message too: the run's error still says what failed
  }
  core_.run.fail(std::current_exception());
  s.holds.clear();  // the submit's guard releases them (see submit)
  s.poisoned.store(true, std::memory_order_relaxed);
  publish(s);
}

inline bool OrchestratorBase::reader_live(const detail::TensorReader& r) const noexcept {
  const Slot& p = core_.pool.at(r.slot);
  // A reader that finished no longer matters: nothing overwrites bytes it still reads.
  // acquire: seeing it finished orders its reads before whatever this task's writer does.
  return p.gen == r.gen && p.consumers.load(std::memory_order_acquire) != detail::closed_list();
}

inline void OrchestratorBase::sweep_tensor_map() {
  tmap_.sweep([this](const detail::TensorReader& r) { return reader_live(r); });
  tmap_sweep_at_ = std::max(kTensorMapSweepMin, tmap_.size());
}

inline void OrchestratorBase::sweep_settled() noexcept {
  settled_since_sweep_ = 0;
  if (tmap_.entries() == 0) return;
  tmap_.sweep([this](const detail::TensorReader& r) { return reader_live(r); },
              [this](TaskSlot p) { return writer_settled(p); });
  tmap_sweep_at_ = std::max(kTensorMapSweepMin, tmap_.size());
}

inline bool OrchestratorBase::writer_settled(TaskSlot p) const noexcept {
  const Slot& w = core_.pool.at(p);
  // acquire: a finished writer's `failed`, and the bytes it wrote, are visible.
  return w.consumers.load(std::memory_order_acquire) == detail::closed_list() &&
         !w.failed.load(std::memory_order_acquire);
}

inline void OrchestratorBase::infer_and_wire(Slot& s) {
  // Entries are (slot << 1) | order_only: sorted, a slot's read-after-write entry comes first
  // and is the one kept, so a producer that is also a reader of what this task overwrites
  // still poisons it when it fails.
  auto& ps = scratch_producers_;
  if (ps.size() > 1) {
    // Usually a handful of entries: an insertion sort, where std::sort's set-up cost more than
    // the sorting.
    if (ps.size() <= 16) {
      TaskSlot* const p = ps.data();
      for (std::size_t i = 1; i < ps.size(); ++i) {
        const TaskSlot v = p[i];
        std::size_t j = i;
        for (; j > 0 && p[j - 1] > v; --j) p[j] = p[j - 1];
        p[j] = v;
      }
    } else {
      std::sort(ps.begin(), ps.end());
    }
    ps.resize_uninit(static_cast<std::size_t>(
        std::unique(ps.begin(), ps.end(), [](TaskSlot a, TaskSlot b) { return a >> 1 == b >> 1; }) -
        ps.begin()));
  }
  // Edges must not move once linked into a producer's list: size them before linking.
  s.edges.resize_uninit(ps.size());
  // Every edge is counted before any becomes visible (a producer may finish and decrement at
  // once); the wiring hold keeps `pending` above zero meanwhile. The slot is not yet known to
  // any other thread: a plain store. A link's release publishes it to the producer's closer.
  s.pending.store(static_cast<std::int32_t>(1 + ps.size()), std::memory_order_relaxed);
  // No reference is taken on a producer: nothing here needs its slot once the task is wired.
  // Its heap bytes, if this task's tensors lie in them, are held as a heap owner (submit), and
  // only this thread recycles slots, so the producer cannot be reused while it is linked to.
  // The reference cost a locked RMW on the producer's line per edge, a line its lane writes as
  // it finishes: in a chain, one cross-core miss per hop.
  std::size_t used = 0;
  for (const TaskSlot entry : ps) {
    const bool order_only = (entry & 1U) != 0;
    Slot& p = core_.pool.at(entry >> 1);
    Edge& e = s.edges[used];
    e.consumer = s.id;
    e.order_only = order_only;
    Edge* head = p.consumers.load(std::memory_order_acquire);
    bool linked = false;
    while (head != detail::closed_list()) {
      e.next = head;
      if (p.consumers.compare_exchange_weak(head, &e, std::memory_order_acq_rel,
                                            std::memory_order_acquire)) {
        linked = true;
        break;
      }
    }
    if (linked) {
      ++used;
      continue;
    }
    // The producer has finished (acquire: its `failed`, stored before the close, is visible).
    if (!order_only && p.failed.load(std::memory_order_acquire))
      s.poisoned.store(true, std::memory_order_relaxed);
  }
  s.edges.resize_uninit(used);
  if (used == 0) {
    s.pending.store(1, std::memory_order_relaxed);  // still unknown to other threads
  } else if (used != ps.size()) {
    // Producers may be decrementing: the edges that were not linked come off with an RMW. The
    // wiring hold keeps the count above zero; publish's release drops it.
    s.pending.fetch_sub(static_cast<std::int32_t>(ps.size() - used), std::memory_order_relaxed);
  }
}

inline void OrchestratorBase::trace_reads(std::uint64_t space, std::uint64_t begin,
                                          std::uint64_t end, TaskSlot self) {
  tmap_.lookup_overlaps(space, begin, end, [&](TaskSlot p, std::uint64_t bytes) {
    if (p != self) trace_reads_.emplace_back(p, bytes);
  });
}

// The submit's events (Submit, its edges, its tensors at level 4) and its DAG node. Edges name
// every producer the reads found, finished or not: the inferred graph, not what was waited for.
inline void OrchestratorBase::trace_submitted(const Slot& s,
                                              const detail::CallableRegistry::Entry& entry,
                                              std::span<const TaskArgs> members) {
  // Producers' task ids (an orch.alloc'd buffer has none), with the bytes summed per producer.
  std::sort(trace_reads_.begin(), trace_reads_.end());
  std::size_t out = 0;
  for (std::size_t i = 0; i < trace_reads_.size(); ++i) {
    const std::uint32_t id = core_.pool.at(trace_reads_[i].first).trace_id;
    if (id == 0) continue;
    if (out != 0 && trace_reads_[out - 1].first == id) {
      trace_reads_[out - 1].second += trace_reads_[i].second;
    } else {
      trace_reads_[out++] = {id, trace_reads_[i].second};
    }
  }
  trace_reads_.resize(out);
  // Order edges: task ids, each once, and none that the reads already made a data edge.
  out = 0;
  for (const TaskSlot p : trace_orders_) {
    const std::uint32_t id = core_.pool.at(p).trace_id;
    if (id != 0) trace_orders_[out++] = id;
  }
  trace_orders_.resize(out);
  std::sort(trace_orders_.begin(), trace_orders_.end());
  trace_orders_.erase(std::unique(trace_orders_.begin(), trace_orders_.end()), trace_orders_.end());
  std::erase_if(trace_orders_, [&](std::uint32_t id) {
    return std::any_of(trace_reads_.begin(), trace_reads_.end(),
                       [id](const auto& r) { return r.first == id; });
  });
  const std::int64_t now = detail::trace_now();
  if (trace_level_ != 0) {
    detail::TraceBuffer& b = *core_.trace.orch;
    detail::TraceEvent e;
    e.kind = detail::TraceKind::Submit;
    e.t0 = now;
    e.task = s.trace_id;
    e.arg = s.callable_index;
    e.arg2 = (s.role == Role::Sub ? 1U : 0U) | (s.group_size << 1);
    b.record(e);
    if (trace_level_ >= detail::kTraceDeps) {
      for (const auto& [from, bytes] : trace_reads_) {
        b.record({now, static_cast<std::int64_t>(bytes), s.trace_id,
                  static_cast<std::uint32_t>(from), detail::TraceKind::Edge});
      }
    }
    if (trace_level_ >= detail::kTraceAll) {
      std::size_t k = 0;
      for (const TaskArgs& a : members) {
        for (std::int32_t i = 0; i < a.tensor_count(); ++i, ++k) {
          b.record({static_cast<std::int64_t>(s.tensors[k].data),
                    static_cast<std::int64_t>(s.tensors[k].nbytes()), s.trace_id,
                    static_cast<std::uint32_t>(a.tag(i)), detail::TraceKind::Tensor});
        }
      }
    }
  }
  if (dag_ != nullptr) {
    detail::DagRecord::Node n;
    n.id = s.trace_id;
    n.callable = entry.name;
    n.sub = s.role == Role::Sub;
    n.members = s.group_size;
    std::size_t k = 0;
    for (const TaskArgs& a : members) {
      for (std::int32_t i = 0; i < a.tensor_count(); ++i, ++k) {
        n.tensors.push_back({s.tensors[k].data, s.tensors[k].nbytes(), a.tag(i)});
      }
    }
    dag_->nodes.push_back(std::move(n));
    for (const auto& [from, bytes] : trace_reads_) {
      dag_->edges.push_back({static_cast<std::uint32_t>(from), s.trace_id, bytes});
    }
    for (const TaskSlot from : trace_orders_) {
      dag_->edges.push_back({static_cast<std::uint32_t>(from), s.trace_id, 0, true});
    }
  }
}

inline void OrchestratorBase::publish(Slot& s, detail::LaneCore* runner) {
  core_.stats.submitted.add();
  // No edge was linked: no other thread knows this slot yet, so the wiring hold can be dropped
  // without an atomic read-modify-write.
  const bool ready_traced = trace_level_ >= detail::kTraceDeps;
  if (s.edges.empty()) {
    s.pending.store(0, std::memory_order_relaxed);
    s.state.store(TaskState::Ready, std::memory_order_relaxed);
    if (ready_traced) [[unlikely]] {
      core_.trace.orch->record({detail::trace_now(), 0, s.trace_id, 0, detail::TraceKind::Ready});
    }
    hand_over_or_run(s, runner);
    return;
  }
  s.state.store(TaskState::Pending, std::memory_order_relaxed);
  // Dropping the wiring hold: if every producer already finished, this makes the task ready.
  // acq_rel: acquire pairs with producers' decrements (their poison flags), release publishes
  // the task data to the scheduler (the inbox push is seq_cst as well).
  if (s.pending.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    s.state.store(TaskState::Ready, std::memory_order_relaxed);
    if (ready_traced) [[unlikely]] {
      core_.trace.orch->record({detail::trace_now(), 0, s.trace_id, 0, detail::TraceKind::Ready});
    }
    hand_over_or_run(s, runner);
  }
}

inline void OrchestratorBase::hand_over_or_run(Slot& s, detail::LaneCore* runner) noexcept {
  // A producer's failure, found while wiring, skips the task instead (the scheduler's pass).
  if (runner != nullptr && !s.poisoned.load(std::memory_order_relaxed)) {
    run_at_submit(s, *runner);
    return;
  }
  hand_over_ready(s);
  dispatch_published();
}

// Running tasks at submit. With a backlog of ready sub tasks, a task queued now would wait
// behind it anyway, and handing it over costs more than an empty task's body: its slot and
// routing record cross to the scheduler's core and to a lane's, and its completion comes back.
// So, like an OpenMP runtime that runs tasks undeferred past a queue limit, the submit runs it
// here, where its slot was just written, while the lanes work off the backlog; once the
// backlog falls below the limit, submits hand tasks over again. Only what the fence may run
// qualifies (no deadline, not a group, run untraced), through a SubWorker on a thread.
inline detail::LaneCore* OrchestratorBase::submit_runner(Role role, const CallConfig& config,
                                                         std::uint32_t callable_index,
                                                         WorkerId target) noexcept {
  if (role != Role::Sub || core_.submit_lanes.empty() || !core_.caller_runs_tasks) return nullptr;
  if (trace_level_ != 0 || dag_ != nullptr || task_timeout_ms(config) != 0) return nullptr;
  if (!sub_backlogged()) return nullptr;
  // An earlier run's word speaks for the callable its lane timed last, no other.
  if (carried_callable_ != kAnyCallable && callable_index != carried_callable_) return nullptr;
  if (core_.run.cancelled() || core_.run_deadline_ns.load(std::memory_order_relaxed) != 0) {
    return nullptr;
  }
  detail::LaneCore* lane = nullptr;
  if (target == any_worker) {
    const auto n = static_cast<std::uint32_t>(core_.submit_lanes.size());
    if (++submit_pick_ >= n) submit_pick_ = 0;
    lane = core_.submit_lanes[submit_pick_];
  } else {
    lane = core_.subs[target];
    if (lane->run_here == nullptr) return nullptr;
  }
  return lane->lost.load(std::memory_order_relaxed) ? nullptr : lane;
}

inline bool OrchestratorBase::sub_backlogged() noexcept {
  if (--backlog_countdown_ != 0) return backlogged_;
  backlog_countdown_ = kBacklogLookEvery;
  // Ready and not finished: in the ready ring, in the scheduler's queues, posted to a sub lane
  // that may run at submit. The limit scales with those lanes alone, the ones it counts posts
  // of (a Worker's sub lanes are all of one kind: all of them, or none).
  std::uint64_t waiting = core_.ready_ring.waiting() + core_.stats.ready_queued.get();
  for (const detail::LaneCore* l : core_.submit_lanes) {
    waiting +=
        l->posted.load(std::memory_order_relaxed) - l->completed.load(std::memory_order_relaxed);
  }
  const std::uint64_t lanes = core_.submit_lanes.size();
  if (backlogged_ && cheap_at_submit_ && waiting > 0) {
    // Tasks cheaper than handing one over: stay until the lanes have nothing left, and look
    // again only after kCheapStayLooks looks' worth of submits.
    backlog_countdown_ = kBacklogLookEvery * kCheapStayLooks;
  } else {
    carried_callable_ = kAnyCallable;  // lanes_find_tasks_cheap may narrow it again
    backlogged_ = waiting >= kBacklogPerLane * lanes || lanes_find_tasks_cheap();
  }
  time_at_submit_ = backlogged_;  // the first task run at submit after a look is timed
  slow_sample_ = false;
  return backlogged_;
}

// Without a backlog (a chain, a graph whose tasks become ready one by one, lanes that keep up),
// a ready task still costs its hand-over, and where its body costs less than that, the
// orchestration's thread runs it sooner and cheaper itself: bench_engine's d1 row ran in about
// half the time. What a task costs is known from the lanes (LaneCore::cheap_run: timed samples
// of this run, so a run's first tasks, such as one holding the others back, never qualify) and
// from the last task timed at submit; a task that took long there stops it for
// kCostlyPauseLooks looks, after which the lanes' word counts again.
inline bool OrchestratorBase::lanes_find_tasks_cheap() noexcept {
  if (costly_pause_ != 0) {
    --costly_pause_;
    return false;
  }
  const std::uint32_t run = core_.run.id();
  bool cheap = false;
  bool this_run = false;  // some lane timed a task of this run
  std::uint32_t carried = kAnyCallable;
  for (const detail::LaneCore* l : core_.submit_lanes) {
    const std::uint64_t w = l->cheap_run.load(std::memory_order_relaxed);
    const std::uint64_t streak = w & 0xffff'ffffU;
    if ((w >> 32) != run) {
      // An earlier run's samples: cheap ones name their callable (see below).
      if (w != 0 && streak >= kCheapStreak && carried == kAnyCallable)
        carried = l->cheap_callable.load(std::memory_order_relaxed);
      continue;
    }
    this_run = true;
    if (streak == 0) return false;  // its last timed task was not cheap
    cheap = cheap || streak >= kCheapStreak;
  }
  if (this_run || carried == kAnyCallable) return cheap;
  // Nothing timed in this run yet (its first looks): the last run's word counts for the
  // callable its lane timed last and was cheap, and for no other, so a run's first task of a
  // callable not seen cheap (a holder of the others, say) still goes to a lane. A chain of
  // cheap steps then runs here from its first step, instead of waiting for a lane's thread to
  // wake (tens of microseconds, milliseconds when the kernel queues it behind this thread).
  // Unless another lane's last timed task was that callable and costly: its cost depends on
  // its arguments, and the run's first one may be a costly one.
  for (const detail::LaneCore* l : core_.submit_lanes) {
    const std::uint64_t w = l->cheap_run.load(std::memory_order_relaxed);
    if (w != 0 && (w & 0xffff'ffffU) == 0 &&
        l->cheap_callable.load(std::memory_order_relaxed) == carried) {
      return false;
    }
  }
  carried_callable_ = carried;
  return true;
}

inline void OrchestratorBase::run_at_submit(Slot& s, detail::LaneCore& lane) noexcept {
  s.state.store(TaskState::Running, std::memory_order_relaxed);
  const bool failed = run_here(lane, s.digest, s.callable_index, s.member_view(0), s.call_config());
  // Completed as EngineCore::complete would, on the thread that owns the slot: nobody has
  // linked to it (only this thread links, in later submits), so its consumer list closes empty.
  s.state.store(failed ? TaskState::Failed : TaskState::Completed, std::memory_order_relaxed);
  s.failed.store(failed, std::memory_order_relaxed);
  s.consumers.store(detail::closed_list(), std::memory_order_release);
  for (TaskSlot h : s.holds) release_ref(core_.pool.at(h));
  auto& frame = frames_[static_cast<std::size_t>(depth_ - 1)];
  if (!failed && s.heap_ring < 0 && !frame.empty() && frame.back() == s.id) {
    // What compact_frame would do later, now: the scope's reference is all that is left and
    // nothing needs the slot (a failed task stays, so later readers it was recorded for are
    // skipped; one that ran settled was not recorded, and the next submit throws the run's
    // error anyway).
    frame.pop_back();
    s.refs.store(0, std::memory_order_relaxed);
    retire(s);
    return;
  }
  release_ref(s);  // the task's own reference; its scope keeps the other
}

inline bool OrchestratorBase::run_here(detail::LaneCore& lane, std::uint64_t digest,
                                       std::uint32_t index, const TaskArgsView& args,
                                       const CallConfig* config,
                                       const detail::SubFn* sub_fn) noexcept {
  // As in the fence (help_lanes): the task is not the orchestration function, so a submit from
  // it is refused, naming it as a task of this Worker.
  const std::thread::id me = owner_.load(std::memory_order_relaxed);
  helping_.store(me, std::memory_order_relaxed);
  owner_.store(std::thread::id{}, std::memory_order_relaxed);
  bool failed = false;
  if (time_at_submit_) {
    // One task per look is timed (a vDSO clock read on each side), to tell cheap tasks from
    // others (sub_backlogged). One slow sample says little: a preemption, or the first run at
    // submit after a stretch of hand-overs, over code and lines this thread has not touched
    // lately (in a chain of empty steps, one run in two read a step as costly that way). So a
    // slow sample has the next task run at submit timed as well, and only two slow ones in a
    // row count as costly (one more costly task runs here before the pause).
    const auto t0 = std::chrono::steady_clock::now();
    failed = lane.run_here(lane, digest, index, args, config, sub_fn) != Outcome::Success;
    const bool cheap = std::chrono::steady_clock::now() - t0 < kCheapAtSubmit;
    if (cheap || slow_sample_) {
      time_at_submit_ = false;
      slow_sample_ = false;
      cheap_at_submit_ = cheap;
      if (!cheap) costly_pause_ = kCostlyPauseLooks;
    } else {
      slow_sample_ = true;  // time_at_submit_ stays set: the next one decides
    }
  } else {
    failed = lane.run_here(lane, digest, index, args, config, sub_fn) != Outcome::Success;
  }
  owner_.store(me, std::memory_order_relaxed);
  helping_.store(std::thread::id{}, std::memory_order_relaxed);
  return failed;
}

inline void OrchestratorBase::hand_over_ready(Slot& s) noexcept {
  // A group, or a task a failed producer poisoned (it is skipped: the inbox's taker reads the
  // slot, as for any skip), takes the inbox. `poisoned` is final here: the pending decrement
  // that made the task ready acquired its producers' flags.
  if (!s.is_group() && !s.poisoned.load(std::memory_order_relaxed)) {
    // Light when sched_wake is asymmetric: dispatch_published fences before it relies on more.
    if (core_.ready_ring.push({s.id, s.target0, s.role, s.callable_kind}, light_ready_push_)) {
      return;
    }
    core_.stats.ready_overflows.add();
    backlogged_ = true;  // a full ring is a backlog: the next ready sub tasks may run at submit
    backlog_countdown_ = kBacklogLookEvery;
  }
  core_.ready_inbox.push(&s);  // seq_cst as well
}

inline void OrchestratorBase::reclaim_before_growing() noexcept {
  // Retirements are collected in batches (see the end of submit): before the pool grows, take
  // back what finished.
  if (core_.pool.exhausted() && !core_.retire_inbox.empty()) [[unlikely]]
    drain_retired();
}

// An awake scheduler thread takes what was published (it is polling, or in a pass and looks again
// after it). An asleep one is not woken while few tasks are alive (a short run, a nested run):
// the Orchestrator dispatches the task itself, in a scheduler pass on this thread, which costs
// less than a wake-up (a syscall here and a sleeping thread's start there). With more alive,
// tasks are streaming in and the scheduler thread is woken to dispatch in parallel with the
// orchestration, which is then the slower side (dispatching every such task here measured
// bench_engine's a1 row, 100k tasks with an output each, at 1190 -> 2004 and 1359 -> 1907
// ns/task in two A/B pairs on a noisy machine).
inline void OrchestratorBase::dispatch_published() noexcept {
  // After a light ring push, this load may pass the push: then the scheduler registered after
  // it, and takes the push after its first nap at the latest (its heavy fence comes before any
  // longer sleep; EventCount::sleep_until).
  if (!core_.sched_wake.has_waiters()) return;
  // A sleeper is there: from here on the push must be visible before the loads below (the pass
  // token, and the holder's look for input when it lets go, pair with it as before).
  if (light_ready_push_) std::atomic_thread_fence(std::memory_order_seq_cst);
  detail::SchedulerCore* d = core_.driving();
  if (d != nullptr && core_.pool.live() <= kInlineDispatchLive) {
    d->try_pass(core_.stats.orch_passes, nullptr, true);
  } else {
    core_.notify_scheduler();
  }
}

inline detail::HeapRing::Allocation OrchestratorBase::heap_alloc(int ring, std::size_t bytes,
                                                                 const char* api) {
  detail::HeapRing& h = heaps_[static_cast<std::size_t>(ring)];
  if (h.size() == 0 || bytes > h.size()) {
    throw UsageError(fmt::format(
        "Orchestrator::{}: {} bytes requested from heap ring {} but the ring holds {} bytes; raise "
        "WorkerOptions::heap_ring_size",
        api, bytes, ring, h.size()));
  }
  if (auto a = h.try_alloc(bytes)) return *a;
  drain_retired();
  if (auto a = h.try_alloc(bytes)) return *a;
  // Every live buffer in the ring belongs to a scope that is still open: only this thread
  // could free them (by ending that scope), and it is the one that would wait. Fail now.
  if (h.live_allocations() != 0 &&
      h.oldest_seq() >= ring_scope_seq_[static_cast<std::size_t>(ring)]) {
    throw UsageError(fmt::format(
        "Orchestrator::{}: heap ring {} ({} bytes) is full and every buffer in it ({} live) "
        "belongs to a scope that is still open{}, so none can come back while this submit "
        "waits; {} bytes were requested. Wrap the work in an inner scope (auto s = orch.scope()) "
        "so its buffers are reclaimed at scope_end, or raise WorkerOptions::heap_ring_size",
        api, ring, h.size(), h.live_allocations(),
        ring == 0 ? " (the run's outermost scope, which ends only with the run)" : "", bytes));
  }
  bool run_bound = false;
  const auto deadline = submit_wait_deadline(run_bound);
  struct Waiting {
    std::atomic<bool>& flag;
    explicit Waiting(std::atomic<bool>& f) : flag(f) {
      flag.store(true, std::memory_order_seq_cst);
    }
    ~Waiting() { flag.store(false, std::memory_order_relaxed); }
  } waiting(core_.heap_waiting);
  for (;;) {
    drain_retired();
    if (auto a = h.try_alloc(bytes)) return *a;
    // A task failed meanwhile: the run ends with its error, as a window wait does, rather than
    // after the bytes come back or heap_wait passes.
    if (core_.run.failed()) std::rethrow_exception(core_.run.first_error());
    if (std::chrono::steady_clock::now() >= deadline) {
      if (run_bound) check_run_deadline();
      throw TimeoutError(fmt::format(
          "Orchestrator::{}: heap ring {} (scope depth {}, {} bytes, {} live allocations) stayed "
          "full for {} ms while {} bytes were requested; raise WorkerOptions::heap_ring_size, or "
          "end scopes sooner so their buffers are reclaimed",
          api, ring, depth_, h.size(), h.live_allocations(), core_.timing.heap_wait.count(),
          bytes));
    }
    // Retirements wake this thread per kRetireBatch, or when the Scheduler goes idle: a few
    // bytes given back while other tasks keep the workers busy would wake it only at the
    // deadline (a 10 s stall by default). So it also looks again every kWindowTick.
    core_.orch_wake.await([this] { return !core_.retire_inbox.empty(); }, core_.timing.spin,
                          std::min(deadline, std::chrono::steady_clock::now() + kWindowTick));
  }
}

inline std::chrono::steady_clock::time_point OrchestratorBase::submit_wait_deadline(
    bool& run_bound) const {
  auto deadline = detail::deadline_after(std::chrono::steady_clock::now(), core_.timing.heap_wait);
  const std::int64_t run_dl = core_.run_deadline_ns.load(std::memory_order_relaxed);
  run_bound = run_dl != 0 && detail::steady_from_ns(run_dl) < deadline;
  if (run_bound) deadline = detail::steady_from_ns(run_dl);
  return deadline;
}

// The answers driven lanes' children gave to tasks this thread sent them (LaneCore::drive). Any
// left when this thread stops polling are taken by the lane's thread, which the child wakes.
inline void OrchestratorBase::collect_driven() noexcept {
  for (detail::LaneCore* l : core_.driven_lanes) l->drive(*l, detail::LaneCore::DriveStep::Collect);
}

inline bool OrchestratorBase::driven_child_stepping() const noexcept {
  for (detail::LaneCore* l : core_.driven_lanes) {
    if (l->drive(*l, detail::LaneCore::DriveStep::Stepping)) return true;
  }
  return false;
}

// While a task runs here the fence is not polling (a push wakes the scheduler thread, which
// may be needed while the task runs long), and this thread does not own the Orchestrator: the
// task is not the orchestration function, and a submit from it is refused as from a lane.
inline bool OrchestratorBase::help_lanes() noexcept {
  bool ran = false;
  for (detail::LaneCore* l : core_.helped_lanes) {
    if (!l->help_wanted()) continue;
    const std::thread::id me = owner_.load(std::memory_order_relaxed);
    core_.orch_polling.store(false, std::memory_order_seq_cst);
    helping_.store(me, std::memory_order_relaxed);
    owner_.store(std::thread::id{}, std::memory_order_relaxed);
    ran = l->help(*l) || ran;
    owner_.store(me, std::memory_order_relaxed);
    helping_.store(std::thread::id{}, std::memory_order_relaxed);
    core_.orch_polling.store(true, std::memory_order_seq_cst);
  }
  return ran;
}

inline bool OrchestratorBase::workers_idle() const noexcept {
  // Order matters: a lane hands successors to the inbox before it leaves lane_local, and the
  // scheduler clears sched_idle before it takes the inbox.
  return core_.lane_local.load(std::memory_order_seq_cst) == 0 && core_.ready_empty() &&
         core_.sched_idle.load(std::memory_order_seq_cst);
}

inline void OrchestratorBase::compact_open_frames() noexcept {
  drain_retired();
  for (std::size_t d = 0; d < static_cast<std::size_t>(depth_); ++d) compact_frame(d);
  drain_retired();
}

inline std::uint32_t OrchestratorBase::count_unfinished() const noexcept {
  std::uint32_t n = 0;
  for (TaskSlot id = 0; id < core_.pool.capacity(); ++id) {
    const Slot& s = core_.pool.at(id);
    // A free slot's consumer list is left closed by its last task, so check the state first.
    if (s.state.load(std::memory_order_acquire) == TaskState::Free) continue;
    n += s.consumers.load(std::memory_order_acquire) != detail::closed_list() ? 1U : 0U;
  }
  return n;
}

inline void OrchestratorBase::wait_for_window(const char* api) {
  const std::uint32_t window = core_.task_window;
  // A wait ends with a quarter of the window free (`batch`), not one slot: otherwise an
  // orchestration that outruns its workers would walk its frames (up to a window of slots) for
  // every few tasks that finished since the last walk. Only the ends that cannot wait for more
  // (workers idle, a deadline) settle for any free slot.
  const std::uint32_t batch = std::max<std::uint32_t>(1, window / 4);
  const auto roomy = [&] { return core_.pool.live() + batch <= window; };
  // For the ends that settle: gives back what finished, then whether any slot is free.
  const auto any_free_after_compaction = [&] {
    compact_open_frames();
    return core_.pool.live() < window;
  };
  compact_open_frames();
  if (roomy()) return;
  bool run_bound = false;
  const auto deadline = submit_wait_deadline(run_bound);
  // While this is set, finishing tasks are counted; the one that completes a quarter of the
  // window wakes this thread, which then gives back all their slots in one pass (so a pass over
  // the frames costs O(1) per task, and a wakeup is paid per many tasks, not per task).
  core_.window_wake_at.store(batch, std::memory_order_relaxed);
  struct Waiting {
    std::atomic<bool>& flag;
    explicit Waiting(std::atomic<bool>& f) : flag(f) {
      flag.store(true, std::memory_order_seq_cst);
    }
    ~Waiting() { flag.store(false, std::memory_order_relaxed); }
  } waiting(core_.window_waiting);
  // Counted once the flag is up: a test that sees the count knows completions now flush.
  core_.stats.window_waits.add();
  bool compacted = false;  // the tick path below just compacted
  for (;;) {
    // Tasks that finished before the flag was up are seen here (complete() closes its consumer
    // list with a seq_cst exchange before it loads the flag).
    if (!compacted) compact_open_frames();
    compacted = false;
    if (roomy()) return;
    if (core_.run.failed()) std::rethrow_exception(core_.run.first_error());
    if (workers_idle()) {
      if (core_.pool.live() < window) return;  // nothing more will finish: take what there is
      // Every published task finished. A retirement may still be on its way; after that, what
      // fills the window can only come back when a scope ends, and this thread would end it.
      core_.orch_wake.await([this] { return !core_.retire_inbox.empty(); }, core_.timing.spin,
                            std::chrono::steady_clock::now() + std::chrono::milliseconds(10));
      if (any_free_after_compaction()) return;
      if (core_.run.failed()) std::rethrow_exception(core_.run.first_error());
      std::size_t heap_owners = 0;
      for (std::size_t d = 0; d < static_cast<std::size_t>(depth_); ++d) {
        for (const TaskSlot id : frames_[d]) heap_owners += core_.pool.at(id).heap_ring >= 0;
      }
      throw UsageError(fmt::format(
          "Orchestrator::{}: the task window (WorkerOptions::task_window = {}) is full and every "
          "task in it has finished: {} of the {} alive own heap bytes (orch.alloc buffers or "
          "auto-allocated outputs) of scopes that are still open, so they come back only when "
          "those scopes end, which cannot happen while this call waits. Wrap the work in an "
          "inner scope (auto s = orch.scope()) so its tasks and buffers are given back at its "
          "end, or raise WorkerOptions::task_window",
          api, window, heap_owners, core_.pool.live()));
    }
    core_.window_done.store(0, std::memory_order_relaxed);
    // Every kWindowTick it settles for any free slot, so tasks finishing slowly (a long task
    // the rest wait for) still let the orchestration go on.
    const auto tick = std::min(deadline, std::chrono::steady_clock::now() + kWindowTick);
    const bool woke = core_.orch_wake.await(
        [this, batch] {
          return core_.window_done.load(std::memory_order_seq_cst) >= batch || workers_idle() ||
                 core_.run.failed();
        },
        core_.timing.spin, tick);
    if (!woke) {
      if (any_free_after_compaction()) return;
      if (std::chrono::steady_clock::now() < deadline) {
        compacted = true;
        continue;
      }
      if (run_bound) check_run_deadline();
      throw TimeoutError(fmt::format(
          "Orchestrator::{}: the task window (WorkerOptions::task_window = {}) stayed full for "
          "{} ms: {} tasks alive, {} of them not finished; the workers did not keep up with this "
          "orchestration. Raise WorkerOptions::heap_wait (how long a submit waits) or "
          "task_window, or look for a task that does not finish (CallConfig::timeout and "
          "WorkerOptions::task_timeout bound them)",
          api, window, core_.timing.heap_wait.count(), core_.pool.live(), count_unfinished()));
    }
  }
}

inline ContinuousTensor OrchestratorBase::alloc(std::span<const std::uint32_t> shape,
                                                DataType dtype) {
  check_open("alloc");
  check_run_deadline();
  if (core_.pool.live() >= core_.task_window) [[unlikely]]
    wait_for_window("alloc");
  ContinuousTensor t = make_tensor(nullptr, shape, dtype);
  const std::uint64_t bytes = t.nbytes();
  if (bytes == 0) {
    throw UsageError("Orchestrator::alloc: the shape has no elements; allocate at least one");
  }
  const int ring = ring_for_depth();
  const auto a = heap_alloc(ring, detail::HeapRing::round_up(bytes), "alloc");
  reclaim_before_growing();
  Slot* sp = nullptr;
  try {
    sp = &core_.pool.alloc();
  } catch (...) {
    heaps_[ring].release(a.seq);
    throw;
  }
  Slot& s = *sp;
  heaps_[ring].set_owner(a.seq, s.id);
  t.data = reinterpret_cast<std::uintptr_t>(heaps_[ring].base() + a.offset);
  s.run_id = core_.run.id();
  s.trace_id = 0;  // not a task: no node, and no edge from it
  s.heap_ring = static_cast<std::int8_t>(ring);
  s.heap_seq = a.seq;
  s.has_config = false;
  // A finished producer with only its scope's reference: readers add theirs.
  s.refs.store(1, std::memory_order_relaxed);
  s.pending.store(0, std::memory_order_relaxed);
  s.poisoned.store(false, std::memory_order_relaxed);
  s.failed.store(false, std::memory_order_relaxed);
  s.consumers.store(detail::closed_list(), std::memory_order_relaxed);
  s.state.store(TaskState::Completed, std::memory_order_relaxed);
  tmap_.insert(0, t.data, t.data + bytes, s.id);
  s.outputs.push_back({0, t.data, t.data + bytes});
  frames_[static_cast<std::size_t>(depth_ - 1)].push_back(s.id);
  return t;
}

template <class SlotAt>
inline void OrchestratorBase::prefetch_retiring(SlotAt&& at, std::size_t n,
                                                std::size_t i) const noexcept {
  // Distances in tasks: the slot's shared and bookkeeping lines (written on other cores, or long
  // ago), then its outputs array, then the TensorMap index entry and segment of its first output.
  constexpr std::size_t kSlot = 16;
  constexpr std::size_t kOutputs = 8;
  constexpr std::size_t kIndex = 4;
  constexpr std::size_t kSegment = 2;
  if (i + kSlot < n) {
    const char* p = reinterpret_cast<const char*>(&at(i + kSlot));
    __builtin_prefetch(p + detail::kCacheLine, 1, 3);
    __builtin_prefetch(p + 2 * detail::kCacheLine, 1, 3);
  }
  if (i + kOutputs < n) {
    const Slot& s = at(i + kOutputs);
    if (!s.outputs.empty()) __builtin_prefetch(s.outputs.data(), 0, 3);
  }
  if (i + kIndex < n) {
    const Slot& s = at(i + kIndex);
    if (!s.outputs.empty()) tmap_.prefetch(s.outputs[0].space, s.outputs[0].begin);
  }
  if (i + kSegment < n) {
    const Slot& s = at(i + kSegment);
    if (!s.outputs.empty()) tmap_.prefetch_segment(s.outputs[0].space, s.outputs[0].begin);
  }
}

inline void OrchestratorBase::release_frame(std::vector<TaskSlot>& frame) noexcept {
  const auto at = [&](std::size_t k) -> const Slot& { return core_.pool.at(frame[k]); };
  for (std::size_t i = 0; i < frame.size(); ++i) {
    prefetch_retiring(at, frame.size(), i);
    release_ref(core_.pool.at(frame[i]));
  }
  frame.clear();
}

inline void OrchestratorBase::compact_frame(std::size_t d) noexcept {
  auto& frame = frames_[d];
  std::size_t kept = 0;
  const auto at = [&](std::size_t k) -> const Slot& { return core_.pool.at(frame[k]); };
  for (std::size_t i = 0; i < frame.size(); ++i) {
    prefetch_retiring(at, frame.size(), i);
    const TaskSlot id = frame[i];
    Slot& s = core_.pool.at(id);
    // Finished (acquire: its outcome is final once its consumer list is closed), succeeded, and
    // no heap bytes that a later task of this scope may still use: the scope's reference is all
    // that keeps the slot, and nothing needs it any more. A failed task stays in the TensorMap
    // until the scope ends, so the readers submitted after it are still skipped.
    const bool finished = s.consumers.load(std::memory_order_acquire) == detail::closed_list();
    if (finished && s.heap_ring < 0 && !s.failed.load(std::memory_order_relaxed)) {
      release_ref(s);
    } else {
      frame[kept++] = id;
    }
  }
  frame.resize(kept);
  frame_compact_at_[d] = std::max(kFrameCompactMin, 2 * kept);
}

inline void OrchestratorBase::scope_begin() {
  check_owner("scope_begin");
  if (depth_ >= kMaxScopeDepth) {
    throw UsageError(fmt::format(
        "Orchestrator::scope_begin: scopes nest at most {} deep (the run's own scope included)",
        kMaxScopeDepth));
  }
  frames_[static_cast<std::size_t>(depth_)].clear();
  frame_compact_at_[static_cast<std::size_t>(depth_)] = kFrameCompactMin;
  ++depth_;
  // The outermost open scope using a ring is the first scope at a depth that maps to it.
  const int ring = ring_for_depth();
  if (depth_ - 1 == ring) {
    ring_scope_seq_[static_cast<std::size_t>(ring)] =
        heaps_[static_cast<std::size_t>(ring)].next_seq();
  }
}

inline void OrchestratorBase::scope_end() {
  check_owner("scope_end");
  if (depth_ <= 1) {
    throw UsageError("Orchestrator::scope_end: no scope is open (scope_end without scope_begin)");
  }
  --depth_;
  release_frame(frames_[static_cast<std::size_t>(depth_)]);
  drain_retired();
}

inline void OrchestratorBase::hold_heap_owner_slow(const char* api, std::int32_t index,
                                                   const ContinuousTensor& t, std::size_t ring,
                                                   std::uint64_t offset) {
  std::uint32_t owner = 0;
  auto found = heaps_[ring].find(offset, t.nbytes(), owner);
  if (found == detail::HeapRing::Lookup::Live) {
    for (TaskSlot h : scratch_holds_) {
      if (h == owner) return;  // already held for this task
    }
    Slot& o = core_.pool.at(owner);
    // Only while the owner still has a reference (its scope is open or a task holds it); at 0
    // its bytes are about to be reclaimed.
    std::int32_t r = o.refs.load(std::memory_order_acquire);
    while (r > 0) {
      if (o.refs.compare_exchange_weak(r, r + 1, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
        scratch_holds_.push_back(owner);
        return;
      }
    }
    found = detail::HeapRing::Lookup::Released;
  }
  if (found == detail::HeapRing::Lookup::Released) {
    throw UsageError(fmt::format(
        "Orchestrator::{}: tensor {} ({:#x}, {} bytes) is a heap buffer whose scope has ended "
        "(its bytes are being reclaimed); use a buffer from orch.alloc or an auto-allocated "
        "output only inside the scope that made it, or make it in an outer scope",
        api, index, t.data, t.nbytes()));
  }
  throw UsageError(fmt::format(
      "Orchestrator::{}: tensor {} ({:#x}, {} bytes) lies in heap ring {} but not within one live "
      "allocation; pass a buffer orch.alloc returned (or an auto-allocated output), whole or a "
      "part of it",
      api, index, t.data, t.nbytes(), ring));
}

inline void OrchestratorBase::release_scratch_holds() noexcept {
  for (TaskSlot h : scratch_holds_) release_ref(core_.pool.at(h));
  scratch_holds_.clear();
}

inline void OrchestratorBase::release_ref(Slot& s) noexcept {
  // Only this thread adds references (Slot::refs), so a count of 1 is the caller's own: nobody
  // else holds one or can take one, and the slot retires without the locked RMW. That RMW waited
  // for the line the lane had just written when it finished the task (a frame compaction's main
  // cost): 100k empty tasks 303-362 -> 279-339 ns/task, with an output each 754-780 -> 686-695,
  // a chain of 10k 408-413 -> 373-382 per hop (a driver of bench_engine's rows, 3 alternations).
  // acquire: as the RMW's, it sees what the other holders did before they let go.
  if (s.refs.load(std::memory_order_acquire) == 1 ||
      s.refs.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    s.refs.store(0, std::memory_order_relaxed);
    retire(s);
  }
}

inline void OrchestratorBase::retire(Slot& s) noexcept {
  for (const auto& o : s.outputs) tmap_.erase_owned(o.space, o.begin, o.end, s.id);
  ++s.gen;  // its TensorMap reader entries are stale from here on
  if (s.heap_ring >= 0) heaps_[static_cast<std::size_t>(s.heap_ring)].release(s.heap_seq);
  s.heap_ring = -1;
  s.outputs.clear();
  s.holds.clear();
  s.edges.clear();
  s.members_done = 0;
  s.group_outcome = Outcome::Success;
  s.state.store(TaskState::Free, std::memory_order_relaxed);
  core_.pool.free(s);
}

inline void OrchestratorBase::drain_retired() noexcept {
  // Newest first: the order of retirements does not matter. In batches, so the links (one miss
  // after another) are followed first, asking for each slot's other lines on the way, and the
  // retirements then overlap the misses of the tasks a little further on.
  std::array<Slot*, 64> batch;
  Slot* s = core_.retire_inbox.take_lifo();
  while (s != nullptr) {
    std::size_t n = 0;
    for (; s != nullptr && n < batch.size(); s = s->next) {
      __builtin_prefetch(reinterpret_cast<const char*>(s) + detail::kCacheLine, 1, 3);
      batch[n++] = s;
    }
    const auto at = [&](std::size_t k) -> const Slot& { return *batch[k]; };
    for (std::size_t i = 0; i < n; ++i) {
      prefetch_retiring(at, n, i);
      retire(*batch[i]);
    }
  }
}

inline void OrchestratorBase::begin_run() {
  owner_.store(std::this_thread::get_id(), std::memory_order_relaxed);
  in_run_.store(true, std::memory_order_release);
  depth_ = 0;
  // A run starts with idle workers: no backlog until a look finds one.
  backlogged_ = false;
  costly_pause_ = 0;
  carried_callable_ = kAnyCallable;
  backlog_countdown_ = 1;
  cheap_at_submit_ = false;
  time_at_submit_ = false;
  slow_sample_ = false;
  scope_begin();
}

inline void OrchestratorBase::give_up_lost_tasks() noexcept {
  lost_tasks_ = core_.pool.live();
  detail::log_worker(
      LogLevel::Error, core_.level,
      "run {}: {} task(s) neither finished nor were given back while the engine stood "
      "idle for {} ms; they were lost inside the engine (a defect in simpler)",
      core_.run.id(), lost_tasks_, kLostTaskGrace.count());
  try {
    core_.run.fail(std::make_exception_ptr(Error(fmt::format(
        "L{} Worker::run: {} task(s) of this run neither finished nor were given back while every "
        "worker stood idle for {} ms: the engine lost them (a defect in simpler; please report "
        "it, with a trace of the run if you can: CallConfig::enable_l2_swimlane). Their slots "
        "never come back, so this Worker runs nothing more: close it and create a new one",
        core_.level, lost_tasks_, kLostTaskGrace.count()))));
  } catch (...) {
    core_.run.fail(std::current_exception());
  }
}

inline int OrchestratorBase::finish_run() noexcept {
  const int left_open = depth_ - 1;
  while (depth_ > 0) {
    --depth_;
    release_frame(frames_[static_cast<std::size_t>(depth_)]);
  }
  // The run's fence: every task it submitted has finished and released its last reference.
  // Sleep until the scheduler is idle with nothing left in its inbox (then every published task
  // has finished: a task still waiting would need a running producer), then collect. A traced
  // run also waits for the scheduler to go idle: its last pass may still be recording events.
  //
  // While it spins it also does the scheduler's passes (orch_polling): the lanes' completions
  // are collected here, and the scheduler thread is not woken for them. It stops polling before
  // it sleeps, then looks once more for what the lanes pushed meanwhile.
  //
  // A driving fence also waits for the lanes to hand their last results in (right after their
  // tasks retire) and collects them itself: otherwise those would wake the scheduler thread
  // after the run, to compete with the next one for the cores.
  const bool traced = trace_level_ != 0 || dag_ != nullptr;
  detail::SchedulerCore* const driver = core_.driving();
  const bool drives = driver != nullptr;
  const bool helps = core_.caller_runs_tasks && !core_.helped_lanes.empty();
  const auto done = [&] {
    return core_.pool.live() == 0 && (!(traced || drives) || workers_idle());
  };
  // How long the fence spins on past its spin for a driven child stepping off a CPU (set at the
  // first such look): the child's answer is late by a migration (~100 us on this VM class), and
  // when this thread slept through it and the child woke it, the two were soon on one CPU again:
  // the step did not hold (bench_fork's e row had 2.4 us repetitions, sharing a CPU, in 6 of 14;
  // with every spin of the Worker at 200 us instead, in none of 14).
  constexpr auto kStepGrace = std::chrono::milliseconds(2);
  std::chrono::steady_clock::time_point step_grace_end{};
  // The liveness check: since when the engine has stood idle with `idle_live` tasks unretired
  // (zero: it was not, at the last look).
  std::chrono::steady_clock::time_point idle_since{};
  std::uint32_t idle_live = 0;
  for (;;) {
    drain_retired();
    if (done()) break;
    const auto settled = [this] { return workers_idle(); };
    bool ok = false;
    if (drives) {
      core_.orch_polling.store(true, std::memory_order_seq_cst);
      // Driven lanes' answers first: what they complete is then in this very pass.
      const auto drive = [&] {
        collect_driven();
        driver->try_pass(core_.stats.orch_passes, nullptr, true);
        if (helps && help_lanes()) driver->try_pass(core_.stats.orch_passes, nullptr, true);
        return settled();
      };
      ok = detail::EventCount::spin_until(drive, core_.timing.spin);
      collect_driven();  // still polling: what it pushes needs no wake-up
      core_.orch_polling.store(false, std::memory_order_seq_cst);
      driver->try_pass(core_.stats.orch_passes, nullptr, true);
      if (!ok && driven_child_stepping()) {
        const auto now = std::chrono::steady_clock::now();
        if (step_grace_end == std::chrono::steady_clock::time_point{}) {
          step_grace_end = now + kStepGrace;
        }
        // Bounded: a child that died while it stepped is not waited for.
        if (now < step_grace_end) {
          idle_since = {};  // a child is answering: not idle
          continue;
        }
      }
    }
    if (!ok) {
      // Spun already when it polled: sleep now.
      const auto spin = drives ? std::chrono::nanoseconds(0) : core_.timing.spin;
      core_.orch_wake.await(settled, spin,
                            std::chrono::steady_clock::now() + std::chrono::seconds(1));
    }
    if (!core_.retire_inbox.empty() || !workers_idle()) {
      idle_since = {};
      continue;
    }
    drain_retired();
    if (done()) break;
    // Idle yet something unretired: its retirement is in flight; wait for it specifically. With
    // the run's scopes closed, every reference to a task is held by a task that has not
    // finished, so an engine idle this long with no retirement has lost those tasks (a defect:
    // a task dropped between two queues). Waiting on would never end, the run's deadline
    // included (it fails a run only while a lane is busy or work is queued).
    const auto now = std::chrono::steady_clock::now();
    if (idle_since == std::chrono::steady_clock::time_point{} || core_.pool.live() != idle_live) {
      idle_since = now;
      idle_live = core_.pool.live();
    } else if (now - idle_since >= kLostTaskGrace) {
      give_up_lost_tasks();
      break;
    }
    core_.orch_wake.await([this] { return !core_.retire_inbox.empty(); }, core_.timing.spin,
                          now + std::chrono::milliseconds(10));
  }
  // Every task retired: what is left are readers of retired tasks (their writers' entries went
  // at retire). The next run starts from an empty map.
  tmap_.clear();
  tmap_sweep_at_ = kTensorMapSweepMin;
  settled_since_sweep_ = 0;
  core_.pool.restore_order();
  in_run_.store(false, std::memory_order_release);
  return left_open;
}

}  // namespace simpler
