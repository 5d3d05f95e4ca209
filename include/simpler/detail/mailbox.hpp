// simpler::detail::Mailbox — the shared-memory frame between a lane and its forked child.
//
// Start-up, shutdown and control commands go through the state word of the first (control)
// frame, one at a time; tasks go through a ring of further frames (the counters at the end of the
// header), several in flight. The state word and the ring counters are the publication points:
// the writer stores the payload with plain stores, then the word (seq_cst, so the EventCount
// notify that follows cannot miss a sleeper); the reader loads the word, then reads the payload.
// The parent owns Ready -> ControlRequest and -> Shutdown; the child owns Starting -> Ready |
// InitFailed and ControlRequest -> ControlDone. Lives in an anonymous shared mapping made before
// fork (detail::SharedRegion); both processes use the same object.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>

#include "simpler/call_config.hpp"
#include "simpler/detail/event_count.hpp"
#include "simpler/error.hpp"

namespace simpler::detail {

enum class MailboxState : std::uint32_t {
  Starting = 0,   ///< forked, not ready yet
  Ready = 1,      ///< idle, waiting for a task
  TaskReady = 2,  ///< unused since tasks travel in the ring (kept: the values are the wire)
  TaskDone = 3,
  Shutdown = 4,
  InitFailed = 5,
  ControlRequest = 6,  ///< parent -> child, between tasks
  ControlDone = 7,
};

/// Commands on the control channel (between tasks). The child answers an unknown command with
/// an error naming it; a leaf may handle commands of its own (control(command, arg, payload)).
enum class ControlCommand : std::uint64_t {
  Ping = 1,  ///< result = arg + 1: proves the child is alive and serving
};

/// The frame. A task: digest, index_hint, config_in_frame (and then config) and blob_bytes of
/// args blob (after the header) from the parent; error, error_kind, error_code and message from
/// the child. A control command: command, arg and blob_bytes of payload (in the same blob area)
/// from the parent; result, or the same error fields, from the child. The failure fields are a
/// Fault {kind, code, message}.
struct MailboxHeader {
  MailboxHeader() noexcept = default;
  /// `light_sends`: the parent publishes `sent` with a release store and a light fence, and
  /// registered for the child's global heavy fence (ForkShmTransport's send; asymmetric_fence.hpp).
  explicit MailboxHeader(bool light_sends) noexcept : to_child(true, light_sends) {}

