// simpler — forward declarations of the public types, templates and concepts.
#pragma once

#include <cstdint>

namespace simpler {
enum class DataType : std::uint8_t;
enum class TensorArgType : std::int32_t;
enum class CallableKind : std::uint8_t;
enum class Outcome : std::uint8_t;
enum class ChildMode;
struct ContinuousTensor;
struct TaskArgsView;
class TaskArgs;
struct CallConfig;
struct CallableHandle;
struct SubmitResult;
struct LeafRequest;
struct WorkerOptions;
struct ChipKernel;
struct ChipCallable;
struct ChipOptions;
class ChipWorker;
class OrchestratorBase;
template <class... Lanes>
class BasicOrchestrator;
class SubWorker;
struct ThreadTransport;
struct ForkShmTransport;
template <class W>
class NestedWorker;
class Worker;
class Error;
class UsageError;
class TaskError;
class DeviceError;

// Concepts cannot be forward-declared: Transport and its parts are in transport/transport.hpp,
// Leaf and its parts in leaf/leaf.hpp.

template <class... Lanes>
class Scheduler;
template <class... Lanes>
class BasicWorker;
}  // namespace simpler
