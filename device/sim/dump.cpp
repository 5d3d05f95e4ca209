// The run's output directory and its tensor dumps (run config dump_tensor): each task's input
// (and inout, no_dep) tensors before its first dispatch and its output (and inout, no_dep)
// tensors after its last block, as NumPy .npy v1.0 files, with tensors/index.json listing them.
//
// Threads: prepare_diagnostics and finish_diagnostics run on the host while the device threads
// sleep; dump_task runs on a scheduler thread (files written outside the lock, records added
// under RunFiles::mu). A file that cannot be written never fails the run: its results are in
// the run's tensors either way. The failure is listed in index.json and printed once to stderr.

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "run_files.hpp"

namespace simpler::sim {

namespace {

/// The NumPy type string of a simpler DataType (little-endian host). bfloat16 has none: its
/// bits are stored as '<u2' and index.json names the real type.
const char* npy_descr(std::uint8_t dtype) noexcept {
  switch (dtype) {
    case SIMPLER_FLOAT32:
      return "<f4";
    case SIMPLER_FLOAT16:
      return "<f2";
    case SIMPLER_INT32:
      return "<i4";
    case SIMPLER_INT16:
      return "<i2";
    case SIMPLER_INT8:
      return "|i1";
    case SIMPLER_UINT8:
      return "|u1";
    case SIMPLER_BFLOAT16:
      return "<u2";
    case SIMPLER_INT64:
      return "<i8";
    case SIMPLER_UINT64:
      return "<u8";
    default:
      return "|V1";
  }
}

/// The .npy v1.0 header of `t`: magic, version, header length, then the dict padded with spaces
/// and a newline so that the data starts at a multiple of 64 bytes.
std::string npy_header(const simpler_chip_tensor& t) {
  std::string shape = "(";
  for (std::uint32_t i = 0; i < t.ndims && i < 5; ++i) shape += fmt::format("{}, ", t.shapes[i]);
  if (t.ndims == 1) {
    shape.pop_back();  // "(n,)"
  } else if (t.ndims > 1) {
    shape.resize(shape.size() - 2);
  }
  shape += ")";
  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
                                 npy_descr(t.dtype), shape);
  const std::size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict.push_back('\n');
  std::string h("\x93NUMPY\x01\x00", 8);
  h.push_back(static_cast<char>(dict.size() & 0xff));
  h.push_back(static_cast<char>(dict.size() >> 8));
  return h + dict;
}

/// Writes all of [p, p + n) to fd; false (errno set) on failure.
bool write_all(int fd, const void* p, std::size_t n) {
  const auto* b = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = ::write(fd, b, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    b += w;
    n -= static_cast<std::size_t>(w);
  }
  return true;
}

/// Writes `t`'s bytes (host memory: the device shares the address space) as a .npy file. "" on
/// success, else what failed.
std::string write_npy(const std::string& path, const simpler_chip_tensor& t) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return fmt::format("cannot create {}: {}", path, std::strerror(errno));
  const std::string h = npy_header(t);
  std::uint64_t bytes = 0;
  static_cast<void>(tensor_bytes(t, bytes));  // checked at submit
  const void* data = reinterpret_cast<const void*>(static_cast<std::uintptr_t>(t.addr + t.offset));
  std::string err;
  if (!write_all(fd, h.data(), h.size()) || !write_all(fd, data, bytes))
    err = fmt::format("cannot write {}: {}", path, std::strerror(errno));
  if (::close(fd) != 0 && err.empty())
    err = fmt::format("cannot write {}: {}", path, std::strerror(errno));
  return err;
}

const char* role_of(int tag) noexcept {
  switch (tag) {
    case SIMPLER_TAG_INPUT:
      return "input";
    case SIMPLER_TAG_INOUT:
      return "inout";
    case SIMPLER_TAG_NO_DEP:
      return "no_dep";
    default:
      return "output";
  }
}

/// Is the tensor of `tag` dumped before the first dispatch (`after` false) / after the last block?
bool dumped(int tag, bool after) noexcept {
  if (tag == SIMPLER_TAG_INOUT || tag == SIMPLER_TAG_NO_DEP) return true;
  const bool output = tag == SIMPLER_TAG_OUTPUT || tag == SIMPLER_TAG_OUTPUT_EXISTING;
  return output == after;
}

