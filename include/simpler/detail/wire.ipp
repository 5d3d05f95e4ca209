// The remote wire codec (see remote/wire.hpp and docs/remote.md).
// Included once, at the end of its header; every function is inline (the library is header-only).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "simpler/remote/wire.hpp"

namespace simpler::wire {

inline const char* to_string(FrameType t) noexcept {
  switch (t) {
    case FrameType::AuthBegin:
      return "AUTH_BEGIN";
    case FrameType::AuthChallenge:
      return "AUTH_CHALLENGE";
    case FrameType::AuthProof:
      return "AUTH_PROOF";
    case FrameType::Hello:
      return "HELLO";
    case FrameType::Task:
      return "TASK";
    case FrameType::Completion:
      return "COMPLETION";
    case FrameType::Control:
      return "CONTROL";
    case FrameType::ControlReply:
      return "CONTROL_REPLY";
    case FrameType::Heartbeat:
      return "HEARTBEAT";
    case FrameType::Shutdown:
      return "SHUTDOWN";
  }
  return "?";
}

inline const char* to_string(ControlOp op) noexcept {
  switch (op) {
    case ControlOp::Alloc:
      return "ALLOC";
    case ControlOp::Free:
      return "FREE";
    case ControlOp::CopyTo:
      return "COPY_TO";
    case ControlOp::CopyFrom:
      return "COPY_FROM";
    case ControlOp::Ping:
      return "PING";
  }
  return "?";
}

namespace detail {
inline void put_le(std::byte* out, std::uint64_t v, int n) noexcept {
  for (int i = 0; i < n; ++i) out[i] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
}
inline std::uint64_t get_le(const std::byte* in, int n) noexcept {
  std::uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(in[i]) << (8 * i);
  return v;
}
}  // namespace detail

inline void encode_header(const FrameHeader& h, std::byte* out) noexcept {
  detail::put_le(out + 0, h.magic, 4);
  detail::put_le(out + 4, h.version, 2);
  detail::put_le(out + 6, static_cast<std::uint8_t>(h.type), 1);
  detail::put_le(out + 7, h.flags, 1);
  detail::put_le(out + 8, h.session, 8);
  detail::put_le(out + 16, h.worker, 4);
  detail::put_le(out + 20, h.reserved0, 4);
  detail::put_le(out + 24, h.sequence, 8);
  detail::put_le(out + 32, h.length, 4);
  detail::put_le(out + 36, h.reserved1, 4);
}

inline FrameHeader decode_header(std::span<const std::byte> b) {
  if (b.size() != kHeaderBytes) {
    throw ProtocolError(
        fmt::format("frame header: {} bytes, a header is {}", b.size(), kHeaderBytes));
  }
  FrameHeader h;
  h.magic = static_cast<std::uint32_t>(detail::get_le(b.data() + 0, 4));
  if (h.magic != kMagic) {
    throw ProtocolError(fmt::format(
        "frame header: magic is {:#010x}, expected {:#010x} (not a simpler remote peer, or the "
        "stream lost its framing)",
        h.magic, kMagic));
  }
  h.version = static_cast<std::uint16_t>(detail::get_le(b.data() + 4, 2));
  if (h.version != kVersion) {
    throw ProtocolError(fmt::format(
        "frame header: protocol version is {}, this side speaks {} (both sides must come from "
        "the same simpler release)",
        h.version, kVersion));
  }
  const auto type = static_cast<std::uint8_t>(detail::get_le(b.data() + 6, 1));
  if (type == 0 || type > kFrameTypeMax) {
    throw ProtocolError(fmt::format("frame header: type is {}, an unknown frame type", type));
  }
  h.type = static_cast<FrameType>(type);
  h.flags = static_cast<std::uint8_t>(detail::get_le(b.data() + 7, 1));
  if ((h.flags & ~kKnownFlags) != 0) {
    throw ProtocolError(fmt::format(
        "frame header: flags are {:#04x}; no flag is defined in version {}", h.flags, kVersion));
  }
  h.session = detail::get_le(b.data() + 8, 8);
  h.worker = static_cast<std::uint32_t>(detail::get_le(b.data() + 16, 4));
  h.reserved0 = static_cast<std::uint32_t>(detail::get_le(b.data() + 20, 4));
  h.sequence = detail::get_le(b.data() + 24, 8);
  h.length = static_cast<std::uint32_t>(detail::get_le(b.data() + 32, 4));
  h.reserved1 = static_cast<std::uint32_t>(detail::get_le(b.data() + 36, 4));
  if (h.reserved0 != 0 || h.reserved1 != 0) {
    throw ProtocolError(
        fmt::format("frame header: reserved field at byte {} is {:#x}; it must be 0",
                    h.reserved0 != 0 ? 20 : 36, h.reserved0 != 0 ? h.reserved0 : h.reserved1));
  }
  return h;
}

inline void check_header(const FrameHeader& h, const Expect& e) {
  if (h.session != e.session) {
    throw ProtocolError(fmt::format("{} frame: session id is {:#x}, this link's is {:#x}",
                                    to_string(h.type), h.session, e.session));
  }
  if (h.worker != e.worker) {
    throw ProtocolError(fmt::format("{} frame: worker id is {}, this link's is {}",
                                    to_string(h.type), h.worker, e.worker));
  }
  if (h.sequence != e.sequence) {
    throw ProtocolError(fmt::format("{} frame: sequence is {}, expected {} (frames out of order)",
                                    to_string(h.type), h.sequence, e.sequence));
  }
  if (h.length > e.max_length) {
    throw ProtocolError(fmt::format("{} frame: payload length {} is over this link's limit of {}",
                                    to_string(h.type), h.length, e.max_length));
  }
}

inline std::string Reader::str(std::size_t max, const char* field) {
  const std::uint32_t n = u32(field);
  if (n > max) fail(field, fmt::format("string of {} bytes, over the limit of {}", n, max));
  auto b = bytes(n, field);
  return std::string(reinterpret_cast<const char*>(b.data()), b.size());
}

inline std::uint32_t Reader::count(std::size_t max, std::size_t item_bytes, const char* field) {
  const std::uint32_t n = u32(field);
  if (n > max) fail(field, fmt::format("count {} is over the limit of {}", n, max));
  if (item_bytes != 0 && static_cast<std::uint64_t>(n) * item_bytes > left()) {
    fail(field, fmt::format("count {} needs at least {} bytes, {} left", n,
                            static_cast<std::uint64_t>(n) * item_bytes, left()));
  }
  return n;
}

inline void Reader::end() {
  if (left() != 0) fail("end", fmt::format("{} trailing bytes after the payload", left()));
}

inline void Reader::fail(const char* field, const std::string& what) const {
  throw ProtocolError(fmt::format("{} payload: {}: {}", frame_, field, what));
}

namespace detail {
template <std::size_t N>
void put_array(Writer& w, const std::array<std::byte, N>& a) {
  w.bytes(std::span<const std::byte>(a.data(), N));
}
template <std::size_t N>
std::array<std::byte, N> get_array(Reader& r, const char* field) {
  std::array<std::byte, N> a{};
  auto b = r.bytes(N, field);
  std::copy(b.begin(), b.end(), a.begin());
  return a;
}
inline void put_status(Writer& w, Status s, ErrorKind k, std::int32_t code,
                       const std::string& message) {
  w.u8(static_cast<std::uint8_t>(s));
  w.u8(static_cast<std::uint8_t>(k));
  w.i32(code);
  w.str(std::string_view(message).substr(0, kMaxMessage));
}
template <class M>
void get_status(Reader& r, M& m) {
  const std::uint8_t s = r.u8("status");
  if (s > 1) r.fail("status", fmt::format("{} is not 0 (ok) or 1 (failed)", s));
  m.status = static_cast<Status>(s);
  const std::uint8_t k = r.u8("error_kind");
  if (k > static_cast<std::uint8_t>(ErrorKind::Remote)) {
    r.fail("error_kind", fmt::format("{} is not an ErrorKind", k));
  }
  m.kind = static_cast<ErrorKind>(k);
  m.code = r.i32("code");
  m.message = r.str(kMaxMessage, "message");
  if (m.status == Status::Ok && (m.kind != ErrorKind::Other || m.code != 0 || !m.message.empty())) {
    r.fail("status", "an ok status carries an error kind, code or message");
  }
}
}  // namespace detail

inline void encode(const AuthBegin& m, std::vector<std::byte>& out) {
  Writer w(out);
  detail::put_array(w, m.client_nonce);
  w.u32(m.heartbeat_ms);
  w.u32(m.heartbeat_timeout_ms);
}
inline AuthBegin decode_auth_begin(std::span<const std::byte> p) {
  Reader r(p, "AUTH_BEGIN");
  AuthBegin m;
  m.client_nonce = detail::get_array<kNonceBytes>(r, "client_nonce");
  m.heartbeat_ms = r.u32("heartbeat_ms");
  m.heartbeat_timeout_ms = r.u32("heartbeat_timeout_ms");
  if (m.heartbeat_ms == 0) r.fail("heartbeat_ms", "is 0; a period must be positive");
  if (m.heartbeat_timeout_ms <= m.heartbeat_ms) {
    r.fail("heartbeat_timeout_ms", fmt::format("{} is not longer than the period ({} ms)",
                                               m.heartbeat_timeout_ms, m.heartbeat_ms));
  }
  r.end();
  return m;
}

inline void encode(const AuthChallenge& m, std::vector<std::byte>& out) {
  Writer w(out);
  detail::put_array(w, m.server_nonce);
  detail::put_array(w, m.server_proof);
}
inline AuthChallenge decode_auth_challenge(std::span<const std::byte> p) {
  Reader r(p, "AUTH_CHALLENGE");
  AuthChallenge m;
  m.server_nonce = detail::get_array<kNonceBytes>(r, "server_nonce");
  m.server_proof = detail::get_array<kProofBytes>(r, "server_proof");
  r.end();
  return m;
}

inline void encode(const AuthProof& m, std::vector<std::byte>& out) {
  Writer w(out);
  detail::put_array(w, m.client_proof);
}
inline AuthProof decode_auth_proof(std::span<const std::byte> p) {
  Reader r(p, "AUTH_PROOF");
  AuthProof m;
  m.client_proof = detail::get_array<kProofBytes>(r, "client_proof");
  r.end();
  return m;
}

inline void encode(const Hello& m, std::vector<std::byte>& out) {
  Writer w(out);
  w.i32(m.level);
  w.u32(m.max_payload);
  w.u64(m.max_buffer_bytes);
  w.u64(m.buffer_pool_bytes);
  w.u32(static_cast<std::uint32_t>(m.served.size()));
  for (const auto& s : m.served) {
    w.u64(s.digest);
    w.str(s.name);
  }
  detail::put_status(w, m.status, m.kind, m.code, m.message);
}
inline Hello decode_hello(std::span<const std::byte> p) {
  Reader r(p, "HELLO");
  Hello m;
  m.level = r.i32("level");
  m.max_payload = r.u32("max_payload");
  if (m.max_payload < 4096) {
    r.fail("max_payload", fmt::format("{} is under the minimum of 4096", m.max_payload));
  }
  m.max_buffer_bytes = r.u64("max_buffer_bytes");
  m.buffer_pool_bytes = r.u64("buffer_pool_bytes");
  const std::uint32_t n = r.count(kMaxServed, 12, "served_count");
  m.served.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    ServedCallable s;
    s.digest = r.u64("served.digest");
    if (s.digest == 0) r.fail("served.digest", "is 0");
    s.name = r.str(kMaxName, "served.name");
    m.served.push_back(std::move(s));
  }
  detail::get_status(r, m);
  r.end();
  return m;
}

