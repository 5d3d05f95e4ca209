// simpler — the error hierarchy.
//
// Every error the library raises is a simpler::Error. Subclasses say where it came from. An
// exception never crosses a thread or process boundary raw: lanes catch what a leaf throws, store
// {kind, message} on the task, and run() rethrows a TaskError built from it on the caller's thread.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

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
  SystemError(const std::string& what, int err);
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

/// The first failure of a run, rethrown by Worker::run(). what() reads
/// "<level> worker <worker>: callable '<callable>' failed: <message>".
class TaskError : public Error {
 public:
  TaskError(Outcome outcome, int level, std::string worker, std::string callable,
            std::string message);
  [[nodiscard]] Outcome outcome() const noexcept { return outcome_; }
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
};

namespace detail {
/// Throws SystemError for the current errno, prefixed with `what`.
[[noreturn]] void throw_errno(const char* what);
}  // namespace detail

}  // namespace simpler