/// Creates (truncates) `path` to prove the run can write there. "" or the error.
std::string probe_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return fmt::format("cannot create {}: {}", path, std::strerror(errno));
  ::close(fd);
  return {};
}

}  // namespace

const char* dtype_name(std::uint8_t dtype) noexcept {
  static const char* const names[] = {"float32", "float16",  "int32", "int16", "int8",
                                      "uint8",   "bfloat16", "int64", "uint64"};
  return dtype < std::size(names) ? names[dtype] : "unknown";
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(ch);
    } else if (c < 0x20) {
      out += fmt::format("\\u{:04x}", c);
    } else {
      out.push_back(ch);
    }
  }
  return out + "\"";
}

bool make_dirs(const std::string& path) {
  for (std::size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/') continue;
    const std::string part = path.substr(0, pos);
    if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST) return false;
    struct stat st {};
    if (::stat(part.c_str(), &st) != 0) return false;
    if (!S_ISDIR(st.st_mode)) {
      errno = ENOTDIR;
      return false;
    }
  }
  return true;
}

std::string write_text_file(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return fmt::format("{}: {}", path, std::strerror(errno));
  std::string err;
  if (!write_all(fd, text.data(), text.size()))
    err = fmt::format("{}: {}", path, std::strerror(errno));
  if (::close(fd) != 0 && err.empty()) err = fmt::format("{}: {}", path, std::strerror(errno));
  return err;
}

int Context::prepare_diagnostics(const simpler_run_config* cfg) {
  run.dump_tensor = false;
  run.pmu = 0;
  if (cfg == nullptr || cfg->struct_size == 0) return SIMPLER_OK;
  if (cfg->pmu < 0 || cfg->pmu > 1) {
    return fail(SIMPLER_ERR_INVALID_ARGUMENT,
                fmt::format("pmu {} selects no counter set: use 0 (off) or 1 (wall and CPU time, "
                            "hardware cycles and instructions)",
                            cfg->pmu));
  }
  const bool dump = cfg->dump_tensor != 0;
  if (!dump && cfg->pmu == 0) return SIMPLER_OK;
  const char* what = dump && cfg->pmu != 0 ? "dump_tensor and pmu" : (dump ? "dump_tensor" : "pmu");
  const std::size_t len = ::strnlen(cfg->output_prefix, sizeof cfg->output_prefix);
  if (len == sizeof cfg->output_prefix)
    return fail(SIMPLER_ERR_INVALID_ARGUMENT, "output_prefix is not NUL-terminated");
  if (len == 0) {
    return fail(SIMPLER_ERR_INVALID_ARGUMENT,
                fmt::format("{}: output_prefix is empty; set it to the directory the run's "
                            "diagnostic files go to",
                            what));
  }
  if (!run_files) run_files = std::make_unique<RunFiles>();
  RunFiles& d = *run_files;
  d.run_index = counters.runs;
  d.run_dir = fmt::format("{}/chip{}/run{}", std::string(cfg->output_prefix, len), config.device_id,
                          d.run_index);
  const std::string dir = dump ? d.run_dir + "/tensors" : d.run_dir;
  if (!make_dirs(dir)) {
    return fail(SIMPLER_ERR_INVALID_ARGUMENT,
                fmt::format("{}: cannot create the output directory {}: {}", what, dir,
                            std::strerror(errno)));
  }
  // Create the files now, so an unwritable directory fails the prepare, not the finished run.
  std::string err = dump ? probe_file(d.run_dir + "/tensors/index.json") : std::string();
  if (err.empty() && cfg->pmu != 0) err = probe_file(d.run_dir + "/pmu.json");
  if (!err.empty()) return fail(SIMPLER_ERR_INVALID_ARGUMENT, fmt::format("{}: {}", what, err));
  {
    std::lock_guard lk(d.mu);
    d.records.clear();
    d.errors.clear();
    d.error_printed = false;
  }
  run.dump_tensor = dump;
  run.pmu = cfg->pmu;
  if (run.pmu != 0) pmu_prepare(*this);
  return SIMPLER_OK;
}