namespace detail {
inline void put_config(Writer& w, const CallConfig& c) {
  w.i32(c.block_dim);
  w.i32(c.aicpu_thread_num);
  w.i32(c.enable_l2_swimlane);
  w.i32(c.enable_dump_tensor);
  w.i32(c.enable_pmu);
  w.i32(c.enable_dep_gen);
  const std::size_t len = strnlen(c.output_prefix.data(), c.output_prefix.size());
  w.str(std::string_view(c.output_prefix.data(), len));
  for (const auto* a :
       {&c.runtime_env.ring_task_window, &c.runtime_env.ring_heap, &c.runtime_env.ring_dep_pool}) {
    for (std::uint64_t v : *a) w.u64(v);
  }
  w.i64(c.timeout.count());
}
inline CallConfig get_config(Reader& r) {
  CallConfig c;
  c.block_dim = r.i32("config.block_dim");
  c.aicpu_thread_num = r.i32("config.aicpu_thread_num");
  c.enable_l2_swimlane = r.i32("config.enable_l2_swimlane");
  c.enable_dump_tensor = r.i32("config.enable_dump_tensor");
  c.enable_pmu = r.i32("config.enable_pmu");
  c.enable_dep_gen = r.i32("config.enable_dep_gen");
  const std::string prefix = r.str(c.output_prefix.size() - 1, "config.output_prefix");
  if (prefix.find('\0') != std::string::npos) r.fail("config.output_prefix", "contains a NUL");
  std::memcpy(c.output_prefix.data(), prefix.data(), prefix.size());
  for (auto* a :
       {&c.runtime_env.ring_task_window, &c.runtime_env.ring_heap, &c.runtime_env.ring_dep_pool}) {
    for (std::uint64_t& v : *a) v = r.u64("config.runtime_env");
  }
  c.timeout = std::chrono::milliseconds(r.i64("config.timeout_ms"));
  try {
    c.validate();
  } catch (const UsageError& e) {
    r.fail("config", e.what());
  }
  return c;
}
}  // namespace detail

