// simpler — the logger: one line per lifecycle event of a Worker tree, over fmt.
//
// Levels, from quiet to chatty: error, warn (the default), info, debug. The level comes from the
// environment variable SIMPLER_LOG, read once per process on first use; a forked child inherits
// its parent's level, and every other process (an MPI rank, a remote server) reads it itself. An
// invalid value leaves the default and writes one warning line naming it and the valid ones.
//
// A line is "simpler [<level>] <who> pid <pid>: <message>\n", <who> being the Worker's level
// ("L3") or the process's role ("remote server"). Each line goes out in one write(2) to stderr,
// so lines of concurrent threads and processes never interleave; set_log_sink() sends them
// elsewhere instead (tests capture them that way).
//
// Thread-safety: every function here may be called from any thread. Cost: a disabled level
// costs one relaxed load and a compare; nothing is formatted.
#pragma once

#include <fmt/format.h>

#include <atomic>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace simpler {

enum class LogLevel : int { Error = 0, Warn = 1, Info = 2, Debug = 3 };

/// "error", "warn", "info" or "debug".
[[nodiscard]] const char* to_string(LogLevel level) noexcept;

/// The level named by `text` ("error", "warn", "info", "debug", any case; "warning" too), or
/// nullopt.
[[nodiscard]] std::optional<LogLevel> parse_log_level(std::string_view text) noexcept;

/// The level lines are written at (SIMPLER_LOG, read on first use, unless set_log_level was
/// called).
[[nodiscard]] LogLevel log_level() noexcept;
/// Overrides the level for this process (and the children it forks from now on).
void set_log_level(LogLevel level) noexcept;
/// Whether a line at `level` would be written.
[[nodiscard]] bool log_enabled(LogLevel level) noexcept;

/// Receives each line, newline included. Called on the thread that logs, possibly from several
/// threads at once: it must be thread-safe and must not log itself.
using LogSink = void (*)(LogLevel level, std::string_view line, void* user);
/// Sends lines to `sink` (nullptr: back to stderr). Set it before the threads that log start.
void set_log_sink(LogSink sink, void* user = nullptr) noexcept;

namespace detail {

/// The level SIMPLER_LOG's `value` asks for (nullptr: unset): on an invalid value, the default
/// and `warning` set to the line to write about it.
[[nodiscard]] LogLevel level_from_env(const char* value, std::string* warning);

/// Formats and writes one line (the level was checked by the caller). Never throws.
void write_log_line(LogLevel level, std::string_view who, std::string_view message) noexcept;

/// Logs `f(args...)` at `level` as `who` ("remote server", "MPI rank 2"). Never throws.
template <class... A>
void log_as(LogLevel level, std::string_view who, fmt::format_string<A...> f,
            A&&... args) noexcept {
  if (!log_enabled(level)) return;
  try {
    write_log_line(level, who, fmt::format(f, std::forward<A>(args)...));
  } catch (...) {
    write_log_line(level, who, "(a log line could not be formatted)");
  }
}

/// Logs as a Worker of level `worker_level` ("L3").
template <class... A>
void log_worker(LogLevel level, int worker_level, fmt::format_string<A...> f,
                A&&... args) noexcept {
  if (!log_enabled(level)) return;
  char who[16];
  const auto r = fmt::format_to_n(who, sizeof who, "L{}", worker_level);
  log_as(level, std::string_view(who, r.size < sizeof who ? r.size : sizeof who), f,
         std::forward<A>(args)...);
}

}  // namespace detail
}  // namespace simpler

#include "simpler/detail/log.ipp"
