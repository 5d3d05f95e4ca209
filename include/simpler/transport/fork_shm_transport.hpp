// simpler — ForkShmTransport: the leaf runs in a forked child, reached through a shared-memory
// mailbox (detail::Mailbox).
//
// launch() maps the mailbox and forks; it must run before any engine thread exists (the
// Scheduler launches every lane before it starts a thread). The child dies with its parent
// (PR_SET_PDEATHSIG plus a parent check whenever it idles), starts with the kernel libraries'
// thread counts at 1 unless the user set them (detail::limit_library_threads), runs tasks one
// after another in the order they were sent, and never returns into the parent's stack: it always
// ends with _exit.
//
// The endpoint pipelines (Pipelines): up to kWindow tasks are in flight per child, each in its
// own frame of a ring in the mapping, so the child runs the next task while the lane publishes
// the previous outcome, and drains every frame it finds before it sleeps. Both sides spin briefly
// and then sleep on a futex in the mailbox, so an idle child and an idle lane use no CPU; a wake
// is sent only to a side that waits for what was just published (the parent wakes the child once
// per batch, the child wakes the parent only for the task it waits for). A task with a deadline
// goes out only to an idle child, so its deadline counts from when it starts.
//
// Every wait for the child (start-up, a task's answer, a control command) checks every 10 ms
// that the child is alive: a dead child ends the request with an error naming the child and its
// signal; every task in flight then ends with an EndpointFailure saying whether it was running
// or still queued (a task the child answered before it died keeps its answer), and every later
// request on this endpoint fails the same way (the scheduler stops giving it shared work).
// Failures cross the mailbox as {kind, code, message} (a Fault), so a device status raised in
// the child reaches the TaskError the user catches.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <new>
#include <optional>
#include <span>
#include <string>

#include <fmt/format.h>

#include "simpler/args_blob.hpp"
#include "simpler/detail/asymmetric_fence.hpp"
#include "simpler/detail/cpu_step_off.hpp"
#include "simpler/detail/deadline.hpp"
#include "simpler/detail/mailbox.hpp"
#include "simpler/detail/process.hpp"
#include "simpler/detail/shared_memory.hpp"
#include "simpler/detail/trace.hpp"
#include "simpler/error.hpp"
#include "simpler/log.hpp"
#include "simpler/transport/transport.hpp"