inline void encode_task(std::uint64_t digest, const CallConfig& config, TaskArgsView args,
                        std::vector<std::byte>& out, std::uint8_t trace_level,
                        std::uint32_t trace_limit) {
  Writer w(out);
  w.u64(digest);
  detail::put_config(w, config);
  w.u32(static_cast<std::uint32_t>(args.tensor_count));
  for (std::int32_t i = 0; i < args.tensor_count; ++i) {
    const ContinuousTensor& t = args.tensors[i];
    w.u64(t.data);
    w.u8(static_cast<std::uint8_t>(t.dtype));
    w.u8(static_cast<std::uint8_t>(t.ndims));
    w.u8(t.child_memory);
    w.u8(0);
    for (std::uint32_t d = 0; d < t.ndims && d < kMaxTensorDims; ++d) w.u32(t.shapes[d]);
  }
  w.u32(static_cast<std::uint32_t>(args.scalar_count));
  for (std::int32_t i = 0; i < args.scalar_count; ++i) w.u64(args.scalars[i]);
  w.u8(trace_level);
  if (trace_level != 0) w.u32(trace_limit);
}

inline Task decode_task(std::span<const std::byte> p) {
  Reader r(p, "TASK");
  Task m;
  m.digest = r.u64("digest");
  if (m.digest == 0) r.fail("digest", "is 0");
  m.config = detail::get_config(r);
  const std::uint32_t nt = r.count(kMaxTensors, 16, "tensor_count");
  m.tensors.reserve(nt);
  for (std::uint32_t i = 0; i < nt; ++i) {
    ContinuousTensor t;
    t.data = r.u64("tensor.data");
    const std::uint8_t dtype = r.u8("tensor.dtype");
    const std::uint8_t ndims = r.u8("tensor.ndims");
    t.child_memory = r.u8("tensor.child_memory");
    const std::uint8_t reserved = r.u8("tensor.reserved");
    if (reserved != 0) r.fail("tensor.reserved", fmt::format("is {}; it must be 0", reserved));
    if (!is_valid(static_cast<DataType>(dtype))) {
      r.fail("tensor.dtype", fmt::format("{} is not a DataType", dtype));
    }
    if (ndims == 0 || ndims > kMaxTensorDims) {
      r.fail("tensor.ndims", fmt::format("{} is outside 1..{}", ndims, kMaxTensorDims));
    }
    if (t.child_memory != 1) {
      r.fail("tensor.child_memory",
             fmt::format("is {}; a remote tensor lies in a remote buffer (1)", t.child_memory));
    }
    t.dtype = static_cast<DataType>(dtype);
    t.ndims = ndims;
    for (std::uint32_t d = 0; d < ndims; ++d) t.shapes[d] = r.u32("tensor.shape");
    try {
      validate(t);
    } catch (const UsageError& e) {
      r.fail("tensor", e.what());
    }
    m.tensors.push_back(t);
  }
  const std::uint32_t ns = r.count(kMaxScalars, 8, "scalar_count");
  m.scalars.reserve(ns);
  for (std::uint32_t i = 0; i < ns; ++i) m.scalars.push_back(r.u64("scalar"));
  m.trace_level = r.u8("trace_level");
  if (m.trace_level > kMaxTraceLevel) {
    r.fail("trace_level", fmt::format("{} is outside 0..{}", m.trace_level, kMaxTraceLevel));
  }
  if (m.trace_level != 0) m.trace_limit = r.u32("trace_limit");
  r.end();
  return m;
}

