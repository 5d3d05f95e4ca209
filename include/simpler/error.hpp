// simpler — the error hierarchy.
//
// Every error the library raises is a simpler::Error. Subclasses say where it came from. An
// exception never crosses a thread or process boundary raw: lanes catch what a leaf throws, store
// {kind, message} on the task, and run() rethrows a TaskError built from it on the caller's thread.
#pragma once

#include <fmt/format.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <exception>
#include <stdexcept>
#include <string>
#include <utility>

namespace simpler {

/// Base of every error raised by simpler.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A call was made with arguments or in a state the API does not accept. Nothing was changed.
class UsageError : public Error {
 public:
  using Error::Error;
};

/// An operating-system call failed; carries errno.
class SystemError : public Error {
 public:
  SystemError(const std::string& what, int err)
      : Error(fmt::format("{}: {} (errno {})", what, std::strerror(err), err)), code_(err) {}
  [[nodiscard]] int code() const noexcept { return code_; }

 private:
  int code_;
};

/// A wait for a resource (heap ring space, a child, a reply) passed its deadline.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

/// Something went wrong moving a task to or from a child (dead child, malformed frame).
class TransportError : public Error {
 public:
  using Error::Error;
};

/// A device runtime returned a non-zero status.
class DeviceError : public Error {
 public:
  DeviceError(const std::string& what, int status) : Error(what), status_(status) {}
  [[nodiscard]] int status() const noexcept { return status_; }

 private:
  int status_;
};

/// A remote worker reported a failure.
class RemoteError : public Error {
 public:
  using Error::Error;
};

/// How a dispatched task ended. Every dispatch ends in exactly one of these.
enum class Outcome : std::uint8_t {
  Success,          ///< the callable returned normally
  TaskFailure,      ///< the callable threw / the kernel reported failure
  EndpointFailure,  ///< the child died, a frame was malformed, a deadline passed
  Skipped,          ///< never run: a producer failed or the run was cancelled
};

/// Which Error subclass a failure was raised as, so it survives a thread, process or host
/// boundary as data (see Fault).
enum class ErrorKind : std::uint8_t {
  Other = 0,  ///< a std::exception that is not a simpler::Error (or not an exception at all)
  Error,      ///< a plain simpler::Error
  Usage,
  System,  ///< code: errno
  Timeout,
  Transport,
  Device,  ///< code: the device runtime's SIMPLER_ERR_* status
  Remote,
};
const char* to_string(ErrorKind k) noexcept;

/// A failure as it crosses every transport: what kind of error it was, its code (a device status
/// or an errno; 0 when the kind has none) and its message. A lane fills one from what a leaf threw
/// (fault_from), a mailbox or socket frame carries the three fields, and the TaskError that
/// run() throws exposes them again.
struct Fault {
  ErrorKind kind = ErrorKind::Other;
  std::int32_t code = 0;
  std::string message;

  /// Sets every field; never throws (out of memory leaves the message empty).
  void set(ErrorKind k, std::int32_t c, const char* text) noexcept;
  void set(ErrorKind k, std::int32_t c, std::string text) noexcept;
  void clear() noexcept {
    kind = ErrorKind::Other;
    code = 0;
    message.clear();
  }
};

/// The Fault for the exception being handled (call inside a catch block). A TaskError from a
/// nested Worker keeps the kind and code of the failure it reports.
void fault_from_current_exception(Fault& out) noexcept;

/// The first failure of a run, rethrown by Worker::run(). what() reads
/// "<level> worker <worker>: callable '<callable>' failed: <message>".
class TaskError : public Error {
 public:
  TaskError(Outcome outcome, int level, std::string worker, std::string callable,
            std::string message, ErrorKind kind = ErrorKind::Other, std::int32_t code = 0);
  [[nodiscard]] Outcome outcome() const noexcept { return outcome_; }
  /// What the failing callable raised (ErrorKind::Device for a device runtime's status, ...).
  [[nodiscard]] ErrorKind error_kind() const noexcept { return kind_; }
  /// Its code: the device status (SIMPLER_ERR_*) for ErrorKind::Device, errno for System, else 0.
  [[nodiscard]] std::int32_t code() const noexcept { return code_; }
  [[nodiscard]] int level() const noexcept { return level_; }
  [[nodiscard]] const std::string& worker() const noexcept { return worker_; }
  [[nodiscard]] const std::string& callable() const noexcept { return callable_; }
  /// The original message, without the context prefix.
  [[nodiscard]] const std::string& message() const noexcept { return message_; }

