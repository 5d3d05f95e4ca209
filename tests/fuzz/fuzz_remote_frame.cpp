// Fuzz target: the remote wire codec as a receiver runs it, on a stream of frames.
//
// Input: frames back to back, each a 40-byte header and header.length payload bytes. The first
// header fixes the link (its session, worker and sequence; a payload limit of kMaxPayload), so
// every later header is checked against it and must carry the next sequence number. A frame that
// fails to decode ends the stream, as it ends a session. Whatever decodes must re-encode to the
// same bytes (header and payload), and decode_payload must agree with the typed decoder.
#include <simpler/error.hpp>
#include <simpler/remote/wire.hpp>
#include <simpler/task_args.hpp>
#include <simpler/types.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "fuzz/fuzz_targets.hpp"

namespace {

namespace wire = simpler::wire;

constexpr std::uint32_t kMaxPayload = 1U << 16;

[[noreturn]] void defect(const char* what) {
  std::fprintf(stderr, "fuzz_remote_frame: %s\n", what);
  std::abort();
}

void check_refusal(const simpler::ProtocolError& e) {
  if (e.what()[0] == '\0') defect("a refused frame has an empty message");
}

void same_bytes(const std::vector<std::byte>& out, std::span<const std::byte> in,
                const char* what) {
  if (out.size() != in.size() || (!in.empty() && std::memcmp(out.data(), in.data(), in.size()))) {
    defect(what);
  }
}

template <class M>
std::vector<std::byte> encoded(const M& m) {
  std::vector<std::byte> out;
  wire::encode(m, out);
  return out;
}

void check_status(wire::Status s, simpler::ErrorKind k, std::int32_t code,
                  const std::string& message) {
  if (message.size() > wire::kMaxMessage) defect("decoded a message over its limit");
  if (s == wire::Status::Ok && (k != simpler::ErrorKind::Other || code != 0 || !message.empty()))
    defect("decoded an ok status that carries an error");
}

// Decodes `p` as a payload of type `t` with the typed decoder, checks what it promised and that
// it re-encodes to `p`. Returns false if the decoder refused it.
bool decode_typed(wire::FrameType t, std::span<const std::byte> p) {
  using wire::FrameType;
  try {
    switch (t) {
      case FrameType::AuthBegin: {
        const wire::AuthBegin m = wire::decode_auth_begin(p);
        if (m.heartbeat_ms == 0 || m.heartbeat_timeout_ms <= m.heartbeat_ms)
          defect("decoded an impossible heartbeat");
        same_bytes(encoded(m), p, "AUTH_BEGIN does not re-encode to the same bytes");
        return true;
      }
      case FrameType::AuthChallenge:
        same_bytes(encoded(wire::decode_auth_challenge(p)), p,
                   "AUTH_CHALLENGE does not re-encode to the same bytes");
        return true;
      case FrameType::AuthProof:
        same_bytes(encoded(wire::decode_auth_proof(p)), p,
                   "AUTH_PROOF does not re-encode to the same bytes");
        return true;
      case FrameType::Hello: {
        const wire::Hello m = wire::decode_hello(p);
        if (m.max_payload < 4096) defect("decoded a HELLO under the minimum payload");
        if (m.served.size() > wire::kMaxServed) defect("decoded more callables than the limit");
        for (const auto& s : m.served) {
          if (s.digest == 0 || s.name.size() > wire::kMaxName) defect("decoded a bad callable");
        }
        same_bytes(encoded(m), p, "HELLO does not re-encode to the same bytes");
        return true;
      }
      case FrameType::Task: {
        const wire::Task m = wire::decode_task(p);
        if (m.digest == 0) defect("decoded a TASK with digest 0");
        if (m.tensors.size() > wire::kMaxTensors || m.scalars.size() > wire::kMaxScalars)
          defect("decoded a TASK over its counts");
        m.config.validate();  // the decoder promised a usable config: must not throw
        for (const auto& x : m.tensors) {
          simpler::validate(x);  // and valid tensors in remote buffers
          if (x.child_memory != 1) defect("decoded a TASK tensor outside a remote buffer");
        }
        const simpler::TaskArgsView v{static_cast<std::int32_t>(m.tensors.size()),
                                      static_cast<std::int32_t>(m.scalars.size()), m.tensors.data(),
                                      m.scalars.data()};
        std::vector<std::byte> out;
        wire::encode_task(m.digest, m.config, v, out, m.trace_level, m.trace_limit);
        same_bytes(out, p, "TASK does not re-encode to the same bytes");
        return true;
      }
      case FrameType::Completion: {
        const wire::Completion m = wire::decode_completion(p);
        check_status(m.status, m.kind, m.code, m.message);
        same_bytes(encoded(m), p, "COMPLETION does not re-encode to the same bytes");
        return true;
      }
      case FrameType::Control: {
        const wire::Control m = wire::decode_control(p);
        if (p.size() < wire::kControlHeadBytes) defect("decoded a CONTROL shorter than its head");
        const std::size_t rest = p.size() - wire::kControlHeadBytes;
        if (m.op == wire::ControlOp::CopyTo ? rest != m.n : rest != 0)
          defect("decoded a CONTROL whose data do not match its op");
        if ((m.op == wire::ControlOp::CopyTo || m.op == wire::ControlOp::CopyFrom) &&
            m.b + m.n > wire::kOffsetMask)
          defect("decoded a copy past the offset bits");
        same_bytes(encoded(m), p.first(wire::kControlHeadBytes),
                   "CONTROL does not re-encode to the same head");
        return true;
      }
      case FrameType::ControlReply: {
        std::size_t head = 0;
        const wire::ControlReply m = wire::decode_control_reply(p, head);
        check_status(m.status, m.kind, m.code, m.message);
        if (head > p.size()) defect("CONTROL_REPLY head is longer than the payload");
        const std::size_t rest = p.size() - head;
        if (m.op == wire::ControlOp::CopyFrom && m.status == wire::Status::Ok ? rest != m.r0
                                                                              : rest != 0)
          defect("decoded a CONTROL_REPLY whose data do not match its op");
        same_bytes(encoded(m), p.first(head), "CONTROL_REPLY does not re-encode to the same head");
        return true;
      }
      case FrameType::Heartbeat:
      case FrameType::Shutdown:
        return p.empty();  // no typed decoder: empty is the whole rule
    }
  } catch (const simpler::ProtocolError& e) {
    check_refusal(e);
    return false;
  }
  defect("a frame type the header decoder let through has no payload decoder");
}

}  // namespace