inline void encode(const Completion& m, std::vector<std::byte>& out) {
  Writer w(out);
  w.u64(m.answers);
  detail::put_status(w, m.status, m.kind, m.code, m.message);
  w.u8(m.traced ? 1 : 0);
  if (!m.traced) return;
  w.i64(m.trace.rx_ns);
  w.i64(m.trace.begin_ns);
  w.i64(m.trace.end_ns);
  w.i64(m.trace.tx_ns);
  w.u64(m.trace.lost);
  w.u32(static_cast<std::uint32_t>(m.trace.records.size()));
  w.bytes(m.trace.records);
}
inline Completion decode_completion(std::span<const std::byte> p) {
  Reader r(p, "COMPLETION");
  Completion m;
  m.answers = r.u64("answers");
  detail::get_status(r, m);
  const std::uint8_t traced = r.u8("traced");
  if (traced > 1) r.fail("traced", fmt::format("is {}; it must be 0 or 1", traced));
  m.traced = traced == 1;
  if (m.traced) {
    m.trace.rx_ns = r.i64("trace.rx_ns");
    m.trace.begin_ns = r.i64("trace.begin_ns");
    m.trace.end_ns = r.i64("trace.end_ns");
    m.trace.tx_ns = r.i64("trace.tx_ns");
    if (m.trace.begin_ns < m.trace.rx_ns || m.trace.end_ns < m.trace.begin_ns ||
        m.trace.tx_ns < m.trace.end_ns) {
      r.fail("trace", fmt::format("times are out of order: received {}, began {}, ended {}, "
                                  "answered {} (each must be at least the one before)",
                                  m.trace.rx_ns, m.trace.begin_ns, m.trace.end_ns, m.trace.tx_ns));
    }
    m.trace.lost = r.u64("trace.lost");
    const std::uint32_t n = r.u32("trace.records_bytes");
    const auto b = r.bytes(n, "trace.records");
    m.trace.records.assign(b.begin(), b.end());
  }
  r.end();
  return m;
}

