// Test orchestration: runs a byte-coded program of runtime calls with hostile arguments (see
// fuzz_program.hpp for the format and what it checks). Kernels are expected to be no-ops (the
// tensors it submits need not point at real memory); reads only target views of buffers whose
// extent it knows, so every out-of-range byte a read touches is the runtime's fault.
#include <simpler/device/orchestration.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "fuzz_program.hpp"

using namespace fuzz_program;

namespace {

constexpr std::size_t kMaxKnown = 64;
constexpr int kMaxOps = 512;
constexpr std::uint64_t kMaxReadView = std::uint64_t{1} << 20;

[[noreturn]] void violated(const char* what) {
  std::fprintf(stderr, "fuzz_program: the runtime %s\n", what);
  std::fflush(stderr);
  std::abort();
}

/// A buffer whose real extent (bytes from addr + offset) this orchestration knows.
struct Known {
  simpler_chip_tensor t;
  std::uint64_t extent;
};

struct State {
  simpler_orch_runtime* rt;
  Reader in;
  std::vector<Known> known;

  void remember(const simpler_chip_tensor& t, std::uint64_t extent) {
    if (known.size() < kMaxKnown) known.push_back({t, extent});
  }
  const Known* pick(std::uint8_t k) const {
    return known.empty() ? nullptr : &known[k % known.size()];
  }

  std::int32_t lane() {
    const std::uint8_t b = in.u8();
    if (b == 0xff) return -1;
    if (b == 0xfe) return in.raw<std::int32_t>();
    return b % 4;
  }

  void shape_fields(simpler_chip_tensor& t) {
    t.ndims = in.u8();
    t.dtype = in.u8();
    for (auto& s : t.shapes) s = in.compact<std::uint32_t>();
  }

  simpler_chip_tensor tensor() {
    simpler_chip_tensor t{};
    t.owner_task = SIMPLER_INVALID_TASK_ID;
    switch (in.u8() % kSources) {
      case kKnown:
        if (const Known* k = pick(in.u8())) return k->t;
        t = simpler::device::describe({4}, SIMPLER_INT32);
        break;
      case kRawView:
        if (const Known* k = pick(in.u8())) t.addr = k->t.addr;
        t.offset = in.compact<std::uint64_t>();
        t.owner_task = in.compact<std::uint64_t>();
        shape_fields(t);
        break;
      case kDescribe:
        shape_fields(t);
        break;
      default:
        t.addr = in.raw<std::uint64_t>();
        t.offset = in.compact<std::uint64_t>();
        t.owner_task = in.compact<std::uint64_t>();
        shape_fields(t);
        break;
    }
    return t;
  }

  void submit() {
    simpler_mixed_kernels k{};
    k.aic = lane();
    k.aiv0 = lane();
    k.aiv1 = lane();
    simpler_task_builder b;
    std::memset(&b, 0, sizeof b);
    const int nt = std::min<int>(in.u8(), SIMPLER_MAX_TASK_TENSORS + 2);
    for (int i = 0; i < nt; ++i) {
      const auto tag = static_cast<std::int32_t>(in.u8());
      const simpler_chip_tensor t = tensor();
      simpler_builder_add_tensor(&b, &t, tag);
    }
    const int ns = std::min<int>(in.u8(), SIMPLER_MAX_TASK_SCALARS + 2);
    for (int i = 0; i < ns; ++i) simpler_builder_add_scalar(&b, in.u8());
    simpler_chip_tensor out[SIMPLER_MAX_TASK_TENSORS];
    const simpler_task_id id = rt->ops->submit(rt, k, &b, out);
    if (id == SIMPLER_INVALID_TASK_ID) return;
    for (int i = 0; i < b.tensor_count; ++i) {
      const simpler_chip_tensor& t = b.tensors[i];
      std::uint64_t bytes = 0;
      if (t.ndims < 1 || t.ndims > 5 || simpler_dtype_size(t.dtype) == 0)
        violated("accepted a submit with a tensor of bad ndims or dtype");
      if (!checked_nbytes(t.shapes, t.ndims, simpler_dtype_size(t.dtype), bytes))
        violated(
            "accepted a submit with a tensor whose byte size overflows or exceeds the maximum");
      if (b.tags[i] == SIMPLER_TAG_OUTPUT) {
        if (bytes > 0 && out[i].addr == 0) violated("gave an output no buffer");
        remember(out[i], bytes);
      } else if (t.offset + bytes < t.offset) {
        violated("accepted a submit with a view whose offset + size wraps");
      }
    }
  }