int simpler_fuzz_remote_frame(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> in(data, size);
  std::size_t pos = 0;
  std::optional<wire::Expect> link;
  while (size - pos >= wire::kHeaderBytes) {
    const auto hb = std::as_bytes(in.subspan(pos, wire::kHeaderBytes));
    pos += wire::kHeaderBytes;
    wire::FrameHeader h;
    try {
      h = wire::decode_header(hb);
    } catch (const simpler::ProtocolError& e) {
      check_refusal(e);
      return 0;
    }
    std::vector<std::byte> again(wire::kHeaderBytes);
    wire::encode_header(h, again.data());
    same_bytes(again, hb, "a header does not re-encode to the same bytes");
    if (!link) link = wire::Expect{h.session, h.worker, h.sequence, kMaxPayload};
    try {
      wire::check_header(h, *link);
    } catch (const simpler::ProtocolError& e) {
      check_refusal(e);
      return 0;
    }
    if (h.length > kMaxPayload) defect("check_header let a payload over the limit through");
    if (size - pos < h.length) return 0;  // the stream ends inside the payload: a link would wait
    // Exactly `length` bytes on the heap: a read past the payload is a sanitizer report.
    const std::unique_ptr<std::byte[]> buf(new std::byte[h.length == 0 ? 1 : h.length]);
    if (h.length > 0) std::memcpy(buf.get(), data + pos, h.length);
    pos += h.length;
    const std::span<const std::byte> p(buf.get(), h.length);

    bool generic = true;
    try {
      wire::decode_payload(h.type, p);
    } catch (const simpler::ProtocolError& e) {
      check_refusal(e);
      generic = false;
    }
    const bool typed = decode_typed(h.type, p);
    if (generic != typed) defect("decode_payload and the typed decoder disagree");
    if (!typed) return 0;  // a frame that fails to decode ends its session
    ++link->sequence;
  }
  return 0;
}
