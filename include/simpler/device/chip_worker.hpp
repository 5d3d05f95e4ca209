// simpler — ChipWorker: one chip (L2), driven through a device runtime library
// (<simpler/device/device_abi.h>).
//
// Standalone (L2): construct with a device id, init(), register_callable(), run() any number of
// times, finalize() (or let the destructor do it). As a Worker's next-level leaf (L3): the Worker
// builds one per WorkerOptions::device_ids entry over its callable registry; start() initialises
// the chip where the lane runs (in the forked child with ChildMode::Process) and registers every
// chip callable of the registry, and run(const LeafRequest&) runs the callable a task names.
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
}

namespace detail {

/// A shared-memory page that carries a chip callable registered after init() to forked chip
/// children (Worker::register_chip): the parent writes it, then sends each chip child
/// ChipWorker::kControlRegisterChip over its mailbox. Mapped before the children are forked.
class ChipBroadcast {
 public:
  static constexpr std::size_t kBytes = 64 * 1024;
  ChipBroadcast();
  ~ChipBroadcast();
  ChipBroadcast(const ChipBroadcast&) = delete;
  ChipBroadcast& operator=(const ChipBroadcast&) = delete;
  /// Writes `c` and its digest; returns the bytes written. Throws UsageError when it does not
  /// fit.
  std::size_t write(const ChipCallable& c, std::uint64_t digest);
  /// Reads what write() wrote; throws Error for a malformed record.
  static std::pair<std::uint64_t, ChipCallable> read(const std::byte* region, std::size_t bytes);
  [[nodiscard]] const std::byte* data() const noexcept { return base_; }

 private:
  std::byte* base_;
};

}  // namespace detail

class ChipWorker {
 public:
  /// Runs chip callables from Worker::register_chip.
  static constexpr std::uint8_t kRuns = kind_bit(CallableKind::Chip);

  /// Control commands a forked chip child serves between tasks (see detail::ChipBroadcast):
  /// register the callable in the broadcast page (arg = its size; answers the callable id), and
  /// unregister the late callable with digest `arg` (a rollback).
  static constexpr std::uint64_t kControlRegisterChip = 0x4348495000000001ULL;
  static constexpr std::uint64_t kControlUnregisterChip = 0x4348495000000002ULL;

  /// Callable ids a chip accepts: 0 .. kMaxCallables - 1.
  static constexpr int kMaxCallables = 64;

  /// A chip for standalone use (L2). Nothing is loaded until init(). Throws UsageError for a
  /// negative device id or option, or a timeout that does not fit the device ABI.
  explicit ChipWorker(int device_id, ChipOptions options = {});
  /// A chip as a Worker's next-level leaf: runs the chip callables of `registry`, which must
  /// outlive it.
  ChipWorker(int device_id, ChipOptions options, const detail::CallableRegistry& registry,
             const detail::ChipBroadcast* broadcast = nullptr);
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
  /// Serves kControlRegisterChip / kControlUnregisterChip in a forked chip child; nullopt for
  /// any other command (the transport answers it as unknown).
  std::optional<std::uint64_t> control(std::uint64_t command, std::uint64_t arg);

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
  const detail::ChipBroadcast* broadcast_ = nullptr;
  std::vector<std::pair<std::uint64_t, int>> late_;  ///< digest -> callable id, after start()
};

static_assert(Leaf<ChipWorker>);

}  // namespace simpler
