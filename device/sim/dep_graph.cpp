// The dependency graph of a run (dep_gen) and the producers a submit found (also the trace's
// dependency flows at swimlane >= 2): recorded on the orchestrator thread, written as DOT and
// JSON by the host after the run.

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <new>

#include "sim.hpp"
#include "tensor_map.hpp"

namespace simpler::sim {

static_assert(kMaxFanin + 1 <= sizeof(PendingEdges::items) / sizeof(PendingEdges::Item),
              "PendingEdges holds every producer a submit may have");

void PendingEdges::add(std::uint64_t producer, std::uint64_t bytes, std::uint32_t why) noexcept {
  for (int i = 0; i < n; ++i) {
    if (items[i].producer == producer) {
      items[i].bytes += bytes;
      items[i].why |= why;
      return;
    }
  }
  if (n < static_cast<int>(std::size(items)))
    items[n++] = {producer, bytes, why};
  else
    ++omitted;
}

void DepGraph::clear() noexcept {
  nodes.clear();
  tensors.clear();
  edges.clear();
  omitted_nodes = 0;
  omitted_edges = 0;
}

void diag_find_edges(Context& ctx, const simpler_task_builder& b) noexcept {
  const ArenaHeader& h = ctx.header();
  const bool all = ctx.config.all_hazards;
  PendingEdges& pe = ctx.diag.pending;
  pe.n = 0;
  pe.omitted = 0;
  for (int i = 0; i < b.tensor_count; ++i) {
    const simpler_chip_tensor& t = b.tensors[i];
    const int tag = b.tags[i];
    if (tag == SIMPLER_TAG_OUTPUT) continue;
    const std::uint64_t bytes = simpler_tensor_nbytes(&t);  // checked by the submit
    const std::uint32_t tag_bit = 1U << static_cast<unsigned>(tag & 7);
    const bool reads = tag != SIMPLER_TAG_OUTPUT_EXISTING;  // Input, InOut, NoDep
    const bool writes = tag == SIMPLER_TAG_INOUT || tag == SIMPLER_TAG_OUTPUT_EXISTING;
    // The owner of a buffer is a dependency unless it is an alloc (no kernels: complete at
    // birth, nothing to wait for).
    if (t.owner_task != SIMPLER_INVALID_TASK_ID && !retired(h, t.owner_task) &&
        ctx.slot_of(t.owner_task).lane_mask != 0) {
      pe.add(t.owner_task, bytes, kEdgeViaOwner | tag_bit | (reads ? kEdgeData : 0));
    }
    if (tag == SIMPLER_TAG_NO_DEP || (tag == SIMPLER_TAG_OUTPUT_EXISTING && !all)) continue;
    const std::uint64_t begin = t.offset, end = t.offset + bytes;
    for (std::uint32_t e = tm_bucket_head(h.tmap, tm_bucket_of(h.tmap, t.addr)); e != 0;) {
      const TmEntry& en = h.tmap.entries[e - 1];
      e = en.bucket_next;
      if (en.addr != t.addr || !tm_overlaps(begin, end, en.begin, en.end) || retired(h, en.task))
        continue;
      const std::uint64_t overlap = std::min(end, en.end) - std::max(begin, en.begin);
      if (en.kind == kTmWrite && reads) {
        pe.add(en.task, overlap, kEdgeViaWrite | kEdgeData | tag_bit);
      } else if (en.kind == kTmWrite && all) {  // an OutputExisting after a writer
        pe.add(en.task, overlap, kEdgeViaWrite | tag_bit);
      } else if (en.kind == kTmRead && writes) {  // read entries exist with all hazards only
        pe.add(en.task, overlap, kEdgeViaRead | tag_bit);
      }
    }
  }
}

namespace {

void record_node(Diag& d, std::uint64_t id, const simpler_task_builder& b,
                 const simpler_chip_tensor* tensors, const std::int32_t lanes[3]) {
  DepGraph& g = d.dag;
  g.omitted_edges += d.pending.omitted;
  if (g.nodes.size() >= g.max_nodes) {
    ++g.omitted_nodes;
    g.omitted_edges += static_cast<std::uint64_t>(d.pending.n);
    return;
  }
  DagNode n{id, {lanes[0], lanes[1], lanes[2]}, static_cast<std::uint32_t>(g.tensors.size()), 0};
  for (int i = 0; i < b.tensor_count; ++i) {
    const simpler_chip_tensor& t = tensors[i];
    DagTensor dt{t.addr,
                 t.offset,
                 simpler_tensor_nbytes(&t),
                 {},
                 static_cast<std::uint8_t>(t.ndims),
                 t.dtype,
                 static_cast<std::uint8_t>(b.tags[i])};
    std::copy(std::begin(t.shapes), std::end(t.shapes), std::begin(dt.shapes));
    g.tensors.push_back(dt);
    ++n.tensor_count;
  }
  g.nodes.push_back(n);
  for (int i = 0; i < d.pending.n; ++i) {
    const PendingEdges::Item& it = d.pending.items[i];
    if (g.edges.size() >= 16 * g.max_nodes) {
      ++g.omitted_edges;
      continue;
    }
    g.edges.push_back({it.producer, id, it.bytes, it.why});
  }
}

}  // namespace

void diag_submitted(Context& ctx, std::uint64_t id, const simpler_task_builder& b,
                    const simpler_chip_tensor* tensors, const std::int32_t lanes[3],
                    std::uint64_t t0) noexcept {
  Diag& d = ctx.diag;
  if (d.swimlane >= 2) {
    TraceBuffer& ob = d.buffers[0];
    const std::uint64_t now = trace_now_ns();
    for (int i = 0; i < d.pending.n; ++i) {
      const PendingEdges::Item& it = d.pending.items[i];
      // block_idx 1: the edge only orders (see simpler_trace_event).
      ob.push(now, now, id, static_cast<std::int64_t>(it.producer), SIMPLER_TRACE_DEPENDENCY, -1,
              (it.why & kEdgeData) != 0 ? 0 : 1);
    }
    if (d.swimlane >= 4) {
      const std::int32_t func = lanes[0] >= 0 ? lanes[0] : lanes[1] >= 0 ? lanes[1] : lanes[2];
      ob.push(t0, now, id, -1, SIMPLER_TRACE_SUBMIT, func);
    }
  }
  if (d.dep_gen) {
    try {
      record_node(d, id, b, tensors, lanes);
    } catch (const std::bad_alloc&) {
      // No memory for more: keep what was recorded and count the rest as omitted.
      d.dag.max_nodes = d.dag.nodes.size();
      ++d.dag.omitted_nodes;
    }
  }
  d.pending.n = 0;
}

// ---- files ------------------------------------------------------------------------------------

namespace {

const char* tag_name(unsigned tag) noexcept {
  switch (tag) {
    case SIMPLER_TAG_INPUT:
      return "input";
    case SIMPLER_TAG_OUTPUT:
      return "output";
    case SIMPLER_TAG_INOUT:
      return "inout";
    case SIMPLER_TAG_OUTPUT_EXISTING:
      return "output_existing";
    case SIMPLER_TAG_NO_DEP:
      return "no_dep";
    default:
      return "unknown";
  }
}

const char* dtype_name(std::uint8_t dtype) noexcept {
  static const char* const names[] = {"float32", "float16",  "int32", "int16", "int8",
                                      "uint8",   "bfloat16", "int64", "uint64"};
  return dtype < std::size(names) ? names[dtype] : "unknown";
}

const char* lane_name(int lane) noexcept {
  static const char* const names[] = {"aic", "aiv0", "aiv1"};
  return names[lane];
}

std::string shape_of(const DagTensor& t) {
  std::string s = "[";
  for (unsigned i = 0; i < t.ndims && i < 5; ++i)
    s += fmt::format("{}{}", i ? ", " : "", t.shapes[i]);
  return s + "]";
}

/// The consumer tags of an edge, as a list of names.
std::vector<const char*> edge_tags(std::uint32_t why) {
  std::vector<const char*> out;
  for (unsigned tag = 0; tag < 8; ++tag) {
    if (why & (1U << tag)) out.push_back(tag_name(tag));
  }
  return out;
}

/// A FILE* closed on scope exit; `ok()` after writing says whether every write succeeded.
struct OutFile {
  std::FILE* f;
  explicit OutFile(const std::string& path) : f(std::fopen(path.c_str(), "w")) {}
  OutFile(const OutFile&) = delete;
  OutFile& operator=(const OutFile&) = delete;
  ~OutFile() {
    if (f != nullptr) std::fclose(f);
  }
  bool close() {
    const bool good = std::ferror(f) == 0;
    const bool closed = std::fclose(f) == 0;
    f = nullptr;
    return good && closed;
  }
};

int write_fail(Context& ctx, const std::string& path) {
  return ctx.fail(
      SIMPLER_ERR_SYSTEM,
      fmt::format("cannot write the run's dependency graph to {}: {}", path, std::strerror(errno)));
}

int write_dag_json(Context& ctx, const std::string& path) {
  const DepGraph& g = ctx.diag.dag;
  OutFile out(path);
  if (out.f == nullptr) return write_fail(ctx, path);
  std::FILE* f = out.f;
  fmt::print(f,
             "{{\"device_id\":{},\"run\":{},\"truncated\":{},\"omitted_nodes\":{},"
             "\"omitted_edges\":{},\"max_nodes\":{},\n\"nodes\":[",
             ctx.config.device_id, ctx.diag.run_index,
             g.omitted_nodes + g.omitted_edges > 0 ? "true" : "false", g.omitted_nodes,
             g.omitted_edges, g.max_nodes);
  for (std::size_t i = 0; i < g.nodes.size(); ++i) {
    const DagNode& n = g.nodes[i];
    fmt::print(f, "{}\n{{\"id\":{},\"task\":\"{}\",\"kernels\":[", i ? "," : "", n.task,
               task_label(n.task));
    bool first = true;
    for (int l = 0; l < 3; ++l) {
      if (n.kernels[l] < 0) continue;
      fmt::print(f, "{}{{\"lane\":\"{}\",\"func_id\":{},\"name\":{}}}", first ? "" : ",",
                 lane_name(l), n.kernels[l], json_quoted(kernel_label(ctx, n.kernels[l])));
      first = false;
    }
    fmt::print(f, "],\"tensors\":[");
    for (std::uint32_t k = 0; k < n.tensor_count; ++k) {
      const DagTensor& t = g.tensors[n.first_tensor + k];
      fmt::print(f,
                 "{}{{\"tag\":\"{}\",\"addr\":\"{:#x}\",\"offset\":{},\"bytes\":{},\"shape\":{},"
                 "\"dtype\":\"{}\"}}",
                 k ? "," : "", tag_name(t.tag), t.addr, t.offset, t.bytes, shape_of(t),
                 dtype_name(t.dtype));
    }
    fmt::print(f, "]}}");
  }
  fmt::print(f, "],\n\"edges\":[");
  for (std::size_t i = 0; i < g.edges.size(); ++i) {
    const DagEdge& e = g.edges[i];
    std::string via;
    if (e.why & kEdgeViaOwner) via += "\"owner\"";
    if (e.why & kEdgeViaWrite) via += fmt::format("{}\"write\"", via.empty() ? "" : ",");
    if (e.why & kEdgeViaRead) via += fmt::format("{}\"read\"", via.empty() ? "" : ",");
    std::string tags;
    for (const char* t : edge_tags(e.why))
      tags += fmt::format("{}\"{}\"", tags.empty() ? "" : ",", t);
    fmt::print(f,
               "{}\n{{\"from\":{},\"to\":{},\"from_task\":\"{}\",\"to_task\":\"{}\",\"bytes\":{},"
               "\"tags\":[{}],\"via\":[{}],\"order_only\":{}}}",
               i ? "," : "", e.producer, e.consumer, task_label(e.producer), task_label(e.consumer),
               e.bytes, tags, via, (e.why & kEdgeData) != 0 ? "false" : "true");
  }
  fmt::print(f, "]}}\n");
  if (!out.close()) return write_fail(ctx, path);
  return SIMPLER_OK;
}

int write_dag_dot(Context& ctx, const std::string& path) {
  const DepGraph& g = ctx.diag.dag;
  OutFile out(path);
  if (out.f == nullptr) return write_fail(ctx, path);
  std::FILE* f = out.f;
  fmt::print(f, "digraph {} {{\n",
             json_quoted(fmt::format("chip {} run {}", ctx.config.device_id, ctx.diag.run_index)));
  if (g.omitted_nodes + g.omitted_edges > 0) {
    fmt::print(f,
               "  // truncated: {} tasks and {} dependencies past the limit of {} tasks are not "
               "shown\n  label={};\n",
               g.omitted_nodes, g.omitted_edges, g.max_nodes,
               json_quoted(fmt::format("truncated: {} tasks and {} dependencies not shown",
                                       g.omitted_nodes, g.omitted_edges)));
  }
  fmt::print(f, "  node [shape=box, fontname=\"monospace\"];\n");
  for (const DagNode& n : g.nodes) {
    std::string label = "task " + task_label(n.task);
    for (int l = 0; l < 3; ++l) {
      if (n.kernels[l] >= 0)
        label += fmt::format("\n{} {} ({})", lane_name(l), kernel_label(ctx, n.kernels[l]),
                             n.kernels[l]);
    }
    for (std::uint32_t k = 0; k < n.tensor_count; ++k) {
      const DagTensor& t = g.tensors[n.first_tensor + k];
      label += fmt::format("\n{} {} {}", tag_name(t.tag), shape_of(t), dtype_name(t.dtype));
    }
    fmt::print(f, "  {} [label={}];\n", json_quoted(task_label(n.task)), json_quoted(label));
  }
  for (const DagEdge& e : g.edges) {
    std::string label = fmt::format("{} B", e.bytes);
    for (const char* t : edge_tags(e.why)) label += fmt::format(" {}", t);
    if (e.why & kEdgeViaRead) label += " after read";
    // An edge that only orders (no bytes flow along it) is dashed.
    fmt::print(f, "  {} -> {} [label={}{}];\n", json_quoted(task_label(e.producer)),
               json_quoted(task_label(e.consumer)), json_quoted(label),
               (e.why & kEdgeData) != 0 ? "" : ", style=dashed");
  }
  fmt::print(f, "}}\n");
  if (!out.close()) return write_fail(ctx, path);
  return SIMPLER_OK;
}

}  // namespace

int write_dag_files(Context& ctx, const std::string& dir) {
  if (const int rc = write_dag_json(ctx, dir + "/dag.json"); rc != SIMPLER_OK) return rc;
  return write_dag_dot(ctx, dir + "/dag.dot");
}

}  // namespace simpler::sim
