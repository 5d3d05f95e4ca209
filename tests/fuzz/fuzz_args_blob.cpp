// Fuzz target: the args-blob decoder on arbitrary bytes, and the encoder on whatever it accepts.
#include <simpler/args_blob.hpp>
#include <simpler/error.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "fuzz/fuzz_targets.hpp"

namespace {

[[noreturn]] void defect(const char* what) {
  std::fprintf(stderr, "fuzz_args_blob: %s\n", what);
  std::abort();
}

}  // namespace

int simpler_fuzz_args_blob(const std::uint8_t* data, std::size_t size) {
  // Exactly `size` bytes (operator new aligns to 16): a read past the blob is a sanitizer report.
  const std::unique_ptr<std::byte[]> buf(new std::byte[size == 0 ? 1 : size]);
  if (size > 0) std::memcpy(buf.get(), data, size);
  const std::span<const std::byte> in(buf.get(), size);
  simpler::TaskArgsView v;
  try {
    v = simpler::decode_args_blob(in);
  } catch (const simpler::TransportError& e) {
    if (e.what()[0] == '\0') defect("a refused blob has an empty message");
    return 0;  // refused with a message: fine. Any other exception escapes and is a defect.
  }
  if (v.tensor_count < 0 || v.scalar_count < 0) defect("decoded a negative count");
  const std::size_t need = simpler::args_blob_size(v);
  if (need > size) defect("decoded a view larger than the blob");
  if (v.tensor_count > 0 &&
      reinterpret_cast<const std::byte*>(v.tensors) != buf.get() + simpler::kArgsBlobHeaderBytes)
    defect("the tensors do not follow the header");
  // Touch everything the view points at (a sanitizer sees a read outside the blob).
  std::uint64_t sum = 0;
  for (std::int32_t i = 0; i < v.tensor_count; ++i) {
    simpler::validate(v.tensors[i]);  // the decoder promised valid tensors: must not throw
    sum += v.tensors[i].nbytes();
  }
  for (std::int32_t i = 0; i < v.scalar_count; ++i) sum += v.scalars[i];
  static_cast<void>(sum);
  // Round trip: the accepted prefix re-encodes to the same bytes, and decodes again.
  std::vector<std::byte> out(need);
  if (simpler::encode_args_blob(v, out) != need) defect("encode wrote another size");
  if (need > 0 && std::memcmp(out.data(), buf.get(), need) != 0)
    defect("the blob does not re-encode to the same bytes");
  const std::unique_ptr<std::byte[]> again(new std::byte[need]);
  std::memcpy(again.get(), out.data(), need);
  const simpler::TaskArgsView w = simpler::decode_args_blob({again.get(), need});
  if (w.tensor_count != v.tensor_count || w.scalar_count != v.scalar_count)
    defect("the re-encoded blob decodes to other counts");
  return 0;
}