void Context::dump_task(std::uint64_t id, bool after) noexcept {
  try {
    const Payload& p = payload_of(id);
    std::vector<DumpRecord> made;
    std::vector<std::string> errs;
    for (int i = 0; i < p.tensor_count; ++i) {
      const int tag = p.tags[i];
      if (!dumped(tag, after)) continue;
      DumpRecord r;
      r.task_id = id;
      for (int l = 0; l < 3; ++l) r.func_ids[l] = p.kernels[l];
      r.arg = i;
      r.role = role_of(tag);
      r.when = after ? "after" : "before";
      r.tensor = p.tensors[i];
      r.file = fmt::format("task{}_{}_arg{}_{}.npy", ring_of(id), local_of(id), i, r.when);
      std::string err = write_npy(run_files->run_dir + "/tensors/" + r.file, r.tensor);
      if (err.empty())
        made.push_back(std::move(r));
      else
        errs.push_back(std::move(err));
    }
    std::lock_guard lk(run_files->mu);
    for (auto& r : made) run_files->records.push_back(std::move(r));
    for (auto& e : errs) {
      if (!run_files->error_printed) {
        std::fprintf(stderr,
                     "simpler chip %d: tensor dump incomplete: %s (the run's results are "
                     "unaffected)\n",
                     config.device_id, e.c_str());
        run_files->error_printed = true;
      }
      run_files->errors.push_back(std::move(e));
    }
  } catch (...) {
    // Out of memory while dumping: the dump is incomplete, the run goes on.
  }
}

void Context::finish_diagnostics() noexcept {
  try {
    RunFiles& d = *run_files;
    std::string err;
    if (run.dump_tensor) {
      std::lock_guard lk(d.mu);
      std::sort(d.records.begin(), d.records.end(), [](const DumpRecord& a, const DumpRecord& b) {
        const int wa = a.when[0] == 'a', wb = b.when[0] == 'a';
        if (a.task_id != b.task_id) return a.task_id < b.task_id;
        return wa != wb ? wa < wb : a.arg < b.arg;
      });
      const Callable& c = life.callables[run.callable];
      std::string j = fmt::format("{{\n  \"device_id\": {},\n  \"run\": {},\n  \"entries\": [",
                                  config.device_id, d.run_index);
      for (std::size_t i = 0; i < d.records.size(); ++i) {
        const DumpRecord& r = d.records[i];
        const std::int32_t fid = r.func_ids[0] >= 0   ? r.func_ids[0]
                                 : r.func_ids[1] >= 0 ? r.func_ids[1]
                                                      : r.func_ids[2];
        const std::string& name = fid >= 0 ? c.kernel_names[static_cast<std::size_t>(fid)] : "";
        std::string shape;
        for (std::uint32_t k = 0; k < r.tensor.ndims && k < 5; ++k)
          shape += fmt::format("{}{}", k == 0 ? "" : ", ", r.tensor.shapes[k]);
        j += fmt::format(
            "{}\n    {{\"task_id\": {}, \"task\": \"{}:{}\", \"func_id\": {}, \"func_ids\": [{}, "
            "{}, {}], \"kernel\": {}, \"arg\": {}, \"role\": \"{}\", \"when\": \"{}\", "
            "\"dtype\": \"{}\", \"shape\": [{}], \"file\": {}}}",
            i == 0 ? "" : ",", r.task_id, ring_of(r.task_id), local_of(r.task_id), fid,
            r.func_ids[0], r.func_ids[1], r.func_ids[2],
            name.empty() ? std::string("null") : json_string(name), r.arg, r.role, r.when,
            dtype_name(r.tensor.dtype), shape, json_string(r.file));
      }
      j += "\n  ],\n  \"errors\": [";
      for (std::size_t i = 0; i < d.errors.size(); ++i)
        j += fmt::format("{}{}", i == 0 ? "" : ", ", json_string(d.errors[i]));
      j += "]\n}\n";
      err = write_text_file(d.run_dir + "/tensors/index.json", j);
    }
    if (run.pmu != 0) {
      const std::string e = pmu_write(*this);
      if (err.empty()) err = e;
    }
    if (!err.empty()) {
      std::fprintf(stderr, "simpler chip %d: cannot write the diagnostics of run %llu: %s\n",
                   config.device_id, static_cast<unsigned long long>(d.run_index), err.c_str());
    }
  } catch (...) {
    std::fprintf(stderr, "simpler chip %d: out of memory writing the run's diagnostics\n",
                 config.device_id);
  }
}

}  // namespace simpler::sim
