// simpler — how a submitted task is named: its slot id, the worker ids it may target, and the
// states its slot goes through.
#pragma once

#include <cstdint>
#include <limits>

namespace simpler {

using TaskSlot = std::uint32_t;
using WorkerId = std::int32_t;
inline constexpr WorkerId any_worker = -1;
inline constexpr TaskSlot kInvalidSlot = std::numeric_limits<TaskSlot>::max();

/// Life of a task's slot. Building -> Pending/Ready -> Running -> Completed/Failed -> Consumed ->
/// Free (Orchestrator::state_of).
enum class TaskState : std::uint8_t {
  Free,
  Building,
  Pending,
  Ready,
  Running,
  Completed,
  Failed,
  Consumed,
};

}  // namespace simpler
