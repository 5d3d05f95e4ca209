// simpler — ForkShmTransport: the leaf runs in a forked child, reached through a shared-memory
// mailbox (detail::Mailbox).
//
// launch() maps the mailbox and forks; it must run before any engine thread exists (the
// Scheduler launches every lane before it starts a thread). The child dies with its parent
// (PR_SET_PDEATHSIG plus a parent check whenever it idles), runs one task at a time, and never
// returns into the parent's stack: it always ends with _exit. Both sides spin briefly and then
// sleep on a futex in the mailbox, so an idle child and an idle lane use no CPU. While a task
// runs the lane checks every 10 ms that the child is alive: a dead child ends the task with an
// EndpointFailure naming the child and its signal, and every later task on this lane fails the
// same way (the scheduler stops giving it shared work).
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <optional>
#include <span>
#include <string>

#include <fmt/format.h>

#include "simpler/args_blob.hpp"
#include "simpler/detail/deadline.hpp"
#include "simpler/detail/mailbox.hpp"
#include "simpler/detail/process.hpp"
#include "simpler/error.hpp"
#include "simpler/transport/transport.hpp"

namespace simpler {

namespace detail {
/// Records a failure in the frame. A message longer than the mailbox's text field is cut, and
/// the cut says so (and how long the whole message was), so nobody reads a truncated message as
/// the whole story.
inline void write_frame_error(MailboxHeader& box, const char* what) noexcept {
  box.error = 1;
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

/// The child's side of one task frame: validates the frame (blob size within the mailbox, a
/// well-formed blob), runs the leaf, and records the outcome in the frame. Never throws: a
/// malformed or truncated frame is a task failure with a message, not a crash.
template <class L>
void serve_frame(MailboxHeader& box, const std::byte* blob, L& leaf) noexcept {
  box.error = 0;
  try {
    if (box.blob_bytes > kMailboxBlobCapacity) {
      throw TransportError(fmt::format("mailbox frame claims a {}-byte blob; the capacity is {}",
                                       box.blob_bytes, kMailboxBlobCapacity));
    }
    LeafRequest r;
    r.digest = box.digest;
    r.index_hint = box.index_hint;
    r.config = &box.config;
    r.args = decode_args_blob(std::span<const std::byte>(blob, box.blob_bytes));
    leaf.run(r);
  } catch (const std::exception& e) {
    write_frame_error(box, e.what());
  } catch (...) {
    write_frame_error(box, "a non-std::exception was thrown");
  }
}
}  // namespace detail

struct ForkShmTransport {
  /// The lane kills a child that overruns a task's deadline (EnforcesDeadlines).
  static constexpr bool kEnforcesDeadlines = true;
  /// Children see only memory shared before they were forked (SeparateAddressSpace).
  static constexpr bool kSeparateAddressSpace = true;
  /// The default transport of ChildMode::Process (DefaultForChildMode).
  static constexpr ChildMode kChildMode = ChildMode::Process;
  static constexpr std::chrono::milliseconds kLivenessTick{10};
  static constexpr std::chrono::milliseconds kStartDeadline{10'000};
  /// Longest wait for the answer to a control command (loading a chip callable, say).
  static constexpr std::chrono::milliseconds kControlDeadline{60'000};
  static constexpr std::chrono::milliseconds kShutdownGrace{5'000};
  static constexpr std::chrono::microseconds kSpin{20};

  template <class L>
  class Endpoint {
   public:
    explicit Endpoint(L& leaf) noexcept : leaf_(&leaf) {}
    Endpoint(const Endpoint&) = delete;
    Endpoint& operator=(const Endpoint&) = delete;
    ~Endpoint() { shutdown(); }

    /// Maps the mailbox, forks the child and waits until it reports ready. Throws
    /// TransportError (leaving no child and no mapping behind) when the child cannot start.
    void launch() {
      void* p = ::mmap(nullptr, detail::kMailboxBytes, PROT_READ | PROT_WRITE,
                       MAP_SHARED | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) detail::throw_errno("ForkShmTransport: mmap of the mailbox");
      base_ = static_cast<std::byte*>(p);
      box_ = new (base_) detail::MailboxHeader();
      const pid_t parent = ::getpid();
      const pid_t pid = ::fork();
      if (pid < 0) {
        const int err = errno;
        release_mapping();
        throw SystemError("ForkShmTransport: fork", err);
      }
      if (pid == 0) child_main(parent);  // never returns
      pid_ = pid;
      const auto deadline = std::chrono::steady_clock::now() + kStartDeadline;
      for (;;) {
        const auto s = box_->state.load(std::memory_order_seq_cst);
        if (s == detail::MailboxState::Ready) return;
        if (s == detail::MailboxState::InitFailed) {
          std::string why(box_->message, ::strnlen(box_->message, sizeof(box_->message)));
          detail::reap(pid_, kShutdownGrace);
          pid_ = -1;
          release_mapping();
          throw TransportError(fmt::format("ForkShmTransport: the child failed to start: {}", why));
        }
        if (auto how = detail::poll_exit(pid_)) {
          pid_ = -1;
          release_mapping();
          throw TransportError(fmt::format("ForkShmTransport: the child {} during start-up", *how));
        }
        if (std::chrono::steady_clock::now() >= deadline) {
          detail::reap(pid_, std::chrono::milliseconds(0));
          pid_ = -1;
          release_mapping();
          throw TransportError("ForkShmTransport: the child did not report ready within 10 s");
        }
        box_->to_parent.await(
            [this] {
              return box_->state.load(std::memory_order_seq_cst) != detail::MailboxState::Starting;
            },
            kSpin, std::chrono::steady_clock::now() + kLivenessTick);
      }
    }

    Outcome execute(const LeafRequest& r, Fault& fault) noexcept {
      if (pid_ < 0) {
        fault.set(ErrorKind::Transport, 0, fmt::format("its child process is gone ({})", death_));
        return Outcome::EndpointFailure;
      }
      if (r.deadline != std::chrono::steady_clock::time_point::max() &&
          std::chrono::steady_clock::now() >= r.deadline) {
        fault.set(ErrorKind::Timeout, 0, fmt::format("{} passed before the task could start; it was not sent",
                               detail::describe_deadline(r)));
        return Outcome::EndpointFailure;  // the child is idle and healthy
      }
      const std::size_t need = args_blob_size(r.args);
      if (need > detail::kMailboxBlobCapacity) {
        fault.set(ErrorKind::Usage, 0, fmt::format("args blob of {} bytes exceeds the mailbox capacity of {} bytes "
                               "({} tensors, {} scalars); pass fewer arguments",
                               need, detail::kMailboxBlobCapacity, r.args.tensor_count,
                               r.args.scalar_count));
        return Outcome::TaskFailure;  // nothing was sent: the lane stays usable
      }
      box_->digest = r.digest;
      box_->index_hint = r.index_hint;
      box_->config = *r.config;
      box_->blob_bytes = static_cast<std::uint32_t>(need);
      encode_args_blob(r.args, std::span<std::byte>(base_ + detail::kMailboxBlobOffset, need));
      box_->state.store(detail::MailboxState::TaskReady, std::memory_order_seq_cst);
      box_->to_child.notify_all();
      for (;;) {
        const auto now = std::chrono::steady_clock::now();
        const bool done = box_->to_parent.await(
            [this] {
              return box_->state.load(std::memory_order_seq_cst) == detail::MailboxState::TaskDone;
            },
            kSpin, std::min(now + kLivenessTick, r.deadline));
        if (done) break;
        if (auto how = detail::poll_exit(pid_)) {
          pid_ = -1;
          death_ = *how;
          fault.set(ErrorKind::Transport, 0, fmt::format("its child process {} while running the task", death_));
          return Outcome::EndpointFailure;
        }
        if (std::chrono::steady_clock::now() >= r.deadline) {
          const pid_t pid = kill_child("was killed when its task passed its deadline");
          fault.set(ErrorKind::Timeout, 0, fmt::format("the task did not finish within {}; its child process (pid {}) "
                                 "was killed and this worker is lost",
                                 detail::describe_deadline(r), pid));
          return Outcome::EndpointFailure;
        }
      }
      const bool ok = box_->error == 0;
      if (!ok)
        fault.set(ErrorKind::Other, 0,
                  std::string(box_->message, ::strnlen(box_->message, sizeof(box_->message))));
      box_->state.store(detail::MailboxState::Ready, std::memory_order_relaxed);
      return ok ? Outcome::Success : Outcome::TaskFailure;
    }

    /// Sends a control command to the child between tasks (never while a task runs on this
    /// endpoint) and returns its answer. Throws TransportError when the child reports an error
    /// (an unknown command, say: the endpoint stays usable) or dies.
    std::uint64_t control(std::uint64_t command, std::uint64_t arg) {
      if (pid_ < 0) throw TransportError(fmt::format("control: the child is gone ({})", death_));
      box_->command = command;
      box_->arg = arg;
      box_->state.store(detail::MailboxState::ControlRequest, std::memory_order_seq_cst);
      box_->to_child.notify_all();
      const auto deadline = std::chrono::steady_clock::now() + kControlDeadline;
      for (;;) {
        const bool done = box_->to_parent.await(
            [this] {
              return box_->state.load(std::memory_order_seq_cst) ==
                     detail::MailboxState::ControlDone;
            },
            kSpin, std::chrono::steady_clock::now() + kLivenessTick);
        if (done) break;
        if (auto how = detail::poll_exit(pid_)) {
          pid_ = -1;
          death_ = *how;
          throw TransportError(fmt::format("control: the child {} before answering", death_));
        }
        if (std::chrono::steady_clock::now() >= deadline) {
          const pid_t pid = kill_child("was killed when a control command passed its deadline");
          throw TransportError(fmt::format(
              "control command {} got no answer within {} ms; the child (pid {}) was killed",
              command, kControlDeadline.count(), pid));
        }
      }
      const bool ok = box_->error == 0;
      const std::uint64_t result = box_->result;
      std::string why = ok ? std::string() : std::string(box_->message);
      box_->state.store(detail::MailboxState::Ready, std::memory_order_relaxed);
      if (!ok)
        throw TransportError(
            fmt::format("control command {} failed in the child: {}", command, why));
      return result;
    }

    /// Asks the child to exit, reaps it (SIGKILL after a grace period) and unmaps the mailbox.
    void shutdown() noexcept {
      if (pid_ > 0) {
        box_->state.store(detail::MailboxState::Shutdown, std::memory_order_seq_cst);
        box_->to_child.notify_all();
        const auto r = detail::reap(pid_, kShutdownGrace);
        if (!r.clean) {
          death_ = r.how;
          unreported_ = true;  // nothing failed with it yet: close() reports it
        }
        pid_ = -1;
      }
      release_mapping();
    }

    [[nodiscard]] pid_t pid() const noexcept { return pid_; }
    [[nodiscard]] bool alive() const noexcept { return pid_ > 0; }
    /// How the child ended, when it ended abnormally; empty otherwise.
    [[nodiscard]] const std::string& death() const noexcept { return death_; }
    /// An abnormal end seen only at shutdown (a death during a task already failed that task).
    [[nodiscard]] bool death_unreported() const noexcept { return unreported_; }

   private:
    [[noreturn]] void child_main(pid_t parent) noexcept {
      detail::become_child_of(parent);
      // A leaf with a start() (a nested Worker) starts here, in the child: its own children are
      // forked from this process, and it reports ready only once they all are.
      if constexpr (requires { leaf_->start(); }) {
        try {
          leaf_->start();
        } catch (const std::exception& e) {
          fail_start(e.what());
        } catch (...) {
          fail_start("a non-std::exception was thrown");
        }
      }
      box_->state.store(detail::MailboxState::Ready, std::memory_order_seq_cst);
      box_->to_parent.notify_all();
      for (;;) {
        const bool got = box_->to_child.await(
            [this] {
              const auto s = box_->state.load(std::memory_order_seq_cst);
              return s == detail::MailboxState::TaskReady || s == detail::MailboxState::Shutdown ||
                     s == detail::MailboxState::ControlRequest;
            },
            kSpin, std::chrono::steady_clock::now() + std::chrono::milliseconds(100));
        if (!got) {
          if (!detail::parent_alive(parent)) ::_exit(2);
          continue;
        }
        if (box_->state.load(std::memory_order_seq_cst) == detail::MailboxState::Shutdown) {
          // A nested Worker closes its own subtree here, so its children exit cleanly too.
          if constexpr (requires { leaf_->stop(); }) leaf_->stop();
          ::_exit(0);
        }
        if (box_->state.load(std::memory_order_seq_cst) == detail::MailboxState::ControlRequest) {
          serve_control();
          box_->state.store(detail::MailboxState::ControlDone, std::memory_order_seq_cst);
          box_->to_parent.notify_all();
          continue;
        }
        run_one();
        box_->state.store(detail::MailboxState::TaskDone, std::memory_order_seq_cst);
        box_->to_parent.notify_all();
      }
    }

    void serve_control() noexcept {
      box_->error = 0;
      const std::uint64_t cmd = box_->command;
      if (cmd == static_cast<std::uint64_t>(detail::ControlCommand::Ping)) {
        box_->result = box_->arg + 1;
        return;
      }
      if constexpr (requires { leaf_->control(cmd, box_->arg); }) {
        try {
          if (auto r = leaf_->control(cmd, box_->arg)) {
            box_->result = *r;
            return;
          }
        } catch (const std::exception& e) {
          write_error(e.what());
          return;
        } catch (...) {
          write_error("a non-std::exception was thrown");
          return;
        }
      }
      char text[64];
      std::snprintf(text, sizeof text, "unknown control command %llu",
                    static_cast<unsigned long long>(cmd));
      write_error(text);
    }

    void run_one() noexcept {
      detail::serve_frame(*box_, base_ + detail::kMailboxBlobOffset, *leaf_);
    }

    [[noreturn]] void fail_start(const char* what) noexcept {
      write_error(what);
      box_->state.store(detail::MailboxState::InitFailed, std::memory_order_seq_cst);
      box_->to_parent.notify_all();
      ::_exit(1);
    }

    void write_error(const char* what) noexcept { detail::write_frame_error(*box_, what); }

    /// Kills and reaps a child that must not go on; the endpoint is dead from now on. Returns
    /// the pid it had, for messages.
    pid_t kill_child(const char* why) noexcept {
      const pid_t pid = pid_;
      detail::kill_and_reap(pid);
      pid_ = -1;
      set(death_, why);
      return pid;
    }

    static void set(std::string& out, std::string text) noexcept {
      try {
        out = std::move(text);
      } catch (...) {
        out.clear();
      }
    }

    void release_mapping() noexcept {
      if (base_ != nullptr) {
        box_->~MailboxHeader();
        ::munmap(base_, detail::kMailboxBytes);
      }
      base_ = nullptr;
      box_ = nullptr;
    }

    L* leaf_;
    std::byte* base_ = nullptr;
    detail::MailboxHeader* box_ = nullptr;
    pid_t pid_ = -1;
    std::string death_;
    bool unreported_ = false;
  };
};

static_assert(Transport<ForkShmTransport>);

}  // namespace simpler