inline void encode(const Control& m, std::vector<std::byte>& out) {
  Writer w(out);
  w.u32(static_cast<std::uint32_t>(m.op));
  w.u32(0);
  w.u64(m.a);
  w.u64(m.b);
  w.u64(m.n);
}
inline Control decode_control_head(std::span<const std::byte> prefix, std::uint64_t payload_length,
                                   bool detached) {
  Reader r(prefix.first(std::min(prefix.size(), kControlHeadBytes)), "CONTROL");
  Control m;
  const std::uint32_t op = r.u32("op");
  if (op == 0 || op > kControlOpMax) r.fail("op", fmt::format("{} is not a control op", op));
  m.op = static_cast<ControlOp>(op);
  const std::uint32_t reserved = r.u32("reserved");
  if (reserved != 0) r.fail("reserved", fmt::format("is {}; it must be 0", reserved));
  m.a = r.u64("a");
  m.b = r.u64("b");
  m.n = r.u64("n");
  r.end();
  const std::uint64_t rest = payload_length - kControlHeadBytes;
  Reader whole(prefix, "CONTROL");
  switch (m.op) {
    case ControlOp::CopyTo:
      if (rest != (detached ? 0 : m.n)) {
        whole.fail("n", fmt::format("says {} bytes follow, the frame carries {}", m.n, rest));
      }
      break;
    case ControlOp::Alloc:
    case ControlOp::Ping:
    case ControlOp::Free:
    case ControlOp::CopyFrom:
      if (rest != 0) whole.fail("end", fmt::format("{} trailing bytes after the payload", rest));
      break;
  }
  if ((m.op == ControlOp::CopyTo || m.op == ControlOp::CopyFrom) &&
      (m.b > kOffsetMask || m.n > kOffsetMask || m.b + m.n > kOffsetMask)) {
    whole.fail("offset", fmt::format("range [{}, +{}) is outside any buffer", m.b, m.n));
  }
  if (m.op == ControlOp::Alloc && (m.b == 0 || m.b > kMaxBufferId)) {
    whole.fail("b", fmt::format("buffer id {} is outside 1..{}", m.b, kMaxBufferId));
  }
  const bool ping = m.op == ControlOp::Ping;
  if ((ping && m.b != 0) || ((ping || m.op == ControlOp::Alloc) && m.n != 0)) {
    whole.fail("n", "unused fields of this op must be 0");
  }
  if (m.op == ControlOp::Ping && m.a != 0) whole.fail("a", "unused fields of this op must be 0");
  if (m.op == ControlOp::Free && (m.b != 0 || m.n != 0)) {
    whole.fail("b", "unused fields of this op must be 0");
  }
  return m;
}