  EventCount to_child{true};   ///< the child sleeps here
  EventCount to_parent{true};  ///< the parent sleeps here
  std::atomic<MailboxState> state{MailboxState::Starting};
  std::int32_t error = 0;        ///< 0 = success; else error_kind, error_code, message say why
  std::uint32_t error_kind = 0;  ///< an ErrorKind (read back with read_frame_error)
  std::int32_t error_code = 0;   ///< its code: a device status, an errno; 0 when it has none
  std::uint64_t digest = 0;
  std::uint32_t index_hint = 0;
  std::int32_t sender_cpu = -1;  ///< task: the CPU the parent sent it from (CpuStepOff)
  std::uint32_t blob_bytes = 0;  ///< task: the args blob; control: the payload
  /// Task: 1 = `config` holds the task's CallConfig; 0 = the task has the default one, and the
  /// 1 KiB+ of `config` was not copied (most tasks: the copy was a fifth of a send). Any other
  /// value is a malformed frame.
  std::uint32_t config_in_frame = 0;
  std::uint64_t command = 0;  ///< control: the command
  std::uint64_t arg = 0;      ///< control: its argument
  std::uint64_t result = 0;   ///< control: the child's answer
  CallConfig config;
  char message[1024] = {};  ///< NUL-terminated failure text (context of every level below)
  // Tracing (detail/trace.hpp). Parent: trace_level of the task, 0 = untraced (then the child
  // reads no clock). Child, for a traced task: when it ran (CLOCK_MONOTONIC ns), and the bytes of
  // nested trace it left in the blob area (trace_bytes), or those that did not fit (trace_lost).
  std::int32_t trace_level = 0;
  std::uint32_t trace_bytes = 0;
  std::int64_t trace_begin_ns = 0;
  std::int64_t trace_end_ns = 0;
  std::uint64_t trace_lost = 0;
  // The task ring (used in the control frame only; see ForkShmTransport). Task frames follow the
  // control frame in the same mapping; frame i carries task number i modulo their count. The
  // parent publishes task n by storing sent = n + 1 (seq_cst, after the frame's plain stores),
  // the child answers it by storing answered = n + 1 (seq_cst, after the answer's plain stores),
  // so each side reads a frame only after the other's store of the counter published it.
  // `wanted` is the task the parent waits for (or last waited for): the child wakes the parent
  // only when it answers that task, so a batch of answers costs one wake, not one per task.
  // `received` counts the answers the parent took: a child about to sleep with answers nobody
  // took wakes the parent's lane thread for them (the thread that sent them may have gone on to
  // other work: see WorkerThread, "Driven lanes").
  // Parent-written and child-written counters sit on different cache lines.
  alignas(64) std::atomic<std::uint32_t> sent{0};
  std::atomic<std::uint32_t> wanted{0};
  std::atomic<std::uint32_t> received{0};
  alignas(64) std::atomic<std::uint32_t> answered{0};
  /// Times the child stepped off its sender's CPU (CpuStepOff; diagnostics). Child-written, on
  /// the line the parent reads `answered` from.
  std::atomic<std::uint32_t> cpu_steps{0};
  /// Non-zero while the child steps off a CPU (CpuStepOff): its next answer is late by a
  /// migration, and a parent that waits for it spins on rather than sleep (see
  /// OrchestratorBase::finish_run). Child-written, same line.
  std::atomic<std::uint32_t> stepping{0};
};

inline constexpr std::size_t kMailboxBytes = std::size_t{64} << 10;
inline constexpr std::size_t kMailboxBlobOffset = (sizeof(MailboxHeader) + 63) & ~std::size_t{63};
inline constexpr std::size_t kMailboxBlobCapacity = kMailboxBytes - kMailboxBlobOffset;
static_assert(kMailboxBlobCapacity >= 8 + 256 * 40 + 128 * 8,
              "a mailbox holds the largest chip task (256 tensors, 128 scalars)");

/// The largest ErrorKind a frame may carry.
inline constexpr std::uint32_t kMaxFrameErrorKind = static_cast<std::uint32_t>(ErrorKind::Remote);

/// Records a failure in the frame (the child's side). A message longer than the mailbox's text
/// field is cut, and the cut says so (and how long the whole message was), so nobody reads a
/// truncated message as the whole story.
inline void write_frame_error(MailboxHeader& box, ErrorKind kind, std::int32_t code,
                              const char* what) noexcept {
  box.error = 1;
  box.error_kind = static_cast<std::uint32_t>(kind);
  box.error_code = code;
  constexpr std::size_t cap = sizeof(box.message) - 1;
  const std::size_t len = std::strlen(what);
  if (len <= cap) {
    std::memcpy(box.message, what, len + 1);
    return;
  }
  // Room for the note first; the start of the message fills the rest.
  constexpr std::size_t kNoteRoom = 96;
  const std::size_t keep = cap - kNoteRoom;
  std::memcpy(box.message, what, keep);
  std::snprintf(box.message + keep, sizeof(box.message) - keep,
                " [... message cut: the first %zu of %zu bytes; a mailbox holds %zu]", keep, len,
                cap);
}

/// Records the exception being handled (call inside a catch block): its kind, code and message
/// (fault_from_current_exception), so a DeviceError's status survives the process boundary.
inline void write_frame_exception(MailboxHeader& box) noexcept {
  Fault f;
  fault_from_current_exception(f);
  write_frame_error(box, f.kind, f.code,
                    f.message.empty() ? "(no message: out of memory)" : f.message.c_str());
}

/// Clears the failure fields before the child serves a request.
inline void clear_frame_error(MailboxHeader& box) noexcept {
  box.error = 0;
  box.error_kind = 0;
  box.error_code = 0;
  box.message[0] = '\0';
}

/// The parent's side: the failure the child recorded. Never trusts the frame: the message is read
/// up to the end of its field, NUL or not, and an error kind this build does not know makes the
/// fault a TransportError saying so (with the code and message it came with), and returns false.
inline bool read_frame_error(const MailboxHeader& box, Fault& out) noexcept {
  std::string text;
  try {
    text.assign(box.message, ::strnlen(box.message, sizeof(box.message)));
  } catch (...) {
    // Out of memory: the kind and code still say what failed.
  }
  const std::uint32_t kind = box.error_kind;
  if (kind > kMaxFrameErrorKind) {
    try {
      out.set(ErrorKind::Transport, 0,
              "malformed mailbox reply: error kind " + std::to_string(kind) +
                  " is not one this build knows (code " + std::to_string(box.error_code) +
                  "): " + text);
    } catch (...) {
      out.set(ErrorKind::Transport, 0, "malformed mailbox reply: unknown error kind");
    }
    return false;
  }
  out.set(static_cast<ErrorKind>(kind), box.error_code, std::move(text));
  return true;
}

/// Whether a task send must notify the child (ForkShmTransport's send). Called after the frame
/// is published (`sent` stored) with the `answered` count loaded after that store. A light
/// send's store may become visible only after that load; the child, which reads `sent` after
/// storing its answer, then finds the frame in the spin it starts after its last answer, or
/// in the sleep's fenced check (EventCount, asymmetric).
///
/// A notify may be skipped only while the child is known to be behind: an earlier send that
/// notified found it with fewer answers than frames sent, and it has answered nothing since.
/// It then has that earlier frame still to answer, stores `answered` after our load, and reads
/// `sent` after that store, so it sees this frame before it can sleep. A send that found the
/// child caught up (every frame answered, possibly the one just sent) says nothing about the
/// next: the child may then spin out and sleep, and the next send must wake it. Skipping on
/// "no new answers" alone lost that wake: the child slept until its 100 ms liveness timeout
/// (about 1 in 20000 back-to-back one-task runs).
class ChildWake {
 public:
  /// True when the send must notify the child.
  [[nodiscard]] bool needed(std::uint32_t sent, std::uint32_t answered) noexcept {
    if (behind_ && answered == behind_at_) return false;
    behind_ = answered != sent;
    behind_at_ = answered;
    return true;
  }

 private:
  bool behind_ = false;          ///< the last notify found the child behind ...
  std::uint32_t behind_at_ = 0;  ///< ... with this many answers
};

}  // namespace simpler::detail