 private:
  Outcome outcome_;
  int level_;
  std::string worker_;
  std::string callable_;
  std::string message_;
  ErrorKind kind_;
  std::int32_t code_;
};

namespace detail {
/// Throws SystemError for the current errno, prefixed with `what`.
[[noreturn]] inline void throw_errno(const char* what) {
  throw SystemError(what, errno);
}

inline const char* outcome_text(Outcome o) noexcept {
  switch (o) {
    case Outcome::Success:
      return "succeeded";
    case Outcome::TaskFailure:
      return "failed";
    case Outcome::EndpointFailure:
      return "lost its endpoint";
    case Outcome::Skipped:
      return "was skipped";
  }
  return "ended";
}
}  // namespace detail

inline const char* to_string(ErrorKind k) noexcept {
  switch (k) {
    case ErrorKind::Other:
      return "other";
    case ErrorKind::Error:
      return "error";
    case ErrorKind::Usage:
      return "usage";
    case ErrorKind::System:
      return "system";
    case ErrorKind::Timeout:
      return "timeout";
    case ErrorKind::Transport:
      return "transport";
    case ErrorKind::Device:
      return "device";
    case ErrorKind::Remote:
      return "remote";
  }
  return "unknown";
}

inline void Fault::set(ErrorKind k, std::int32_t c, const char* text) noexcept {
  kind = k;
  code = c;
  try {
    message = text;
  } catch (...) {
    message.clear();  // out of memory: the kind and code still say what failed
  }
}

inline void Fault::set(ErrorKind k, std::int32_t c, std::string text) noexcept {
  kind = k;
  code = c;
  message = std::move(text);
}

inline void fault_from_current_exception(Fault& out) noexcept {
  try {
    throw;
  } catch (const TaskError& e) {
    out.set(e.error_kind(), e.code(), e.what());
  } catch (const DeviceError& e) {
    out.set(ErrorKind::Device, e.status(), e.what());
  } catch (const SystemError& e) {
    out.set(ErrorKind::System, e.code(), e.what());
  } catch (const UsageError& e) {
    out.set(ErrorKind::Usage, 0, e.what());
  } catch (const TimeoutError& e) {
    out.set(ErrorKind::Timeout, 0, e.what());
  } catch (const TransportError& e) {
    out.set(ErrorKind::Transport, 0, e.what());
  } catch (const RemoteError& e) {
    out.set(ErrorKind::Remote, 0, e.what());
  } catch (const Error& e) {
    out.set(ErrorKind::Error, 0, e.what());
  } catch (const std::exception& e) {
    out.set(ErrorKind::Other, 0, e.what());
  } catch (...) {
    out.set(ErrorKind::Other, 0, "a non-std::exception was thrown");
  }
}

inline TaskError::TaskError(Outcome outcome, int level, std::string worker, std::string callable,
                            std::string message, ErrorKind kind, std::int32_t code)
    : Error(fmt::format("L{} {}: callable '{}' {}: {}", level, worker, callable,
                        detail::outcome_text(outcome), message)),
      outcome_(outcome),
      level_(level),
      worker_(std::move(worker)),
      callable_(std::move(callable)),
      message_(std::move(message)),
      kind_(kind),
      code_(code) {}

}  // namespace simpler