  void read() {
    const Known* base = pick(in.u8());
    const std::uint8_t mode = in.u8() % kModes;
    simpler_chip_tensor v{};
    v.owner_task = SIMPLER_INVALID_TASK_ID;
    v.ndims = 1;
    if (base != nullptr) {
      v = base->t;
      v.ndims = 1;
      for (auto& s : v.shapes) s = 0;
    } else {
      v.dtype = SIMPLER_UINT8;
    }
    const std::uint64_t dsize = std::max<std::uint64_t>(1, simpler_dtype_size(v.dtype));
    std::uint64_t view_bytes = 0;
    if (mode != kWraps) {
      const std::uint64_t extent = base != nullptr ? base->extent : 0;
      const std::uint64_t first = in.compact<std::uint64_t>() % (extent / dsize + 1) * dsize;
      const std::uint64_t max_el = std::min(extent - first, kMaxReadView) / dsize;
      const std::uint64_t numel = in.compact<std::uint64_t>() % (max_el + 1);
      if (base == nullptr) return;  // nothing to view
      v.offset += first;
      v.shapes[0] = static_cast<std::uint32_t>(numel);
      view_bytes = numel * dsize;
      if (mode == kOwner) v.owner_task = in.compact<std::uint64_t>();
    } else {
      const std::uint64_t numel = in.u8() % 64 + 1;
      view_bytes = numel * dsize;
      v.shapes[0] = static_cast<std::uint32_t>(numel);
      v.offset = ~std::uint64_t{0} - in.u8() % view_bytes;  // offset + view_bytes wraps
      if (base == nullptr) v.addr = reinterpret_cast<std::uintptr_t>(&v);
    }
    const auto off = in.compact<std::uint64_t>();
    const auto n = in.compact<std::uint64_t>();
    // Exactly the view's size: a read the runtime lets past it is an overflow ASan sees.
    std::vector<std::byte> dst(std::max<std::uint64_t>(view_bytes, 1));
    const int rc = rt->ops->read_tensor(rt, &v, off, dst.data(), n);
    if (rc != 0) return;
    if (mode == kWraps) violated("accepted a read of a view whose offset + size wraps");
    if (n > view_bytes || off > view_bytes - n) violated("accepted a read outside the view");
  }

  void alloc() {
    simpler_chip_tensor t{};
    shape_fields(t);
    simpler_chip_tensor out{};
    if (rt->ops->alloc_tensor(rt, t.shapes, t.ndims, t.dtype, &out) != 0) return;
    std::uint64_t bytes = 0;
    if (t.ndims < 1 || t.ndims > 5 || simpler_dtype_size(t.dtype) == 0)
      violated("accepted alloc_tensor with bad ndims or dtype");
    if (!checked_nbytes(t.shapes, t.ndims, simpler_dtype_size(t.dtype), bytes))
      violated("accepted alloc_tensor with a byte size that overflows or exceeds the maximum");
    if (bytes > 0 && out.addr == 0) violated("gave an alloc no buffer");
    remember(out, bytes);
  }

  void read_null() {
    std::byte one{};
    const Known* k = pick(in.u8());
    const int rc = in.u8() % 2 == 0 || k == nullptr
                       ? rt->ops->read_tensor(rt, nullptr, 0, &one, 0)
                       : rt->ops->read_tensor(rt, &k->t, 0, nullptr, 0);
    if (rc == 0) violated("accepted read_tensor with a NULL tensor or destination");
  }
};

}  // namespace

SIMPLER_ORCHESTRATION(orch, args) {
  if (args.tensor_count < 1) {
    orch.report_fatal("fuzz_program: tensor 0 must hold the program");
    return;
  }
  const simpler_chip_tensor& prog = args.tensors[0];
  std::uint64_t prog_bytes = 0;
  if (!checked_nbytes(prog.shapes, prog.ndims, simpler_dtype_size(prog.dtype), prog_bytes))
    violated("accepted a run tensor whose byte size overflows or exceeds the maximum");
  State s{orch.raw(),
          Reader(static_cast<const std::uint8_t*>(simpler_tensor_data(&prog)),
                 static_cast<std::size_t>(prog_bytes)),
          {}};
  for (int i = 1; i < args.tensor_count; ++i) {
    const simpler_chip_tensor& t = args.tensors[i];
    std::uint64_t bytes = 0;
    if (!checked_nbytes(t.shapes, t.ndims, simpler_dtype_size(t.dtype), bytes))
      violated("accepted a run tensor whose byte size overflows or exceeds the maximum");
    s.remember(t, bytes);
  }
  for (int op = 0; op < kMaxOps && !s.in.done() && !orch.fatal(); ++op) {
    switch (s.in.u8() % kOps) {
      case kSubmit:
        s.submit();
        break;
      case kRead:
        s.read();
        break;
      case kAlloc:
        s.alloc();
        break;
      case kScopeBegin:
        orch.scope_begin();
        break;
      case kScopeEnd:
        orch.scope_end();
        break;
      default:
        s.read_null();
        break;
    }
  }
}
