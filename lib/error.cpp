#include "simpler/error.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstring>

namespace simpler {

namespace {
std::string errno_text(const std::string& what, int err) {
  return fmt::format("{}: {} (errno {})", what, std::strerror(err), err);
}

const char* outcome_text(Outcome o) {
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
}  // namespace

SystemError::SystemError(const std::string& what, int err)
    : Error(errno_text(what, err)), code_(err) {}

TaskError::TaskError(Outcome outcome, int level, std::string worker, std::string callable,
                     std::string message)
    : Error(fmt::format("L{} {}: callable '{}' {}: {}", level, worker, callable,
                        outcome_text(outcome), message)),
      outcome_(outcome),
      level_(level),
      worker_(std::move(worker)),
      callable_(std::move(callable)),
      message_(std::move(message)) {}

namespace detail {
void throw_errno(const char* what) {
  throw SystemError(what, errno);
}
}  // namespace detail

}  // namespace simpler
