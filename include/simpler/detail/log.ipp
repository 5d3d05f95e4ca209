// The logger's non-template part. Included once, at the end of <simpler/log.hpp>.
#pragma once

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <iterator>

#include "simpler/log.hpp"

namespace simpler {

namespace detail {

inline constexpr LogLevel kDefaultLogLevel = LogLevel::Warn;

inline LogLevel level_from_env(const char* value, std::string* warning) {
  if (value == nullptr || *value == '\0') return kDefaultLogLevel;
  if (auto l = parse_log_level(value)) return *l;
  if (warning != nullptr) {
    *warning = fmt::format(
        "SIMPLER_LOG is '{}', which is not a log level; use one of error, warn, info, debug "
        "(logging at {})",
        value, to_string(kDefaultLogLevel));
  }
  return kDefaultLogLevel;
}

struct LogState {
  std::atomic<int> level;
  std::atomic<LogSink> sink{nullptr};
  std::atomic<void*> user{nullptr};
};

/// The process's logger state; SIMPLER_LOG is read (and a bad value reported) on first use.
inline LogState& log_state() noexcept {
  static LogState state = [] {
    std::string warning;
    LogLevel l = kDefaultLogLevel;
    try {
      l = level_from_env(std::getenv("SIMPLER_LOG"), &warning);
    } catch (...) {
      warning.clear();
    }
    return LogState{static_cast<int>(l)};
  }();
  return state;
}

/// Writes the warning about a bad SIMPLER_LOG once per process (after log_state() exists, so
/// the line goes through a sink set by then).
inline void report_bad_env_once() noexcept {
  static const bool done = [] {
    std::string warning;
    try {
      static_cast<void>(level_from_env(std::getenv("SIMPLER_LOG"), &warning));
    } catch (...) {
      return true;
    }
    if (!warning.empty()) write_log_line(LogLevel::Warn, "logger", warning);
    return true;
  }();
  static_cast<void>(done);
}

inline void write_all(int fd, const char* p, std::size_t n) noexcept {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

inline void write_log_line(LogLevel level, std::string_view who,
                           std::string_view message) noexcept {
  try {
    fmt::memory_buffer line;
    fmt::format_to(std::back_inserter(line), "simpler [{}] {} pid {}: {}\n", to_string(level), who,
                   ::getpid(), message);
    const std::string_view text(line.data(), line.size());
    LogState& s = log_state();
    if (LogSink sink = s.sink.load(std::memory_order_acquire)) {
      sink(level, text, s.user.load(std::memory_order_acquire));
      return;
    }
    write_all(2, text.data(), text.size());  // one write(2): lines never interleave
  } catch (...) {
    static constexpr char kLost[] = "simpler: a log line was lost (out of memory)\n";
    write_all(2, kLost, sizeof kLost - 1);
  }
}

}  // namespace detail

inline const char* to_string(LogLevel level) noexcept {
  switch (level) {
    case LogLevel::Error:
      return "error";
    case LogLevel::Warn:
      return "warn";
    case LogLevel::Info:
      return "info";
    case LogLevel::Debug:
      return "debug";
  }
  return "?";
}

inline std::optional<LogLevel> parse_log_level(std::string_view text) noexcept {
  std::string lower;
  try {
    for (char c : text) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  } catch (...) {
    return std::nullopt;
  }
  if (lower == "error") return LogLevel::Error;
  if (lower == "warn" || lower == "warning") return LogLevel::Warn;
  if (lower == "info") return LogLevel::Info;
  if (lower == "debug") return LogLevel::Debug;
  return std::nullopt;
}

inline LogLevel log_level() noexcept {
  detail::report_bad_env_once();
  // Relaxed: the level is a filter; a thread may see a change a little late.
  return static_cast<LogLevel>(detail::log_state().level.load(std::memory_order_relaxed));
}

inline void set_log_level(LogLevel level) noexcept {
  detail::report_bad_env_once();
  detail::log_state().level.store(static_cast<int>(level), std::memory_order_relaxed);
}

inline bool log_enabled(LogLevel level) noexcept {
  // Relaxed, as in log_level(). The bad-value warning is written by the first log_level() or
  // set_log_level(), which every Worker's constructor calls.
  return static_cast<int>(level) <= detail::log_state().level.load(std::memory_order_relaxed);
}

inline void set_log_sink(LogSink sink, void* user) noexcept {
  detail::LogState& s = detail::log_state();
  s.user.store(user, std::memory_order_release);
  s.sink.store(sink, std::memory_order_release);
}

}  // namespace simpler