inline Control decode_control_detached(std::span<const std::byte> p) {
  return decode_control_head(p, p.size(), true);
}

inline Control decode_control(std::span<const std::byte> p) {
  return decode_control_head(p, p.size());
}

inline void encode(const ControlReply& m, std::vector<std::byte>& out) {
  Writer w(out);
  w.u64(m.answers);
  w.u32(static_cast<std::uint32_t>(m.op));
  detail::put_status(w, m.status, m.kind, m.code, m.message);
  w.u64(m.r0);
  w.u64(m.r1);
  w.u64(m.r2);
}
inline ControlReply decode_control_reply_head(std::span<const std::byte> p,
                                              std::uint64_t payload_length, std::size_t& head_bytes,
                                              bool detached) {
  Reader r(p, "CONTROL_REPLY");
  ControlReply m;
  m.answers = r.u64("answers");
  const std::uint32_t op = r.u32("op");
  if (op == 0 || op > kControlOpMax) r.fail("op", fmt::format("{} is not a control op", op));
  m.op = static_cast<ControlOp>(op);
  detail::get_status(r, m);
  m.r0 = r.u64("r0");
  m.r1 = r.u64("r1");
  m.r2 = r.u64("r2");
  head_bytes = p.size() - r.left();
  const std::uint64_t data = payload_length - head_bytes;
  if (m.op == ControlOp::CopyFrom && m.status == Status::Ok && !detached) {
    if (data != m.r0) {
      r.fail("r0", fmt::format("says {} bytes follow, the frame carries {}", m.r0, data));
    }
  } else if (data != 0) {
    r.fail("end", fmt::format("{} trailing bytes after the payload", data));
  }
  return m;
}

inline ControlReply decode_control_reply_detached(std::span<const std::byte> p) {
  std::size_t head = 0;
  return decode_control_reply_head(p, p.size(), head, true);
}

inline ControlReply decode_control_reply(std::span<const std::byte> p, std::size_t& head_bytes) {
  // The head is at most its fixed fields and the longest message.
  const std::size_t max_head = 8 + 4 + 1 + 1 + 4 + 4 + kMaxMessage + 24;
  return decode_control_reply_head(p.first(std::min(p.size(), max_head)), p.size(), head_bytes);
}

inline void decode_payload(FrameType t, std::span<const std::byte> p) {
  std::size_t head = 0;
  switch (t) {
    case FrameType::AuthBegin:
      static_cast<void>(decode_auth_begin(p));
      return;
    case FrameType::AuthChallenge:
      static_cast<void>(decode_auth_challenge(p));
      return;
    case FrameType::AuthProof:
      static_cast<void>(decode_auth_proof(p));
      return;
    case FrameType::Hello:
      static_cast<void>(decode_hello(p));
      return;
    case FrameType::Task:
      static_cast<void>(decode_task(p));
      return;
    case FrameType::Completion:
      static_cast<void>(decode_completion(p));
      return;
    case FrameType::Control:
      static_cast<void>(decode_control(p));
      return;
    case FrameType::ControlReply:
      static_cast<void>(decode_control_reply(p, head));
      return;
    case FrameType::Heartbeat:
    case FrameType::Shutdown:
      if (!p.empty()) {
        throw ProtocolError(
            fmt::format("{} payload: must be empty, carries {} bytes", to_string(t), p.size()));
      }
      return;
  }
}

}  // namespace simpler::wire
