// simpler — ChipWorker: one chip (L2), driven through a device runtime library
// (<simpler/device/device_abi.h>).
//
// Standalone (L2): construct with a device id, init(), register_callable(), run() any number of
// times, finalize() (or let the destructor do it). As a Worker's next-level leaf (L3): the Worker
// builds one per WorkerOptions::device_ids entry over its callable registry; start() initialises
// the chip where the lane runs (in the forked child with ChildMode::Process) and registers every
// chip callable of the registry, and run(const LeafRequest&) runs the callable a task names. A
// chip callable registered on the Worker later reaches a forked chip through control()
// (kControlRegisterChip, the callable in the mailbox payload), a chip in a thread at its first run.
// The definitions are in detail/chip_worker.ipp, included at the end (no compiled part).
//
// Thread-safety: a ChipWorker is driven by one thread at a time (the device runtime's contract
// for a context). Distinct ChipWorkers (distinct contexts) are independent, also on one device
// runtime library. Fork-safety: a ChipWorker that was initialised must not be used in a process
// forked afterwards (its device threads do not exist there); ForkShmTransport initialises it in
// the child instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "simpler/call_config.hpp"
#include "simpler/detail/engine_core.hpp"
#include "simpler/device/chip_callable.hpp"
#include "simpler/device/device_abi.h"
#include "simpler/leaf/leaf.hpp"
#include "simpler/orchestrator.hpp"
#include "simpler/task_args.hpp"

namespace simpler {

namespace detail {
struct DeviceRuntime;

/// The bytes that carry a chip callable registered after init() to a forked chip child, in the
/// mailbox's payload area with ChipWorker::kControlRegisterChip: its strings, each ended by a
/// NUL, in the order name, orchestration, entry, then per kernel its func_id (decimal), path and
/// symbol. Throws UsageError naming the field when a string holds a NUL byte.
std::string encode_chip_callable(const ChipCallable& c);
/// The callable in `payload` (what encode_chip_callable wrote). Throws Error naming the defect
/// for a malformed payload (not NUL-terminated, a wrong field count, a bad func_id).
ChipCallable decode_chip_callable(std::span<const std::byte> payload);
}  // namespace detail

class ChipWorker {
 public:
  /// Runs chip callables from Worker::register_chip.
  static constexpr std::uint8_t kRuns = kind_bit(CallableKind::Chip);

  /// Control commands a forked chip child serves between tasks (Worker::register_chip after
  /// init()): register the chip callable in the command's payload (detail::encode_chip_callable;
  /// arg = its digest; answers the callable id), and unregister the late callable with digest
  /// `arg` (a rollback when another chip refused it).
  static constexpr std::uint64_t kControlRegisterChip = 0x4348495000000001ULL;
  static constexpr std::uint64_t kControlUnregisterChip = 0x4348495000000002ULL;

  /// Callable ids a chip accepts: 0 .. kMaxCallables - 1.
  static constexpr int kMaxCallables = 64;

  /// A chip for standalone use (L2). Nothing is loaded until init(). Throws UsageError for a
  /// negative device id or option, or a timeout that does not fit the device ABI.
  explicit ChipWorker(int device_id, ChipOptions options = {});
  /// A chip as a Worker's next-level leaf: runs the chip callables of `registry`, which must
  /// outlive it.
  ChipWorker(int device_id, ChipOptions options, const detail::CallableRegistry& registry);
  ChipWorker(ChipWorker&& other) noexcept;
  ChipWorker& operator=(ChipWorker&& other) noexcept;
  ChipWorker(const ChipWorker&) = delete;
  ChipWorker& operator=(const ChipWorker&) = delete;
  /// Finalises the chip if needed; never throws.
  ~ChipWorker();

  /// Loads the device runtime (once per path per process; see detail::load_device_runtime),
  /// creates the device context and initialises it on the device id with the options. Throws
  /// DeviceError when the library cannot be loaded or simpler_init fails (the context is then
  /// destroyed and init() may be called again), UsageError when called twice or after
  /// finalize().
  void init();

  /// Registers `c` on the chip under `callable_id` (0..63), or under the lowest free id when it
  /// is -1; returns the id. The chip loads the orchestration and kernel files now, once. Throws
  /// UsageError for an invalid callable (see validate(ChipCallable)), an id out of range or
  /// already in use, or no free id; DeviceError when the device refuses it.
  int register_callable(const ChipCallable& c, int callable_id = -1);
  /// Throws UsageError when `callable_id` is not registered.
  void unregister_callable(int callable_id);

