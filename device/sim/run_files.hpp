// The diagnostics of a run the simulator writes as files: tensor dumps (dump.cpp) and counters
// (pmu.cpp). A context creates its RunFiles at the first run that turns either on; runs with
// both off never touch it (their only cost is a branch on RunSetup::dump_tensor / pmu).
//
// Files of run N of the context on device D go under <output_prefix>/chipD/runN/ (N counts the
// context's launched runs from 0): tensors/*.npy with tensors/index.json, and pmu.json/pmu.csv.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "sim.hpp"

namespace simpler::sim {

/// One dumped tensor: an entry of tensors/index.json.
struct DumpRecord {
  std::uint64_t task_id = 0;
  std::int32_t func_ids[3] = {-1, -1, -1};  ///< per lane (AIC, AIV0, AIV1); -1 = unused
  std::int32_t arg = 0;
  const char* role = "";  ///< "input", "output", "inout" or "no_dep"
  const char* when = "";  ///< "before" (the first dispatch) or "after" (the last block)
  simpler_chip_tensor tensor{};
  std::string file;  ///< relative to tensors/
};

/// One kernel's totals on one core.
struct PmuCell {
  std::uint64_t invocations = 0;
  std::uint64_t wall_ns = 0;
  std::uint64_t cpu_ns = 0;
  std::uint64_t cycles = 0;
  std::uint64_t instructions = 0;
};

/// A core's counters. Written only by that core's thread during a run; the host reads them in
/// finalize_run (the FIN handshake and threads_done order the writes before it) and resets the
/// cells in prepare_run (the device threads sleep).
struct alignas(64) PmuCore {
  int fd_cycles = -1;  ///< group leader; -1 until opened or when it failed
  int fd_instructions = -1;
  bool tried = false;          ///< the core thread tried to open its counters
  std::string error;           ///< why this core has none, when the context-wide probe succeeded
  std::vector<PmuCell> cells;  ///< by func_id
};

class RunFiles {
 public:
  RunFiles() = default;
  RunFiles(const RunFiles&) = delete;
  RunFiles& operator=(const RunFiles&) = delete;
  ~RunFiles();  ///< closes the cores' perf_event fds (the core threads have stopped)

  std::string run_dir;  ///< <output_prefix>/chip<D>/run<N>
  std::uint64_t run_index = 0;

  // Tensor dumps: the schedulers write the files and add records under `mu`.
  std::mutex mu;
  std::vector<DumpRecord> records;  ///< guarded by mu
  std::vector<std::string> errors;  ///< write failures, guarded by mu
  bool error_printed = false;       ///< guarded by mu: one stderr line per run

  // Counters: the context-wide probe (prepare_run of the first run with pmu on).
  bool probed = false;
  bool hardware = false;       ///< perf_event_open works for cycles and instructions
  std::string hw_reason;       ///< why not, when !hardware
  std::vector<PmuCore> cores;  ///< by core index
};

/// pmu.cpp: probes the hardware counters once per context (printing why they are unavailable,
/// once) and resets every core's cells for the run. Host, in prepare_run.
void pmu_prepare(Context& ctx);
/// pmu.cpp: pmu.json and pmu.csv of the run; "" or the first write error. Host, finalize_run.
std::string pmu_write(Context& ctx);

/// `s` as a JSON string literal (quoted, escaped).
std::string json_string(const std::string& s);
/// "float32", "int8", ... for a simpler DataType code.
const char* dtype_name(std::uint8_t dtype) noexcept;
/// Creates `path` and its missing parents; false (errno set) on failure.
bool make_dirs(const std::string& path);
/// Writes `text` to `path` (truncating); "" on success, else "<path>: <strerror>".
std::string write_text_file(const std::string& path, const std::string& text);

}  // namespace simpler::sim
