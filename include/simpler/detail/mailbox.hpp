// simpler::detail::Mailbox — the shared-memory frame between a lane and its forked child.
//
// One task at a time. The state word is the publication point: the writer stores the payload
// with plain stores, then stores the state (seq_cst, so the EventCount notify that follows cannot
// miss a sleeper); the reader loads the state, then reads the payload. The parent owns
// Idle -> TaskReady and -> Shutdown; the child owns Starting -> Ready and TaskReady -> TaskDone.
// Lives in a MAP_SHARED mapping made before fork; both processes use the same object.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "simpler/call_config.hpp"
#include "simpler/detail/event_count.hpp"

namespace simpler::detail {

enum class MailboxState : std::uint32_t {
  Starting = 0,  ///< forked, not ready yet
  Ready = 1,     ///< idle, waiting for a task
  TaskReady = 2,
  TaskDone = 3,
  Shutdown = 4,
  InitFailed = 5,
  ControlRequest = 6,  ///< parent -> child, between tasks
  ControlDone = 7,
};

/// Commands on the control channel (between tasks). The child answers an unknown command with
/// an error naming it; a leaf may handle commands of its own (control(command, arg)).
enum class ControlCommand : std::uint64_t {
  Ping = 1,  ///< result = arg + 1: proves the child is alive and serving
};

struct MailboxHeader {
  EventCount to_child{true};   ///< the child sleeps here
  EventCount to_parent{true};  ///< the parent sleeps here
  std::atomic<MailboxState> state{MailboxState::Starting};
  std::int32_t error = 0;  ///< 0 = success
  std::uint64_t digest = 0;
  std::uint32_t index_hint = 0;
  std::uint32_t blob_bytes = 0;
  std::uint64_t command = 0;  ///< control: the command
  std::uint64_t arg = 0;      ///< control: its argument
  std::uint64_t result = 0;   ///< control: the child's answer
  CallConfig config;
  char message[1024] = {};  ///< NUL-terminated failure text (context of every level below)
};

inline constexpr std::size_t kMailboxBytes = std::size_t{64} << 10;
inline constexpr std::size_t kMailboxBlobOffset = (sizeof(MailboxHeader) + 63) & ~std::size_t{63};
inline constexpr std::size_t kMailboxBlobCapacity = kMailboxBytes - kMailboxBlobOffset;
static_assert(kMailboxBlobCapacity >= 8 + 256 * 40 + 128 * 8,
              "a mailbox holds the largest chip task (256 tensors, 128 scalars)");

}  // namespace simpler::detail