namespace simpler {

namespace detail {
/// The child's side of one task frame: validates the frame (blob size within the mailbox, a
/// well-formed blob), runs the leaf, and records the outcome in the frame (a failure as its
/// kind, code and message). Never throws: a malformed or truncated frame is a task failure with a
/// message, not a crash. With `trace` (a traced task), records when the leaf ran in the frame and
/// hands `trace` to the leaf.
template <class L>
void serve_frame(MailboxHeader& box, const std::byte* blob, L& leaf,
                 TraceReply* trace = nullptr) noexcept {
  clear_frame_error(box);
  if (trace != nullptr) box.trace_begin_ns = trace_now();
  try {
    if (box.blob_bytes > kMailboxBlobCapacity) {
      throw TransportError(fmt::format("mailbox frame claims a {}-byte blob; the capacity is {}",
                                       box.blob_bytes, kMailboxBlobCapacity));
    }
    if (box.config_in_frame > 1) {
      throw TransportError(fmt::format(
          "mailbox frame has config_in_frame = {}; 0 (the default config) or 1 (the frame's) "
          "are the only values",
          box.config_in_frame));
    }
    LeafRequest r;
    r.digest = box.digest;
    r.index_hint = box.index_hint;
    r.config = box.config_in_frame != 0 ? &box.config : &default_call_config();
    r.args = decode_args_blob(std::span<const std::byte>(blob, box.blob_bytes));
    r.trace = trace;
    leaf.run(r);
  } catch (...) {
    write_frame_exception(box);
  }
  if (trace != nullptr) box.trace_end_ns = trace_now();
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
  /// Tasks in flight per child at most (frames in the ring). A stream of short tasks keeps the
  /// child busy only while it finds the next frame already sent: with 8, 100k empty tasks on one
  /// child took 610-640 ns each (bench_fork, t row), every few tasks a hand-off (a yield, a
  /// wake-up) between the lane's thread and the child; with 32, 275-325 ns. A frame is 64 KiB of
  /// mapping, of which a task touches only the pages its arguments fill.
  static constexpr std::uint32_t kWindow = 32;

  template <class L>
  class Endpoint {
   public:
    explicit Endpoint(L& leaf) noexcept : leaf_(&leaf) {}
    Endpoint(const Endpoint&) = delete;
    Endpoint& operator=(const Endpoint&) = delete;
    ~Endpoint() { shutdown(); }

    /// Maps the mailbox, forks the child and waits until it reports ready. Throws
    /// TransportError (leaving no child and no mapping behind) when the child cannot start,
    /// SystemError when the mailbox cannot be mapped or fork fails.
    void launch() {
      region_ = detail::SharedRegion(
          kRegionBytes,
          fmt::format("ForkShmTransport: mmap of the {}-byte mailbox of a forked child (shared "
                      "memory; free some, or start fewer children)",
                      kRegionBytes));
      // Sends publish without a store-load fence when the kernel lets the child's sleep pay
      // for it (send). Registered here, in the process that sends: a nested Worker's child
      // registers for its own children.
      box_ = new (region_.data()) detail::MailboxHeader(detail::register_global_light_publisher());
      light_sends_ = box_->to_child.asymmetric();
      for (std::uint32_t i = 0; i < kWindow; ++i) {
        new (region_.data() + detail::kMailboxBytes * (1 + i)) detail::MailboxHeader();
      }
      const pid_t parent = ::getpid();
      const pid_t pid = ::fork();
      if (pid < 0) {
        const int err = errno;
        release_mapping();
        throw SystemError("ForkShmTransport: fork", err);
      }
      if (pid == 0) child_main(parent);  // never returns
      pid_ = pid;
      log(LogLevel::Info, "forked {} (pid {})", pid);
      switch (wait_for_child(detail::MailboxState::Starting,
                             std::chrono::steady_clock::now() + kStartDeadline,
                             "was killed when it did not report ready in time")) {
        case Wait::Answered:
          break;
        case Wait::Died:
          release_mapping();
          throw TransportError(
              fmt::format("ForkShmTransport: the child {} during start-up", death_));
        case Wait::TimedOut:
          release_mapping();
          throw TransportError("ForkShmTransport: the child did not report ready within 10 s");
      }
      if (box_->state.load(std::memory_order_seq_cst) == detail::MailboxState::Ready) {
        log(LogLevel::Info, "{} is ready (pid {})", pid_);
        return;
      }
      // InitFailed: the leaf's start() threw in the child, which exits by itself.
      Fault why;
      detail::read_frame_error(*box_, why);
      detail::reap(pid_, kShutdownGrace);
      pid_ = -1;
      release_mapping();
      throw TransportError(
          fmt::format("ForkShmTransport: the child failed to start: {}", why.message));
    }

    /// Runs one task: send() and then receive() (call it with no task in flight).
    Outcome execute(const LeafRequest& r, Fault& fault) noexcept {
      Outcome refused = Outcome::EndpointFailure;
      if (!send(r, refused, fault)) return refused;
      return receive(fault);
    }

    /// Tasks in flight at most (Pipelines).
    [[nodiscard]] std::uint32_t window() const noexcept { return kWindow; }

    /// Hands a task to the child without waiting for it (Pipelines); at most window() may be in
    /// flight. False when it did not go out: `refused` says how it ended (EndpointFailure: the
    /// child is gone, or the task's deadline passed before it could start; TaskFailure: its
    /// arguments do not fit a frame, the lane stays usable) and `fault` why. A task with a
    /// deadline first waits for the tasks in flight (each by its own deadline), so it starts at
    /// once. r.trace, when set, must stay valid until receive() returns its outcome.
    bool send(const LeafRequest& r, Outcome& refused, Fault& fault) noexcept {
      if (pid_ < 0) {
        refused = Outcome::EndpointFailure;
        fault.set(ErrorKind::Transport, 0, fmt::format("its child process is gone ({})", death_));
        return false;
      }
      const std::size_t need = args_blob_size(r.args);
      if (need > detail::kMailboxBlobCapacity) {
        refused = Outcome::TaskFailure;  // nothing was sent: the lane stays usable
        fault.set(ErrorKind::Usage, 0,
                  fmt::format("args blob of {} bytes exceeds the mailbox capacity of {} bytes "
                              "({} tensors, {} scalars); pass fewer arguments",
                              need, detail::kMailboxBlobCapacity, r.args.tensor_count,
                              r.args.scalar_count));
        return false;
      }
      if (sent_ - received_ >= kWindow) {
        refused = Outcome::TaskFailure;  // a lane that ignores window(): nothing was sent
        fault.set(ErrorKind::Usage, 0,
                  fmt::format("{} tasks are already in flight to this child (the window); the "
                              "task was not sent",
                              kWindow));
        return false;
      }
      if (r.timed()) {
        // Its deadline counts from now: it must not queue behind other tasks.
        for (std::uint32_t seq = received_; seq != sent_; ++seq) {
          if (answered(seq)) continue;
          if (wait_answered(seq) != Wait::Answered) {
            refused = Outcome::EndpointFailure;
            fault.set(ErrorKind::Transport, 0,
                      fmt::format("its child process {} before the task was sent", death_));
            return false;
          }
        }
        if (std::chrono::steady_clock::now() >= r.deadline) {
          refused = Outcome::EndpointFailure;  // the child is idle and healthy
          fault.set(ErrorKind::Timeout, 0,
                    fmt::format("{} passed before the task could start; it was not sent",
                                detail::describe_deadline(r)));
          return false;
        }
      }
      detail::MailboxHeader& f = frame(sent_);
      f.digest = r.digest;
      f.index_hint = r.index_hint;
      f.sender_cpu = detail::CpuStepOff::sender_cpu();
      // The default config is the child's own: only another one is copied (over 1 KiB).
      const bool config_in_frame = r.config != &default_call_config();
      f.config_in_frame = config_in_frame ? 1 : 0;
      if (config_in_frame) f.config = *r.config;
      f.trace_level = r.trace != nullptr ? r.trace->level : 0;
      f.blob_bytes = static_cast<std::uint32_t>(need);
      encode_args_blob(r.args, std::span<std::byte>(frame_blob(sent_), need));
      pending_[sent_ % kWindow] = Pending{r.deadline, r.deadline_ms, r.run_deadline, r.trace};
      ++sent_;
      // Publishes the frame. The light store keeps the sending thread from stalling until the
      // frame's lines (last read on the child's core) are its own again, a third of a send in
      // perf; the child's sleep fences for it (EventCount, asymmetric) and its spin sees it.
      if (light_sends_) {
        box_->sent.store(sent_, std::memory_order_release);
        detail::light_fence();
      } else {
        box_->sent.store(sent_, std::memory_order_seq_cst);
      }
      // Wake the child unless it is sure to find this frame before it sleeps (ChildWake).
      if (child_wake_.needed(sent_, box_->answered.load(std::memory_order_seq_cst))) {
        box_->to_child.notify_all();
      }
      return true;
    }

    /// Waits until receive() would not wait (true: the oldest task in flight was answered, or the
    /// child died or was killed at that task's deadline) or until `more()` holds (false: the
    /// lane has a task to send first). True at once with nothing in flight (AwaitsAnswerOr).
    template <class More>
    bool await_answer_or(More&& more) noexcept {
      if (received_ == sent_ || pid_ < 0 || answered(received_)) return true;
      const Wait w = wait_answered(received_, more);
      return w != Wait::Answered || answered(received_);
    }
    /// The event await_answer_or sleeps on: the child notifies it when it answers the task the
    /// lane waits for, or when it is about to sleep with answers nobody took; the lane's poster
    /// when it posts more (LaneCore::also_wake).
    [[nodiscard]] detail::EventCount& answer_event() noexcept { return box_->to_parent; }

    // ---- DrivenInline: any one thread at a time may send and receive (the lane serialises
    // them); these let a thread other than the sender find out, without waiting, what is due.

    /// Whether receive() would not wait: nothing in flight, the oldest task was answered, or the
    /// child is gone.
    [[nodiscard]] bool answer_ready() const noexcept {
      return received_ == sent_ || pid_ < 0 || answered(received_);
    }
    /// Whether the child answered a task receive() has not returned yet. Any thread: it reads
    /// only the mailbox's counters.
    [[nodiscard]] bool answers_waiting() const noexcept {
      return static_cast<std::int32_t>(box_->answered.load(std::memory_order_seq_cst) -
                                       box_->received.load(std::memory_order_seq_cst)) > 0;
    }
    /// Checks, without waiting, that the child is alive; a dead one ends every task in flight
    /// (receive() then returns at once). False when it is dead.
    bool poll_child() noexcept {
      if (pid_ < 0) return false;
      if (auto how = detail::poll_exit(pid_)) {
        died(std::move(*how));
        return false;
      }
      return true;
    }
    /// How often a thread that waits on the child checks that it lives.
    [[nodiscard]] static constexpr std::chrono::milliseconds liveness_tick() noexcept {
      return kLivenessTick;
    }
    /// Times the child stepped off the CPU its tasks were sent from (detail::CpuStepOff;
    /// diagnostics). Any thread, while the endpoint is launched.
    [[nodiscard]] std::uint32_t cpu_steps() const noexcept {
      return box_ != nullptr ? box_->cpu_steps.load(std::memory_order_relaxed) : 0;
    }
    /// Whether the child is stepping off a CPU right now (CpuStepOff; its answer is late by a
    /// migration). Any thread, while the endpoint is launched.
    [[nodiscard]] bool child_stepping() const noexcept {
      return box_ != nullptr && box_->stepping.load(std::memory_order_acquire) != 0;
    }

    /// Tasks handed to the child so far (diagnostics and tests; any thread).
    [[nodiscard]] std::uint32_t tasks_sent() const noexcept {
      return box_ != nullptr ? box_->sent.load(std::memory_order_seq_cst) : 0;
    }

    /// Waits for the oldest task in flight and says how it ended (Pipelines): in the order the
    /// tasks were sent. A task the child answered keeps its answer even when the child died
    /// afterwards; one it did not answer ends with EndpointFailure (the child died while running
    /// it or before it started, or was killed at its deadline).
    Outcome receive(Fault& fault) noexcept {
      if (received_ == sent_) {
        fault.set(ErrorKind::Usage, 0, "receive() with no task in flight");
        return Outcome::EndpointFailure;
      }
      const std::uint32_t seq = received_++;
      // Read only to decide whether answers wait untaken (the child's wake of the lane thread,
      // answers_waiting): a stale value means one wake-up too many, never one too few, so a
      // release store serves (no fence per task on the streaming path).
      box_->received.store(received_, std::memory_order_release);
      const Pending& p = pending_[seq % kWindow];
      if (!answered(seq)) {
        const Wait w = pid_ < 0 ? Wait::Died : wait_answered(seq);
        if (w != Wait::Answered) {
          if (killed_at_deadline_ && seq == killed_seq_) {
            fault.set(
                ErrorKind::Timeout, 0,
                fmt::format("the task did not finish within {}; its child process (pid {}) "
                            "was killed and this worker is lost",
                            detail::describe_deadline(p.deadline_ms, p.run_deadline), killed_pid_));
          } else if (seq == first_unanswered_) {
            fault.set(ErrorKind::Transport, 0,
                      fmt::format("its child process {} while running the task", death_));
          } else {
            fault.set(ErrorKind::Transport, 0,
                      fmt::format("its child process {} before the task started ({} ahead of it "
                                  "in flight)",
                                  death_, seq - first_unanswered_));
          }
          return Outcome::EndpointFailure;
        }
      }
      detail::MailboxHeader& f = frame(seq);
      if (p.trace != nullptr) [[unlikely]]
        take_trace(f, frame_blob(seq), *p.trace);
      const bool ok = f.error == 0;
      if (!ok) detail::read_frame_error(f, fault);
      return ok ? Outcome::Success : Outcome::TaskFailure;
    }

    /// Sends a control command to the child between tasks (never while a task runs on this
    /// endpoint), with `payload` copied into the mailbox's blob area, and waits for the answer
    /// (at most kControlDeadline). Success: `result` holds it. TaskFailure: the child reported an
    /// error (an unknown command, or the leaf's control() threw: `fault` holds its kind, code and
    /// message as raised in the child), or the payload does not fit the mailbox (nothing was
    /// sent); the endpoint stays usable. EndpointFailure: the child is gone, died, or did not
    /// answer in time and was killed; `fault` says which.
    Outcome control(std::uint64_t command, std::uint64_t arg, std::span<const std::byte> payload,
                    std::uint64_t& result, Fault& fault) noexcept {
      if (pid_ < 0) {
        fault.set(ErrorKind::Transport, 0, fmt::format("control: the child is gone ({})", death_));
        return Outcome::EndpointFailure;
      }
      if (payload.size() > detail::kMailboxBlobCapacity) {
        fault.set(ErrorKind::Usage, 0, payload_too_big(command, payload.size()));
        return Outcome::TaskFailure;
      }
      box_->command = command;
      box_->arg = arg;
      box_->blob_bytes = static_cast<std::uint32_t>(payload.size());
      if (!payload.empty()) std::memcpy(blob(), payload.data(), payload.size());
      post(detail::MailboxState::ControlRequest);
      switch (wait_for_child(detail::MailboxState::ControlRequest,
                             std::chrono::steady_clock::now() + kControlDeadline,
                             "was killed when a control command passed its deadline")) {
        case Wait::Answered:
          break;
        case Wait::Died:
          fault.set(ErrorKind::Transport, 0,
                    fmt::format("control: the child {} before answering", death_));
          return Outcome::EndpointFailure;
        case Wait::TimedOut:
          fault.set(ErrorKind::Timeout, 0,
                    fmt::format("control command {} got no answer within {} ms; the child (pid "
                                "{}) was killed",
                                command, kControlDeadline.count(), killed_pid_));
          return Outcome::EndpointFailure;
      }
      result = box_->result;
      return take_answer(fault) ? Outcome::Success : Outcome::TaskFailure;
    }

    /// control() that returns the answer and throws: TransportError when the child reports an
    /// error ("control command N failed in the child: ..."; the endpoint stays usable) or is
    /// gone, dies or does not answer in time; UsageError, sending nothing, for a payload larger
    /// than the mailbox.
    std::uint64_t control(std::uint64_t command, std::uint64_t arg,
                          std::span<const std::byte> payload = {}) {
      if (payload.size() > detail::kMailboxBlobCapacity) {
        throw UsageError(payload_too_big(command, payload.size()));
      }
      std::uint64_t result = 0;
      Fault fault;
      switch (control(command, arg, payload, result, fault)) {
        case Outcome::Success:
          return result;
        case Outcome::TaskFailure:
          throw TransportError(
              fmt::format("control command {} failed in the child: {}", command, fault.message));
        default:
          throw TransportError(fault.message);
      }
    }

    /// Asks the child to exit, reaps it (SIGKILL after a grace period) and unmaps the mailbox.
    void shutdown() noexcept {
      if (pid_ > 0) {
        post(detail::MailboxState::Shutdown);
        const auto r = detail::reap(pid_, kShutdownGrace);
        log(r.clean ? LogLevel::Info : LogLevel::Warn, "the child of {} (pid {}) {}", pid_, r.how);
        if (!r.clean) {
          set(death_, r.how);
          unreported_ = true;  // nothing failed with it yet: close() reports it
        }
        pid_ = -1;
      }
      release_mapping();
    }

    [[nodiscard]] pid_t pid() const noexcept { return pid_; }
    /// Names this endpoint's lines after its lane (the Worker's level and the lane's name).
    void log_as(int level, std::string_view lane) {
      log_level_ = level;
      lane_ = std::string(lane);
    }
    [[nodiscard]] bool alive() const noexcept { return pid_ > 0; }
    /// How the child ended, when it ended abnormally; empty otherwise.
    [[nodiscard]] const std::string& death() const noexcept { return death_; }
    /// An abnormal end seen only at shutdown (a death during a task already failed that task).
    [[nodiscard]] bool death_unreported() const noexcept { return unreported_; }
    /// Whether sends publish without a store-load fence (launch registered this process for
    /// the child's global heavy fence; false where the kernel has no membarrier for it).
    [[nodiscard]] bool light_sends() const noexcept { return light_sends_; }

   private:
    /// How a wait for the child's answer ended.
    enum class Wait { Answered, Died, TimedOut };

    [[nodiscard]] std::byte* blob() const noexcept {
      return region_.data() + detail::kMailboxBlobOffset;
    }

    /// Publishes a request (the payload was stored before) and wakes the child.
    void post(detail::MailboxState s) noexcept {
      box_->state.store(s, std::memory_order_seq_cst);
      box_->to_child.notify_all();
    }

    /// The wait for a start-up or control answer: until the child moves the mailbox out of
    /// `asked` (the state the parent published); see wait_until.
    Wait wait_for_child(detail::MailboxState asked, std::chrono::steady_clock::time_point deadline,
                        const char* why_killed) noexcept {
      return wait_until([&] { return box_->state.load(std::memory_order_seq_cst) != asked; },
                        deadline, why_killed);
    }

    /// The wait for task `seq` (the oldest unanswered one) by its own deadline; see wait_until.
    /// The child wakes us only for the task in `wanted`, so that is published first. It also
    /// ends, as Answered, when `more()` holds (await_answer_or).
    Wait wait_answered(std::uint32_t seq) noexcept {
      return wait_answered(seq, [] { return false; });
    }
    template <class More>
    Wait wait_answered(std::uint32_t seq, More&& more) noexcept {
      box_->wanted.store(seq, std::memory_order_seq_cst);
      const Wait w =
          wait_until([&] { return answered(seq) || more(); }, pending_[seq % kWindow].deadline,
                     "was killed when its task passed its deadline");
      if (w == Wait::TimedOut) {
        killed_seq_ = seq;
        killed_at_deadline_ = true;
      }
      return w;
    }

    /// The one wait of every request: until `ready()` (seq_cst loads of what the child
    /// publishes), checking every kLivenessTick that the child is alive. Died: it ended (death_
    /// says how; the endpoint is dead). TimedOut: `deadline` passed and it was killed and reaped
    /// (death_ = `why_killed`, killed_pid_ = its pid; the endpoint is dead). Either way
    /// first_unanswered_ is the first task the child did not answer.
    template <class Ready>
    Wait wait_until(Ready&& ready, std::chrono::steady_clock::time_point deadline,
                    const char* why_killed) noexcept {
      for (;;) {
        const bool got = box_->to_parent.await(
            ready, kSpin, std::min(std::chrono::steady_clock::now() + kLivenessTick, deadline));
        if (got) return Wait::Answered;
        if (auto how = detail::poll_exit(pid_)) {
          died(std::move(*how));
          return Wait::Died;
        }
        if (std::chrono::steady_clock::now() >= deadline) {
          killed_pid_ = pid_;
          log(LogLevel::Warn, "the child of {} (pid {}) {}", pid_, why_killed);
          detail::kill_and_reap(pid_);
          pid_ = -1;
          set(death_, why_killed);
          first_unanswered_ = box_->answered.load(std::memory_order_seq_cst);
          return Wait::TimedOut;
        }
      }
    }

    /// Records that the child ended (`how`, from poll_exit): the endpoint is dead.
    void died(std::string how) noexcept {
      log(LogLevel::Warn, "the child of {} (pid {}) died: {}", pid_, how);
      pid_ = -1;
      set(death_, std::move(how));
      first_unanswered_ = box_->answered.load(std::memory_order_seq_cst);
    }

    /// Whether the child answered task `seq` (answers come in order). The seq_cst load makes the
    /// frame's answer visible.
    [[nodiscard]] bool answered(std::uint32_t seq) const noexcept {
      return static_cast<std::int32_t>(box_->answered.load(std::memory_order_seq_cst) - seq) > 0;
    }

    /// Task `seq`'s frame and its blob area.
    [[nodiscard]] detail::MailboxHeader& frame(std::uint32_t seq) const noexcept {
      return *std::launder(reinterpret_cast<detail::MailboxHeader*>(
          region_.data() + detail::kMailboxBytes * (1 + seq % kWindow)));
    }
    [[nodiscard]] std::byte* frame_blob(std::uint32_t seq) const noexcept {
      return region_.data() + detail::kMailboxBytes * (1 + seq % kWindow) +
             detail::kMailboxBlobOffset;
    }

    /// Reads the child's answer to a control command (its failure into `fault`) and makes the
    /// mailbox idle again. True on success.
    bool take_answer(Fault& fault) noexcept {
      const bool ok = box_->error == 0;
      if (!ok) detail::read_frame_error(*box_, fault);
      // Relaxed: Ready is read only by this side; the next request publishes with seq_cst.
      box_->state.store(detail::MailboxState::Ready, std::memory_order_relaxed);
      return ok;
    }

    /// A traced task's times and nested trace, as the child left them in the mailbox.
    static void take_trace(const detail::MailboxHeader& f, const std::byte* blob,
                           detail::TraceReply& t) noexcept {
      t.begin_ns = f.trace_begin_ns;
      t.end_ns = f.trace_end_ns;
      t.nested_dropped += f.trace_lost;
      const std::uint32_t n = f.trace_bytes;
      if (n == 0) return;
      if (n > detail::kMailboxBlobCapacity) {
        ++t.nested_dropped;  // a malformed answer: not read
        return;
      }
      try {
        t.nested.assign(blob, blob + n);
      } catch (...) {
        ++t.nested_dropped;
      }
    }

    static std::string payload_too_big(std::uint64_t command, std::size_t bytes) noexcept {
      try {
        return fmt::format(
            "control command {}: a payload of {} bytes exceeds the mailbox capacity of {} bytes; "
            "nothing was sent",
            command, bytes, detail::kMailboxBlobCapacity);
      } catch (...) {
        return {};
      }
    }

    [[noreturn]] void child_main(pid_t parent) noexcept {
      detail::become_child_of(parent);
      detail::limit_library_threads();
      // This process's AwakeThreads count knows nothing of the parent's threads, which compete
      // for the same cores: spins here yield early, as they always did (a nested Worker's too).
      detail::AwakeThreads::add(detail::AwakeThreads::kCrowd);
      // A leaf with a start() (a nested Worker) starts here, in the child: its own children are
      // forked from this process, and it reports ready only once they all are.
      if constexpr (requires { leaf_->start(); }) {
        try {
          leaf_->start();
        } catch (...) {
          detail::write_frame_exception(*box_);
          box_->state.store(detail::MailboxState::InitFailed, std::memory_order_seq_cst);
          box_->to_parent.notify_all();
          ::_exit(1);
        }
      }
      answer(detail::MailboxState::Ready);
      detail::CpuStepOff step_off;  // see cpu_step_off.hpp
      step_off.announce_to(&box_->stepping);
      std::uint32_t served = 0;  // tasks answered (the child's copy of box_->answered)
      const auto request = [&] {
        if (box_->sent.load(std::memory_order_seq_cst) != served) return true;
        const auto s = box_->state.load(std::memory_order_seq_cst);
        return s == detail::MailboxState::Shutdown || s == detail::MailboxState::ControlRequest;
      };
      for (;;) {
        bool got = detail::EventCount::spin_until(request, kSpin);
        if (!got) {
          // About to sleep with answers the parent has not taken: the thread that sent them may
          // be busy elsewhere (they went out from the run's thread: WorkerThread, "Driven
          // lanes"), so wake the lane thread to take them. A sleeper-less notify is one load.
          if (box_->received.load(std::memory_order_seq_cst) != served) {
            box_->to_parent.notify_all();
          }
          step_off.sleeping();
          got = box_->to_child.await(
              request, std::chrono::nanoseconds(0),
              std::chrono::steady_clock::now() + std::chrono::milliseconds(100));
        }
        if (!got) {
          if (!detail::parent_alive(parent)) ::_exit(2);
          continue;
        }
        // Every task sent so far, before sleeping again; each answer wakes the parent only if
        // it waits for that very task.
        while (box_->sent.load(std::memory_order_seq_cst) != served) {
          detail::MailboxHeader& f = frame(served);
          step_off.picked(f.sender_cpu);
          if (f.trace_level != 0) [[unlikely]] {
            serve_traced(f, frame_blob(served));
          } else {
            detail::serve_frame(f, frame_blob(served), *leaf_);
          }
          box_->answered.store(++served, std::memory_order_seq_cst);  // publishes the answer
          if (box_->wanted.load(std::memory_order_seq_cst) == served - 1) {
            box_->to_parent.notify_all();
          }
        }
        // Every answer is out: stepping off the sender's CPU now delays none of them.
        if (step_off.batch_done()) {
          box_->cpu_steps.store(step_off.steps(), std::memory_order_relaxed);
        }
        switch (box_->state.load(std::memory_order_seq_cst)) {
          case detail::MailboxState::Shutdown:
            // A nested Worker closes its own subtree here, so its children exit cleanly too.
            if constexpr (requires { leaf_->stop(); }) leaf_->stop();
            ::_exit(0);
          case detail::MailboxState::ControlRequest:
            serve_control();
            answer(detail::MailboxState::ControlDone);
            break;
          default:
            break;
        }
      }
    }

    /// The child's side of a traced task: the leaf's nested trace goes back in the blob area (the
    /// task's arguments there are no longer needed), or is counted as lost when it does not fit.
    void serve_traced(detail::MailboxHeader& f, std::byte* blob) noexcept {
      detail::TraceReply reply;
      reply.level = f.trace_level;
      f.trace_bytes = 0;
      f.trace_lost = 0;
      detail::serve_frame(f, blob, *leaf_, &reply);
      if (reply.nested.size() <= detail::kMailboxBlobCapacity) {
        if (!reply.nested.empty()) std::memcpy(blob, reply.nested.data(), reply.nested.size());
        f.trace_bytes = static_cast<std::uint32_t>(reply.nested.size());
      } else {
        f.trace_lost = 1;
      }
      f.trace_lost += reply.nested_dropped;
    }

    /// The child's side: publishes its answer and wakes the parent.
    void answer(detail::MailboxState s) noexcept {
      box_->state.store(s, std::memory_order_seq_cst);
      box_->to_parent.notify_all();
    }

    void serve_control() noexcept {
      detail::clear_frame_error(*box_);
      const std::uint64_t cmd = box_->command;
      if (cmd == static_cast<std::uint64_t>(detail::ControlCommand::Ping)) {
        box_->result = box_->arg + 1;
        return;
      }
      // A leaf's control(command, arg, payload) gets the payload; one with only
      // control(command, arg) (Controllable) gets the command alone.
      constexpr bool kTakesPayload = requires(std::span<const std::byte> p) {
        leaf_->control(cmd, box_->arg, p);
      };
      if constexpr (kTakesPayload || requires { leaf_->control(cmd, box_->arg); }) {
        try {
          if (box_->blob_bytes > detail::kMailboxBlobCapacity) {
            throw TransportError(
                fmt::format("control frame claims a {}-byte payload; the capacity is {}",
                            box_->blob_bytes, detail::kMailboxBlobCapacity));
          }
          std::optional<std::uint64_t> r;
          if constexpr (kTakesPayload) {
            r = leaf_->control(cmd, box_->arg,
                               std::span<const std::byte>(blob(), box_->blob_bytes));
          } else {
            r = leaf_->control(cmd, box_->arg);
          }
          if (r) {
            box_->result = *r;
            return;
          }
        } catch (...) {
          detail::write_frame_exception(*box_);
          return;
        }
      }
      char text[64];
      std::snprintf(text, sizeof text, "unknown control command %llu",
                    static_cast<unsigned long long>(cmd));
      detail::write_frame_error(*box_, ErrorKind::Transport, 0, text);
    }

    /// Logs `f` with the lane's name first and then `args` (see log_as).
    template <class... A>
    void log(LogLevel level, fmt::format_string<std::string_view, A...> f,
             A&&... args) const noexcept {
      detail::log_worker(level, log_level_, f,
                         lane_.empty() ? std::string_view("a forked child") : lane_,
                         std::forward<A>(args)...);
    }

    static void set(std::string& out, std::string text) noexcept {
      try {
        out = std::move(text);
      } catch (...) {
        out.clear();
      }
    }

    void release_mapping() noexcept {
      if (box_ != nullptr) {
        for (std::uint32_t i = 0; i < kWindow; ++i) frame(i).~MailboxHeader();
        box_->~MailboxHeader();
      }
      box_ = nullptr;
      region_.reset();
    }

    /// The control frame and then kWindow task frames.
    static constexpr std::size_t kRegionBytes = detail::kMailboxBytes * (1 + kWindow);

    /// What the parent keeps of a task in flight.
    struct Pending {
      std::chrono::steady_clock::time_point deadline;
      std::uint32_t deadline_ms = 0;
      bool run_deadline = false;
      detail::TraceReply* trace = nullptr;
    };

    L* leaf_;
    detail::SharedRegion region_;
    detail::MailboxHeader* box_ = nullptr;
    pid_t pid_ = -1;
    pid_t killed_pid_ = -1;  ///< the child killed at a deadline, for messages
    int log_level_ = 3;      ///< the Worker's level, for log lines
    std::string lane_;       ///< the lane's name, for log lines
    std::string death_;
    bool unreported_ = false;
    // The task ring, parent side (the lane's thread only).
    std::array<Pending, kWindow> pending_{};
    std::uint32_t sent_ = 0;              ///< tasks sent
    std::uint32_t received_ = 0;          ///< outcomes returned by receive()
    detail::ChildWake child_wake_;        ///< whether a send must notify the child
    bool light_sends_ = false;            ///< box_->to_child.asymmetric(), copied (send)
    std::uint32_t first_unanswered_ = 0;  ///< when the child ended: the first task it left
    std::uint32_t killed_seq_ = 0;        ///< the task whose deadline killed the child ...
    bool killed_at_deadline_ = false;     ///< ... if one did
  };
};

static_assert(Transport<ForkShmTransport>);

}  // namespace simpler