  /// Runs a registered callable with `args` (used in place: the simulated chip shares the host's
  /// address space) and waits for it. Throws DeviceError with the device's status and message
  /// when the run fails ("ChipWorker::run('name' as callable 0) on device 0:
  /// SIMPLER_ERR_KERNEL_FAILED (...): ..."); the chip stays usable.
  void run(int callable_id, const TaskArgs& args, const CallConfig& config = default_call_config());
  void run(int callable_id, TaskArgsView args, const CallConfig& config = default_call_config());

  /// Device memory (1024-byte aligned). device_malloc throws UsageError for 0 bytes and
  /// DeviceError when the device has no room; device_free(nullptr) does nothing.
  void* device_malloc(std::size_t bytes);
  void device_free(void* p);
  void copy_to_device(void* dev, const void* host, std::size_t n);
  void copy_from_device(void* host, const void* dev, std::size_t n);

  /// The context's counters (loads, boots, runs, ...).
  [[nodiscard]] simpler_context_stats stats() const;
  /// The chip trace of the last finished run on this chip (simpler_get_run_trace): its events
  /// sorted by begin_ns (CLOCK_MONOTONIC nanoseconds, the clock of the host's own trace), one
  /// track name per AICPU thread and AICore core, and how many events were dropped because a
  /// per-thread buffer was full. Zero events when the run's CallConfig::enable_l2_swimlane was 0
  /// or no run finished yet. The arrays belong to the device context: they stay valid until the
  /// next run, finalize() or destruction of this ChipWorker, so copy what must outlive them. Only
  /// the thread driving the chip may call it. Throws UsageError when the chip is not ready,
  /// DeviceError when the runtime refuses.
  [[nodiscard]] simpler_trace_info last_run_trace() const;
  [[nodiscard]] int device_id() const noexcept { return device_id_; }
  /// True between a successful init() and finalize().
  [[nodiscard]] bool ready() const noexcept { return state_ == State::Ready; }
  /// The path of the device runtime this chip loads (resolved at init(); before that, what
  /// init() would load).
  [[nodiscard]] std::string runtime_path() const;

  /// Finalises and destroys the context. Idempotent; afterwards every call but finalize()
  /// throws UsageError. Throws DeviceError when simpler_finalize reports an error (the context
  /// is destroyed anyway).
  void finalize();

  // ---- Leaf side, used by a Worker's lanes.
  /// init(), then registers every chip callable of the registry (callable ids in registry
  /// order). On failure the chip is finalised again and the error rethrown.
  void start();
  /// finalize(), for shutdown paths: an error is written to stderr, never thrown.
  void stop() noexcept;
  /// Runs the chip callable `r.digest` names with r.args and *r.config (aicpu_thread_num and
  /// runtime_env reach the device). A chip callable registered on the Worker after start() (a
  /// Worker whose children are threads) is registered on the chip at its first run. Throws
  /// Error for a digest that names no chip callable, DeviceError when the run fails.
  void run(const LeafRequest& r);
  [[nodiscard]] std::string callable_name(const LeafRequest& r) const;
  /// Serves kControlRegisterChip (the callable in `payload`) / kControlUnregisterChip in a forked
  /// chip child; nullopt for any other command (the transport answers it as unknown). Throws
  /// what register_callable / unregister_callable throw (a DeviceError keeps its status), Error
  /// for a malformed payload or an unknown digest.
  std::optional<std::uint64_t> control(std::uint64_t command, std::uint64_t arg,
                                       std::span<const std::byte> payload = {});

 private:
  enum class State { New, Ready, Finalised };

  void check_ready(const char* api) const;
  [[noreturn]] void throw_status(const std::string& api, int status) const;
  int leaf_callable_id(const LeafRequest& r);
  void run_raw(int callable_id, TaskArgsView args, const CallConfig& config, const char* api);
  void release() noexcept;

  int device_id_;
  ChipOptions options_;
  const detail::CallableRegistry* registry_ = nullptr;
  const detail::DeviceRuntime* rt_ = nullptr;
  simpler_device_context* ctx_ = nullptr;
  State state_ = State::New;
  std::uint64_t used_ids_ = 0;      ///< bit i: callable id i is registered
  std::vector<std::string> names_;  ///< by callable id, for messages
  std::vector<int> id_by_index_;    ///< registry index -> callable id; -1 = not on the chip
  std::vector<std::pair<std::uint64_t, int>> late_;  ///< digest -> callable id, after start()
};

static_assert(Leaf<ChipWorker>);

}  // namespace simpler

#include "simpler/detail/chip_worker.ipp"
